"""Atomic, verified checkpoints.

Writes go to a temporary file in the same folder, are flushed and fsynced, then renamed over the
target (and the folder fsynced), so a kill at any moment leaves the previous checkpoint intact. A
failed write (full disk, I/O error) is a :class:`~speechtrain.errors.CheckpointError` naming the file
and the free space. Every checkpoint carries a SHA-256 digest of its content (``checksum``), checked
on load, so a flipped byte in tensor data is caught instead of loaded.

Loading goes through :mod:`speechtrain.ckptio` (the package's one reader of pickled files): only tensors and
plain containers are accepted, so a checkpoint carrying a pickled callable is refused instead of executed.

In a run's ``checkpoints/`` folder the newest *loadable* checkpoint is the one a resume uses; newer
broken files are renamed ``*.corrupt`` (kept for inspection, out of the way of pruning), and pruning
deletes the oldest checkpoints by age, never the one just written.

Sharded checkpoints (``train.strategy=fsdp``): each rank writes its own shards of the modules and
optimizers with ``torch.distributed.checkpoint`` (DCP) into ``checkpoints/step_N.dcp/`` (one
``__R_0.distcp`` file per rank and DCP's ``.metadata``), first under a temporary name
(``.step_N.dcp.tmp-PID``) that is renamed once every rank has written; rank 0 then writes
``step_N.pt`` (atomically, as above) *last*: it holds the run state (step, counters, schedulers,
loader, every rank's RNG, config, the optimizers' parameter groups) and names its shard folder, so it
is the commit marker. A ``step_N.pt`` whose folder is missing, cut short or replaced is a
:class:`CheckpointError` like a damaged file (and a resume falls back to the previous checkpoint);
pruning deletes a checkpoint's folder with its file. What guards what: the ``.pt`` is read with
``weights_only`` and its checksum, which also covers a SHA-256 of the folder's ``.metadata``; the
``.metadata`` (a pickle in DCP's format) is read with an unpickler that accepts DCP's own metadata
classes only, the folder may hold tensors only (no pickled entries), and each shard file must be as
long as the metadata says; DCP reads the tensors themselves with ``weights_only``. The shard *bytes*
carry no checksum of ours (hashing every rank's shards on every save would cost a read of the whole
model): a flipped bit inside a shard file goes unnoticed. :func:`module_states` gives the full module
weights of either layout (for export, synthesis, ``init_from``).
"""

from __future__ import annotations

import errno
import functools
import hashlib
import os
import random
import re
import shutil
import warnings
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch

from speechtrain import ckptio
from speechtrain.errors import CheckpointError, free_space
from speechtrain.logs import get_logger

log = get_logger(__name__)

FORMAT_KEY = "speechtrain_checkpoint"
FORMAT_VERSION = 1
CHECKSUM_KEY = "checksum"
_STEP_RE = re.compile(r"step_(\d+)\.pt$")
#: in a step file of a sharded run: the name of its shard folder (``step_N.dcp``, beside it); in a loaded
#: state, that folder's path
SHARDS_KEY = "shards"
SHARDS_DIGEST_KEY = "shards_metadata_sha256"
#: in a step file of a sharded run: what of the module and optimizer states is not a tensor (parameter groups)
SHARD_REST_KEY = "shard_rest"
SHARD_SUFFIX = ".dcp"
_TMP_RE = re.compile(r"^\..+\.tmp-(\d+)$")


def first_line(exc: BaseException) -> str:
    """The first non-empty line of an exception's message (its type name when the message is empty)."""
    lines = [line for line in str(exc).splitlines() if line.strip()]
    return lines[0].strip() if lines else type(exc).__name__


def _os_error_in(exc: BaseException) -> OSError | None:
    """The OSError behind ``exc`` (torch wraps a failed write in a RuntimeError), if any."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


#: less free space than this where a write failed without saying why (torch's own file writer: "unexpected pos
#: ...") counts as a full disk
_NEARLY_FULL = 64 * 2**20


def failure_reason(exc: BaseException, where: str | os.PathLike[str] | None = None) -> str:
    """Why a write failed, in a few words: "the disk is full (...)" for a full disk or quota, else the first
    line of the OSError behind it (torch wraps one in a RuntimeError) or of the error itself. ``where``: the
    folder written to, whose free space tells a full disk when torch's writer gives no OSError."""
    os_error = _os_error_in(exc)
    if os_error is not None and os_error.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        return f"the disk is full ({os.strerror(os_error.errno)})"
    if os_error is None and where is not None:
        p = Path(where).absolute()
        while not p.exists() and p != p.parent:
            p = p.parent
        try:
            if shutil.disk_usage(p).free < _NEARLY_FULL:
                return f"the disk is full ({first_line(exc)[:120]})"
        except OSError:
            pass
    return first_line(os_error if os_error is not None else exc)


def write_failed(path: Path, exc: BaseException) -> CheckpointError:
    """The clear error for a checkpoint (or run file) that could not be written."""
    why = failure_reason(exc)
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
        _fsync_folder(path.parent)
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
        obj = ckptio.load(path, map_location=map_location)  # tensors and plain containers only
    except ckptio.PickledObjects as exc:
        raise CheckpointError(
            f"{path}: refused: it holds Python objects other than tensors and plain containers "
            f"(a pickled callable or class), which could run code when loaded. Only load checkpoints "
            f"you trust, and re-save them with speechtrain. ({exc.detail})"
        ) from None
    except ckptio.Unreadable as exc:
        raise CheckpointError(f"{path}: not a readable checkpoint ({exc.detail}). {corrupt}") from None
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
    if SHARDS_KEY in obj:  # a sharded checkpoint: its folder must be there, whole, and the one this file names
        obj[SHARDS_KEY] = str(_named_shard_folder(Path(os.path.abspath(path)), obj[SHARDS_KEY]))  # absolute: see below
        check_shards(path, Path(obj[SHARDS_KEY]), obj.get(SHARDS_DIGEST_KEY))
    return obj


# ---------------------------------------------------------------------------------------------- sharded (DCP)


def shard_folder(path: str | os.PathLike[str]) -> Path:
    """The shard folder of a checkpoint file: ``step_N.pt`` -> ``step_N.dcp`` (``best.pt`` -> ``best.dcp``)."""
    return Path(path).with_suffix(SHARD_SUFFIX)


def shard_folder_of(state: dict[str, Any], path: str | os.PathLike[str]) -> Path:
    """The shard folder of a sharded checkpoint ``state`` read from ``path``: as the file names it (a folder name
    beside it), or as :func:`safe_load` resolved it (an absolute path, whatever path the file was read by)."""
    entry = state[SHARDS_KEY]
    if isinstance(entry, str) and Path(entry).is_absolute():
        return Path(entry)
    return _named_shard_folder(Path(path), entry)


def _named_shard_folder(path: Path, name: Any) -> Path:
    if not isinstance(name, str) or not name or Path(name).name != name or name in (".", ".."):
        raise CheckpointError(f"{path}: its shard folder entry {name!r} is not a folder name beside the file")
    return path.parent / name


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _read_metadata(owner: Path, folder: Path) -> Any:
    """DCP's ``.metadata`` of ``folder`` (read with the restricted unpickler); a CheckpointError naming
    ``owner`` (the step file) when the folder or its metadata is missing or unreadable."""
    fix = (
        "Resume from an earlier checkpoint (speechtrain train --resume RUN_DIR picks the newest that loads), or "
        f"delete {owner.name}."
    )
    if not folder.is_dir():
        raise CheckpointError(
            f"{owner}: its shard folder {folder.name} is missing (deleted, not copied along, or the save was cut "
            f"short); a sharded checkpoint needs both. {fix}"
        )
    meta = folder / ".metadata"
    if not meta.is_file():
        raise CheckpointError(f"{owner}: its shard folder {folder} has no .metadata (the save never finished). {fix}")
    try:
        with open(meta, "rb") as fh:
            return ckptio.load_dcp_metadata(fh, meta)  # DCP's own metadata classes only
    except ckptio.PickledObjects as exc:
        raise CheckpointError(
            f"{meta}: refused: it holds Python objects other than DCP's metadata, which could run code when "
            f"loaded. Only load checkpoints you trust. ({exc.detail})"
        ) from None
    except (ckptio.Unreadable, OSError) as exc:
        detail = exc.detail if isinstance(exc, ckptio.Unreadable) else first_line(exc)
        raise CheckpointError(f"{meta}: not readable ({detail}). {fix}") from None


def check_shards(owner: str | os.PathLike[str], folder: str | os.PathLike[str], digest: str | None = None) -> Any:
    """DCP's metadata of the shard folder of the step file ``owner``, after checking that it is whole: the
    ``.metadata`` has the SHA-256 ``owner`` recorded (when given), it describes tensors only, and every
    shard file it names is there and long enough. A CheckpointError naming both otherwise."""
    owner, folder = Path(owner), Path(folder)
    fix = "Resume from an earlier checkpoint (speechtrain train --resume RUN_DIR picks the newest that loads)."
    metadata = _read_metadata(owner, folder)
    if digest is not None and file_sha256(folder / ".metadata") != digest:
        raise CheckpointError(
            f"{owner}: its shard folder {folder.name} is not the one it was saved with (the .metadata differs: "
            f"written by another save, or damaged). {fix}"
        )
    entries = getattr(metadata, "state_dict_metadata", None)
    storage = getattr(metadata, "storage_data", None)
    if not isinstance(entries, dict) or not isinstance(storage, dict):
        raise CheckpointError(f"{folder / '.metadata'}: not DCP metadata. {fix}")
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    pickled = [k for k, v in entries.items() if not isinstance(v, TensorStorageMetadata)]
    if pickled:
        raise CheckpointError(
            f"{folder}: refused: it holds pickled entries ({', '.join(map(str, pickled[:3]))}), which DCP would "
            f"unpickle without weights_only; speechtrain writes tensors only there"
        )
    sizes: dict[str, int] = {}
    for info in storage.values():
        name = str(getattr(info, "relative_path", ""))
        sizes[name] = max(sizes.get(name, 0), int(getattr(info, "offset", 0)) + int(getattr(info, "length", 0)))
    for name, needed in sorted(sizes.items()):
        file = folder / name
        if Path(name).name != name or not file.is_file():
            raise CheckpointError(f"{owner}: shard file {file} is missing (the folder is incomplete). {fix}")
        if file.stat().st_size < needed:
            raise CheckpointError(
                f"{owner}: shard file {file} is cut short ({file.stat().st_size} bytes, the metadata says at least "
                f"{needed}). {fix}"
            )
    return metadata


def shard_reader(folder: str | os.PathLike[str]) -> Any:
    """DCP's FileSystemReader of ``folder`` whose ``.metadata`` is read with the restricted unpickler (pass it
    as ``storage_reader`` to ``torch.distributed.checkpoint.load``)."""
    return _reader_class()(str(folder))


@functools.cache
def _reader_class() -> type:
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.metadata import StorageMeta

    class ShardReader(FileSystemReader):
        def read_metadata(self, *args: Any, **kwargs: Any) -> Any:
            folder = Path(str(self.path))
            metadata = _read_metadata(folder, folder)
            if getattr(metadata, "storage_meta", None) is None:
                metadata.storage_meta = StorageMeta()
            metadata.storage_meta.load_id = self.load_id
            return metadata

    return ShardReader


@contextmanager
def dcp_without_group_quietly() -> Iterator[None]:
    """DCP warns on every read or write without a process group; one process reading alone is meant here."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is (disabled|unavailable)", category=UserWarning)
        yield


def module_states(state: dict[str, Any], path: str | os.PathLike[str]) -> dict[str, Any]:
    """The full (unsharded, CPU) weights of every module of a checkpoint ``state`` read from ``path``:
    its ``modules`` (a 1-process or DDP run), else assembled from its shard folder (an FSDP run), whatever
    number of ranks wrote it; ``{}`` for a file holding neither."""
    modules = state.get("modules")
    if isinstance(modules, dict):
        return modules
    if SHARDS_KEY not in state:
        return {}
    path = Path(path)
    folder = shard_folder_of(state, path)
    metadata = check_shards(path, folder, state.get(SHARDS_DIGEST_KEY))
    rest = state.get(SHARD_REST_KEY, {}).get("modules", {})
    names = sorted(rest, key=len, reverse=True)  # the longest first: "gen" must not take "gen_ema.w"
    out: dict[str, dict[str, Any]] = {name: {} for name in rest}
    for key, entry in metadata.state_dict_metadata.items():
        name = next((n for n in names if key.startswith(f"modules.{n}.")), None)
        if name is not None:
            out[name][key[len(f"modules.{name}.") :]] = torch.empty(tuple(entry.size), dtype=entry.properties.dtype)
    import torch.distributed.checkpoint as dcp

    try:
        with dcp_without_group_quietly():
            dcp.load({"modules": out}, storage_reader=shard_reader(folder), no_dist=True)
    except (Exception, dcp.CheckpointException) as exc:  # noqa: BLE001 - DCP wraps every rank's failure
        raise CheckpointError(f"{path}: its shard folder {folder} does not read ({first_line(exc)})") from None
    for name, extra in rest.items():  # non-tensor entries of a state dict (rare), kept in the step file
        out[name].update(extra)
    return out


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
                shards = shard_folder(path)
                if shards.is_dir():  # out of the way of the next save of this step
                    shutil.rmtree(shards.with_name(shards.name + ".corrupt"), ignore_errors=True)
                    os.replace(shards, shards.with_name(shards.name + ".corrupt"))
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
    doomed = others[: max(0, len(others) - room)]  # (a negative end would delete all but the newest few)
    for p in doomed:
        p.unlink(missing_ok=True)
        shutil.rmtree(shard_folder(p), ignore_errors=True)
    folder = Path(folder)
    for shards in folder.glob(f"step_*{SHARD_SUFFIX}") if folder.is_dir() else []:
        if shards.is_dir() and not shards.with_suffix(".pt").exists():  # no step file names it: never loadable
            shutil.rmtree(shards, ignore_errors=True)
    return doomed


def clean_temporaries(folder: str | os.PathLike[str]) -> list[Path]:
    """Delete ``.<name>.tmp-PID`` files that a killed save left in ``folder`` (those of processes that
    are no longer running on this machine); returns what was deleted."""
    folder = Path(folder)
    removed = []
    for p in folder.glob(".*.tmp-*") if folder.is_dir() else []:
        m = _TMP_RE.match(p.name)
        if m and not _pid_alive(int(m.group(1))):
            if p.is_dir():  # the shard folder of a killed sharded save
                shutil.rmtree(p, ignore_errors=True)
            else:
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


def _fsync_folder(folder: Path) -> None:
    dir_fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def move_folder(src: Path, dst: Path) -> None:
    """Rename the folder ``src`` to ``dst``, replacing an older ``dst`` (a save of the same step)."""
    old = dst.with_name(f".{dst.name}.old.tmp-{os.getpid()}")
    try:
        if dst.exists():
            shutil.rmtree(old, ignore_errors=True)
            os.replace(dst, old)
        os.replace(src, dst)
        _fsync_folder(dst.parent)
    except OSError as exc:
        raise write_failed(dst, exc) from exc
    finally:
        shutil.rmtree(old, ignore_errors=True)


def copy_folder(src: Path, dst: Path) -> None:
    """Copy the folder ``src`` to ``dst`` through a temporary folder (hard links where the disk allows)."""
    tmp = dst.with_name(f".{dst.name}.tmp-{os.getpid()}")
    try:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        for file in src.iterdir():
            try:
                os.link(file, tmp / file.name)
            except OSError:
                shutil.copy2(file, tmp / file.name)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise write_failed(dst, exc) from exc
    move_folder(tmp, dst)


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
