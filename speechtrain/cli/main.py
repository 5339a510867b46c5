"""The ``speechtrain`` command. Each subcommand lives in ``speechtrain/cli/cmd_<name>.py`` with
``add_parser(subparsers)`` (light: no torch import) and ``run(args) -> int`` (imports what it needs).
What ``speechtrain --help`` shows is :data:`DESCRIPTION` and :data:`FIRST_STEPS`, written for users.

Every command runs with logging configured (:func:`speechtrain.logs.logging_for_command`: rank 0, standard
error; ``--quiet`` warnings and errors only, ``--verbose`` debug messages too; either before or after the
command's name) and with Ctrl-C honoured even when the command was started with SIGINT ignored (a background
job of a script); SIGTERM stops it the same way. Exit codes: 0 done (a training stopped by SIGTERM/SIGINT after
saving its checkpoint counts as done: its summary says ``"stopped": "signal SIGTERM"``), 2 an error with its
one-line message, 130 interrupted (Ctrl-C or SIGTERM outside training).
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import logging
import os
import signal
import sys
import textwrap
import threading
from types import FrameType
from typing import Any

from speechtrain import __version__
from speechtrain.train.signals import absorb_signal, stop_finished, stop_under_way

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
    "eval": "cmd_eval",
    "score": "cmd_score",
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


def _add_verbosity(p: argparse.ArgumentParser, default: object) -> None:
    group = p.add_mutually_exclusive_group()
    group.add_argument("--quiet", action="store_true", default=default, help="warnings and errors only")
    group.add_argument("--verbose", action="store_true", default=default, help="debug messages too")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every available subcommand."""
    parser = argparse.ArgumentParser(
        prog="speechtrain",
        description=textwrap.fill(DESCRIPTION, 100),
        epilog=FIRST_STEPS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"speechtrain {__version__}")
    _add_verbosity(parser, False)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        module = _load(name)
        if module is not None:
            p = module.add_parser(sub)
            _add_verbosity(p, argparse.SUPPRESS)  # after the command's name too, without resetting the global one
            p.set_defaults(_module=module)
    return parser


def _interrupted(signum: int, frame: FrameType | None) -> None:  # noqa: ARG001
    if stop_under_way():  # training stopped for a signal and is winding down: this one changes nothing
        absorb_signal()
        return
    raise KeyboardInterrupt(signal.Signals(signum).name)


def _redeliver_swallowed_interrupt(unraisable: Any) -> None:
    """``sys.unraisablehook`` while a command runs. A signal whose handler runs inside a finalizer (a
    ``weakref.finalize`` callback or a ``__del__``, e.g. of a DataLoader iterator being collected) raises its
    KeyboardInterrupt there, where Python only prints "Exception ignored" and goes on: the Ctrl-C was lost and
    `tune` trained on (tests/test_cluster_cli.py, under load). The signal is sent again, so that its handler runs
    in the command's own frames once the finalizer has returned."""
    exc = unraisable.exc_value
    if isinstance(exc, KeyboardInterrupt):
        name = str(exc.args[0]) if exc.args else "SIGINT"
        signum = getattr(signal.Signals, name, signal.SIGINT)
        # from a thread, a moment later: raised here, it could land in this hook's own frame and be lost again
        threading.Timer(0.01, os.kill, (os.getpid(), signum)).start()
        return
    sys.__unraisablehook__(unraisable)


def _honour_stop_signals() -> None:
    """Ctrl-C and SIGTERM end a command cleanly (KeyboardInterrupt: workers stopped, "interrupted", exit 130),
    also when it was started with SIGINT ignored, as a script's background jobs are; training installs its own
    handlers (stop at the next step, save, exit 0). Only from the main thread (a command run inside a thread
    keeps its program's handlers)."""
    stop_finished()  # (a stop of an earlier command in this process is over)
    try:
        signal.signal(signal.SIGINT, _interrupted)
        signal.signal(signal.SIGTERM, _interrupted)
    except ValueError:  # not the main thread
        pass


def unknown_command(argv: list[str]) -> str | None:
    """The one-line error for a command name that is not one (``speechtrain trian``: did you mean ``train``?),
    else None. Global options may stand before the command; anything that is not an option is taken as it."""
    word = next((a for a in argv if not a.startswith("-")), None)
    if word is None or word in COMMANDS:
        return None
    hint = difflib.get_close_matches(word, list(COMMANDS), n=1, cutoff=0.6)
    if not hint:  # a prefix (``synth``) or a command said with underscores (``make_dataset``)
        hint = [c for c in COMMANDS if c.startswith(word) or c == word.replace("_", "-")][:1]
    said = f": did you mean '{hint[0]}'?" if hint else ""
    return f"unknown command '{word}'{said} (commands: {', '.join(COMMANDS)}; speechtrain --help describes them)"


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``speechtrain`` console script."""
    from speechtrain.errors import UserError
    from speechtrain.logs import logging_for_command

    words = list(sys.argv[1:] if argv is None else argv)
    unknown = unknown_command(words)
    if unknown is not None:
        print(f"error: {unknown}", file=sys.stderr)
        return 2
    parser = build_parser()
    args = parser.parse_args(words)
    if not getattr(args, "command", None):
        parser.print_help()
        return 2
    level = logging.WARNING if args.quiet else logging.DEBUG if args.verbose else logging.INFO
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    hook_before = sys.unraisablehook
    _honour_stop_signals()
    sys.unraisablehook = _redeliver_swallowed_interrupt
    try:
        with logging_for_command(level):
            return int(args._module.run(args) or 0)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        stop_finished()
        sys.unraisablehook = hook_before
        for sig, handler in before.items():
            try:
                signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
            except ValueError:
                pass
