"""speechtrain export RUN_DIR OUT_DIR [--format F] [--which best|last] [--text S ...] [--name N] [--no-check]
[--consolidate] [--force]"""

from __future__ import annotations

import argparse

from speechtrain.cli.common import help_from_table


def formats_help() -> str:
    """Every format of the export table, the families it serves and what it writes."""
    from speechtrain.export.formats import FORMATS

    rows = [f"{f.key} ({', '.join(f.families)}: {f.summary})" for f in FORMATS.values()]
    return "; ".join(rows) + "; default: the family's first"


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "export",
        help="write a trained run for the runtime that deploys it (Piper, ONNX Runtime, OpenUtau, jik876, Coqui), "
        "checked in that runtime",
        description="Write the run's model for a runtime and check it there: the exported model runs in its runtime "
        "(onnxruntime, piper-tts) on fixed inputs of two lengths beside the PyTorch model; the largest difference is "
        "printed and the export fails when it is above the stated tolerance. onnx/piper formats need "
        "pip install 'speechtrain[export]'. --consolidate: the full weights of any run (an FSDP run's shards "
        "assembled) as OUT_DIR/model.pt with its config.yaml. Written to a temporary folder and moved into place "
        "once whole and checked; OUT_DIR must be new or empty (--force replaces the files an export writes), and "
        "never the run directory or the folder the run was fine-tuned from.",
    )
    p.add_argument("run_dir", help="run directory (holds config.yaml and checkpoints)")
    p.add_argument("out_dir", help="output folder")
    p.add_argument("--format", dest="fmt", default=None, help="the runtime's format (listed by --help)")
    help_from_table(p, "fmt", formats_help)
    p.add_argument("--which", choices=("best", "last"), default="best", help="best.pt (default) or the newest step")
    p.add_argument(
        "--text",
        action="append",
        default=None,
        help="TTS: a check sentence (repeat; default: model.eval_texts, then the run's transcripts)",
    )
    p.add_argument("--name", default=None, help="base name of the model file (piper: NAME.onnx; default: the run's)")
    p.add_argument("--no-check", action="store_true", help="write the files without running them in the runtime")
    p.add_argument(
        "--consolidate",
        action="store_true",
        help="one file of the run's full weights (OUT_DIR/model.pt): for sharded (FSDP2) runs, or any run",
    )
    p.add_argument("--force", action="store_true", help="OUT_DIR may hold files: the exported ones replace theirs")
    return p


def run(args: argparse.Namespace) -> int:
    from speechtrain.recipes.export import export_run

    result = export_run(
        args.run_dir,
        args.out_dir,
        args.fmt,
        which=args.which,
        texts=args.text,
        name=args.name,
        check=not args.no_check,
        force=args.force,
        consolidate=args.consolidate,
    )
    for line in result.lines():
        print(line)
    return 0
