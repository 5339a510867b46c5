"""speechtrain tune --config CFG --out TUNED.yaml [--json REPORT] [key=value ...]

Finds, per duration bucket, the largest batch that trains within the memory budget (or the one
past which audio-seconds/s stop rising), by running real training steps; writes the config with
``data.bucket_boundaries`` / ``data.bucket_batch_sizes`` (and ``train.grad_accum`` when
``tune.target_batch_seconds`` is set) so that ``speechtrain train --config TUNED.yaml`` uses them.
Under torchrun (``torchrun --nproc-per-node N -m speechtrain tune ...``) every rank measures its own
device and each bucket takes the smallest batch of any rank.
"""

from __future__ import annotations

import argparse

from speechtrain.cli.common import add_config_args, config_from_args, user_file, write_json


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser("tune", help="measure the largest batch per duration bucket and write a tuned config")
    add_config_args(p, required=True)
    p.add_argument("--out", required=True, metavar="TUNED.yaml", help="where to write the tuned config")
    p.add_argument("--json", default=None, metavar="REPORT", help="also write the per-bucket report as JSON")
    return p  # --quiet (every command's): no line per trial either


def run(args: argparse.Namespace) -> int:
    cfg = config_from_args(args, needs_model=True)
    from speechtrain.memory.estimate import format_estimate
    from speechtrain.recipes.tune import TuneRecipe, write_tuned_config
    from speechtrain.train.distributed import env_rank

    # under torchrun every rank tunes its own device; they agree, and the first alone prints and writes
    first = env_rank() == 0
    user_file(args.out, "--out")  # before the measurement: a folder, a path under a file, a run's own file
    if args.json:
        user_file(args.json)
    if first:
        print(f"tuning batch sizes per bucket ({cfg.tune.objective}) ...")
    report = TuneRecipe(cfg, quiet=args.quiet or not first).run()
    if not first:
        return 0
    print(report.table())
    if report.estimate is not None:
        print("estimate (before any run):")
        print(format_estimate(report.estimate))
    path = write_tuned_config(report, args.out)
    write_json(args.json, report.to_dict())
    print(f"wrote {path}: train with `speechtrain train --config {path}`")
    return 0
