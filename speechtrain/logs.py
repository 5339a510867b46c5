"""Logging for the library: ``get_logger(__name__)`` everywhere, a rank-zero filter, one set-up call.

The library never prints: it logs to the ``speechtrain`` logger tree. ``setup_logging()`` (the UI's job
runner) and :func:`logging_for_command` (every ``speechtrain`` command, for as long as it runs: ``--quiet``
WARNING, ``--verbose`` DEBUG, else INFO) send its records to standard error as plain messages, where
diagnostics belong (standard output keeps a command's results: JSON, YAML, tables). Under a process group only
rank 0 speaks, unless a record is marked ``extra={"all_ranks": True}`` (an OOM recovery on rank 1, an error
one rank alone sees); those carry their rank as a prefix.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

ROOT = "speechtrain"


def get_logger(name: str) -> logging.Logger:
    """The logger of a module (``get_logger(__name__)``), inside the ``speechtrain`` tree."""
    return logging.getLogger(name if name.startswith(ROOT) else f"{ROOT}.{name}")


def process_rank() -> int:
    """This process's global rank: torch.distributed when initialised, else ``RANK`` (torchrun), else 0."""
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return int(dist.get_rank())
    except ImportError:  # pragma: no cover - torch is a dependency
        pass
    return int(os.environ.get("RANK", "0") or 0)


class RankZeroFilter(logging.Filter):
    """Lets records through on rank 0; elsewhere only records logged with ``extra={"all_ranks": True}``."""

    def filter(self, record: logging.LogRecord) -> bool:
        rank = process_rank()
        if rank == 0:
            return True
        if getattr(record, "all_ranks", False):
            record.msg = f"[rank {rank}] {record.msg}"
            return True
        return False


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg,unused-ignore]
    """Writes to the *current* ``sys.stderr`` (so that redirections and test captures see it)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    def emit(self, record: logging.LogRecord) -> None:
        if self.stream is not sys.stderr:  # not setStream: it flushes the old stream, which may be closed by now
            self.stream = sys.stderr
        super().emit(record)


def _handler() -> logging.Handler:
    handler = _StderrHandler()
    handler.setFormatter(logging.Formatter("%(message)s"))
    handler.addFilter(RankZeroFilter())
    return handler


def setup_logging(level: int = logging.INFO) -> logging.Logger:
    """Plain messages of ``level`` and above to standard error, rank 0 only (for the life of the process).
    Idempotent."""
    logger = logging.getLogger(ROOT)
    logger.setLevel(level)
    if not any(isinstance(h, _StderrHandler) for h in logger.handlers):
        logger.addHandler(_handler())
    logger.propagate = False
    return logger


@contextmanager
def logging_for_command(level: int = logging.INFO) -> Iterator[logging.Logger]:
    """:func:`setup_logging` for the duration of one command, then the ``speechtrain`` logger as it was (a
    command run inside another program, a notebook or a test, leaves that program's logging alone). Inside a
    process already set up (the UI's job runner) only the level changes."""
    logger = logging.getLogger(ROOT)
    before = (logger.level, logger.propagate)
    added = None
    if not any(isinstance(h, _StderrHandler) for h in logger.handlers):
        added = _handler()
        logger.addHandler(added)
    logger.setLevel(level)
    logger.propagate = False
    try:
        yield logger
    finally:
        if added is not None:
            logger.removeHandler(added)
        logger.setLevel(before[0])
        logger.propagate = before[1]


#: the file of a job folder that holds the warnings its command logged, one per line (the web UI's jobs)
WARNINGS_FILE = "warnings.txt"


class WarningsFile(logging.Handler):
    """Appends each WARNING (and worse) record to a file as one line: the web UI shows a job's warnings where the
    user looks (they scrolled past in its output)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__(logging.WARNING)
        self.path = path

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = " ".join(self.format(record).split())
            with open(self.path, "a", encoding="utf-8") as fh:
                fh.write(line + "\n")
        except Exception:  # noqa: BLE001 - a warning that cannot be kept must not stop the job
            self.handleError(record)
