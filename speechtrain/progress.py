"""A word on every long wait: stage lines for the jobs that run for minutes (tune, export, rtf, prepare,
the bench ladder), logged as they begin, with the time spent and, where the job counts its rounds, the
time left.

A line per stage (not a redrawn bar) because the wait is read in a terminal, in the UI's job log and in a
CI log alike, and a bar drawn into a file or a pipe shows nothing until it ends. The lines go through
:mod:`speechtrain.logs` (standard error, rank 0 only, off with ``--quiet``), so that standard output keeps
the command's results. ``Progress("tune").stage("building the model")`` logs
``tune: building the model (0:03 so far)``; ``progress.round(2, 5, "bucket 2 (<= 410 frames)")`` logs
``tune: bucket 2 (<= 410 frames), 2 of 5 (0:41 so far, about 1:20 left)``: the time left is the mean of
the rounds done, times the rounds to go.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from speechtrain.logs import get_logger

log = get_logger(__name__)

#: a function a long job calls as each round begins: (round, of, what); the bench ladder takes one
RoundHook = Callable[[int, int, str], None]


def clock(seconds: float) -> str:
    """``m:ss`` (``h:mm:ss`` past an hour) of a duration in seconds."""
    s = max(0, int(round(seconds)))
    h, rest = divmod(s, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class Progress:
    """The stage lines of one job (``job``: the command's name, the lines' prefix)."""

    def __init__(self, job: str, logger: logging.Logger | None = None, now: Callable[[], float] = time.monotonic):
        self.job = job
        self.log = logger or log
        self.now = now
        self.started = now()
        self._round_started: float | None = None
        self._rounds_done = 0
        self._round_seconds = 0.0

    def elapsed(self) -> float:
        return self.now() - self.started

    def stage(self, what: str) -> None:
        """A stage begins: ``<job>: <what> (m:ss so far)``."""
        self.log.info(f"{self.job}: {what} ({clock(self.elapsed())} so far)")

    def round(self, k: int, of: int, what: str) -> None:
        """Round ``k`` of ``of`` begins (1-based); the time left once a round has ended."""
        t = self.now()
        if self._round_started is not None:
            self._rounds_done += 1
            self._round_seconds += t - self._round_started
        self._round_started = t
        left = ""
        if self._rounds_done:
            left = f", about {clock(self._round_seconds / self._rounds_done * (of - k + 1))} left"
        self.log.info(f"{self.job}: {what}, {k} of {of} ({clock(self.elapsed())} so far{left})")

    def done(self, what: str = "done") -> None:
        self.log.info(f"{self.job}: {what} in {clock(self.elapsed())}")
