"""speechtrain estimate --config CFG [--json OUT] [key=value ...]

Memory a training run needs, before running it: weights, gradients and optimizer state counted
from the parameters, activations measured by a small forward/backward and scaled to the frame
budget (``data.max_frames``) and to the longest utterance, beside the device's memory.
"""

from __future__ import annotations

import argparse

from speechtrain.cli.common import add_config_args, config_from_args, user_file, write_json


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser("estimate", help="estimate the memory of a training run before starting it")
    add_config_args(p)
    p.add_argument("--json", default=None, metavar="OUT", help="also write the estimate as JSON")
    return p


def run(args: argparse.Namespace) -> int:
    if args.json:
        user_file(args.json)  # before the work: a folder, under a file, a run's own file
    cfg = config_from_args(args, needs_model=True)
    from speechtrain.memory.estimate import format_estimate
    from speechtrain.recipes.estimate import EstimateRecipe

    est = EstimateRecipe(cfg).run()
    print(format_estimate(est))
    write_json(args.json, est)
    return 0 if est["fits"] is not False else 1
