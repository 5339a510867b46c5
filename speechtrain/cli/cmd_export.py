"""speechtrain export RUN_DIR OUT_DIR [--which best|last] [--format NAME]"""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "export",
        help="write a trained run in its reference's format (xtts: a Coqui XTTS-v2 checkpoint folder; "
        "nsf_hifigan: SingingVocoders' model.ckpt + config.json)",
        description="Write the run's weights in its reference's layout: for an xtts run a Coqui "
        "XTTS-v2 folder (model.pth, dvae.pth, mel_stats.pth, vocab.json, config.json) with the same keys, "
        "order and dtypes as the folder it was fine-tuned from, the vocabulary and languages updated; for an "
        "nsf_hifigan run SingingVocoders' export (model.ckpt with the generator, config.json), which DiffSinger, "
        "DDSP-SVC and so-vits-svc load.",
    )
    p.add_argument("run_dir", help="run directory (holds config.yaml and checkpoints)")
    p.add_argument("out_dir", help="output folder")
    p.add_argument("--which", choices=("best", "last"), default="best", help="best.pt (default) or the newest step")
    p.add_argument(
        "--format", default=None, help="the layout to write (nsf_hifigan: singingvocoders); default: the family's"
    )
    return p


def run(args: argparse.Namespace) -> int:
    from speechtrain.errors import UserError
    from speechtrain.recipes.inference import load_task

    cfg, task = load_task(args.run_dir, device="cpu", which=args.which)
    if not callable(getattr(task, "export", None)):  # an optional method of a family's task
        raise UserError(
            f"{args.run_dir} is a '{cfg.model.name}' run, which has no export format (xtts and nsf_hifigan have)"
        )
    writes = getattr(task, "export_format", None)
    if args.format is not None and writes is not None and args.format != writes:
        raise UserError(f"--format {args.format}: a '{cfg.model.name}' run is written as '{writes}' only")
    out = task.export(args.out_dir)
    print(f"wrote {out}")
    return 0
