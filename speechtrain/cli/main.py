"""The ``speechtrain`` command. Each subcommand lives in ``speechtrain/cli/cmd_<name>.py`` with
``add_parser(subparsers)`` (light: no torch import) and ``run(args) -> int`` (imports what it needs).
"""

from __future__ import annotations

import argparse
import importlib
import sys

from speechtrain import __version__

# subcommand name -> module under speechtrain.cli
COMMANDS = {
    "demo": "cmd_demo",
    "make-dataset": "cmd_make_dataset",
    "prepare": "cmd_prepare",
    "config": "cmd_config",
    "plan": "cmd_plan",
    "probe": "cmd_probe",
    "estimate": "cmd_estimate",
    "tune": "cmd_tune",
    "train": "cmd_train",
    "bench": "cmd_bench",
    "synthesize": "cmd_synthesize",
    "vocode": "cmd_vocode",
    "classify": "cmd_classify",
    "rtf": "cmd_rtf",
    "export": "cmd_export",
    "ui": "cmd_ui",
}


def _load(name: str):  # noqa: ANN202 - a module
    try:
        return importlib.import_module(f"speechtrain.cli.{COMMANDS[name]}")
    except ModuleNotFoundError as exc:
        if exc.name == f"speechtrain.cli.{COMMANDS[name]}":
            return None
        raise


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every available subcommand."""
    parser = argparse.ArgumentParser(prog="speechtrain", description=__doc__.split("\n")[0])
    parser.add_argument("--version", action="version", version=f"speechtrain {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        module = _load(name)
        if module is not None:
            p = module.add_parser(sub)
            p.set_defaults(_module=module)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``speechtrain`` console script."""
    from speechtrain.errors import UserError

    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return 2
    try:
        return int(args._module.run(args) or 0)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
