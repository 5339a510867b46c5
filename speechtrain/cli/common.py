"""Helpers shared by subcommands."""

from __future__ import annotations

import argparse
import json
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


def write_json(path: str | None, obj: Any) -> None:
    """Write ``obj`` as JSON when ``path`` is given."""
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(obj, indent=2, default=str) + "\n")


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
    return out
