"""speechtrain train --config CFG [--auto-resume] [key=value ...] | --resume RUN_DIR [key=value ...]"""

from __future__ import annotations

import argparse
import json

from speechtrain.cli.common import add_config_args


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "train",
        help="train a recipe or your own model (prepares the data when the cache is missing or stale)",
        description="Writes a run directory (train.output_dir): config.yaml, accel.json, checkpoints/, "
        "best.pt, metrics.jsonl, tensorboard/, samples/. SIGTERM/SIGINT stop at the next step, save a checkpoint "
        "and exit 0 (a second signal waits for the save). Under torchrun restarts or a scheduler, run the same "
        "command with --auto-resume each time.",
    )
    add_config_args(p)
    p.add_argument("--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR exactly where it stopped")
    p.add_argument(
        "--auto-resume",
        action="store_true",
        help="continue train.output_dir from its newest loadable checkpoint if it has one, else start it "
        "(train.auto_resume=true): the same command for the first start and every restart",
    )
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
        if args.auto_resume:
            raise UserError(
                "--auto-resume goes with --config CFG (the same command at every restart); for a run directory "
                "use --resume RUN_DIR (with --start-over to start it again when no checkpoint loads)"
            )
        recipe = TrainRecipe.from_run(args.resume, args.overrides, start_over=args.start_over)
    else:
        if args.start_over:
            raise UserError(
                "--start-over goes with --resume RUN_DIR"
            )  # --config CFG, or the defaults with key=value overrides
        from speechtrain.cli.common import config_from_args

        cfg = config_from_args(args, needs_model=True)
        if args.auto_resume:
            cfg.train.auto_resume = True
        recipe = TrainRecipe(cfg)
    run_dir, summary = recipe.run()
    if process_rank() == 0:  # under torchrun every worker runs this; one summary
        print(json.dumps({"run_dir": str(run_dir), **summary}, indent=2, default=str))
    return 0
