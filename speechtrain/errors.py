"""Errors shown to the user as one clear message (no traceback) by the CLI."""

from __future__ import annotations


class UserError(Exception):
    """A problem the user can fix: the message names the file/line/key and the fix."""


class DataError(UserError):
    """Bad input data (manifest, audio, transcript)."""


class CheckpointError(UserError):
    """A checkpoint that is foreign, truncated, tampered or otherwise unloadable."""
