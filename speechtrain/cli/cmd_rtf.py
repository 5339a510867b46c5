"""speechtrain rtf RUN_DIR [--texts FILE] [--warmup N] [--json OUT] [--device D] [--runtime torch|onnx]"""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "rtf",
        help="real-time factor of a TTS run (synthesis time / audio duration) or of a vocoder run (eval mels)",
    )
    p.add_argument("run_dir", help="run directory of a TTS model (vits, gpt_tts) or a vocoder (hifigan, nsf_hifigan)")
    p.add_argument(
        "--texts",
        default=None,
        help="sentences, one per line (default: 8 in the run's language: model.eval_texts, the built-in ones, "
        "its transcripts)",
    )
    p.add_argument("--warmup", type=int, default=2, help="untimed calls before timing (default 2)")
    p.add_argument("--json", default=None, help="also write the result to this JSON file")
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:N (default: cuda when available)")
    p.add_argument("--vocoder", default=None, help="TTS runs: a HiFi-GAN run directory (gpt_tts default: Griffin-Lim)")
    p.add_argument("--items", type=int, default=8, help="vocoder runs: eval utterances to vocode (default 8)")
    p.add_argument("--seed", type=int, default=0, help="seed of the sampling noise (default 0)")
    p.add_argument("--speaker-wav", default=None, help="xtts: the reference clip of the voice")
    p.add_argument("--language", default=None, help="xtts: language tag of the texts (default: model.language)")
    p.add_argument("--threads", type=int, default=None, help="CPU threads for torch (default: torch's choice)")
    p.add_argument(
        "--runtime",
        choices=("torch", "onnx"),
        default="torch",
        help="onnx: also time the run's exported graph in onnxruntime (CPU) on the same inputs, beside PyTorch "
        "(vits, hifigan, nsf_hifigan; needs pip install 'speechtrain[export]')",
    )
    return p


def read_texts(path: str) -> list[str]:
    """Non-empty lines of a text file (UserError when there are none)."""
    from pathlib import Path

    from speechtrain.errors import UserError

    p = Path(path)
    if not p.is_file():
        raise UserError(f"--texts {path}: file not found")
    texts = [line.strip() for line in p.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not texts:
        raise UserError(f"--texts {path}: no sentences (one per line)")
    return texts


def run(args: argparse.Namespace) -> int:
    import json

    from speechtrain.cli.common import set_threads, user_file, write_json
    from speechtrain.errors import UserError
    from speechtrain.progress import Progress
    from speechtrain.recipes.inference import InferenceRecipe

    if args.json:
        user_file(args.json)  # before the measurement: a folder, under a file, a run's own file
    if args.warmup < 0:
        raise UserError("--warmup must be >= 0")
    set_threads(args.threads)
    texts = read_texts(args.texts) if args.texts else None
    progress = Progress("rtf")  # loading a run and timing its calls takes a while: a line per stage
    progress.stage(f"loading {args.run_dir}")
    recipe = InferenceRecipe(args.run_dir, device=args.device, verb="rtf")
    options = {k: getattr(args, k) for k in ("speaker_wav", "language") if getattr(args, k, None) is not None}
    if args.vocoder:
        options["vocoder_run"] = args.vocoder
    result = recipe.rtf(
        texts,
        items=args.items,
        warmup=args.warmup,
        seed=args.seed,
        runtime=args.runtime,
        threads=args.threads,
        progress=progress,
        **options,
    )
    print(json.dumps(result, indent=2))
    write_json(args.json, result)
    return 0
