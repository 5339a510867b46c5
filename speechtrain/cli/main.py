"""The ``speechtrain`` command. Each subcommand lives in ``speechtrain/cli/cmd_<name>.py`` with
``add_parser(subparsers)`` (light: no torch import) and ``run(args) -> int`` (imports what it needs).
What ``speechtrain --help`` shows is :data:`DESCRIPTION` and :data:`FIRST_STEPS`, written for users.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import textwrap

from speechtrain import __version__

DESCRIPTION = (
    "Train speech models -- VITS, HiFi-GAN and NSF-HiFiGAN vocoders, XTTS-style GPT TTS (XTTS-v2 fine-tuning "
    "included), audio classifiers or your own model -- fast and out-of-memory-proof on the GPU you have, "
    "with every speed-up measured."
)
FIRST_STEPS = """first steps:
  speechtrain demo                                   the whole tour on built-in demo data (~4 min on 2 CPU cores)
  speechtrain probe                                  your hardware and the settings recommended for it
  speechtrain prepare data/mine --config recipes/vits_tiny.yaml
                                                     check your corpus and build its feature cache
  speechtrain train --config recipes/vits_tiny.yaml data.manifest=data/mine
  speechtrain synthesize runs/vits_tiny --text "Hello there." --out hello.wav
  speechtrain ui                                     the same from a web page (http://127.0.0.1:7860)

Recipes are YAML files (recipes/*.yaml in the repository); any key can be changed on the command line as
key=value (speechtrain config show CFG prints them all). `speechtrain COMMAND --help` describes a command."""

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
    parser = argparse.ArgumentParser(
        prog="speechtrain",
        description=textwrap.fill(DESCRIPTION, 100),
        epilog=FIRST_STEPS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
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
