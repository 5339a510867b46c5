"""The per-bucket batch-size search behind ``speechtrain tune``.

For each duration bucket of the training set, longest first, the tuner runs real training steps
(``step_fn``: forward, backward, optimizer step, with the run's accelerations) on batches at the
bucket's longest length, made of the bucket's longest real utterances repeated up to the batch
size, and finds the largest batch that fits in the memory budget
(``tune.memory_fraction`` x device memory - ``tune.margin_gib``):

1. grow by doubling from a start (1 for the first bucket; the previous bucket's answer scaled by
   the length ratio for the next ones) until a trial fails or ``tune.max_batch_size`` (or the bucket's item count:
   no training batch holds more) is reached;
2. bisect between the last batch that fitted and the first that failed until they are within
   ``tune.tolerance`` of each other.

A trial fails when it raises an out-of-memory error (:func:`speechtrain.memory.oom.is_oom_error`)
or its measured peak exceeds the budget. The allocator cache is not emptied between trials, so
fragmentation is seen as it will be in training. With ``tune.objective: throughput`` (default),
growing also stops when a larger batch no longer raises audio-seconds per second by
``tune.min_gain``: on a CPU this is what binds. ``SPEECHTRAIN_INJECT_OOM_FRAMES=N`` rehearses the
whole search on a CPU (every batch over N padded frames raises an OOM).

The result (:class:`TuneReport`) carries :class:`TunedSettings`: ``data.bucket_boundaries`` and
``data.bucket_batch_sizes`` (``data.batch_size`` in crop mode or without bucketing) and, when
``tune.target_batch_seconds`` is set, ``train.grad_accum`` chosen so that an optimizer step sees
that many seconds of audio. The recipe (:class:`speechtrain.recipes.tune.TuneRecipe`) builds the
task, its step and the batches, and writes the tuned config.
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from enum import StrEnum
from typing import Any

import numpy as np
import torch

from speechtrain.config import ConfigError, DataConfig, TuneConfig
from speechtrain.data.batch import Batch, round_up
from speechtrain.data.sampler import item_cost
from speechtrain.device import foreign_load, load_average, usable_cores
from speechtrain.errors import DataError
from speechtrain.logs import get_logger
from speechtrain.memory.estimate import device_memory, predict_bytes
from speechtrain.memory.oom import injected_oom_frames, is_oom_error, maybe_inject_oom
from speechtrain.memory.stats import GIB, format_bytes, memory_stats, reset_peak, set_memory_fraction
from speechtrain.progress import Progress

log = get_logger(__name__)

StepFn = Callable[[Any], Any]
#: ``read(indices, crop_at_start, bucket)``: a padded Batch of those training-set items
ReadBatch = Callable[[tuple[int, ...], bool, int], Batch]


class TrialStatus(StrEnum):
    """How one measured batch size ended."""

    FITS = "fits"
    OOM = "oom"
    OVER_BUDGET = "over_budget"
    DOES_NOT_FIT = "does_not_fit"  # not even one utterance fits (no trial succeeded)


class LimitedBy(StrEnum):
    """What stopped a bucket's batch from growing."""

    MEMORY = "memory"
    THROUGHPUT = "throughput"
    MAX_BATCH_SIZE = "max_batch_size"
    BUCKET_SIZE = "bucket_size"  # every item of the bucket in one batch: a larger one never occurs in training
    DOES_NOT_FIT = "does_not_fit"
    EMPTY = "empty"  # no utterance in the bucket: sized from its neighbour


class PlanMode(StrEnum):
    """How the training set is batched: duration buckets, random crops, or fixed-count batches."""

    BUCKETED = "bucketed"
    CROP = "crop"
    FIXED = "fixed"


@dataclass
class Trial:
    """One measured batch size: whether it fitted, its peak memory and its speed."""

    batch_size: int
    ok: bool
    reason: TrialStatus
    padded_frames: int = 0
    peak_bytes: int | None = None
    peak_reserved_bytes: int | None = None
    step_seconds: float | None = None
    audio_seconds_per_second: float | None = None

    def __post_init__(self) -> None:
        self.reason = TrialStatus(self.reason)


@dataclass(kw_only=True)
class BucketResult:
    """The tuned batch of one bucket (``bucket`` indexes the buckets shortest first)."""

    bucket: int
    upper_frames: int  # the bucket's upper bound (data.bucket_boundaries)
    max_item_frames: int  # longest item in the bucket
    padded_frames: int  # its padded length (pad_multiple)
    items: int
    audio_seconds: float
    batch_size: int
    batch_frames: int
    limited_by: LimitedBy
    peak_memory_bytes: int | None = None
    peak_reserved_bytes: int | None = None
    step_seconds: float | None = None
    audio_seconds_per_second: float | None = None
    estimate_bytes: int | None = None
    trials: list[Trial] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.limited_by = LimitedBy(self.limited_by)


@dataclass(kw_only=True)
class TunedSettings:
    """The config values the tuner chose (None: leave the key as it is)."""

    grad_accum: int
    bucket_boundaries: list[int] | None = None
    bucket_batch_sizes: list[int] | None = None
    max_frames: int | None = None
    batch_size: int | None = None

    def overrides(self) -> dict[str, Any]:
        """The settings as ``{dotted key: value}`` (only the keys the tuner sets)."""
        out: dict[str, Any] = {f"data.{k}": v for k, v in asdict(self).items() if k != "grad_accum" and v is not None}
        out["train.grad_accum"] = self.grad_accum
        return out


@dataclass(kw_only=True)
class TuneReport:
    """What the tuner found (``tuned``: the values to write into the config)."""

    buckets: list[BucketResult]
    seconds: float
    mode: PlanMode
    objective: str
    device: str
    budget_bytes: int | None
    budget_source: str
    injected_oom_frames: int | None
    grad_accum: int
    mean_batch_seconds: float
    effective_batch_seconds: float
    target_batch_seconds: float | None
    estimate: dict[str, Any] | None
    tuned: TunedSettings
    peak_kind: str = ""
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def table(self) -> str:
        """The per-bucket table printed by ``speechtrain tune``."""
        head = (
            f"{'bucket':>6} {'longest':>8} {'batch':>6} {'padded':>8} {'peak GiB':>9} {'est. GiB':>9} "
            f"{'step s':>8} {'audio s/s':>10}  limited by"
        )
        lines = [head]
        for b in sorted(self.buckets, key=lambda r: -r.max_item_frames):
            aps = "-" if b.audio_seconds_per_second is None else f"{b.audio_seconds_per_second:.1f}"
            step = "-" if b.step_seconds is None else f"{b.step_seconds:.3f}"
            lines.append(
                f"{b.bucket:>6} {b.max_item_frames:>8} {b.batch_size:>6} {b.batch_frames:>8} "
                f"{_gib(b.peak_memory_bytes):>9} {_gib(b.estimate_bytes):>9} {step:>8} {aps:>10}  "
                f"{b.limited_by} ({len(b.trials)} trials)"
            )
        lines.append(f"peak: {self.peak_kind}; est.: `speechtrain estimate` (weights, grads, optimizer, activations)")
        lines.append(
            f"budget {format_bytes(self.budget_bytes)} ({self.budget_source}); objective {self.objective}; "
            f"device {self.device}; tuned in {self.seconds:.1f} s"
        )
        accum = f"grad_accum {self.grad_accum}: mean batch {self.mean_batch_seconds:.1f} s of audio"
        if self.target_batch_seconds:
            accum += f", {self.effective_batch_seconds:.1f} s per optimizer step (target {self.target_batch_seconds:g})"
        lines.append(accum)
        lines.extend(f"note: {n}" for n in self.notes)
        return "\n".join(lines)


def _gib(n: int | None) -> str:
    return "-" if n is None else f"{n / GIB:.3f}"


# ---------------------------------------------------------------------------------------------- search


def search_batch_size(
    trial: Callable[[int], Trial],
    start: int = 1,
    cap: int = 1024,
    tolerance: float = 0.05,
    objective: str = "memory",
    min_gain: float = 0.05,
    patience: int = 2,
) -> tuple[Trial | None, list[Trial], LimitedBy]:
    """Largest batch size for which ``trial(b).ok`` (grow by doubling, then bisect).

    Returns ``(best trial or None when even 1 fails, all trials, what limited it)``. With
    ``objective="throughput"`` growth also stops when ``patience`` doublings in a row do not raise
    ``audio_seconds_per_second`` by ``min_gain`` over the best so far (which is kept).
    """
    trials: list[Trial] = []

    def run(b: int) -> Trial:
        r = trial(b)
        trials.append(r)
        return r

    b = int(min(max(1, start), cap))
    r = run(b)
    fail: int | None = None
    limited: LimitedBy | None = None
    if not r.ok:
        fail = b
        while not r.ok and b > 1:  # the start was too large: halve until one fits
            b = max(1, b // 2)
            r = run(b)
            if not r.ok:
                fail = b
        if not r.ok:
            return None, trials, LimitedBy.DOES_NOT_FIT
        best, limited = r, LimitedBy.MEMORY
    else:
        best, misses = r, 0
        while limited is None:
            if b >= cap:
                limited = LimitedBy.THROUGHPUT if misses else LimitedBy.MAX_BATCH_SIZE
                break
            nb = min(cap, 2 * b)
            r = run(nb)
            if not r.ok:
                fail, limited = nb, LimitedBy.THROUGHPUT if misses else LimitedBy.MEMORY
            elif objective == "throughput" and _no_gain(r, best, min_gain):
                # one more doubling before giving up: a single timing can be noisy on a busy machine
                misses += 1
                b = nb
                if misses >= patience:
                    limited = LimitedBy.THROUGHPUT
            else:
                best, b, misses = r, nb, 0
    if limited == LimitedBy.MEMORY and fail is not None:
        lo, hi = best.batch_size, fail
        while hi - lo > 1 and hi - lo > tolerance * lo:
            mid = (lo + hi) // 2
            r = run(mid)
            if r.ok:
                best, lo = r, mid
            else:
                hi = mid
    return best, trials, limited


def _no_gain(new: Trial, old: Trial, min_gain: float) -> bool:
    if new.audio_seconds_per_second is None or old.audio_seconds_per_second is None:
        return False
    return new.audio_seconds_per_second < old.audio_seconds_per_second * (1.0 + min_gain)


# ---------------------------------------------------------------------------------------------- budget


def memory_budget(settings: TuneConfig, device: torch.device) -> tuple[int | None, str, int | None]:
    """(budget bytes, where it comes from, device total bytes): fraction x total - margin."""
    mem = device_memory(device)
    total = mem["total_bytes"]
    if total is None:
        return None, "unknown device memory: only OOMs bind", None
    t = settings
    budget = int(total * t.memory_fraction - t.margin_gib * GIB)
    if budget <= 0:
        raise ConfigError(
            f"tune.memory_fraction={t.memory_fraction} x {format_bytes(total)} - tune.margin_gib={t.margin_gib} "
            "leaves no memory; raise tune.memory_fraction or lower tune.margin_gib"
        )
    what = f"{t.memory_fraction:g} x {format_bytes(total)} {mem['name']} - {t.margin_gib:g} GiB"
    return budget, what, total


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # host sync: timing needs the step finished


def _peaks(device: torch.device) -> tuple[int | None, int | None]:
    """(peak allocated, peak reserved) on CUDA; (peak RSS, peak RSS) on the CPU."""
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device)), int(torch.cuda.max_memory_reserved(device))
    peak = memory_stats(device)["peak_rss"]
    return peak, peak


def run_trial(
    step_fn: StepFn,
    batch: Any,
    device: torch.device,
    steps: int,
    budget: int | None,
    clear_grads: Callable[[], None] = lambda: None,
) -> Trial:
    """One warm-up and ``steps`` timed training steps on ``batch``; fails on OOM or over budget."""
    b = batch.size
    reset_peak(device)
    oom = False
    elapsed = 0.0
    try:
        for i in range(1 + steps):
            if i == 1:
                _sync(device)
                t0 = time.perf_counter()
            maybe_inject_oom(batch)
            step_fn(batch)
        _sync(device)
        elapsed = time.perf_counter() - t0
    except Exception as exc:
        if not is_oom_error(exc):
            raise
        oom = True
        del exc
    if oom:  # outside the except block, so the traceback (and the tensors it holds) is gone
        clear_grads()
        if device.type == "cuda":
            gc.collect()  # reference cycles may still hold device tensors of the failed step
        return Trial(b, False, TrialStatus.OOM, batch.padded_frames)
    peak, reserved = _peaks(device)
    step_s = elapsed / steps
    aps = batch.audio_seconds / step_s if step_s > 0 else None
    over = budget is not None and reserved is not None and reserved > budget
    status = TrialStatus.OVER_BUDGET if over else TrialStatus.FITS
    return Trial(b, not over, status, batch.padded_frames, peak, reserved, step_s, aps)


# ---------------------------------------------------------------------------------------------- tune


def plan_mode(data: DataConfig) -> PlanMode:
    """How the training set of ``data`` is batched."""
    if data.crop_frames:
        return PlanMode.CROP
    return PlanMode.BUCKETED if data.bucketing else PlanMode.FIXED


def scaled_start(batch_size: int, frames: int, new_frames: int, quadratic_frames: float | None = None) -> int:
    """The previous bucket's batch size scaled to a bucket of ``new_frames`` (equal item cost)."""
    cost = float(item_cost(frames, quadratic_frames)) * batch_size
    return max(1, int(cost // float(item_cost(new_frames, quadratic_frames))))


def choose_grad_accum(
    buckets: list[BucketResult], target_seconds: float | None, current: int = 1
) -> tuple[int, float, float]:
    """(grad_accum, mean batch seconds, seconds per optimizer step) for ``target_seconds`` of audio
    per optimizer step. The mean is over the batches of an epoch: each bucket contributes
    ``ceil(items / batch_size)`` batches holding its audio."""
    n_batches = sum(math.ceil(b.items / b.batch_size) for b in buckets if b.batch_size > 0 and b.items > 0)
    seconds = sum(b.audio_seconds for b in buckets if b.items > 0)
    mean = seconds / n_batches if n_batches else 0.0
    if target_seconds is None or mean <= 0:
        return current, mean, mean * current
    accum = max(1, math.ceil(target_seconds / mean - 1e-9))
    return accum, mean, mean * accum


def tune(
    step_fn: StepFn,
    *,
    frames: np.ndarray,
    bounds: list[int],
    read: ReadBatch,
    device: torch.device,
    settings: TuneConfig,
    data: DataConfig,
    grad_accum: int = 1,
    params: list[torch.nn.Parameter] | None = None,
    estimate: dict[str, Any] | None = None,
    memory_fraction: float | None = None,
    progress: Progress | None = None,
) -> TuneReport:
    """Tune per-bucket batch sizes (see the module docstring).

    ``step_fn(batch)``: one training step (no OOM guard); ``frames``: mel frames of every training
    utterance; ``bounds``: bucket upper bounds, shortest first (bucketed mode; else ignored);
    ``read``: makes a Batch of chosen items; ``settings``: the ``tune`` section; ``data``: crop,
    padding, bucketing and audio settings; ``grad_accum``: the run's, kept without a target;
    ``params``: the trained parameters (their gradients are dropped after an OOM); ``estimate``:
    :func:`speechtrain.memory.estimate.estimate` of the run, printed beside the measured peaks;
    ``memory_fraction``: the run's ``train.memory_fraction``, restored after a CUDA tune capped it.
    ``progress``: where each bucket's line (bucket k of n, the time left) goes (default: a new ``tune`` one).
    """
    t0 = time.perf_counter()
    d, t = data, settings
    frames = np.asarray(frames, dtype=np.int64)
    if frames.size == 0:
        raise DataError(f"the training set of {d.manifest} is empty: nothing to tune on")
    mode = plan_mode(d)
    if mode == PlanMode.CROP:
        bounds = [int(d.crop_frames)]  # type: ignore[arg-type]
    elif mode == PlanMode.FIXED:
        bounds = [int(frames.max())]
    budget, budget_source, total = memory_budget(t, device)
    injected = injected_oom_frames()
    if injected is not None:
        budget_source += f"; injected OOM above {injected} padded frames (SPEECHTRAIN_INJECT_OOM_FRAMES)"
    cap_record = None
    if device.type == "cuda" and budget is not None and total:
        cap_record = set_memory_fraction(min(1.0, budget / total), device)  # real OOMs at the budget

    def clear_grads() -> None:
        for p in params or []:
            p.grad = None

    loads = [load_average()]
    lower = -1
    members_of = []
    for ub in bounds:
        idx = np.flatnonzero((frames > lower) & (frames <= ub)) if mode == PlanMode.BUCKETED else np.arange(frames.size)
        members_of.append(idx[np.argsort(-frames[idx], kind="stable")])
        lower = ub
    results: list[BucketResult] = []
    notes: list[str] = []
    prev: tuple[int, int] | None = None  # (batch size, padded length) of the previous bucket
    progress = progress or Progress("tune")
    try:
        for k in reversed(range(len(bounds))):  # longest bucket first
            members = members_of[k]
            progress.round(len(bounds) - k, len(bounds), f"bucket {k} (<= {bounds[k]} frames, {members.size} items)")
            if members.size == 0:
                notes.append(f"bucket {k} (<= {bounds[k]} frames) is empty: sized from its neighbour")
                results.append(
                    BucketResult(
                        bucket=k,
                        upper_frames=bounds[k],
                        max_item_frames=0,
                        padded_frames=0,
                        items=0,
                        audio_seconds=0.0,
                        batch_size=0,
                        batch_frames=0,
                        limited_by=LimitedBy.EMPTY,
                    )
                )
                continue
            longest = int(d.crop_frames or frames[members[0]])
            padded = round_up(longest, d.pad_multiple)
            distinct = members[: min(members.size, 16)]  # the bucket's longest real items, repeated

            def trial(b: int, k: int = k, distinct: np.ndarray = distinct, padded: int = padded) -> Trial:
                batch = read(tuple(int(distinct[i % distinct.size]) for i in range(b)), mode == PlanMode.CROP, k)
                r = run_trial(step_fn, batch, device, t.steps_per_trial, budget, clear_grads)
                log.info(
                    f"  bucket {k}: {b} x {padded} frames: {r.reason}"
                    + (f", peak {format_bytes(r.peak_bytes)}" if r.peak_bytes is not None else "")
                    + (f", {r.audio_seconds_per_second:.1f} audio s/s" if r.audio_seconds_per_second else "")
                )
                return r

            start = 1 if prev is None else scaled_start(prev[0], prev[1], padded, d.quadratic_frames)
            cap = min(t.max_batch_size, int(members.size))  # no training batch of the bucket holds more items
            best, trials, limited = search_batch_size(trial, start, cap, t.tolerance, t.objective, t.min_gain)
            if limited == LimitedBy.MAX_BATCH_SIZE and cap < t.max_batch_size:
                limited = LimitedBy.BUCKET_SIZE
            if best is None:
                notes.append(
                    f"bucket {k}: one utterance of {padded} frames does not fit in the budget; lower "
                    "data.max_duration or data.crop_frames, or switch on accel.activation_checkpointing"
                )
                best = Trial(1, False, TrialStatus.DOES_NOT_FIT, padded)
            seconds = float(np.sum(frames[members])) * d.hop_length / d.sample_rate
            if mode == PlanMode.CROP:
                cropped = np.minimum(frames[members], int(d.crop_frames or 0))
                seconds = float(cropped.sum()) * d.hop_length / d.sample_rate
            results.append(
                BucketResult(
                    bucket=k,
                    upper_frames=int(bounds[k]),
                    max_item_frames=longest,
                    padded_frames=padded,
                    items=int(members.size),
                    audio_seconds=seconds,
                    batch_size=best.batch_size,
                    batch_frames=best.batch_size * padded,
                    peak_memory_bytes=best.peak_bytes,
                    peak_reserved_bytes=best.peak_reserved_bytes,
                    step_seconds=best.step_seconds,
                    audio_seconds_per_second=best.audio_seconds_per_second,
                    limited_by=limited,
                    estimate_bytes=None if estimate is None else predict_bytes(estimate, best.batch_size, padded),
                    trials=trials,
                )
            )
            prev = (best.batch_size, padded)
            loads.append(load_average())
    finally:
        if cap_record is not None and cap_record.applied:
            set_memory_fraction(memory_fraction or 1.0, device)
    results.sort(key=lambda r: r.bucket)
    _fill_empty(results)
    warning = load_note(loads, t.objective)
    if warning:
        log.warning(warning)
        notes.append(warning)

    accum, mean_s, eff_s = choose_grad_accum(results, t.target_batch_seconds, grad_accum)
    return TuneReport(
        buckets=results,
        seconds=time.perf_counter() - t0,
        mode=mode,
        objective=t.objective,
        device=str(device),
        budget_bytes=budget,
        budget_source=budget_source,
        injected_oom_frames=injected,
        grad_accum=accum,
        mean_batch_seconds=mean_s,
        effective_batch_seconds=eff_s,
        target_batch_seconds=t.target_batch_seconds,
        estimate=estimate,
        tuned=_tuned_settings(results, mode, d, accum),
        peak_kind=(
            "CUDA max allocated (reserved checked against the budget)"
            if device.type == "cuda"
            else "process peak RSS (includes Python and torch themselves)"
        ),
        notes=notes,
    )


def load_note(loads: list[float | None], objective: str) -> str | None:
    """A warning when other processes loaded the host while throughput trials were timed (the bench's rule,
    :func:`speechtrain.device.foreign_load`): a loaded host makes larger batches look no faster, so the
    throughput objective stops early (it once wrote batch 1 under load). None when quiet, or for the memory
    objective (it reads peaks, not times)."""
    if objective != "throughput":
        return None
    threads, cores = torch.get_num_threads(), usable_cores()
    extra = [(e, load) for load in loads if (e := foreign_load(load, threads, cores)) is not None]
    if not extra:
        return None
    most, load = max(extra)
    return (
        f"other processes loaded the machine while the throughput trials were timed (1-minute load average up to "
        f"{load:.1f} on {cores} cores, {most:.1f} beyond the tuner's {threads} threads): the batch sizes chosen for "
        "speed are unreliable (a loaded host makes larger batches look no faster); re-run `speechtrain tune` on a "
        "quiet machine, or use tune.objective=memory"
    )


def merge_ranks(reports: list[TuneReport], data: DataConfig, grad_accum: int = 1) -> TuneReport:
    """One report from the reports of ranks that each tuned alone (``speechtrain tune`` under torchrun):
    a batch must fit and run on every rank, so each bucket takes the rank whose batch was smallest
    (its trials and peaks). ``grad_accum`` (the run's) is chosen again for the target audio per
    optimizer step over all ranks: ``len(reports)`` batches count towards it."""
    first = reports[0]
    size = len(reports)
    buckets = [min(rows, key=lambda b: b.batch_size) for rows in zip(*(r.buckets for r in reports))]
    target = first.target_batch_seconds
    accum, mean_s, eff_s = choose_grad_accum(buckets, target / size if target else None, grad_accum)
    sizes = [[b.batch_size for b in r.buckets] for r in reports]
    note = f"tuned on {size} ranks, each alone; per bucket the smallest batch of any rank (sizes by rank: {sizes})"
    budgets = [r.budget_bytes for r in reports if r.budget_bytes is not None]
    return replace(
        first,
        buckets=buckets,
        seconds=max(r.seconds for r in reports),
        budget_bytes=min(budgets) if budgets else None,
        grad_accum=accum,
        mean_batch_seconds=mean_s,
        effective_batch_seconds=eff_s * size,
        tuned=_tuned_settings(buckets, first.mode, data, accum),
        notes=[*first.notes, note],
    )


def _tuned_settings(results: list[BucketResult], mode: PlanMode, d: DataConfig, accum: int) -> TunedSettings:
    if mode != PlanMode.BUCKETED:
        return TunedSettings(grad_accum=accum, batch_size=results[0].batch_size)
    # every item must stay inside a bucket (an item over data.max_frames would get a batch of its own)
    costs = [r.batch_size * item_cost(round_up(r.upper_frames, d.pad_multiple), d.quadratic_frames) for r in results]
    return TunedSettings(
        grad_accum=accum,
        bucket_boundaries=[r.upper_frames for r in results],
        bucket_batch_sizes=[r.batch_size for r in results],
        max_frames=int(math.ceil(max(costs))),
    )


def _fill_empty(results: list[BucketResult]) -> None:
    """Empty buckets take the batch size of the nearest longer bucket that has items (safe)."""
    for i, r in enumerate(results):
        if r.limited_by != LimitedBy.EMPTY:
            continue
        longer = [x for x in results[i + 1 :] if x.limited_by != LimitedBy.EMPTY]
        shorter = [x for x in results[:i] if x.limited_by != LimitedBy.EMPTY]
        r.batch_size = longer[0].batch_size if longer else (shorter[-1].batch_size if shorter else 1)
