"""What several recipes do alike: process-wide settings, placing a task, reading a run's config."""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

from speechtrain import registry
from speechtrain.capabilities import SharedSetup
from speechtrain.config import Config, apply_overrides, build_config, read_yaml
from speechtrain.errors import UserError
from speechtrain.train.rundir import RunDir
from speechtrain.train.task import Task


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch (all devices): a process-wide setting, made by recipes only."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def rank_seed(seed: int, rank: int) -> int:
    """The seed of rank ``rank``'s random streams (dropout, noise, augmentation) in a run seeded ``seed``: the
    run's seed itself on rank 0 (a one-process run draws what it always drew), a different, reproducible one on
    every other rank (the same ranks of a resumed run draw the same streams)."""
    if rank == 0:
        return int(seed)
    return int(np.random.SeedSequence([int(seed) % 2**63, int(rank)]).generate_state(1, dtype=np.uint64)[0] >> 1)


def build_task(cfg: Config) -> Task:
    """The Task of ``cfg``'s model family, built from its model and data sections."""
    search = [cfg.source_dir, cfg.source_dir.parent] if cfg.source_dir else []  # examples/x.yaml -> examples.x
    task: Task = registry.build_task(cfg.model, cfg.data, search=search)
    return task


def set_up(task: Task, dataset: Any) -> None:
    """``task.setup(dataset)`` (data-dependent parts: codebooks, vocabularies), then, under a process group, what
    it fitted made equal on every rank (:class:`~speechtrain.capabilities.SharedSetup`). Every rank calls it at
    the same point: a fresh training run and the tuner alike."""
    task.setup(dataset)
    if isinstance(task, SharedSetup):
        task.share_setup()


def place(task: Task, device: torch.device) -> None:
    """Move the task's modules to ``device`` in training mode (``Task.setup`` then fits there)."""
    for module in task.modules().values():
        module.to(device)
        module.train()


def load_run_config(run_dir: str | os.PathLike[str], overrides: list[str] | None = None) -> Config:
    """The resolved config saved in a run directory, with ``key=value`` overrides.

    A run from before learned symbols (its ``data`` section has no ``symbols`` key) read text with
    the fixed ascii set and stripped accents: that is what it gets, so it tokenizes as it was trained."""
    path = RunDir(run_dir).config
    if not path.is_file():
        raise UserError(f"{run_dir} is not a speechtrain run directory (no config.yaml)")
    raw = read_yaml(path)
    data = raw.get("data") if isinstance(raw.get("data"), dict) else None
    if data is not None and "symbols" not in data:
        data["symbols"] = "ascii"
        data.setdefault("strip_accents", True)
    return build_config(apply_overrides(raw, overrides or []))


def find_recipe(name: str) -> Path:
    """A recipe by path, or by name in the repository's recipes/ folder."""
    from speechtrain.errors import UserError

    path = Path(name)
    if path.is_file():
        return path
    stem = name if name.endswith((".yaml", ".yml")) else name + ".yaml"
    roots = [Path.cwd() / "recipes", Path(__file__).resolve().parents[2] / "recipes"]
    for root in roots:
        if (root / stem).is_file():
            return root / stem
    raise UserError(f"recipe '{name}' not found (looked in {', '.join(str(r) for r in roots)}); give a YAML path")
