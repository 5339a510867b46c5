"""What several recipes do alike: process-wide settings, placing a task, reading a run's config."""

from __future__ import annotations

import difflib
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
from speechtrain.logs import get_logger
from speechtrain.train.rundir import RunDir, lock_holder
from speechtrain.train.task import Task

log = get_logger(__name__)


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


def not_a_run(run_dir: Path) -> str:
    """Why ``run_dir`` cannot be read as a run: it does not exist (with the closest run beside it), a live
    process is still starting it (it writes config.yaml once its set-up is done), or it is some other folder."""
    if not run_dir.exists():
        parent = run_dir.parent if run_dir.parent.is_dir() else None
        runs = sorted(p.name for p in parent.iterdir() if RunDir(p).is_run()) if parent else []
        hint = difflib.get_close_matches(run_dir.name, runs, n=1, cutoff=0.6)
        if hint:
            return f"{run_dir} does not exist; did you mean {run_dir.with_name(hint[0])}?"
        listing = f" (runs in {parent}: {', '.join(runs[:8])})" if runs else ""
        return f"{run_dir} does not exist{listing}"
    if not run_dir.is_dir():
        return f"{run_dir} is a file, not a run directory (name the folder `speechtrain train` wrote)"
    holder = lock_holder(run_dir)
    if holder is not None:
        return (
            f"{run_dir} is still starting (pid {holder.get('pid', '?')} holds it and has not written its config.yaml "
            "yet); try again in a few seconds"
        )
    return f"{run_dir} is not a speechtrain run directory (no config.yaml)"


def load_run_config(run_dir: str | os.PathLike[str], overrides: list[str] | None = None) -> Config:
    """The resolved config saved in a run directory, with ``key=value`` overrides.

    A run from before learned symbols (its ``data`` section has no ``symbols`` key) read text with
    the fixed ascii set and stripped accents: that is what it gets, so it tokenizes as it was trained."""
    path = RunDir(run_dir).config
    if not path.is_file():
        raise UserError(not_a_run(Path(run_dir)))
    raw = read_yaml(path)
    data = raw.get("data") if isinstance(raw.get("data"), dict) else None
    if data is not None and "symbols" not in data:
        data["symbols"] = "ascii"
        data.setdefault("strip_accents", True)
    return build_config(apply_overrides(raw, overrides or []))


CHECK_SENTENCES = 24  # transcripts of the run offered to a TTS export's checks


def run_transcripts(cfg: Config, limit: int = CHECK_SENTENCES) -> list[str]:
    """Sentences for a TTS export's checks: ``model.eval_texts``, else the run's manifest transcripts."""
    texts = [t for t in (getattr(cfg.model, "eval_texts", None) or []) if t.strip()]
    if len(texts) < limit and cfg.data.manifest:
        from speechtrain.data.manifest import read_manifest

        try:
            entries, _ = read_manifest(cfg.data.manifest, cfg.data.format)
        except (OSError, UserError) as exc:
            log.warning(f"warning: cannot read {cfg.data.manifest} for check sentences ({exc}); use --text")
            entries = []
        texts += [e.text for e in entries if e.text and e.text.strip()][: limit - len(texts)]
    return texts


def language_sentences(cfg: Config, limit: int = 8) -> tuple[list[str], str]:
    """Sentences in the run's own language, and where they came from: ``model.eval_texts``, else the built-in
    sentences of ``data.language`` (make-dataset's), else the run's transcripts; the English built-ins only for
    an English or undeclared run. UserError naming ``--texts`` when the run's language has none of these."""
    from speechtrain.bench.rtf import DEFAULT_SENTENCES
    from speechtrain.data.speak import SENTENCES

    language = str(cfg.data.language)
    own = [t for t in (getattr(cfg.model, "eval_texts", None) or []) if t.strip()]
    if own:
        return own[:limit], "model.eval_texts"
    for code in dict.fromkeys((language, language.replace("_", "-").split("-")[0])):
        if code in SENTENCES and code != "en":
            return list(SENTENCES[code][:limit]), f"the built-in {code} sentences"
    if language.split("-")[0] not in ("en", "und"):
        texts = run_transcripts(cfg, limit)
        if texts:
            return texts, f"the run's transcripts ({cfg.data.manifest})"
        raise UserError(
            f"no sentences in the run's language ({language}): its corpus is not there to take them from and "
            "there are no built-in ones; pass --texts FILE (one sentence a line)"
        )
    return list(DEFAULT_SENTENCES[:limit]), "the built-in English sentences"


def find_recipe(name: str) -> Path:
    """A recipe by path, or by name in the repository's recipes/ folder."""
    path = Path(name)
    if path.is_file():
        return path
    stem = name if name.endswith((".yaml", ".yml")) else name + ".yaml"
    roots = [Path.cwd() / "recipes", Path(__file__).resolve().parents[2] / "recipes"]
    for root in roots:
        if (root / stem).is_file():
            return root / stem
    known = sorted({p.stem for root in roots if root.is_dir() for p in root.glob("*.yaml")})
    hint = difflib.get_close_matches(Path(stem).stem, known, n=1, cutoff=0.6)
    said = f"did you mean '{hint[0]}'? " if hint else ""
    raise UserError(
        f"recipe '{name}' not found: {said}(looked in {', '.join(str(r) for r in roots)}; recipes: "
        f"{', '.join(known) or 'none'}); or give a YAML path"
    )
