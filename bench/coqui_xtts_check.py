"""Coqui's own XTTS loader on speechtrain's tiny XTTS folders: the random ``tiny_coqui`` base and the
``--format coqui`` export of a tiny run trained a few steps, each loaded with ``Xtts.load_checkpoint(strict=True)``
and compared with ours on the same inputs (conditioning latents, teacher-forced text/audio CE of a padded batch,
speaker embedding, HiFi-GAN decoder audio).

Run it with the Python of a venv that has coqui-tts (never speechtrain's own interpreter: it pulls transformers)::

    python bench/peers/run.py --install      # or: python3 -m venv --system-site-packages V && V/bin/pip install
                                             #     coqui-tts==0.28.0 (check that torch stays the system's)
    ~/.cache/speechtrain-peers/venv/bin/python bench/coqui_xtts_check.py --work /tmp/coqui_check --json out.json
    ... bench/coqui_xtts_check.py --write-layout tests/fixtures/xtts_tiny_coqui_layout.json   # the fixture

This checkout and ``bench/peers/shims`` (torchaudio, which has no CPU build for torch 2.13 here) are put on the
path by the script. ``--write-layout`` records the state-dict layout that Coqui's ``Xtts`` builds from the tiny
base's config.json and vocab.json, with the size entries it was built from, so that the default test suite checks
the contract without Coqui (``tests/test_models_xtts.py``). Exits 1 when a load fails or a difference is over
``--tol`` (relative to the largest value compared).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path[:0] = [str(HERE / "peers" / "shims"), str(REPO)]

import torch  # noqa: E402

#: config.json ``model_args`` entries Coqui's ``Xtts`` sizes its modules from (the rest it hard-codes)
SIZE_ARGS = (
    "gpt_layers",
    "gpt_n_model_channels",
    "gpt_n_heads",
    "gpt_num_audio_tokens",
    "gpt_max_audio_tokens",
    "gpt_max_text_tokens",
    "gpt_max_prompt_tokens",
    "gpt_use_perceiver_resampler",
    "decoder_input_dim",
    "d_vector_dim",
    "cond_d_vector_in_each_upsampling_layer",
    "input_sample_rate",
    "output_sample_rate",
    "output_hop_length",
)


def load_coqui(folder: Path) -> Any:
    """Coqui's ``Xtts`` from the folder's config.json, its tensors loaded strictly, as its users load it."""
    from TTS.tts.configs.xtts_config import XttsConfig
    from TTS.tts.models.xtts import Xtts

    config = XttsConfig()
    config.load_json(str(folder / "config.json"))
    model = Xtts(config)
    model.load_checkpoint(config, checkpoint_dir=str(folder), use_deepspeed=False, strict=True)
    model.eval()  # Coqui's Xtts.eval returns None
    return model


def coqui_layout(folder: Path) -> dict[str, Any]:
    """The state-dict layout Coqui's ``Xtts`` builds from the folder's config.json and vocab.json (before any
    inference copy of the GPT), and the size entries of config.json it was built from."""
    from TTS.tts.configs.xtts_config import XttsConfig
    from TTS.tts.layers.xtts.tokenizer import VoiceBpeTokenizer
    from TTS.tts.models.xtts import Xtts

    config = XttsConfig()
    config.load_json(str(folder / "config.json"))
    model = Xtts(config)
    model.tokenizer = VoiceBpeTokenizer(vocab_file=str(folder / "vocab.json"))
    model.init_models()
    args = json.loads((folder / "config.json").read_text())["model_args"]
    return {
        "source": "coqui-tts 0.28.0: TTS.tts.models.xtts.Xtts built from the tiny_coqui base's config.json and "
        "vocab.json (write_random_checkpoint(DIR, 'tiny_coqui', seed=0)); bench/coqui_xtts_check.py --write-layout",
        "model_args": {k: args.get(k) for k in SIZE_ARGS},
        "text_tokens": model.tokenizer.get_number_tokens(),
        "parameters": sum(p.numel() for p in model.parameters()),
        "model.pth": [[k, list(v.shape), str(v.dtype).removeprefix("torch.")] for k, v in model.state_dict().items()],
    }


def layout_json(data: dict[str, Any]) -> str:
    """One line per entry and per tensor row (a reviewable diff when Coqui's layout changes)."""
    lines = []
    for key, value in data.items():
        if isinstance(value, list):
            rows = ",\n".join(json.dumps(r) for r in value)
            lines.append(f"{json.dumps(key)}: [\n{rows}\n]")
        else:
            lines.append(f"{json.dumps(key)}: {json.dumps(value)}")
    return "{\n" + ",\n".join(lines) + "\n}\n"


class Comparison:
    """Largest absolute differences, one line each; ``failures`` names those over the tolerance."""

    def __init__(self, tol: float) -> None:
        self.tol, self.rows, self.failures = tol, [], []  # type: ignore[var-annotated]

    def check(self, what: str, ours: torch.Tensor, theirs: torch.Tensor) -> None:
        ours, theirs = ours.detach().float().cpu(), theirs.detach().float().cpu()
        if ours.shape != theirs.shape:
            self.failures.append(what)
            print(f"FAIL {what}: shapes {tuple(ours.shape)} vs Coqui {tuple(theirs.shape)}")
            return
        diff = float((ours - theirs).abs().max())
        scale = max(1.0, float(theirs.abs().max()))
        ok = diff <= self.tol * scale
        self.rows.append({"what": what, "max_abs_diff": diff, "scale": scale, "ok": ok})
        if not ok:
            self.failures.append(what)
        print(f"{'ok  ' if ok else 'FAIL'} {what}: max |diff| {diff:.3g} (largest |value| {scale:.3g})")


@torch.no_grad()
def compare(label: str, coqui: Any, mods: Any, cmp: Comparison) -> None:
    """Ours and Coqui's on the same seeded inputs."""
    from speechtrain.models.xtts.gpt import IGNORE_INDEX

    arch_width = mods.gpt.text_embedding.embedding_dim
    g = torch.Generator().manual_seed(0)
    mel = torch.randn(1, 80, 250, generator=g)  # (1, n_mels, T_frames): a style mel
    theirs = coqui.gpt.get_style_emb(mel).transpose(1, 2)  # (1, latents, width)
    ours = mods.gpt.conditioning_latents(mel)
    cmp.check(f"{label}: conditioning latents", ours, theirs)

    stride = coqui.args.gpt_code_stride_len
    text_lengths = torch.tensor([9, 5])
    text = torch.randint(3, min(60, coqui.args.gpt_number_text_tokens), (2, 9), generator=g)
    text[1, 5:] = 0
    wav_lengths = torch.tensor([12 * stride - 100, 6 * stride])
    codes = torch.randint(0, coqui.args.gpt_num_audio_tokens - 2, (2, 12), generator=g)
    cond = mel.expand(2, -1, -1)
    their_text_ce, their_audio_ce, _ = coqui.gpt(text, text_lengths, codes, wav_lengths, cond_mels=cond[:, None])
    code_lengths = mods.gpt.code_lengths(wav_lengths)
    seq = mods.gpt.arrange(text, text_lengths, codes, code_lengths, 9, int(code_lengths.max()))
    valid = torch.cat([seq["text_valid"], seq["mel_valid"]], 1)
    t_logits, m_logits = mods.gpt(seq["text_inputs"], seq["mel_inputs"], ours.expand(2, -1, -1), valid)
    ce = torch.nn.functional.cross_entropy
    our_text_ce = ce(t_logits.flatten(0, 1), seq["text_targets"].flatten(), ignore_index=IGNORE_INDEX)
    our_audio_ce = ce(m_logits.flatten(0, 1), seq["mel_targets"].flatten(), ignore_index=IGNORE_INDEX)
    cmp.check(f"{label}: text CE (padded batch of 2)", our_text_ce, their_text_ce)
    cmp.check(f"{label}: audio CE (padded batch of 2)", our_audio_ce, their_audio_ce)

    audio = 0.1 * torch.randn(1, 32000, generator=g)  # (1, T_samples) at 16 kHz
    their_spk = coqui.hifigan_decoder.speaker_encoder.forward(audio, l2_norm=True)
    our_spk = mods.hifigan_decoder.speaker_encoder(audio)
    cmp.check(f"{label}: speaker embedding", our_spk, their_spk)
    latents = torch.randn(1, 20, arch_width, generator=g)  # (1, T_codes, width): GPT latents
    cmp.check(
        f"{label}: HiFi-GAN decoder audio",
        mods.hifigan_decoder(latents, their_spk.unsqueeze(-1)),
        coqui.hifigan_decoder(latents, g=their_spk.unsqueeze(-1)),
    )


def our_base(folder: Path) -> Any:
    from speechtrain.models.xtts.checkpoint import build_modules, load_coqui_weights, read_config_and_vocab

    mods = build_modules(read_config_and_vocab(folder).arch, dropout=0.0)
    report = load_coqui_weights(folder, mods, strict=True)
    assert report.ok, report.summary()
    for m in mods.by_name().values():
        m.eval()
    return mods


def train_and_export(work: Path, base: Path, steps: int) -> tuple[Any, Path]:
    """A tiny run from the ``tiny_coqui`` base (English demo corpus), exported with ``--format coqui``;
    returns the run's own modules (not re-read from the export) and the export folder."""
    from speechtrain.cli.main import main
    from speechtrain.recipes.inference import load_task

    corpus, run, out = work / "corpus", work / "run", work / "export"
    if not (corpus / "metadata.csv").is_file():
        assert main(["make-dataset", str(corpus), "-n", "8"]) == 0
    args = [
        "--config",
        str(REPO / "recipes" / "xtts_finetune_tiny.yaml"),
        f"data.manifest={corpus}",
        f"data.cache_dir={work / 'cache'}",
        "data.eval_utterances=2",
        f"model.checkpoint_dir={base}",
        "model.random_checkpoint=tiny_coqui",
        "model.language=en",
        "model.extra_tokens=[]",
        f"train.output_dir={run}",
        f"train.max_steps={steps}",
        f"train.eval_every={steps}",
        f"train.save_every={steps}",
        "train.eval_audio_samples=0",
        "train.device=cpu",
    ]
    assert main(["train", *args]) == 0, "training failed"
    assert main(["export", str(run), str(out), "--format", "coqui", "--force"]) == 0, "export failed"
    _, task = load_task(run, device="cpu")
    return task.mods, out  # type: ignore[attr-defined]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--work", type=Path, default=None, help="working folder (default: a temporary one)")
    p.add_argument("--steps", type=int, default=4, help="training steps of the tiny run")
    p.add_argument("--tol", type=float, default=1e-4, help="largest difference allowed, relative")
    p.add_argument("--write-layout", type=Path, default=None, metavar="JSON", help="write Coqui's layout there")
    p.add_argument("--skip-export", action="store_true", help="the base folder only (no training)")
    p.add_argument("--json", type=Path, default=None, metavar="OUT", help="the differences, as JSON")
    args = p.parse_args(argv)

    from speechtrain.models.xtts.build import write_random_checkpoint

    torch.manual_seed(0)
    work = args.work or Path(tempfile.mkdtemp(prefix="coqui-xtts-check-"))
    base = work / "base"
    if not (base / "model.pth").is_file():
        write_random_checkpoint(base, "tiny_coqui", seed=0)
    if args.write_layout:
        args.write_layout.write_text(layout_json(coqui_layout(base)), encoding="utf-8")
        print(f"wrote {args.write_layout}")
    cmp = Comparison(args.tol)
    coqui = load_coqui(base)
    n = sum(t.numel() for t in coqui.parameters())
    print(f"ok   Coqui's Xtts loaded {base} with strict=True: {n:,} parameters")
    compare("tiny_coqui base", coqui, our_base(base), cmp)
    if not args.skip_export:
        mods, out = train_and_export(work, base, args.steps)
        for m in mods.by_name().values():
            m.eval()
        coqui = load_coqui(out)
        print(f"ok   Coqui's Xtts loaded the export {out} with strict=True ({args.steps} steps trained)")
        compare(f"export after {args.steps} steps", coqui, mods, cmp)
    if args.json:
        args.json.write_text(json.dumps({"rows": cmp.rows, "failures": cmp.failures}, indent=1) + "\n")
    if cmp.failures:
        print(f"{len(cmp.failures)} comparison(s) off: {', '.join(cmp.failures)}")
        return 1
    print("every comparison agrees")
    return 0


if __name__ == "__main__":
    sys.exit(main())
