"""A word on every long wait: stage lines for the jobs that run for minutes (tune, export, rtf, prepare,
the bench ladder), logged as they begin, with the time spent and, where the job counts its rounds, the
time left.

A line per stage (not a redrawn bar) because the wait is read in a terminal, in the UI's job log and in a
CI log alike, and a bar drawn into a file or a pipe shows nothing until it ends. The lines go through
:mod:`speechtrain.logs` (standard error, rank 0 only, off with ``--quiet``), so that standard output keeps
the command's results. ``Progress("tune").stage("building the model")`` logs
``tune: building the model (0:03 so far)``; ``progress.round(2, 5, "bucket 2 (<= 410 frames)")`` logs
``tune: bucket 2 (<= 410 frames), 2 of 5 (0:41 so far, about 1:20 left)``: the time left is the mean of
the rounds done, times the rounds to go. Within a stage that works through a known number of items (the files
prepare reads, the utterances it computes), ``progress.count(120, 800, "files read")`` logs
``prepare: 120 of 800 files read (0:05 so far, about 0:28 left)`` at most once every :data:`EVERY` seconds,
the time left at the stage's rate so far.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from speechtrain.logs import get_logger

log = get_logger(__name__)

#: the fewest seconds between two count lines of one stage: a line every few seconds, not one per item
EVERY = 3.0

#: a function a long job calls as each round begins: (round, of, what)
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
        self._stage_started = self.started
        self._last_line = self.started
        self._counted = False

    def elapsed(self) -> float:
        return self.now() - self.started

    def stage(self, what: str) -> None:
        """A stage begins: ``<job>: <what> (m:ss so far)``."""
        self._stage_started = self._last_line = self.now()
        self._counted = False
        self.log.info(f"{self.job}: {what} ({clock(self.elapsed())} so far)")

    def round(self, k: int, of: int, what: str, numbered: bool = True) -> None:
        """Round ``k`` of ``of`` begins (1-based); the time left once a round has ended. ``numbered=False``:
        ``what`` says itself where the job stands (``k`` and ``of`` only count for the time left)."""
        t = self.now()
        if self._round_started is not None:
            self._rounds_done += 1
            self._round_seconds += t - self._round_started
        self._round_started = t
        left = ""
        if self._rounds_done:
            left = f", about {clock(self._round_seconds / self._rounds_done * (of - k + 1))} left"
        where = f", {k} of {of}" if numbered else ""
        self.log.info(f"{self.job}: {what}{where} ({clock(self.elapsed())} so far{left})")

    def count(self, done: int, total: int, what: str) -> None:
        """``done`` of ``total`` items of the current stage (``what``: "files read"): logged once :data:`EVERY`
        seconds have passed since the stage's last line, with the time left at the stage's rate so far; the
        last one (``done == total``) only after an earlier count line (a quick stage says nothing more)."""
        t = self.now()
        last = done >= total
        if (last and not self._counted) or (not last and t - self._last_line < EVERY):
            return
        self._last_line, self._counted = t, True
        left = ""
        if 0 < done < total:
            left = f", about {clock((t - self._stage_started) / done * (total - done))} left"
        self.log.info(f"{self.job}: {done} of {total} {what} ({clock(self.elapsed())} so far{left})")

    def done(self, what: str = "done") -> None:
        self.log.info(f"{self.job}: {what} in {clock(self.elapsed())}")


class Tally:
    """A stage's item count that logs through ``progress.count`` (silent without one): ``update()`` per item
    where a progress bar would be updated."""

    def __init__(self, progress: Progress | None, total: int, what: str) -> None:
        self.progress, self.total, self.what = progress, total, what
        self.done = 0

    def update(self, n: int = 1) -> None:
        self.done += n
        if self.progress is not None:
            self.progress.count(self.done, self.total, self.what)
