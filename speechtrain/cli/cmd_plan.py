"""speechtrain plan DATA [--config CFG] [--json OUT] [key=value ...]

Prints the batch plan of one epoch: bucket bounds, batches per bucket, items per batch and the
padding fraction, for duration-bucketed batching beside random batching of the same mean batch
size. ``--synthetic ljspeech`` plans an LJSpeech-like duration distribution without any data.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from speechtrain.cli.common import config_from_args, user_file, write_json


def _options(p: argparse.ArgumentParser, defaults: bool = True) -> None:
    def d(value: object) -> object:
        return value if defaults else argparse.SUPPRESS

    p.add_argument("--config", "-c", default=d(None), help="YAML config (recipes/*.yaml)")
    p.add_argument("--json", default=d(None), metavar="OUT", help="also write the plan as JSON")
    p.add_argument(
        "--synthetic",
        choices=["ljspeech"],
        default=d(None),
        help="plan a synthetic duration distribution instead of DATA (ljspeech: 13100 utterances, "
        "N(6.5 s, 2.2 s) clipped to [1, 10.1] s)",
    )
    p.add_argument("--utterances", type=int, default=d(13100), help="utterances of --synthetic")


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser("plan", help="print the batch plan (buckets, items per batch, padding) of a dataset")
    p.add_argument("data", nargs="?", default=None, help="dataset folder or manifest (sets data.manifest)")
    _options(p)
    # options may follow DATA and come before or between key=value overrides: parsed again in run()
    p.add_argument("rest", nargs=argparse.REMAINDER, metavar="key=value", help="dotted overrides")
    return p


def _split_rest(args: argparse.Namespace) -> list[str]:
    from speechtrain.errors import UserError

    again = argparse.ArgumentParser(prog="speechtrain plan", add_help=False)
    _options(again, defaults=False)
    ns, overrides = again.parse_known_args(list(args.rest or []))
    for key, value in vars(ns).items():
        setattr(args, key, value)
    bad = [o for o in overrides if o.startswith("-") or "=" not in o]
    if bad:
        raise UserError(f"speechtrain plan: unexpected argument(s) {bad}; overrides are key=value")
    return overrides


def run(args: argparse.Namespace) -> int:
    from speechtrain.errors import UserError

    args.overrides = _split_rest(args)
    if args.json:
        user_file(args.json)  # before the work: a folder, under a file, a run's own file
    data = args.data
    if data is not None and "=" in data and not Path(data).exists():
        args.overrides = [data, *args.overrides]
        data = None
    if data is not None:
        args.overrides = [*args.overrides, f"data.manifest={data}"]
    cfg = config_from_args(args)
    from speechtrain.data.plan import format_plan, plan_report

    if args.synthetic:
        from speechtrain.data.synthetic import ljspeech_like_frames

        frames = ljspeech_like_frames(
            args.utterances, seed=cfg.train.seed, sample_rate=cfg.data.sample_rate, hop_length=cfg.data.hop_length
        )
        report = plan_report(frames, cfg.data, seed=cfg.train.seed)
        report["source"] = f"synthetic {args.synthetic} ({args.utterances} utterances)"
    else:
        if cfg.data.manifest is None:
            raise UserError("speechtrain plan: give DATA (a dataset folder or manifest), data.manifest, or --synthetic")
        from speechtrain.recipes.data import DataRecipe

        recipe = DataRecipe(cfg)
        recipe.ensure_prepared()
        ds = recipe.dataset("train", fields=())
        report = plan_report(
            ds.frames,
            cfg.data,
            seed=cfg.train.seed,
            ids=list(ds.ids),
            hop_length=ds.hop_length,
            sample_rate=ds.sample_rate,
        )
        report["source"] = str(cfg.data.manifest)
    print(f"plan of {report['source']}")
    print(format_plan(report))
    write_json(args.json, report)
    return 0
