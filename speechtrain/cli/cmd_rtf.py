"""speechtrain rtf RUN_DIR [--texts FILE] [--warmup N] [--json OUT] [--device D] [--runtime torch|onnx]"""

from __future__ import annotations

import argparse
from typing import Any


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "rtf",
        help="real-time factor of a TTS run (synthesis time / audio duration) or of a vocoder run (eval mels)",
    )
    p.add_argument("run_dir", help="run directory of a TTS model (vits, gpt_tts) or a vocoder (hifigan)")
    p.add_argument("--texts", default=None, help="sentences, one per line (default: 8 built-in sentences)")
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
        "(vits, hifigan; needs pip install 'speechtrain[export]')",
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


def eval_mels(cfg: Any, n: int) -> list[Any]:
    """Up to ``n`` mels (n_mels, T_frames) of the run's eval set (else its training set)."""
    from speechtrain.recipes.data import DataRecipe

    return DataRecipe(cfg).eval_mels(n)


def task_device(task: Any) -> Any:
    """The device of the task's first parameter (CPU when it has none)."""
    import torch

    for module in task.modules().values():
        for p in module.parameters():
            return p.device
    return torch.device("cpu")


def run(args: argparse.Namespace) -> int:
    import json

    import torch

    from speechtrain.bench.rtf import DEFAULT_SENTENCES, measure_rtf
    from speechtrain.cli.common import write_json
    from speechtrain.errors import UserError
    from speechtrain.recipes.inference import load_task

    if args.warmup < 0:
        raise UserError("--warmup must be >= 0")
    if args.threads is not None:
        if args.threads < 1:
            raise UserError("--threads must be >= 1")
        torch.set_num_threads(args.threads)
    cfg, task = load_task(args.run_dir, device=args.device)
    if args.runtime == "onnx":
        from speechtrain.recipes.export import check_onnx_rtf

        check_onnx_rtf(str(cfg.model.name))
    device = task_device(task)
    options: dict[str, Any] = {}
    if hasattr(task, "synthesize"):
        inputs: list[Any] = read_texts(args.texts) if args.texts else list(DEFAULT_SENTENCES)
        if args.vocoder:
            options["vocoder_run"] = args.vocoder
        options["seed"] = args.seed
        for key in ("speaker_wav", "language"):
            if getattr(args, key, None) is not None:
                options[key] = getattr(args, key)
    elif hasattr(task, "vocode"):
        if args.texts:
            raise UserError(f"{args.run_dir} is a vocoder run: it vocodes eval mels, --texts does not apply")
        inputs = eval_mels(cfg, args.items)
    else:
        raise UserError(f"{args.run_dir} is a '{cfg.model.name}' run: RTF applies to TTS and vocoder runs only")
    torch.manual_seed(args.seed)
    rate = int(getattr(task, "output_sample_rate", cfg.data.sample_rate))  # a family may speak at its own rate
    result = measure_rtf(task, inputs, device, args.warmup, sample_rate=rate, options=options)
    result["runtime"] = "torch"
    if args.runtime == "onnx":
        from speechtrain.recipes.export import onnx_rtf

        onnx = onnx_rtf(task, str(cfg.model.name), inputs, args.warmup, rate, options, args.threads)
        result["onnx"] = onnx
        result["onnx_speedup"] = result["rtf"] / onnx["rtf"] if onnx["rtf"] > 0 else None
    result["run_dir"] = str(args.run_dir)
    result["model"] = cfg.model.name
    result["threads"] = torch.get_num_threads()
    print(json.dumps(result, indent=2))
    write_json(args.json, result)
    return 0
