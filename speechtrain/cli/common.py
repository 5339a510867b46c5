"""Helpers shared by subcommands."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def add_config_args(p: argparse.ArgumentParser, required: bool = False) -> None:
    """``--config CFG`` and trailing ``key=value`` overrides."""
    p.add_argument("--config", "-c", required=required, help="YAML config (recipes/*.yaml)")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="dotted overrides, e.g. train.max_steps=100")


def config_from_args(args: argparse.Namespace) -> Any:
    """Load the config named by ``--config`` with the overrides."""
    from speechtrain.config import load_config

    return load_config(getattr(args, "config", None), list(getattr(args, "overrides", []) or []))


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
