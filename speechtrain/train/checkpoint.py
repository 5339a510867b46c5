"""Atomic, verified checkpoints.

Writes go to a temporary file in the same folder, are flushed and fsynced, then renamed over the
target (and the folder fsynced), so a kill at any moment leaves the previous checkpoint intact. A
failed write (full disk, I/O error) is a :class:`~speechtrain.errors.CheckpointError` naming the file
and the free space. Every checkpoint carries a SHA-256 digest of its content (``checksum``), checked
on load, so a flipped byte in tensor data is caught instead of loaded.

Loading uses ``torch.load(weights_only=True)``: only tensors and plain containers are accepted, so
a checkpoint carrying a pickled callable is refused instead of executed.

In a run's ``checkpoints/`` folder the newest *loadable* checkpoint is the one a resume uses; newer
broken files are renamed ``*.corrupt`` (kept for inspection, out of the way of pruning), and pruning
deletes the oldest checkpoints by age, never the one just written.
"""

from __future__ import annotations

import errno
import hashlib
import os
import pickle
import random
import re
import shutil
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
CHECKSUM_KEY = "checksum"
_STEP_RE = re.compile(r"step_(\d+)\.pt$")
_TMP_RE = re.compile(r"^\..+\.tmp-(\d+)$")


def _first_line(exc: BaseException) -> str:
    """The first non-empty line of an exception's message (its type name when the message is empty)."""
    lines = [line for line in str(exc).splitlines() if line.strip()]
    return lines[0].strip() if lines else type(exc).__name__


def free_space(path: str | os.PathLike[str]) -> str:
    """Free space on the disk holding ``path`` (or its nearest existing parent), as ``"1.23 GiB"``."""
    p = Path(path).absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        return f"{shutil.disk_usage(p).free / 2**30:.2f} GiB"
    except OSError:
        return "unknown"


def _os_error_in(exc: BaseException) -> OSError | None:
    """The OSError behind ``exc`` (torch wraps a failed write in a RuntimeError), if any."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def write_failed(path: Path, exc: BaseException) -> CheckpointError:
    """The clear error for a checkpoint (or run file) that could not be written."""
    os_error = _os_error_in(exc)
    if os_error is not None and os_error.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        why = f"the disk is full ({os.strerror(os_error.errno)})"
    else:
        why = _first_line(os_error if os_error is not None else exc)
    return CheckpointError(
        f"could not write {path}: {why}; {free_space(path.parent)} free there. The previous checkpoint is "
        f"intact: free some space (or point train.output_dir at a larger disk) and continue with "
        f"`speechtrain train --resume {path.parent.parent if path.parent.name == 'checkpoints' else path.parent}`"
    )


def atomic_save(obj: Any, path: str | os.PathLike[str]) -> None:
    """``torch.save`` to ``path`` atomically (temp file, fsync, rename, fsync folder); a failed write
    raises :class:`CheckpointError` (naming the file and the free space) and leaves ``path`` as it was."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
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
    except (OSError, RuntimeError) as exc:
        raise write_failed(path, exc) from exc


def content_digest(obj: Any) -> str:
    """SHA-256 of a state dict's content: structure, keys, plain values, and every tensor's dtype,
    shape and bytes (in the dicts' own order, which saving and loading keep)."""
    h = hashlib.sha256()
    _digest_into(h, obj)
    return h.hexdigest()


def _digest_into(h: Any, obj: Any) -> None:
    if isinstance(obj, torch.Tensor):
        t = obj.detach().to("cpu").contiguous().reshape(-1)
        h.update(f"T{t.dtype}{tuple(obj.shape)}:".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    elif isinstance(obj, dict):
        h.update(f"d{len(obj)}:".encode())
        for k, v in obj.items():
            h.update(f"{k!r}=".encode())
            _digest_into(h, v)
    elif isinstance(obj, (list, tuple)):
        h.update(f"{'l' if isinstance(obj, list) else 't'}{len(obj)}:".encode())
        for v in obj:
            _digest_into(h, v)
    else:
        h.update(f"v{obj!r};".encode())


def with_checksum(state: dict[str, Any]) -> dict[str, Any]:
    """``state`` (copied to host memory) with its :func:`content_digest` under ``checksum``."""
    host = cpu_copy({k: v for k, v in state.items() if k != CHECKSUM_KEY})
    host[CHECKSUM_KEY] = content_digest(host)
    return host


def safe_load(path: str | os.PathLike[str], map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load a speechtrain checkpoint with ``weights_only=True``, its checksum verified; a
    :class:`CheckpointError` naming the file and what is wrong with it for anything else."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint not found: {path}")
    corrupt = (
        "Resume from an earlier checkpoint in the same folder (speechtrain train --resume RUN_DIR picks the newest "
        "that loads), or delete this file."
    )
    size = path.stat().st_size
    if size == 0:
        raise CheckpointError(f"{path}: empty file (0 bytes): its save never finished (killed or disk full). {corrupt}")
    if not zipfile.is_zipfile(path):
        raise CheckpointError(
            f"{path}: not a readable checkpoint (truncated or corrupt: {size} bytes without the zip directory a "
            f"torch checkpoint ends with; cut short, overwritten, or another kind of file). {corrupt}"
        )
    try:
        obj = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as exc:
        globals_line = [line for line in str(exc).splitlines() if "GLOBAL" in line]
        if not globals_line:
            raise CheckpointError(
                f"{path}: not a readable checkpoint (corrupt: {_first_line(exc)}). {corrupt}"
            ) from None
        raise CheckpointError(
            f"{path}: refused: it holds Python objects other than tensors and plain containers "
            f"(a pickled callable or class), which could run code when loaded. Only load checkpoints "
            f"you trust, and re-save them with speechtrain. ({globals_line[0].strip()})"
        ) from None
    except Exception as exc:  # noqa: BLE001 - a damaged archive fails in many ways inside torch.load
        raise CheckpointError(
            f"{path}: not a readable checkpoint (truncated or corrupt: {_first_line(exc)}). {corrupt}"
        ) from None
    if not isinstance(obj, dict) or obj.get(FORMAT_KEY) != FORMAT_VERSION:
        raise CheckpointError(
            f"{path}: not a speechtrain checkpoint (no '{FORMAT_KEY}: {FORMAT_VERSION}' marker); "
            f"to start from foreign weights, load them into your model yourself before training."
        )
    expected = obj.pop(CHECKSUM_KEY, None)
    if expected is not None and content_digest(obj) != expected:
        raise CheckpointError(
            f"{path}: content checksum mismatch: the file was damaged after it was written (a flipped bit on "
            f"disk or in a copy). {corrupt}"
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


def latest_loadable(folder: str | os.PathLike[str], quarantine: bool = False) -> tuple[Path, dict[str, Any]] | None:
    """Newest checkpoint in ``folder`` that loads; broken newer ones are skipped with a warning and,
    with ``quarantine`` (the run's owner resuming it), renamed ``<name>.corrupt`` so that neither
    pruning nor the next resume counts them as checkpoints."""
    for _, path in reversed(list_checkpoints(folder)):
        try:
            return path, safe_load(path)
        except CheckpointError as exc:
            if quarantine:
                moved = path.with_name(path.name + ".corrupt")
                os.replace(path, moved)
                log.warning(f"warning: skipping {exc} (renamed to {moved.name})")
            else:
                log.warning(f"warning: skipping {exc}")
    return None


def _age(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def prune(folder: str | os.PathLike[str], keep: int, protect: Path | None = None) -> list[Path]:
    """Delete the oldest step checkpoints (by modification time, then step) beyond the newest ``keep``;
    ``protect`` (the checkpoint just written) is never deleted. Returns what was deleted."""
    by_age = [p for _, p in sorted(list_checkpoints(folder), key=lambda sp: (_age(sp[1]), sp[0]))]
    others = [p for p in by_age if protect is None or p.resolve() != protect.resolve()]
    room = max(0, keep - (len(by_age) - len(others)))  # the protected one counts among the kept
    doomed = others[: len(others) - room]
    for p in doomed:
        p.unlink(missing_ok=True)
    return doomed


def clean_temporaries(folder: str | os.PathLike[str]) -> list[Path]:
    """Delete ``.<name>.tmp-PID`` files that a killed save left in ``folder`` (those of processes that
    are no longer running on this machine); returns what was deleted."""
    folder = Path(folder)
    removed = []
    for p in folder.glob(".*.tmp-*") if folder.is_dir() else []:
        m = _TMP_RE.match(p.name)
        if m and not _pid_alive(int(m.group(1))):
            p.unlink(missing_ok=True)
            removed.append(p)
    return removed


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return False  # this process is not writing it now: a leftover of an earlier save
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def save_step(run_dir: str | os.PathLike[str], state: dict[str, Any], keep: int, best: bool = False) -> Path:
    """Write ``run_dir/checkpoints/step_N.pt`` (N = ``state["step"]``) with its checksum and, when ``best``,
    ``run_dir/best.pt``; keep the newest ``keep`` step checkpoints (never deleting the one just written)."""
    run_dir = Path(run_dir)
    path = run_dir / "checkpoints" / f"step_{int(state['step']):08d}.pt"
    state = with_checksum(state)
    clean_temporaries(path.parent)
    clean_temporaries(run_dir)
    atomic_save(state, path)
    prune(run_dir / "checkpoints", keep, protect=path)
    if best:
        atomic_save(state, run_dir / "best.pt")
    return path


def latest(run_dir: str | os.PathLike[str] | None, quarantine: bool = False) -> tuple[Path, dict[str, Any]] | None:
    """The newest loadable step checkpoint of a run directory (None without one); ``quarantine``: see
    :func:`latest_loadable`."""
    return latest_loadable(Path(run_dir) / "checkpoints", quarantine) if run_dir is not None else None


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
