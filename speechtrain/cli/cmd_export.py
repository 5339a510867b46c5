"""speechtrain export RUN_DIR OUT_DIR [--which best|last]"""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "export",
        help="write a trained run in its original format (xtts: a Coqui XTTS-v2 checkpoint folder)",
        description="Write the run's weights in the layout they were loaded from: for an xtts run a Coqui "
        "XTTS-v2 folder (model.pth, dvae.pth, mel_stats.pth, vocab.json, config.json) with the same keys, "
        "order and dtypes as the folder it was fine-tuned from, the vocabulary and languages updated.",
    )
    p.add_argument("run_dir", help="run directory (holds config.yaml and checkpoints)")
    p.add_argument("out_dir", help="output folder")
    p.add_argument("--which", choices=("best", "last"), default="best", help="best.pt (default) or the newest step")
    return p


def run(args: argparse.Namespace) -> int:
    from speechtrain.recipes.inference import InferenceRecipe

    recipe = InferenceRecipe(args.run_dir, device="cpu", which=args.which, verb="export")
    print(f"wrote {recipe.export(args.out_dir)}")
    return 0
