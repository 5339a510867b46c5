"""Helpers shared by subcommands."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any


def add_config_args(p: argparse.ArgumentParser, required: bool = False) -> None:
    """``--config CFG`` and trailing ``key=value`` overrides."""
    p.add_argument("--config", "-c", required=required, help="YAML config (recipes/*.yaml)")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="dotted overrides, e.g. train.max_steps=100")


def config_from_args(args: argparse.Namespace, needs_model: bool = False) -> Any:
    """Load the config named by ``--config`` with the overrides. ``needs_model``: the command trains or
    measures a model, so a call with neither ``--config`` nor ``model.name=`` asks for a recipe (instead of
    failing later on the empty model section)."""
    from speechtrain.config import load_config

    overrides = list(getattr(args, "overrides", []) or [])
    if needs_model and not getattr(args, "config", None) and not any(o.startswith("model.name=") for o in overrides):
        from speechtrain.errors import UserError

        raise UserError(f"which recipe? {recipe_hint(getattr(args, 'command', None) or 'train')}")
    return load_config(getattr(args, "config", None), overrides)


def recipe_hint(command: str) -> str:
    """How to name a recipe, with the ones shipped in recipes/ when this is a checkout."""
    shipped = sorted(p.stem for p in (Path(__file__).resolve().parents[2] / "recipes").glob("*.yaml"))
    listing = f" (shipped: {', '.join(shipped)})" if shipped else ""
    return (
        f"pass --config recipes/NAME.yaml{listing}, e.g. `speechtrain {command} --config recipes/gpt_tts_tiny.yaml`, "
        "or your own model with model.name=package.module:build_task"
        + ("; `speechtrain train --resume RUN_DIR` continues a run" if command == "train" else "")
    )


def help_from_table(p: argparse.ArgumentParser, dest: str, text: Callable[[], str]) -> None:
    """The help of ``p``'s argument ``dest`` is ``text()``, computed when the help is shown: the tables it lists
    (layouts, export formats) import their modules, which every other command should not pay for."""
    action = next(a for a in p._actions if a.dest == dest)
    format_help = p.format_help

    def with_table() -> str:
        action.help = text().replace("%", "%%")
        return format_help()

    p.format_help = with_table  # type: ignore[method-assign]


def user_file(path: str | os.PathLike[str], flag: str = "--json") -> Path:
    """``path`` checked as a file the command may write for the user (before any work, where the command can):
    not a folder, not under a file (:func:`speechtrain.paths.writable_file`), and not a run's own file
    (config.yaml, a checkpoint ...: :meth:`speechtrain.train.rundir.RunDir.owning`); else one UserError naming
    it."""
    from speechtrain.errors import UserError
    from speechtrain.paths import writable_file
    from speechtrain.train.rundir import RunDir

    full = writable_file(path, flag)
    run = RunDir.owning(full)
    if run is not None:
        raise UserError(
            f"{flag} {path}: is a file of the run {run.path} (its {full.resolve().relative_to(run.path.resolve())}); "
            "the command will not write over it: choose another path"
        )
    return full


def write_user_file(path: str | os.PathLike[str], data: str | bytes, flag: str = "--json") -> Path:
    """``data`` written to ``path`` for the user: checked (:func:`user_file`), then atomically (a temporary file
    beside it, renamed: a full disk leaves nothing half-written; :func:`speechtrain.paths.write_atomic`)."""
    from speechtrain.paths import write_atomic

    user_file(path, flag)
    return write_atomic(path, data, flag)


def write_json(path: str | None, obj: Any, flag: str = "--json") -> None:
    """Write ``obj`` as JSON when ``path`` is given (:func:`write_user_file`)."""
    if path:
        write_user_file(path, json.dumps(obj, indent=2, default=str) + "\n", flag)


def set_threads(threads: int | None) -> None:
    """``--threads N``: torch's intra-op threads (None: torch's choice)."""
    if threads is None:
        return
    from speechtrain.errors import UserError

    if threads < 1:
        raise UserError("--threads must be >= 1")
    import torch

    torch.set_num_threads(threads)


def wav_out(path: str) -> Path:
    """``--out FILE.wav``, checked before any work."""
    from speechtrain.errors import UserError

    out = Path(path)
    if out.suffix.lower() != ".wav":
        raise UserError(f"--out {out}: write a .wav file")
    user_file(out, "--out")  # not a folder, not under a file, not a run's own file
    return out
