"""speechtrain plan DATA [--config CFG] [--json OUT] [key=value ...]

Prints the batch plan of one epoch: bucket bounds, batches per bucket, items per batch and the
padding fraction, for duration-bucketed batching beside random batching of the same mean batch
size. ``--synthetic ljspeech`` plans an LJSpeech-like duration distribution without any data.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from speechtrain.cli.common import add_config_args, config_from_args, write_json


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser("plan", help="print the batch plan (buckets, items per batch, padding) of a dataset")
    p.add_argument("data", nargs="?", default=None, help="dataset folder or manifest (sets data.manifest)")
    add_config_args(p)
    p.add_argument("--json", default=None, metavar="OUT", help="also write the plan as JSON")
    p.add_argument(
        "--synthetic",
        choices=["ljspeech"],
        default=None,
        help="plan a synthetic duration distribution instead of DATA (ljspeech: 13100 utterances, "
        "N(6.5 s, 2.2 s) clipped to [1, 10.1] s)",
    )
    p.add_argument("--utterances", type=int, default=13100, help="utterances of --synthetic")
    return p


def run(args: argparse.Namespace) -> int:
    from speechtrain.errors import UserError

    data = args.data
    if data is not None and "=" in data and not Path(data).exists():
        args.overrides = [data, *args.overrides]
        data = None
    if data is not None:
        args.overrides = [*args.overrides, f"data.manifest={data}"]
    cfg = config_from_args(args)
    from speechtrain.data.plan import format_plan, plan_report

    if args.synthetic:
        from speechtrain.testing.datasets import ljspeech_like_frames

        frames = ljspeech_like_frames(
            args.utterances, seed=cfg.train.seed, sample_rate=cfg.data.sample_rate, hop_length=cfg.data.hop_length
        )
        report = plan_report(frames, cfg)
        report["source"] = f"synthetic {args.synthetic} ({args.utterances} utterances)"
    else:
        if cfg.data.manifest is None:
            raise UserError("speechtrain plan: give DATA (a dataset folder or manifest), data.manifest, or --synthetic")
        from speechtrain.data.dataset import SpeechDataset
        from speechtrain.data.prepare import ensure_prepared

        ensure_prepared(cfg)
        ds = SpeechDataset.from_config(cfg, split="train", fields=())
        report = plan_report(ds.frames, cfg, ids=list(ds.ids), hop_length=ds.hop_length, sample_rate=ds.sample_rate)
        report["source"] = str(cfg.data.manifest)
    print(f"plan of {report['source']}")
    print(format_plan(report))
    write_json(args.json, report)
    return 0
