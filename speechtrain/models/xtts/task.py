"""The XTTS task: fine-tune Coqui XTTS-v2's GPT on text + DVAE codes; synthesize with a reference clip.

Per micro-batch, on the device (as Coqui's ``GPTTrainer.format_batch_on_device`` does):

- audio codes (``model.codes``): ``utterance``: each utterance's own audio alone -> the DVAE mel
  (``mel_stats.pth`` norms) -> frozen DVAE -> codes, the batch's ``codes`` when ``prepare`` cached them
  (``model.cache_codes``, :mod:`speechtrain.models.xtts.codes`), else computed per utterance on the device;
  ``padded_batch``: the padded batch's audio through the DVAE on the device, as Coqui's trainer does;
- a conditioning clip per utterance, cut from the utterance itself (3 to 6 s by default, random start in
  training, the start in evaluation; padded to the longest length), -> style mel -> conditioning encoder +
  perceiver resampler -> 32 conditioning latents (trained with the GPT, as Coqui fine-tunes them);
- the transcript (``Batch.texts``) -> front end -> BPE ids with the language tag (host side, cached);
- ``loss = text_loss_weight * text_ce + audio_loss_weight * audio_ce`` over the real targets.

``batch_weight`` counts audio targets, so accumulated or OOM-split micro-batches average like one batch.
The DVAE and the HiFi-GAN decoder (with its speaker encoder) are frozen; only ``gpt`` is optimised, with
Coqui's groups (no weight decay on biases, norms and embeddings: :mod:`speechtrain.models.xtts.optim`).

Utterances beyond the model's limits (:mod:`speechtrain.models.xtts.limits`) are skipped by ``prepare``; the
task checks the training set again at set-up, leaves such items out of evaluation batches with a warning,
and synthesis splits long text into sentences within the token limit.

A new language (``model.language`` not in the vocabulary) gets its tag, and with ``add_transcript_chars``
every character of the training transcripts that the BPE cannot encode becomes a new token; the text
embedding and head grow by as many rows (``model.new_token_init``). The extended vocabulary travels in
the run's checkpoints and in exports (:func:`speechtrain.models.xtts.checkpoint.export_coqui`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from speechtrain.data.batch import Batch
from speechtrain.data.loader import derived_usable
from speechtrain.errors import DataError, UserError
from speechtrain.logs import get_logger
from speechtrain.models.xtts.audio import XttsMels
from speechtrain.models.xtts.checkpoint import (
    LoadReport,
    XttsModules,
    build_modules,
    export_coqui,
    load_coqui_weights,
    read_config_and_vocab,
)
from speechtrain.models.xtts.codes import code_count, code_dtype, utterance_codes
from speechtrain.models.xtts.codes import derived_features as derived_features
from speechtrain.models.xtts.config import transcript_language
from speechtrain.models.xtts.gpt import IGNORE_INDEX, SamplingSettings
from speechtrain.models.xtts.limits import XttsLimits
from speechtrain.models.xtts.limits import item_limits as item_limits
from speechtrain.models.xtts.optim import no_weight_decay
from speechtrain.models.xtts.text_split import split_text
from speechtrain.models.xtts.tokenizer import XttsTokenizer, expand_tokens, load_front_end
from speechtrain.train.task import Needs, OptimizerSpec, Task

if TYPE_CHECKING:
    from speechtrain.config import DataConfig
    from speechtrain.models.xtts.config import XttsConfig

log = get_logger(__name__)

SYNTHESIZE_OPTIONS = (
    "speaker_wav",
    "language",
    "temperature",
    "top_k",
    "top_p",
    "repetition_penalty",
    "length_penalty",
    "max_seconds",
    "seed",
)
PAUSE_SECONDS = 0.2  # silence between the pieces of a text synthesized piece by piece


def load_modules(model: XttsConfig) -> tuple[XttsModules, LoadReport | None]:
    """The modules of ``model``: from its Coqui folder when there is one (written first with random weights
    when ``random_checkpoint`` asks), else of ``model.arch`` with their init (a run's checkpoint fills them).

    The folder's sizes are stored in ``model.arch`` so that the run's ``config.yaml`` rebuilds the model
    without the folder (a run loaded from another working directory does not write a random folder there)."""
    from speechtrain.models.xtts.build import checkpoint_folder

    folder = checkpoint_folder(model)
    if folder is not None and (folder / "model.pth").is_file():
        files = read_config_and_vocab(folder)
        mods = build_modules(files.arch, model.dropout, init=not model.strict_load)  # strict: all overwritten
        report = load_coqui_weights(folder, mods, strict=model.strict_load)
        model.arch = files.arch
        return mods, report
    if model.arch is None:
        where = f"{folder} has no model.pth" if folder is not None else "model.checkpoint_dir is not set"
        raise UserError(
            f"xtts: {where}: point model.checkpoint_dir at a Coqui XTTS-v2 folder (model.pth, dvae.pth, "
            "mel_stats.pth, vocab.json, config.json), or set model.random_checkpoint=tiny for a rehearsal"
        )
    return build_modules(model.arch, model.dropout), None


class XttsTask(Task):
    """Coqui XTTS-v2 fine-tuning (GPT trained; DVAE, HiFi-GAN decoder and speaker encoder frozen)."""

    headline_metric = "audio_ce"
    headline_mode = "min"
    produces_audio = True
    quality_kind = "speaker_tts"
    #: the keywords of ``synthesize`` (speechtrain.capabilities.Synthesizer)
    synthesize_options = SYNTHESIZE_OPTIONS
    #: what ``export`` writes (speechtrain.capabilities.Exporter)
    export_format = "a Coqui XTTS-v2 checkpoint folder (model.pth, dvae.pth, mel_stats.pth, vocab.json, config.json)"

    def __init__(self, model: XttsConfig, data: DataConfig) -> None:
        self.model_cfg, self.data_cfg = model, data
        try:
            model.language = transcript_language(model, data.language)  # recorded in the run's config.yaml
        except ValueError as exc:
            raise UserError(str(exc)) from None
        self.mods, self.load_report = load_modules(model)
        arch = model.arch
        assert arch is not None
        self.arch = arch
        if data.sample_rate != arch.input_sample_rate:
            raise UserError(
                f"data.sample_rate={data.sample_rate}, but XTTS's DVAE and conditioning read "
                f"{arch.input_sample_rate} Hz audio: set data.sample_rate={arch.input_sample_rate}"
            )
        self.front_end = load_front_end(model.text_front_end)
        self.mels = XttsMels(arch.n_mels, arch.input_sample_rate)
        self.limits = XttsLimits.of(model, arch)
        self._ids: dict[str, list[int]] = {}  # front-end text -> BPE ids (host side)
        # codes the batches did not bring (not prepared): utterance id -> its DVAE codes (T_codes,) int16 on the
        # device, kept for the run; not when noise or crops change the audio
        self._codes: dict[str, torch.Tensor] = {}
        usable = derived_usable(data)  # the stored audio is what the task sees
        self.cache_codes = model.stores_codes and usable  # the batches bring prepare's codes
        self.keep_codes = model.codes == "utterance" and usable  # codes made here are kept for the run
        self._reported_unknown: set[str] = set()
        self._left_out: set[str] = set()  # eval items beyond the limits, warned about once
        self.tokenizer = (
            XttsTokenizer(self.mods.coqui.vocab_json or "", "vocab.json") if self.mods.coqui.vocab_json else None
        )

    # -- Task protocol ----------------------------------------------------------------------------
    def needs(self) -> Needs:
        return Needs(text=True, audio=True, mel=False, derived=("codes",) if self.cache_codes else ())

    def modules(self) -> dict[str, nn.Module]:
        return {**self.mods.by_name(), "mels": self.mels}

    def optimizer_specs(self) -> list[OptimizerSpec]:
        # DVAE, decoder and speaker encoder stay frozen; Coqui's groups: no decay on biases, norms, embeddings
        return [OptimizerSpec("main", ["gpt"], no_weight_decay=no_weight_decay(self.mods.gpt, "gpt."))]

    def fsdp_forward_methods(self) -> dict[str, tuple[str, ...]]:
        """The GPT's methods besides ``forward`` that read its weights (speechtrain.capabilities.ShardedForwards):
        the conditioning latents, computed before the forward, and generation (eval audio, synthesis)."""
        return {"gpt": ("conditioning_latents", "generate")}

    @property
    def device(self) -> torch.device:
        return next(self.mods.gpt.parameters()).device

    @property
    def output_sample_rate(self) -> int:
        """Sample rate of ``synthesize``'s audio (the HiFi-GAN decoder's, 24 kHz for XTTS-v2)."""
        return int(self.arch.output_sample_rate)

    def parameter_count(self) -> int:
        """Trainable parameters (the GPT with its conditioning encoder and perceiver)."""
        return sum(p.numel() for p in self.mods.gpt.parameters())

    # -- text ----------------------------------------------------------------------------------------
    def _tok(self) -> XttsTokenizer:
        vocab = self.mods.coqui.vocab_json
        if self.tokenizer is None or self.tokenizer.json != vocab:
            if not vocab:
                raise UserError("xtts: the model has no vocabulary (load a Coqui checkpoint folder or a run)")
            self.tokenizer = XttsTokenizer(vocab, "vocab.json")
            self._ids.clear()
        return self.tokenizer

    def text_ids(self, text: str, language: str | None = None) -> list[int]:
        """BPE ids of a transcript (front end applied; language tag first, no start/stop)."""
        lang = language or self.model_cfg.language
        key = f"{lang}\x00{text}"
        tok = self._tok()
        if key not in self._ids:
            clean = self.front_end(text, lang)
            ids = tok.encode(clean, lang)
            if tok.unk_id in ids:
                self._report_unknown(tok, clean)
            self._ids[key] = ids
        return self._ids[key]

    def _report_unknown(self, tok: XttsTokenizer, text: str) -> None:
        chars = tok.unknown_chars(text) - self._reported_unknown
        if chars:
            self._reported_unknown |= chars
            log.warning(
                "xtts: characters the vocabulary cannot encode (they become [UNK]): %s; they were not in the "
                "training transcripts when the vocabulary was extended (model.add_transcript_chars), or add them "
                "with model.extra_tokens",
                " ".join(sorted(chars)),
            )

    def extend_vocabulary(self, texts: list[str]) -> list[str]:
        """Add the language tag and what ``texts`` need (and ``model.extra_tokens``); grow the text embedding
        and head. Returns the tokens added (none when the vocabulary already covers them)."""
        m = self.model_cfg
        tok = self._tok()
        need: list[str] = expand_tokens(m.extra_tokens)
        if m.add_transcript_chars:
            seen: set[str] = set()
            for text in texts:
                for ch in sorted(tok.unknown_chars(self.front_end(text, m.language)) - seen):
                    seen.add(ch)
                    need.append(ch)
        new_tok, added = tok.extended([m.language], need)
        if added:
            rows = new_tok.num_tokens
            self.mods.gpt.resize_text_vocab(rows, init=m.new_token_init)
            c = self.mods.coqui
            c.vocab_json = new_tok.json
            c.added_tokens = [*c.added_tokens, *added]
            self.tokenizer = new_tok
            self._ids.clear()
            shown = " ".join(added[:40]) + (f" ... (+{len(added) - 40})" if len(added) > 40 else "")
            log.info("xtts: vocabulary %d -> %d tokens for [%s]: %s", tok.num_tokens, rows, m.language, shown)
        return added

    def setup(self, train_dataset: Any) -> None:
        """Extend the vocabulary for the training transcripts' language, then check every utterance fits."""
        texts = list(getattr(train_dataset, "texts", []))
        self.extend_vocabulary(texts)
        self._check_dataset(train_dataset, texts)

    def item_problem(self, text: str, samples: int) -> str | None:
        """Why an utterance cannot be used (None: it fits the model's limits), as ``prepare`` checks it."""
        m = self.model_cfg
        tokens = self.text_ids(text)
        tok = self._tok()

        def unknown() -> str:
            return " ".join(sorted(tok.unknown_chars(self.front_end(text, m.language))))

        return self.limits.problem(
            tokens, samples, self.arch.input_sample_rate, tok.unk_id, None if m.add_transcript_chars else unknown
        )

    def _check_dataset(self, dataset: Any, texts: list[str]) -> None:
        """Every training utterance within the limits (``prepare`` skipped those beyond them when it knew the
        checkpoint folder); a DataError before the first step for one that is not."""
        frames = np.asarray(getattr(dataset, "frames", []))
        hop = int(getattr(dataset, "hop_length", self.data_cfg.hop_length))
        count = max(len(texts), int(frames.size))  # a synthetic set may have lengths and no transcripts
        ids = list(getattr(dataset, "ids", [str(i) for i in range(count)]))
        for i in range(count):
            samples = int(frames[i]) * hop if i < frames.size else 0
            problem = self.item_problem(texts[i] if i < len(texts) else "", samples)
            if problem is not None:
                raise DataError(
                    f"training utterance '{ids[i]}': {problem}; run `speechtrain prepare` with this config "
                    "(model.checkpoint_dir set) to skip such items, or fix the transcript"
                )

    # -- training ------------------------------------------------------------------------------------
    def batch_weight(self, batch: Batch) -> float:
        """Audio targets of the batch's items (those within the limits: the ones evaluation keeps)."""
        stride = self.arch.gpt_code_stride_len
        lengths = batch.host_lengths["audio_lengths"]
        return float(sum(-(-lengths[i] // stride) + 4 for i in self._fitting(batch)))  # audio targets

    def _fitting(self, batch: Batch) -> list[int]:
        """Indices of the batch's items within the model's limits (host-side: cached BPE ids, host lengths)."""
        if len(batch.texts) != batch.size:
            return list(range(batch.size))  # training_step says what is missing
        lengths = batch.host_lengths["audio_lengths"]
        return [i for i in range(batch.size) if self.item_problem(batch.texts[i], lengths[i]) is None]

    @torch.no_grad()
    def eval_step(self, batch: Batch) -> dict[str, torch.Tensor]:
        """The training losses of the batch's items within the model's limits; an item beyond them (data
        prepared without the checkpoint folder) is left out with a warning, so evaluation never stops the run."""
        keep = self._fitting(batch)
        if len(keep) < batch.size:
            lengths = batch.host_lengths["audio_lengths"]
            for i in sorted(set(range(batch.size)) - set(keep)):
                if batch.ids[i] not in self._left_out:
                    self._left_out.add(batch.ids[i])
                    log.warning(
                        "xtts: eval utterance '%s' left out: %s (`speechtrain prepare` with this config skips it)",
                        batch.ids[i],
                        self.item_problem(batch.texts[i], lengths[i]),
                    )
            if not keep:
                zero = torch.zeros((), device=batch["audio"].device)
                return {"loss": zero, "text_ce": zero, "audio_ce": zero, "audio_acc": zero}  # weight 0
            batch = batch.select(keep)
        return {k: v.detach() for k, v in self.training_step(batch, "main", {}).items()}

    def eval_summary(self, outputs: list[tuple[float, dict[str, float]]]) -> dict[str, Any]:
        """Weighted means over the batches with an item left (a batch of only left-out items weighs 0); no
        ``loss`` when nothing was left, so that such an evaluation is never the best."""
        kept = [(w, m) for w, m in outputs if w > 0]
        if not kept:
            return {"eval_items_left_out": len(self._left_out)}
        return super().eval_summary(kept)

    def _text_batch(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor, int]:
        if len(batch.texts) != batch.size:
            raise DataError("xtts needs the transcripts in the batch (Batch.texts); build the loader with Needs.text")
        ids = [self.text_ids(t) for t in batch.texts]
        longest = max(len(x) for x in ids)
        tokens = torch.zeros(batch.size, longest, dtype=torch.long)
        for i, x in enumerate(ids):
            tokens[i, : len(x)] = torch.tensor(x, dtype=torch.long)
        lengths = torch.tensor([len(x) for x in ids], dtype=torch.long)
        dev = batch["audio"].device
        return tokens.to(dev, non_blocking=True), lengths.to(dev, non_blocking=True), longest

    def _conditioning_clips(self, batch: Batch) -> tuple[torch.Tensor, list[tuple[int, int]]]:
        """Per item a clip of its own audio, as Coqui's ``get_prompt_slice``: in training a random length in
        [min, max]_conditioning_length at a random start, in evaluation the middle length from the start; an
        utterance shorter than the length gives its first half. Zero-padded to max_conditioning_length (the
        perceiver sees that padding in Coqui's training too). Returns (B, 1, max_conditioning_length) and
        the (start, end) samples of each clip. Host-side draws from torch's RNG (saved with the run)."""
        m = self.model_cfg
        audio = batch["audio"]  # (B, 1, T_samples)
        training = self.mods.gpt.training
        spans: list[tuple[int, int]] = []
        # .item() of CPU-generator draws: host values, no device is waited for (tests/test_step_syncs.py HOST_ONLY)
        for n in batch.host_lengths["audio_lengths"]:
            if training:
                length = int(torch.randint(m.min_conditioning_length, m.max_conditioning_length + 1, ()).item())
            else:
                length = (m.min_conditioning_length + m.max_conditioning_length) // 2
            if n < length:
                length = max(n // 2, 1)
            start = int(torch.randint(0, n - length + 1, ()).item()) if training else 0
            spans.append((start, start + length))
        clips = audio.new_zeros(audio.shape[0], 1, m.max_conditioning_length)
        for i, (s, e) in enumerate(spans):
            clips[i, :, : e - s] = audio[i, :, s:e]
        return clips, spans

    def batch_codes(self, batch: Batch) -> torch.Tensor:
        """The DVAE codes of a batch (B, T_codes), zero-padded: the batch's ``codes`` when ``prepare`` cached
        them, else :meth:`dvae_codes` on the device."""
        if "codes" not in batch:
            return self.dvae_codes(batch)
        lengths = batch.host_lengths["codes_lengths"]
        for n, samples, uid in zip(lengths, batch.host_lengths["audio_lengths"], batch.ids):
            if n != code_count(samples, self.arch):  # host ints: nothing syncs
                raise DataError(
                    f"utterance '{uid}': {n} cached DVAE codes for {samples} samples of audio (expected "
                    f"{code_count(samples, self.arch)}); run `speechtrain prepare` again with this config"
                )
        return batch["codes"][:, : max(lengths)].long()  # (B, T_codes): collate may pad to pad_multiple

    @torch.no_grad()
    def dvae_codes(self, batch: Batch) -> torch.Tensor:
        """DVAE codes of the batch's audio (B, T_codes), zero-padded, computed on the device by the rule of
        ``model.codes``. ``utterance``: each utterance's codes from its audio alone, the rule ``prepare``
        caches by (so they do not depend on what it was batched with), kept for the run when the audio is the
        stored one (not with ``data.noise_snr_db`` or ``data.crop_frames``, which change it every step);
        ``padded_batch``: the padded batch through the DVAE, as Coqui's trainer does (the last codes of a
        shorter item then see the padding)."""
        audio, norms = batch["audio"], self.mods.coqui.mel_norms  # (B, 1, T_samples)
        if self.model_cfg.codes == "padded_batch":
            return self.mods.dvae.codes(self.mels.dvae(audio, norms))
        lengths = batch.host_lengths["audio_lengths"]
        rows = []
        for i, uid in enumerate(batch.ids):
            one = self._codes.get(uid) if self.keep_codes else None
            if one is None:
                one = utterance_codes(self.mods.dvae, self.mels.dvae, norms, audio[i : i + 1, :, : lengths[i]])
                one = one.to(code_dtype(self.arch))  # (T_codes,)
                if self.keep_codes:
                    self._codes[uid] = one
            rows.append(one)
        return nn.utils.rnn.pad_sequence(rows, batch_first=True).long()  # (B, T_codes)

    def training_step(self, batch: Batch, stage: str, cache: dict[str, Any]) -> dict[str, torch.Tensor]:
        gpt, a, m = self.mods.gpt, self.arch, self.model_cfg
        text, text_lengths, max_text = self._text_batch(batch)
        host_samples = batch.host_lengths["audio_lengths"]
        max_codes = max(-(-n // a.gpt_code_stride_len) for n in host_samples)  # host ints: nothing syncs
        if max_codes + 3 > a.gpt_max_audio_tokens:
            raise DataError(
                f"a batch item has {max_codes} audio codes, more than gpt_max_audio_tokens - 3 = "
                f"{a.gpt_max_audio_tokens - 3}: lower data.max_duration"
            )
        with torch.no_grad():
            codes = self.batch_codes(batch)  # (B, T_codes)
        clips, spans = self._conditioning_clips(batch)
        cond_mel = self.mels.style(clips, self.mods.coqui.mel_norms)  # (B, n_mels, T_cond_frames)
        cond_latents = gpt.conditioning_latents(cond_mel)  # (B, P, width)
        code_lengths = gpt.code_lengths(batch["audio_lengths"])
        seq = gpt.arrange(text, text_lengths, codes, code_lengths, max_text, max_codes + 3)
        if m.mask_conditioning_loss:
            targets = seq["mel_targets"].clone()
            for i, (s, e) in enumerate(spans):
                targets[i, s // a.gpt_code_stride_len : e // a.gpt_code_stride_len] = IGNORE_INDEX
            seq["mel_targets"] = targets
        key_valid = torch.cat([seq["text_valid"], seq["mel_valid"]], dim=1)
        text_logits, mel_logits = gpt(seq["text_inputs"], seq["mel_inputs"], cond_latents, key_valid)
        text_ce = F.cross_entropy(
            text_logits.float().flatten(0, 1), seq["text_targets"].flatten(), ignore_index=IGNORE_INDEX
        )
        audio_ce = F.cross_entropy(
            mel_logits.float().flatten(0, 1), seq["mel_targets"].flatten(), ignore_index=IGNORE_INDEX
        )
        loss = m.text_loss_weight * text_ce + m.audio_loss_weight * audio_ce
        with torch.no_grad():
            valid = seq["mel_targets"] != IGNORE_INDEX
            correct = (mel_logits.argmax(-1) == seq["mel_targets"]) & valid
            audio_acc = correct.sum() / valid.sum().clamp_min(1)
        return {"loss": loss, "text_ce": text_ce.detach(), "audio_ce": audio_ce.detach(), "audio_acc": audio_acc}

    # -- inference -----------------------------------------------------------------------------------
    def _settings(self, **given: Any) -> SamplingSettings:
        """Sampling settings: the given ones, else the checkpoint config.json's (Coqui's inference defaults)."""
        config = self.mods.coqui.config
        out = SamplingSettings()
        for key in ("temperature", "top_k", "top_p", "repetition_penalty", "length_penalty"):
            value = given.get(key)
            if value is None:
                value = config.get(key, getattr(out, key))
            setattr(out, key, value)
        return out

    @torch.no_grad()
    def conditioning(self, audio: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """A reference clip (mono float32 at input_sample_rate) -> (GPT conditioning latents (1, P, width),
        speaker embedding (1, d_vector, 1)), as Coqui's ``get_conditioning_latents``: the style mel of each
        ``gpt_cond_chunk_len`` seconds of the first ``gpt_cond_len`` seconds (chunks under 0.33 s left out),
        latents averaged over chunks; the speaker embedding of the first ``max_ref_len`` seconds at 16 kHz."""
        import soxr

        config, sr, dev = self.mods.coqui.config, self.arch.input_sample_rate, self.device
        ref = audio[: int(sr * float(config.get("max_ref_len", 30)))]
        cond = torch.from_numpy(np.ascontiguousarray(ref[: int(sr * float(config.get("gpt_cond_len", 30)))]))
        chunk = int(sr * float(config.get("gpt_cond_chunk_len", 4)))
        latents = []
        for start in range(0, cond.numel(), chunk):
            piece = cond[start : start + chunk]
            if piece.numel() < 0.33 * sr:
                continue
            mel = self.mels.style(piece.to(dev)[None, None], self.mods.coqui.mel_stats)  # (1, n_mels, T)
            latents.append(self.mods.gpt.conditioning_latents(mel))
        if not latents:
            raise UserError(f"the reference clip is {len(audio) / sr:.2f} s long; XTTS needs at least 0.33 s of speech")
        cond_latents = torch.stack(latents).mean(dim=0)  # (1, P, width)
        audio_16k = soxr.resample(ref, sr, 16000, quality="HQ").astype(np.float32)
        speaker = self.mods.hifigan_decoder.speaker_encoder(torch.from_numpy(audio_16k).to(dev)[None])
        return cond_latents, speaker.unsqueeze(-1)  # (1, P, width), (1, d_vector, 1)

    def _reference(self, speaker_wav: Any) -> np.ndarray:
        from speechtrain.data.audio import AudioProblem, load_audio

        if isinstance(speaker_wav, np.ndarray):
            return speaker_wav.astype(np.float32).reshape(-1)
        if speaker_wav is None:
            raise UserError("xtts synthesize needs a reference clip of the voice: --speaker-wav FILE.wav")
        path = Path(str(speaker_wav))
        if not path.is_file():
            raise UserError(f"--speaker-wav {path}: file not found")
        try:
            audio, _ = load_audio(path, self.arch.input_sample_rate)
        except AudioProblem as exc:
            raise UserError(f"--speaker-wav {path}: {exc}") from None
        return audio

    @torch.no_grad()
    def synthesize(
        self,
        text: str,
        speaker_wav: Any = None,
        language: str | None = None,
        temperature: float | None = None,
        top_k: int | None = None,
        top_p: float | None = None,
        repetition_penalty: float | None = None,
        length_penalty: float | None = None,
        max_seconds: float | None = None,
        seed: int | None = None,
        **kwargs: Any,
    ) -> np.ndarray:
        """Speech for ``text`` in the voice of ``speaker_wav`` (a wav path, or mono float32 samples at the
        input sample rate): conditioning latents and speaker embedding of the clip, GPT codes sampled with
        XTTS's settings (defaults from the checkpoint's config.json), their latents through the HiFi-GAN
        decoder. A text longer than the model takes (``max_text_tokens``) is cut into sentences (then clauses,
        then words) that fit, each spoken in turn and joined with ``PAUSE_SECONDS`` of silence; ``max_seconds``
        bounds each piece. Returns 1-D float32 audio at ``output_sample_rate`` (24 kHz for XTTS-v2)."""
        if kwargs:
            given, valid = ", ".join(sorted(kwargs)), ", ".join(SYNTHESIZE_OPTIONS)
            raise UserError(f"xtts synthesize does not take {given}; its options: {valid}")
        lang = language or self.model_cfg.language
        tok = self._tok()
        if not tok.has_language(lang):
            raise UserError(
                f"language '{lang}' is not in this model's vocabulary (it has: {', '.join(tok.languages)}); "
                "fine-tune with model.language set to add it"
            )
        limit = self.limits.max_text_tokens
        pieces = [self.text_ids(p, lang) for p in split_text(text, lambda p: len(self.text_ids(p, lang)) <= limit)]
        pieces = [ids for ids in pieces if len(ids) > 1]  # the language tag alone says nothing
        if not pieces:
            raise UserError("synthesize: the text is empty after the front end")
        longest = max(len(ids) for ids in pieces)
        if longest > self.arch.gpt_max_text_tokens:  # a single character beyond the limit: nothing to cut
            raise UserError(
                f"synthesize: {longest} BPE tokens in one piece, more than the model's {self.arch.gpt_max_text_tokens}"
            )
        a = self.arch
        codes_limit = None
        if max_seconds is not None:
            if not max_seconds > 0:
                raise UserError(f"synthesize: max_seconds must be > 0, got {max_seconds}")
            codes_limit = max(1, int(max_seconds * a.input_sample_rate / a.gpt_code_stride_len))
        settings = self._settings(
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            repetition_penalty=repetition_penalty,
            length_penalty=length_penalty,
        )
        was_training = self.mods.gpt.training
        self.mods.gpt.eval()
        try:
            cond_latents, speaker = self.conditioning(self._reference(speaker_wav))
            dev = self.device
            generator = torch.Generator(device=dev).manual_seed(seed) if seed is not None else None
            pause = np.zeros(int(PAUSE_SECONDS * a.output_sample_rate), dtype=np.float32)
            out: list[np.ndarray] = []
            for ids in pieces:
                tokens = torch.tensor([ids], dtype=torch.long, device=dev)  # (1, L)
                # the latents of every code, the stop code's included, as Coqui's Xtts.inference decodes them
                _, latents = self.mods.gpt.generate(cond_latents, tokens, settings, codes_limit, generator)
                if latents.shape[1] == 0:
                    continue
                wav = self.mods.hifigan_decoder(latents, speaker)  # (1, 1, T_samples) at output_sample_rate
                out += [pause, wav[0, 0].float().cpu().numpy()] if out else [wav[0, 0].float().cpu().numpy()]
            return np.concatenate(out) if out else np.zeros(0, dtype=np.float32)  # host copy of the result
        finally:
            self.mods.gpt.train(was_training)

    @torch.no_grad()
    def eval_audio(self, batch: Batch, max_items: int) -> list[Any]:
        """Speech for the text of up to ``max_items`` eval items in their own voice (seeded), resampled to
        the batch's sample rate."""
        import soxr

        out = []
        for i in range(min(max_items, batch.size)):
            n = batch.host_lengths["audio_lengths"][i]
            ref = batch["audio"][i, 0, :n].float().cpu().numpy()  # host copy, eval only
            max_seconds = 1.5 * n / self.arch.input_sample_rate + 1.0
            wav = self.synthesize(batch.texts[i], speaker_wav=ref, seed=i, max_seconds=max_seconds)
            if wav.size and self.arch.output_sample_rate != batch.sample_rate:
                wav = soxr.resample(wav, self.arch.output_sample_rate, batch.sample_rate).astype(np.float32)
            out.append(wav)
        return out

    @torch.no_grad()
    def speaker_embedding(self, audio: np.ndarray, sample_rate: int) -> np.ndarray:
        """The model's own speaker encoder (the HiFi-GAN decoder's, at 16 kHz, as conditioning computes it) of
        one signal: what the quality metric ``speaker_sim`` compares (speechtrain.capabilities.SpeakerEmbedder)."""
        import soxr

        wav = np.asarray(audio, dtype=np.float32).reshape(-1)
        audio_16k = soxr.resample(wav, sample_rate, 16000, quality="HQ").astype(np.float32)
        encoder = self.mods.hifigan_decoder.speaker_encoder
        out = encoder(torch.from_numpy(audio_16k).to(self.device)[None])  # (1, d_vector)
        return out.reshape(-1).float().cpu().numpy()  # host copy, eval only

    # -- export --------------------------------------------------------------------------------------
    def export(self, out_dir: str | Path) -> Path:
        """Write the model as a Coqui XTTS-v2 checkpoint folder (keys, order and dtypes as loaded; vocabulary
        and config.json updated for the new tokens and language)."""
        return export_coqui(self.mods, out_dir, self.model_cfg.language)


def build_task(model: XttsConfig, data: DataConfig) -> XttsTask:
    """The XTTS task of a ``model.name=xtts`` section and the data section."""
    return XttsTask(model, data)
