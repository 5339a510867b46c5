"""Logging for the library: ``get_logger(__name__)`` everywhere, a rank-zero filter, one set-up call.

The library never prints: it logs to the ``speechtrain`` logger tree. ``setup_logging()`` (called
by the command line and the UI) sends INFO and above to standard output as plain messages. Under a
process group only rank 0 speaks, unless a record is marked ``extra={"all_ranks": True}`` (an error
one rank alone sees, say); those carry their rank as a prefix.
"""

from __future__ import annotations

import logging
import os
import sys

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


class _StdoutHandler(logging.StreamHandler):  # type: ignore[type-arg,unused-ignore]
    """Writes to the *current* ``sys.stdout`` (so that redirections and test captures see it)."""

    def __init__(self) -> None:
        super().__init__(sys.stdout)

    def emit(self, record: logging.LogRecord) -> None:
        self.setStream(sys.stdout)
        super().emit(record)


def setup_logging(level: int = logging.INFO) -> logging.Logger:
    """Plain messages of ``level`` and above to standard output, rank 0 only. Idempotent."""
    logger = logging.getLogger(ROOT)
    logger.setLevel(level)
    if not any(isinstance(h, _StdoutHandler) for h in logger.handlers):
        handler = _StdoutHandler()
        handler.setFormatter(logging.Formatter("%(message)s"))
        handler.addFilter(RankZeroFilter())
        logger.addHandler(handler)
    logger.propagate = False
    return logger
