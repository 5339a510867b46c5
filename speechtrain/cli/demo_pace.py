"""The demo's clock: its estimate of the whole, revised from what it measures as it goes, and the ladder's pacing.

Every class here takes its clock (and the load average) as arguments, so that the tests drive them with made-up
times: the demo's estimate once came out 6x too long ("about 62 min in all" -> 594 s) and its ladder announced
"63 s left" and ran 7 minutes, without a word.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: what one ladder measurement costs at least on 2 idle CPU cores: a fresh process, the model and the data
#: (~5-6 s), warm-up and a window of a few steps (measured: 39 measurements took 300 s in the demo)
MEASUREMENT_SECONDS = 8.0
#: a stage (or a rung) that ends within this share of its announced time (plus OVERRUN_SLACK seconds) kept to it
OVERRUN_SHARE, OVERRUN_SLACK = 0.1, 5.0
#: a revised estimate is printed when it moves by more than this share of the last one printed and REVISE_SLACK s
REVISE_SHARE, REVISE_SLACK = 0.15, 15.0
#: training's rate is measured over this many steps after its first (which pays the warm-up)
RATE_STEPS = 3


def kept_to(took: float, announced: float) -> bool:
    """Whether something that took ``took`` seconds kept to the ``announced`` ones (within ``OVERRUN_SHARE`` and
    ``OVERRUN_SLACK``)."""
    return took <= announced * (1 + OVERRUN_SHARE) + OVERRUN_SLACK


def demo_estimate(so_far: float, train: float, ladder: float, rows: int, row_floor: float, reserve: float) -> float:
    """Seconds the whole demo takes: the stages done (measured), training (bounded), the ladder (its share of
    the budget, but at least ``row_floor`` per measured row) and the report."""
    return so_far + train + max(ladder, rows * row_floor) + reserve


def minutes(seconds: float) -> str:
    """``about 4 min (250s)``: the minutes a reader plans with, the seconds the next line is compared with."""
    return f"about {seconds / 60:.0f} min ({seconds:.0f}s)"


@dataclass
class Revisions:
    """The estimate lines the demo prints: the first always, a later one only when it moved materially (more than
    ``REVISE_SHARE`` of the last one printed and ``REVISE_SLACK`` seconds), so that a steady run prints one line."""

    shown: float | None = None
    lines: list[str] = field(default_factory=list)

    def offer(self, total: float, why: str) -> str | None:
        if self.shown is not None and abs(total - self.shown) <= max(REVISE_SLACK, REVISE_SHARE * self.shown):
            return None
        first = self.shown is None
        self.shown = total
        line = f"{'estimate for this machine' if first else 'revised estimate'}: {minutes(total)} in all ({why})"
        self.lines.append(line)
        return line


class TrainPace:
    """Seconds of training left, from the steps measured: the time per step after the first (which pays the
    warm-up: a compile, the allocator, the first batches), times the steps left, but no more than what is left of
    training's time bound (``train.max_minutes``, counted from the step-0 record) and the step that passes it."""

    def __init__(self, bound: float, started: float) -> None:
        self.bound = bound
        self.started = started  # the wall time training started at (replaced by the step-0 record's, when seen)
        self._first: tuple[int, float] | None = None
        self.per_step: float | None = None
        self.measured_steps = 0

    def observe(self, step: int, max_steps: int | None, at: float) -> float | None:
        """Seconds left once ``RATE_STEPS`` steps after the first are measured (None before)."""
        if step == 0:
            self.started = at
            return None
        if self._first is None:
            self._first = (step, at)
            return None
        done = step - self._first[0]
        if done < RATE_STEPS:
            return None
        self.per_step, self.measured_steps = (at - self._first[1]) / done, done
        # the bound is checked between steps: the step under way when it passes still runs
        bound_left = max(0.0, self.bound - (at - self.started)) + self.per_step
        if max_steps is None:
            return bound_left
        return min(bound_left, self.per_step * max(0, max_steps - step))

    def why(self, left: float) -> str:
        return f"training: {self.per_step or 0:.2f}s per step over {self.measured_steps} steps, {left:.0f}s of it left"


class TrainWatch:
    """Reads the run's ``progress.json`` every ``every`` seconds in a thread and hands each record to ``on_record``
    (the demo's estimate); the trainer itself is not touched. ``poll()`` is one look, for the tests."""

    def __init__(self, run_dir: Path, on_record: Callable[[Any], None], every: float = 2.0) -> None:
        self.run_dir, self.on_record, self.every = run_dir, on_record, every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="demo-train-watch", daemon=True)
        self._seen: tuple[int, float | None] | None = None

    def poll(self) -> None:
        from speechtrain.train.metrics import read_progress_record

        record = read_progress_record(self.run_dir)
        if record is None or (record.step, record.time) == self._seen:
            return
        self._seen = (record.step, record.time)
        self.on_record(record)

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            self.poll()

    def __enter__(self) -> TrainWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def passes_that_fit(measured_rows: int, seconds: float, repeat: int) -> int:
    """Interleaved passes over ``measured_rows`` rows that ``seconds`` hold at ~MEASUREMENT_SECONDS per
    measurement: ``repeat`` at most, 1 at least."""
    return max(1, min(repeat, int(seconds // (max(1, measured_rows) * MEASUREMENT_SECONDS))))


def load_average() -> float | None:
    """The machine's 1-minute load average (None where the platform has none)."""
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):
        return None


@dataclass
class Measurement:
    """One ladder measurement as the pacer saw it: its label, its share of the time left when it started, its
    timed window, and (once the next one starts) what it took in all."""

    label: str
    share: float = 0.0
    window: float = 0.0
    took: float | None = None


class Pacer:
    """Shares what is left of the ladder's time among the measurements still to run (every measured
    row, ``repeat`` passes): each timed window gets (time left / measurements left) minus the
    start-up cost seen so far (a fresh process, the model, the data: ~5 s per row on 2 idle cores).

    ``clock`` and ``load`` are the clock and the load average it reads (the tests pass made-up ones)."""

    def __init__(
        self,
        rows: list[Any],
        seconds: float,
        repeat: int = 1,
        overhead: float = 5.0,
        clock: Callable[[], float] = time.perf_counter,
        load: Callable[[], float | None] = load_average,
        cores: int | None = None,
    ) -> None:
        self.total = sum(1 for v in rows if not v.skip_reason) * max(1, repeat)
        self.clock, self.load = clock, load
        self.cores = cores or os.cpu_count() or 1
        self.deadline = clock() + seconds
        self.overhead = overhead
        self.measurements: list[Measurement] = []
        self._started: float | None = None

    @property
    def limits(self) -> list[float]:
        return [m.window for m in self.measurements]

    def row_started(self, label: str = "") -> str | None:
        """A measurement starts (``label``; "" at the ladder's end): closes the one before, and returns the line
        that says it overran its share and why (None when it kept to it)."""
        now = self.clock()
        note = None
        if self._started is not None and self.measurements and self.measurements[-1].took is None:
            last = self.measurements[-1]
            last.took = now - self._started
            note = self._overrun(last)
        self._started = now
        if label:
            self.measurements.append(Measurement(label))
        return note

    def limit(self, i: int) -> float:
        left = max(0.0, self.deadline - self.clock())
        measurements_left = max(1, self.total - self._closed())
        share = left / measurements_left
        window = max(1.0, share - self._overhead())
        if not self.measurements or self.measurements[-1].took is not None:
            self.measurements.append(Measurement(""))  # limit() without row_started(): no label to name
        self.measurements[-1].share, self.measurements[-1].window = share, window
        return window

    def seconds_left(self) -> float:
        """What the ladder still takes: the time left to its deadline, or, when the measurements to go cost more
        than that (each its start-up as measured so far and a window of at least 1 s), their cost."""
        to_go = self.total - self._closed()
        return max(self.deadline - self.clock(), to_go * (self._overhead() + 1.0), 0.0)

    def why(self) -> str:
        done = self._closed()
        return (
            f"ladder: {done} of {self.total} measurements done, each {self._overhead():.0f}s beyond its timed window"
            " (a fresh process, the model and the data)"
        )

    def summary(self) -> str:
        limits = self.limits
        return f"{min(limits):.0f}-{max(limits):.0f}s" if limits else "-"

    @property
    def costs(self) -> list[float]:
        """Seconds each measurement took beyond its timed window (a fresh process, the model, the data)."""
        return [max(0.0, m.took - m.window) for m in self.measurements if m.took is not None]

    def _closed(self) -> int:
        return sum(1 for m in self.measurements if m.took is not None)

    def _overhead(self) -> float:
        costs = self.costs
        return sum(costs) / len(costs) if costs else self.overhead

    def _overrun(self, m: Measurement) -> str | None:
        assert m.took is not None
        if kept_to(m.took, m.share):
            return None
        why = []
        if "compile" in m.label.lower():
            why.append("torch.compile builds its kernels before the timed window")
        load = self.load()
        if load is not None and load > self.cores:
            why.append(f"the machine is loaded (1-minute load average {load:.1f} on {self.cores} cores)")
        why.append(
            f"its process, the model and the data took {max(0.0, m.took - m.window):.0f}s beyond its "
            f"{m.window:.0f}s timed window"
        )
        name = f"'{m.label}'" if m.label else "a measurement"
        return (
            f"ladder: {name} took {m.took:.0f}s, {m.took - m.share:.0f}s past its {m.share:.0f}s share: "
            + "; ".join(why)
        )


def overrun_note(took: float, announced: float, costs: list[float], measurements: int) -> str | None:
    """What the demo says when its ladder ran past the time it announced, and why: the measurements' cost beyond
    their timed windows (each a fresh process, the model and the data), which no window can shrink; None when it kept
    to its time. (It once announced 63 s left and ran 7 minutes, without a word.)"""
    if kept_to(took, announced):
        return None
    overhead = sum(costs) / len(costs) if costs else None
    why = (
        f"its {measurements} measurements cost {overhead:.0f}s each beyond their timed windows (a fresh process, "
        f"the model and the data), {measurements * overhead:.0f}s in all"
        if overhead is not None
        else f"its {measurements} measurements' start-up was not measured"
    )
    return (
        f"the ladder ran {took:.0f}s, {took - announced:.0f}s past the {announced:.0f}s it announced: {why}; give the "
        "demo more --minutes, or skip rungs with --skip"
    )


@dataclass
class DemoPlan:
    """What the demo's estimate of the whole is made of once the tuner has run: the budget's shares, the ladder's
    measured rows and what one of them costs at least here (``floor``: a fresh process's start-up, as this one's
    was measured, plus a warm-up and a window)."""

    total_budget: float
    reserve: float
    rows: int
    floor: float

    def total(self, so_far: float, train_left: float) -> float:
        """The whole, ``so_far`` seconds in with ``train_left`` seconds of training to go."""
        ladder = self.total_budget - so_far - train_left - self.reserve
        return demo_estimate(so_far, train_left, ladder, self.rows, self.floor, self.reserve)

    def ladder_seconds(self, so_far: float) -> float:
        """What the ladder will take once training is over, ``so_far`` seconds in."""
        return max(self.total_budget - so_far - self.reserve, self.rows * self.floor)


def say_line(line: str) -> None:
    """A line on standard output that leaves a progress bar where it is (tqdm's write clears and redraws it)."""
    from tqdm import tqdm

    tqdm.write(line, file=sys.stdout)
    sys.stdout.flush()


@dataclass
class Estimator:
    """Joins what the demo measures as it goes to its estimate of the whole: ``training`` with each progress record of
    the training run, ``ladder`` after each measurement of the ladder; a line is said when the estimate moved."""

    plan: DemoPlan
    revisions: Revisions
    elapsed: Callable[[], float]
    say: Callable[[str], None] = say_line

    def training(self, pace: TrainPace, record: Any) -> None:
        if record.time is None:
            return
        left = pace.observe(record.step, record.max_steps, record.time)
        if left is not None:
            self._offer(self.plan.total(self.elapsed(), left), pace.why(left))

    def ladder(self, pacer: Pacer) -> None:
        self._offer(self.elapsed() + pacer.seconds_left() + self.plan.reserve, pacer.why())

    def _offer(self, total: float, why: str) -> None:
        line = self.revisions.offer(total, why)
        if line is not None:
            self.say(line)
