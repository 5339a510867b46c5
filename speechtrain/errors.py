"""Errors shown to the user as one clear message (no traceback) by the CLI."""

from __future__ import annotations

import os
import shutil
from pathlib import Path


class UserError(Exception):
    """A problem the user can fix: the message names the file/line/key and the fix."""


class DataError(UserError):
    """Bad input data (manifest, audio, transcript)."""


class CheckpointError(UserError):
    """A checkpoint that is foreign, truncated, tampered or otherwise unloadable."""


def free_space(path: str | os.PathLike[str]) -> str:
    """Free space on the disk holding ``path`` (or its nearest existing parent), as ``"1.23 GiB"``: for the
    messages of a write that failed (a full disk names how much is left)."""
    p = Path(path).absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        return f"{shutil.disk_usage(p).free / 2**30:.2f} GiB"
    except OSError:
        return "unknown"
