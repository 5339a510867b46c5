"""speechtrain export RUN_DIR OUT_DIR [--which best|last] [--consolidate] [--force]"""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "export",
        help="write a trained run in its original format (xtts: a Coqui XTTS-v2 folder), or any run's weights as "
        "one file (--consolidate)",
        description="Write the run's weights in the layout they were loaded from: for an xtts run a Coqui "
        "XTTS-v2 folder (model.pth, dvae.pth, mel_stats.pth, vocab.json, config.json) with the same keys, "
        "order and dtypes as the folder it was fine-tuned from, the vocabulary and languages updated. "
        "--consolidate: the full weights of any run (an FSDP run's shards assembled) as OUT_DIR/model.pt with its "
        "config.yaml. Written to a temporary folder and moved into place once whole; OUT_DIR must be new or empty "
        "(--force replaces the files an export writes), and never the folder the run was fine-tuned from.",
    )
    p.add_argument("run_dir", help="run directory (holds config.yaml and checkpoints)")
    p.add_argument("out_dir", help="output folder")
    p.add_argument("--which", choices=("best", "last"), default="best", help="best.pt (default) or the newest step")
    p.add_argument(
        "--consolidate",
        action="store_true",
        help="one file of the run's full weights (OUT_DIR/model.pt): for sharded (FSDP2) runs, or any run",
    )
    p.add_argument("--force", action="store_true", help="OUT_DIR may hold files: the exported ones replace theirs")
    return p


def run(args: argparse.Namespace) -> int:
    from speechtrain.recipes.export import export_run

    out = export_run(args.run_dir, args.out_dir, which=args.which, force=args.force, consolidate=args.consolidate)
    print(f"wrote {out}")
    return 0
