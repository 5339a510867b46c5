"""speechtrain classify RUN_DIR FILE... [--json]"""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "classify",
        help="label audio files with a trained classifier run",
        description="Loads RUN_DIR/best.pt (else the newest checkpoint) of a classifier run (e.g. cnn_lstm) and "
        "prints FILE, label and its probability per file (--json: every class probability).",
    )
    p.add_argument("run_dir", metavar="RUN_DIR", help="a training run directory (config.yaml + checkpoints)")
    p.add_argument("files", nargs="+", metavar="FILE", help="audio files (any rate; resampled)")
    p.add_argument("--json", action="store_true", help="print a JSON list with all class probabilities")
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:N (default: cuda when available)")
    p.add_argument("--checkpoint", choices=["best", "latest"], default="best", help="best.pt or the newest step")
    return p


def run(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from speechtrain.errors import DataError
    from speechtrain.recipes.inference import InferenceRecipe

    missing = [f for f in args.files if not Path(f).is_file()]
    if missing:
        raise DataError(f"file(s) not found: {', '.join(missing)}")
    recipe = InferenceRecipe(args.run_dir, device=args.device, which=args.checkpoint, verb="classify")
    results = []
    for f in args.files:
        c = recipe.classify(f)
        results.append({"file": f, "label": c.label, "probability": c.probability, "probabilities": c.probabilities})
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        width = max(len(r["file"]) for r in results)
        label_width = max(len(r["label"]) for r in results)
        for r in results:
            print(f"{r['file']:<{width}}  {r['label']:<{label_width}}  {r['probability']:.3f}")
    return 0
