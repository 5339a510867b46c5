"""speechtrain train --config CFG [key=value ...] | --resume RUN_DIR [key=value ...]"""

from __future__ import annotations

import argparse
import json

from speechtrain.cli.common import add_config_args


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "train",
        help="train a recipe or your own model (prepares the data when the cache is missing or stale)",
        description="Writes a run directory (train.output_dir): config.yaml, accel.json, checkpoints/, "
        "best.pt, metrics.jsonl, tensorboard/, samples/. SIGTERM/SIGINT save a checkpoint and exit cleanly.",
    )
    add_config_args(p)
    p.add_argument("--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR exactly where it stopped")
    p.add_argument(
        "--start-over",
        action="store_true",
        help="with --resume: when no checkpoint of RUN_DIR loads, train it again from step 0 (else an error)",
    )
    return p


def run(args: argparse.Namespace) -> int:
    from speechtrain.errors import UserError
    from speechtrain.logs import process_rank
    from speechtrain.recipes.train import TrainRecipe

    if args.resume:
        if args.config:
            raise UserError("--resume uses the run's own config.yaml; pass changes as key=value, not --config")
        recipe = TrainRecipe.from_run(args.resume, args.overrides, start_over=args.start_over)
    else:
        if args.start_over:
            raise UserError(
                "--start-over goes with --resume RUN_DIR"
            )  # --config CFG, or the defaults with key=value overrides
        from speechtrain.cli.common import config_from_args

        recipe = TrainRecipe(config_from_args(args, needs_model=True))
    run_dir, summary = recipe.run()
    if process_rank() == 0:  # under torchrun every worker runs this; one summary
        print(json.dumps({"run_dir": str(run_dir), **summary}, indent=2, default=str))
    return 0
