"""The one reader of pickled files: every checkpoint, of ours or of a peer, is opened here.

A PyTorch checkpoint is a pickle; unpickling can call any function the file names, so a checkpoint
someone handed you can run code the moment it is loaded. Every module of speechtrain that opens one
(training, resume, ``init_from`` imports, export and its metadata, consolidate, the UI, inference,
XTTS base weights, sharded checkpoints' DCP metadata) goes through :func:`load` or
:func:`load_dcp_metadata`, and ``tests/test_safe_reader.py`` fails when any other module of the package
calls ``torch.load`` or unpickles.

:func:`load` accepts tensors and plain containers only (``torch.load(weights_only=True)``) unless the
caller passes ``trust_pickle=True``, which only a user's explicit flag for that file may set (today
``train.init_trust_pickle`` for ``train.init_from``; the web UI refuses it). A refused file is a
:class:`PickledObjects` error, an unreadable one :class:`Unreadable`; both are CheckpointErrors that
name the file, and callers add the fix that fits their door.

It sits in the lowest layer (it needs only :mod:`speechtrain.errors`) so that any layer may read a
checkpoint through it; torch is imported when a file is read.
"""

from __future__ import annotations

import os
import pickle
import re
from pathlib import Path
from typing import IO, Any

from speechtrain.errors import CheckpointError

__all__ = ["PickledObjects", "Unreadable", "load", "load_dcp_metadata"]


class PickledObjects(CheckpointError):
    """A file that holds Python objects other than tensors and plain containers (it could run code when loaded)."""

    def __init__(self, path: Path, detail: str) -> None:
        self.path, self.detail = path, detail
        super().__init__(
            f"{path}: refused: it holds Python objects other than tensors and plain containers, which could run "
            f"code when loaded ({detail})"
        )


class Unreadable(CheckpointError):
    """A file that is not a readable torch file (truncated, damaged, or another kind of file)."""

    def __init__(self, path: Path, detail: str) -> None:
        self.path, self.detail = path, detail
        super().__init__(f"{path}: not a readable torch file ({detail})")


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__


def _globals_line(exc: BaseException) -> str | None:
    """``GLOBAL module.name`` of torch's weights-only refusal: what the file would have called (None: no refusal)."""
    found = re.search(r"GLOBAL ([\w.]+)", str(exc))
    if found is not None:
        return f"GLOBAL {found.group(1)}"
    return _first_line(exc) if "Unsupported global" in str(exc) else None


def load(
    path: str | os.PathLike[str],
    *,
    trust_pickle: bool = False,
    mmap: bool = False,
    map_location: Any = "cpu",
) -> Any:
    """The object in the torch file ``path``: tensors and plain containers only, unless ``trust_pickle`` (the
    user's explicit trust flag for this file). ``mmap``: map the tensors' storage instead of reading it (a file
    in the legacy, pre-zip format is read whole). :class:`PickledObjects` for a refused file,
    :class:`Unreadable` for one that does not load."""
    import torch

    path = Path(path)
    try:
        try:
            return torch.load(path, map_location=map_location, weights_only=not trust_pickle, mmap=mmap)
        except RuntimeError as exc:
            if not mmap or "mmap" not in str(exc):
                raise
            return torch.load(path, map_location=map_location, weights_only=not trust_pickle)  # legacy format
    except pickle.UnpicklingError as exc:
        refused = _globals_line(exc)
        if refused is not None:
            raise PickledObjects(path, refused) from None
        raise Unreadable(path, f"corrupt: {_first_line(exc)}") from None
    except Exception as exc:  # noqa: BLE001 - a damaged or foreign file fails in many ways inside torch.load
        raise Unreadable(path, f"truncated or corrupt: {_first_line(exc)}") from None


#: the globals a DCP ``.metadata`` pickle is made of (torch dtypes are accepted besides)
_DCP_METADATA_GLOBALS = {
    *(
        ("torch.distributed.checkpoint.metadata", name)
        for name in (
            "Metadata",
            "MetadataIndex",
            "StorageMeta",
            "TensorProperties",
            "TensorStorageMetadata",
            "ChunkStorageMetadata",
            "BytesStorageMetadata",
            "_MEM_FORMAT_ENCODING",
        )
    ),
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
    ("torch", "Size"),
    ("torch.serialization", "_get_layout"),
    ("collections", "OrderedDict"),
    *(("pathlib", name) for name in ("PosixPath", "WindowsPath", "PurePosixPath", "PureWindowsPath")),
}


class _MetadataUnpickler(pickle.Unpickler):
    """Unpickles DCP's metadata classes and nothing else (no callable of another module can run)."""

    def find_class(self, module: str, name: str) -> Any:
        import torch

        if (module, name) in _DCP_METADATA_GLOBALS or (
            module == "torch" and isinstance(getattr(torch, name, None), torch.dtype)
        ):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"GLOBAL {module}.{name} is not one of DCP's metadata classes")


def load_dcp_metadata(fh: IO[bytes], path: str | os.PathLike[str]) -> Any:
    """DCP's ``.metadata`` pickle from the open file ``fh`` (``path``: its name, for the errors), read with an
    unpickler that accepts DCP's own metadata classes only: :class:`PickledObjects` when it names anything
    else, :class:`Unreadable` when it is damaged."""
    try:
        return _MetadataUnpickler(fh).load()
    except pickle.UnpicklingError as exc:
        if "GLOBAL" in str(exc):
            raise PickledObjects(Path(path), _first_line(exc)) from None
        raise Unreadable(Path(path), f"corrupt: {_first_line(exc)}") from None
    except Exception as exc:  # noqa: BLE001 - a damaged pickle fails in many ways
        raise Unreadable(Path(path), f"corrupt: {_first_line(exc)}") from None
