"""Atomic, safe checkpoints.

Writes go to a temporary file in the same folder, are flushed and fsynced, then renamed over the
target (and the folder fsynced), so a kill at any moment leaves the previous checkpoint intact.
Loading uses ``torch.load(weights_only=True)``: only tensors and plain containers are accepted, so
a checkpoint carrying a pickled callable is refused instead of executed.
"""

from __future__ import annotations

import os
import pickle
import random
import re
import zipfile
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch

from speechtrain.errors import CheckpointError
from speechtrain.logs import get_logger

log = get_logger(__name__)

FORMAT_KEY = "speechtrain_checkpoint"
FORMAT_VERSION = 1
_STEP_RE = re.compile(r"step_(\d+)\.pt$")


def atomic_save(obj: Any, path: str | os.PathLike[str]) -> None:
    """``torch.save`` to ``path`` atomically (temp file, fsync, rename, fsync folder)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as fh:
            torch.save(obj, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def safe_load(path: str | os.PathLike[str], map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load a speechtrain checkpoint with ``weights_only=True``; clear errors for bad files."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint not found: {path}")
    try:
        obj = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as exc:
        raise CheckpointError(
            f"{path}: refused: it holds Python objects other than tensors and plain containers "
            f"(a pickled callable or class), which could run code when loaded. Only load checkpoints "
            f"you trust, and re-save them with speechtrain. ({str(exc).splitlines()[0]})"
        ) from None
    except (RuntimeError, EOFError, zipfile.BadZipFile, OSError, ValueError) as exc:
        raise CheckpointError(
            f"{path}: not a readable checkpoint (truncated or corrupt: {str(exc).splitlines()[0]}). "
            f"Resume from an earlier checkpoint in the same folder, or delete this file."
        ) from None
    if not isinstance(obj, dict) or obj.get(FORMAT_KEY) != FORMAT_VERSION:
        raise CheckpointError(
            f"{path}: not a speechtrain checkpoint (no '{FORMAT_KEY}: {FORMAT_VERSION}' marker); "
            f"to start from foreign weights, load them into your model yourself before training."
        )
    return obj


def list_checkpoints(folder: str | os.PathLike[str]) -> list[tuple[int, Path]]:
    """(step, path) of ``step_*.pt`` files in ``folder``, oldest first."""
    folder = Path(folder)
    found = []
    for p in folder.glob("step_*.pt") if folder.is_dir() else []:
        m = _STEP_RE.search(p.name)
        if m:
            found.append((int(m.group(1)), p))
    return sorted(found)


def latest_loadable(folder: str | os.PathLike[str]) -> tuple[Path, dict[str, Any]] | None:
    """Newest checkpoint in ``folder`` that loads; broken newer ones are skipped with a warning."""
    for _, path in reversed(list_checkpoints(folder)):
        try:
            return path, safe_load(path)
        except CheckpointError as exc:
            log.warning(f"warning: skipping {exc}")
    return None


def prune(folder: str | os.PathLike[str], keep: int) -> list[Path]:
    """Delete all but the newest ``keep`` step checkpoints; returns what was deleted."""
    ckpts = list_checkpoints(folder)
    doomed = [p for _, p in ckpts[:-keep]] if keep > 0 else []
    for p in doomed:
        p.unlink(missing_ok=True)
    return doomed


def save_step(run_dir: str | os.PathLike[str], state: dict[str, Any], keep: int, best: bool = False) -> Path:
    """Write ``run_dir/checkpoints/step_N.pt`` (N = ``state["step"]``) and, when ``best``, ``run_dir/best.pt``;
    keep the newest ``keep`` step checkpoints."""
    run_dir = Path(run_dir)
    path = run_dir / "checkpoints" / f"step_{int(state['step']):08d}.pt"
    atomic_save(state, path)
    prune(run_dir / "checkpoints", keep)
    if best:
        atomic_save(state, run_dir / "best.pt")
    return path


def latest(run_dir: str | os.PathLike[str] | None) -> tuple[Path, dict[str, Any]] | None:
    """The newest loadable step checkpoint of a run directory (None without one)."""
    return latest_loadable(Path(run_dir) / "checkpoints") if run_dir is not None else None


def cpu_copy(obj: Any) -> Any:
    """A copy of a state dict (nested dicts and lists of tensors) in host memory."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, dict):
        return {k: cpu_copy(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [cpu_copy(v) for v in obj]
    return obj


def rng_state() -> dict[str, Any]:
    """Python, NumPy, torch (and CUDA) RNG states in weights_only-safe types."""
    py = random.getstate()
    np_state = cast(tuple[Any, ...], np.random.get_state(legacy=True))
    state: dict[str, Any] = {
        "python": [py[0], list(py[1]), py[2]],
        "numpy": {
            "name": np_state[0],
            "keys": torch.from_numpy(np_state[1].astype(np.int64)),
            "pos": int(np_state[2]),
            "has_gauss": int(np_state[3]),
            "cached_gaussian": float(np_state[4]),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`rng_state` saved."""
    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    n = state["numpy"]
    np.random.set_state(
        (n["name"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["cached_gaussian"])
    )
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
