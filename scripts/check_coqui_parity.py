"""Check an XTTS folder against Coqui's own code: Coqui's ``Xtts`` loads it strictly, and our modules compute
what Coqui's compute on the same inputs (style mel, conditioning latents, speaker embedding, teacher-forced
text/audio losses of a padded batch, greedy codes, HiFi-GAN decoder audio, BPE ids); then Coqui synthesizes
the text with the reference clip.

Not a test (it needs Coqui's package, which is no speechtrain dependency): run it in an environment with
``coqui-tts`` (0.28.0 was used) and speechtrain importable (e.g. ``PYTHONPATH=.``)::

    python scripts/check_coqui_parity.py FOLDER REF.wav --language am --text "ሰላም ለዓለም" --out coqui.wav

FOLDER: a Coqui XTTS-v2 folder (a download, ``speechtrain export RUN OUT``, or one written by
``model.random_checkpoint``; the ``tiny`` preset shrinks parts Coqui hard-codes, so Coqui cannot load it:
use ``tiny_coqui``). Coqui's tokenizer refuses languages it has no text cleaner for (``am``): as users of
fine-tuned new-language checkpoints do, the check lets such text through unchanged. Prints one line per
comparison (largest absolute difference) and exits 1 when one is off.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np
import torch

TOL = 1e-4


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("folder")
    p.add_argument("speaker_wav")
    p.add_argument("--language", default="en")
    p.add_argument("--text", default="hello world")
    p.add_argument("--out", default=None, help="write Coqui's synthesis here (24 kHz wav)")
    p.add_argument("--max-codes", type=int, default=None, help="stop generating after this many codes")
    args = p.parse_args(argv)

    from TTS.tts.configs.xtts_config import XttsConfig as CoquiConfig
    from TTS.tts.layers.xtts import tokenizer as coqui_tokenizer
    from TTS.tts.models.xtts import Xtts

    from speechtrain.data.audio import load_audio
    from speechtrain.models.xtts.audio import XttsMels
    from speechtrain.models.xtts.checkpoint import build_modules, load_coqui_weights, read_config_and_vocab
    from speechtrain.models.xtts.gpt import IGNORE_INDEX, SamplingSettings
    from speechtrain.models.xtts.tokenizer import XttsTokenizer, load_front_end

    torch.manual_seed(0)
    failures: list[str] = []

    def check(name: str, ours: torch.Tensor, theirs: torch.Tensor, tol: float = TOL) -> None:
        ours, theirs = ours.detach().float().cpu(), theirs.detach().float().cpu()
        if ours.shape != theirs.shape:
            failures.append(name)
            print(f"FAIL {name}: shapes {tuple(ours.shape)} vs {tuple(theirs.shape)}")
            return
        diff = float((ours - theirs).abs().max()) if ours.numel() else 0.0
        ok = diff <= tol * max(1.0, float(theirs.abs().max()))
        if not ok:
            failures.append(name)
        print(f"{'ok  ' if ok else 'FAIL'} {name}: max |diff| {diff:.3g} (shape {tuple(ours.shape)})")

    # -- load: Coqui strictly, ours strictly -------------------------------------------------------------
    config = CoquiConfig()
    config.load_json(f"{args.folder}/config.json")
    coqui = Xtts.init_from_config(config)
    coqui.load_checkpoint(config, checkpoint_dir=args.folder, use_deepspeed=False, strict=True)
    coqui.eval()
    n_coqui = sum(t.numel() for t in coqui.parameters())
    files = read_config_and_vocab(args.folder)
    mods = build_modules(files.arch, dropout=0.0)
    report = load_coqui_weights(args.folder, mods, strict=True)
    for m in mods.by_name().values():
        m.eval()
    n_ours = sum(t.numel() for t in mods.gpt.parameters()) + sum(t.numel() for t in mods.hifigan_decoder.parameters())
    print(
        f"ok   Coqui's Xtts loaded {args.folder} strictly: {n_coqui:,} parameters (ours {n_ours:,}); {report.summary()}"
    )
    if n_coqui != n_ours:
        failures.append("parameter count")

    arch = files.arch
    sr = arch.input_sample_rate
    audio, _ = load_audio(args.speaker_wav, sr)
    wav = torch.from_numpy(audio)[None]  # (1, T_samples)
    mels = XttsMels(arch.n_mels, sr)
    with torch.no_grad():
        # -- style mel and conditioning latents of one 6 s chunk --------------------------------------
        from TTS.tts.models.xtts import wav_to_mel_cloning

        chunk = wav[:, : 6 * sr]
        their_mel = wav_to_mel_cloning(
            chunk,
            mel_norms=coqui.mel_stats.cpu(),
            n_fft=2048,
            hop_length=256,
            win_length=1024,
            power=2,
            normalized=False,
            sample_rate=sr,
            f_min=0,
            f_max=8000,
            n_mels=arch.n_mels,
        )
        our_mel = mels.style(chunk[None], mods.coqui.mel_stats)
        check("style mel", our_mel, their_mel)
        their_latents = coqui.gpt.get_style_emb(their_mel).transpose(1, 2)  # (1, 32, width)
        our_latents = mods.gpt.conditioning_latents(their_mel)
        check("conditioning latents (encoder + perceiver)", our_latents, their_latents)

        # -- speaker embedding of the same 16 kHz audio ----------------------------------------------
        import torchaudio

        audio_16k = torchaudio.functional.resample(wav, sr, 16000)
        their_spk = coqui.hifigan_decoder.speaker_encoder.forward(audio_16k, l2_norm=True)
        our_spk = mods.hifigan_decoder.speaker_encoder(audio_16k)
        check("speaker embedding", our_spk, their_spk)

        # -- teacher-forced losses of a padded batch of two ------------------------------------------
        g = torch.Generator().manual_seed(0)
        text_lengths = torch.tensor([9, 5])
        text = torch.randint(3, min(60, arch.gpt_number_text_tokens), (2, 9), generator=g)
        text[1, 5:] = 0
        wav_lengths = torch.tensor([12 * arch.gpt_code_stride_len - 100, 6 * arch.gpt_code_stride_len])
        codes = torch.randint(0, arch.num_codes, (2, 12), generator=g)
        cond_mel = their_mel.expand(2, -1, -1)
        their_text_ce, their_audio_ce, _ = coqui.gpt(
            text, text_lengths, codes, wav_lengths, cond_mels=cond_mel[:, None]
        )
        code_lengths = mods.gpt.code_lengths(wav_lengths)
        seq = mods.gpt.arrange(text, text_lengths, codes, code_lengths, 9, int(code_lengths.max()))
        valid = torch.cat([seq["text_valid"], seq["mel_valid"]], 1)
        t_logits, m_logits = mods.gpt(seq["text_inputs"], seq["mel_inputs"], our_latents.expand(2, -1, -1), valid)
        ce = torch.nn.functional.cross_entropy
        check(
            "text CE",
            ce(t_logits.flatten(0, 1), seq["text_targets"].flatten(), ignore_index=IGNORE_INDEX),
            their_text_ce,
        )
        check(
            "audio CE",
            ce(m_logits.flatten(0, 1), seq["mel_targets"].flatten(), ignore_index=IGNORE_INDEX),
            their_audio_ce,
        )

        # -- BPE ids of the text -------------------------------------------------------------------------
        lang = args.language
        tok = XttsTokenizer.from_file(f"{args.folder}/vocab.json")
        ours_ids = tok.encode(load_front_end("multilingual")(args.text, lang), lang)  # the default front end
        original = coqui_tokenizer.VoiceBpeTokenizer.preprocess_text

        def preprocess(self: Any, txt: str, language: str) -> str:
            try:
                return original(self, txt, language)
            except NotImplementedError:  # a language Coqui has no cleaner for: the text as it is, lowercased
                return txt.lower()  # (ours also writes numbers in words there: compare a text without digits)

        coqui_tokenizer.VoiceBpeTokenizer.preprocess_text = preprocess  # type: ignore[method-assign]
        their_ids = coqui.tokenizer.encode(args.text, lang)
        same = ours_ids == their_ids
        print(f"{'ok  ' if same else 'FAIL'} BPE ids of {args.text!r} [{lang}]: {len(ours_ids)} tokens")
        if not same:
            failures.append("BPE ids")
            print(f"     ours {ours_ids}\n     Coqui {their_ids}")

        # -- greedy codes and their latents through the decoder ----------------------------------------
        tokens = torch.tensor([their_ids])
        limit = {"max_new_tokens": args.max_codes} if args.max_codes else {}  # HF: wins over Coqui's max_length
        their_codes = coqui.gpt.generate(
            their_latents,
            tokens,
            do_sample=False,
            top_p=None,
            top_k=None,
            temperature=1.0,
            num_return_sequences=1,
            num_beams=1,
            length_penalty=1.0,
            repetition_penalty=1.0,
            output_attentions=False,
            **limit,
        )  # (1, n): the codes, the stop code last when it came
        greedy = SamplingSettings(do_sample=False, repetition_penalty=1.0)
        our_codes, our_gpt_latents = mods.gpt.generate(our_latents, tokens, greedy, their_codes.shape[1])
        same = their_codes[0].tolist() == our_codes.tolist()
        print(f"{'ok  ' if same else 'FAIL'} greedy codes: {our_codes.numel()} (Coqui {their_codes.shape[1]})")
        if not same:
            failures.append("greedy codes")
        # Xtts.inference: the latents of the codes (stop included) by a teacher-forced pass
        their_gpt_latents = coqui.gpt(
            tokens,
            torch.tensor([tokens.shape[-1]]),
            their_codes,
            torch.tensor([their_codes.shape[-1] * arch.gpt_code_stride_len]),
            cond_latents=their_latents,
            return_attentions=False,
            return_latent=True,
        )
        check("GPT latents of the codes (the decoder's input)", our_gpt_latents, their_gpt_latents)
        their_audio = coqui.hifigan_decoder(their_gpt_latents, g=their_spk.unsqueeze(-1))
        our_audio = mods.hifigan_decoder(their_gpt_latents, our_spk.unsqueeze(-1))
        check(f"HiFi-GAN decoder audio ({their_codes.shape[1]} codes)", our_audio, their_audio)

        # -- Coqui's own synthesis with the reference clip ----------------------------------------------
        # (its get_conditioning_latents reads the file with torchaudio, which needs torchcodec: the same steps
        # from the samples loaded above)
        ref = wav[:, : int(sr * config.max_ref_len)]
        speaker = coqui.get_speaker_embedding(ref, sr)
        cond = coqui.get_gpt_cond_latents(ref, sr, length=config.gpt_cond_len, chunk_length=config.gpt_cond_chunk_len)
        out = coqui.inference(args.text, lang, cond, speaker, temperature=0.7, **limit)
        seconds = len(out["wav"]) / arch.output_sample_rate
        print(f"ok   Coqui synthesized {args.text!r} [{lang}] with {args.speaker_wav}: {seconds:.2f} s")
        if args.out:
            import soundfile as sf

            sf.write(args.out, np.asarray(out["wav"], dtype=np.float32), arch.output_sample_rate)
            print(f"     wrote {args.out}")
    if failures:
        print(f"{len(failures)} check(s) off: {', '.join(failures)}")
        return 1
    print("all checks agree")
    return 0


if __name__ == "__main__":
    sys.exit(main())
