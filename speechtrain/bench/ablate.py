"""The ablation ladder: the baseline, each change alone on top of it, then everything on.

Rows, all on the same model, data and device, measured in one invocation:

1. ``baseline``: the plain PyTorch loop (:mod:`speechtrain.bench.baseline`) with the model's standard
   attention (``scaled_dot_product_attention``, the families' default): the reference of every ratio.
   ``fair_baseline``: the loop a competent user writes (bf16 autocast where the device has fast bf16,
   SDPA, fused AdamW, random batches of the recipe's size): on a GPU the headline is against it.
   ``naive_attention``: the same loop with the explicit softmax(QK^T)V path, listed for reference only.
   ``lightning``: the same Task in a LightningModule (:mod:`speechtrain.bench.lightning_row`).
2. ``speechtrain, all off``: our Trainer and loader with every change switched off (fp32,
   fixed-count random batches, no workers, plain AdamW kernel, glibc's malloc). Its ratio to the
   baseline is the engine's own overhead (OOM guard, numerics guard), so the rungs below are not
   flattered by it.
3. one row per change on top of (2): bucketing, loader settings, then one per acceleration that
   declares a rung in its module (:class:`speechtrain.accel.catalog.Rung`), in the table's order: TF32
   and cuDNN autotune (CUDA), the CPU allocator, precision, channels-last, activation checkpointing,
   fused optimizer, compile; then tuned per-bucket batch sizes (from ``speechtrain tune``).
4. ``memory_saving``: bf16 + activation checkpointing at the baseline's batches (the memory goal's row).
5. ``all``: every setting the hardware recommendation switches on, plus bucketing and the tuned
   batch sizes; then ``all`` eager (no compile), with ``torch.compile`` and with compile's CUDA graphs
   (``accel.compile_mode=reduce-overhead``), where they differ from ``all``.

The rows run ``repeat`` passes, interleaved (:func:`run_ladder`), each in a fresh process that may be
limited in time (``row_timeout``: the row is marked timed out and the next one runs); after every
measurement the caller gets the ladder so far (``on_result``), so a report written then survives a kill;
every speed-up is the ratio of a
row's median audio-seconds/s to the baseline's, with the range of the per-pass ratios and a
:func:`verdict`. Whether a change took effect comes from the AccelRecords the Trainer wrote
(``applied``), never from the switch alone. The recipe (:mod:`speechtrain.recipes.bench`) reads the
Config and builds one :class:`~speechtrain.bench.measure.RunSpec` per row; this module takes the data
section and the specs.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from speechtrain.bench.lightning_row import INSTALL_HINT, lightning_available
from speechtrain.bench.measure import (
    Execute,
    RowNotApplicable,
    RowTimedOut,
    RunFailed,
    RunResult,
    RunSpec,
    run_spec,
)
from speechtrain.progress import Progress, clock

if TYPE_CHECKING:
    from speechtrain.config import DataConfig

#: rows of the ladder that are not an acceleration: before the accelerations' rungs, and after them
LEADING_RUNGS = ("baseline", "fair_baseline", "naive_attention", "lightning", "engine", "bucketing", "loader")
TRAILING_RUNGS = ("memory_saving", "tuned_batch", "all", "all_eager", "all_compile", "all_graphs")
#: the rows that are "all" with compile decided one way (``all`` follows the recommendation)
ALL_VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "all_eager": ("all, eager (no torch.compile)", {"accel.compile": False}),
    "all_compile": ("all + torch.compile", {"accel.compile": True, "accel.compile_mode": "default"}),
    "all_graphs": (
        "all + torch.compile with CUDA graphs (reduce-overhead)",
        {"accel.compile": True, "accel.compile_mode": "reduce-overhead"},
    ),
}


def _acceleration_rungs(device_type: str = "cpu", recommended: dict[str, Any] | None = None) -> list[tuple[Any, Any]]:
    """(acceleration, its rung) for every acceleration of the table that has a ladder row, in table order."""
    from speechtrain.accel.catalog import accelerations

    out = []
    for acc in accelerations():
        rung = acc.rung_for(device_type, recommended or {})
        if rung is not None:
            out.append((acc, rung))
    return out


#: rung keys in ladder order (``--skip`` takes these); the accelerations' rows come from their modules
RUNGS = (*LEADING_RUNGS, *(rung.key for _, rung in _acceleration_rungs()), *TRAILING_RUNGS)


@dataclass
class Variant:
    """One row of the ladder: overrides on top of the all-off base (or the recommendation)."""

    key: str
    label: str
    overrides: dict[str, Any] = field(default_factory=dict)
    kind: str = "engine"
    records: tuple[str, ...] = ()  # AccelRecord names that say whether the change took effect
    skip_reason: str | None = None
    # whether one of those records (as written in the run, a dict) counts as taking effect; None: its "applied"
    took_effect: Callable[[Mapping[str, Any]], bool] | None = field(default=None, repr=False, compare=False)


#: set in every row: one micro-batch per step (steps/s is per micro-batch), no progress bar or event files
COMMON = {"train.grad_accum": 1, "train.progress": False, "train.tensorboard": False}

#: the rung the ladder's quality column is judged against: speechtrain's Trainer with every change off (fp32,
#: random batches): the plain loops above it train the same maths outside the Trainer
QUALITY_REFERENCE = "engine"
#: the rung that is the autopilot: what the recommendation switches on, plus bucketing and tuned sizes
AUTOPILOT = "all"


def all_off(device_type: str) -> dict[str, Any]:
    """Overrides that switch every change off (what the plain baseline does, on our engine): the data
    settings below and each acceleration's own "off" value (e.g. SDPA stays on: the model's standard
    attention, as in the baseline; the optimizer kernel is torch's own default for a plain AdamW)."""
    from speechtrain.accel.catalog import accelerations

    return {
        **COMMON,
        "data.bucketing": False,
        # bucketed rows get the baseline's budget (batch_size x the longest utterance): bucketing then
        # changes how batches are composed, not how large they are; the tuned rung changes the size
        "data.max_frames": None,
        "data.bucket_batch_sizes": None,
        "data.bucket_boundaries": None,
        "data.num_workers": 0,
        "data.pin_memory": False,
        "data.prefetch_factor": None,
        "data.persistent_workers": False,
        **{acc.key: acc.off(device_type) for acc in accelerations() if acc.off is not None},
    }


def row_overrides(variant: Variant, device_type: str) -> dict[str, Any]:
    """Every override a row sets on the config: all-off and the row's own (``config``: the config as it is)."""
    base = COMMON if variant.key == "config" else all_off(device_type)
    return {**base, **variant.overrides}


def recommendation(probe_result: Any) -> dict[str, Any]:
    """The hardware recommendation as ``{dotted key: value}`` (empty without the probe)."""
    if probe_result is None:
        return {}
    from speechtrain.accel.probe import recommend

    return {r.key: r.value for r in recommend(probe_result) if not r.key.startswith("note.")}


def _loader_overrides(rec: dict[str, Any], device_type: str) -> tuple[dict[str, Any], str]:
    workers = int(rec.get("data.num_workers", 0) or 0)
    note = ""
    if workers == 0:
        # the recommendation keeps every core for training here; measure one worker anyway
        workers = 1
        note = " (recommendation: 0 workers on this machine; measured with 1)"
    return {
        "data.num_workers": workers,
        "data.pin_memory": device_type == "cuda",
        "data.prefetch_factor": 2,
        "data.persistent_workers": True,
    }, note


TUNED_KEYS = ("bucket_boundaries", "bucket_batch_sizes", "max_frames", "batch_size")


def tuned_overrides(tuned_data: DataConfig, data: DataConfig) -> dict[str, Any]:
    """The data keys the tuner changed (``tuned_data`` is ``TuneReport.config.data``), as overrides."""
    out = {f"data.{k}": getattr(tuned_data, k) for k in TUNED_KEYS if getattr(tuned_data, k) != getattr(data, k)}
    if tuned_data.bucket_batch_sizes:
        out["data.bucketing"] = True
    return out


def config_tuned(data: DataConfig) -> dict[str, Any] | None:
    """The per-bucket sizes already in the data section, as overrides (None when there are none)."""
    if not data.bucket_batch_sizes:
        return None
    return {
        "data.bucketing": True,
        "data.bucket_batch_sizes": data.bucket_batch_sizes,
        "data.bucket_boundaries": data.bucket_boundaries,
        "data.max_frames": data.max_frames,
    }


def tuned_batch_size(tuned: dict[str, Any] | None) -> float | None:
    """Mean items per batch the tuner chose (per-bucket sizes averaged), or None."""
    if not tuned:
        return None
    sizes = tuned.get("data.bucket_batch_sizes")
    if sizes:
        return sum(sizes) / len(sizes)
    size = tuned.get("data.batch_size")
    return float(size) if size else None


def plan_ladder(
    data: DataConfig,
    device_type: str,
    probe_result: Any = None,
    skip: Sequence[str] = (),
    tuned: dict[str, Any] | None = None,
) -> list[Variant]:
    """The rows for ``cfg`` on this device; skipped or inapplicable rows carry their reason.

    ``tuned``: the tuner's overrides (:func:`tuned_overrides`); default: the per-bucket sizes
    already in the data section ``data``, if any.
    """
    unknown = [s for s in skip if s not in RUNGS]
    if unknown:
        from speechtrain.errors import UserError

        raise UserError(f"--skip {', '.join(unknown)}: unknown rung; valid: {', '.join(RUNGS)}")
    rec = recommendation(probe_result)
    tuned = tuned if tuned is not None else config_tuned(data)
    tuned_over = dict(tuned or {})
    loader_over, loader_note = _loader_overrides(rec, device_type)
    rows = [
        Variant("baseline", "baseline (plain PyTorch loop)", kind="baseline"),
        fair_variant(device_type),
        Variant("naive_attention", "naive (explicit attention)", {"accel.sdpa": False}, kind="baseline"),
        Variant("lightning", "Lightning (same model and loss, plain DataLoader)", kind="lightning"),
        Variant("engine", "speechtrain, all off"),
        Variant("bucketing", "+ bucketing", {"data.bucketing": True}, records=("bucketing",)),
        Variant("loader", "+ loader workers/pin/prefetch" + loader_note, loader_over, records=("loader",)),
    ]
    all_over = {k: v for k, v in rec.items() if k.startswith(("accel.", "optim.", "data."))}
    all_over.update({"data.bucketing": True})
    all_over.update(tuned_over)
    for acc, rung in _acceleration_rungs(device_type, rec):
        row = Variant(rung.key, rung.label, dict(rung.overrides), records=rung.records, took_effect=rung.took_effect)
        if not acc.runs_on(device_type):
            row.skip_reason = f"not applicable on {device_type}: {acc.device_note}"
        if rung.skip_keeps_off and rung.key in skip and acc.off is not None:
            all_over[acc.key] = acc.off(device_type)
        rows.append(row)
    rows.append(memory_variant(rec))
    rows.append(Variant("tuned_batch", "+ tuned batch sizes", tuned_over, records=("bucketing",)))
    rows.append(Variant("all", "all (recommended settings)", all_over, records=()))
    rows += all_variants(all_over, device_type)
    for row in rows:
        if row.key in skip:
            row.skip_reason = "skipped (--skip " + row.key + ")"
        elif row.key == "lightning" and not lightning_available():
            row.skip_reason = INSTALL_HINT
        elif row.key == "tuned_batch" and not tuned:
            row.skip_reason = "no tuned batch sizes in the config: run `speechtrain tune` first or pass --tune"
    return rows


def fair_variant(device_type: str) -> Variant:
    """The fair baseline's row: the plain loop as a competent user writes it on this device."""
    from speechtrain.bench.baseline import fair_precision

    precision = fair_precision(device_type)
    what = "bf16 autocast, SDPA, fused AdamW" if precision == "bf16" else "fp32: no fast bf16 here; SDPA, fused AdamW"
    return Variant("fair_baseline", f"fair baseline ({what})", kind="fair")


def memory_variant(rec: Mapping[str, Any]) -> Variant:
    """bf16 (or the recommendation's fp16) + activation checkpointing at the baseline's batches: the row the
    memory goal reads (peak memory against the plain loop's at the same batch)."""
    precision = rec.get("accel.precision")
    precision = precision if precision in ("bf16", "fp16") else "bf16"
    overrides = {"accel.precision": precision, "accel.activation_checkpointing": True}
    label = f"{precision} + activation checkpointing (memory)"
    return Variant("memory_saving", label, overrides, records=("precision", "activation_checkpointing"))


def all_variants(all_over: Mapping[str, Any], device_type: str) -> list[Variant]:
    """ "all" with compile off, on, and with CUDA graphs; a row whose settings are those of "all" itself is
    listed with that reason instead of measured twice."""
    from speechtrain.config import AccelConfig

    out = []
    for key, (label, extra) in ALL_VARIANTS.items():
        row = Variant(key, label, {**all_over, **extra}, records=())
        same = all(all_over.get(k, False if k == "accel.compile" else "default") == v for k, v in extra.items())
        if same:
            same_as = ", ".join(f"{k}={v}" for k, v in extra.items())
            row.skip_reason = f"the same settings as 'all' here ({same_as})"
        elif key == "all_graphs" and device_type != "cuda":
            row.skip_reason = f"not applicable on {device_type}: CUDA graphs need a CUDA device"
        elif any(k.startswith("accel.") and k.split(".", 1)[1] not in AccelConfig.model_fields for k in extra):
            row.skip_reason = "not available: this version's config has no " + ", ".join(
                k for k in extra if k.startswith("accel.") and k.split(".", 1)[1] not in AccelConfig.model_fields
            )
        out.append(row)
    return out


def set_dotted(raw: dict[str, Any], key: str, value: Any) -> None:
    """Set ``a.b.c`` in a nested dict."""
    node = raw
    parts = key.split(".")
    for p in parts[:-1]:
        node = node.setdefault(p, {})
    node[parts[-1]] = value


def applied_text(result: RunResult | None, variant: Variant) -> str:
    """The 'applied?' cell: yes / no with the reason from the records."""
    if variant.skip_reason:
        return variant.skip_reason
    if result is None:
        return "-"
    if variant.key == "baseline":
        return "reference"
    if variant.key == "fair_baseline":
        rec = result.applied.get("fair_loop") or {}
        return f"not speechtrain: {rec.get('detail', 'the fair loop')}"
    if variant.key == "engine":
        return "everything off"
    if variant.key == "lightning":
        rec = result.applied.get("lightning") or {}
        return f"not speechtrain: {rec.get('detail', 'lightning')}"
    if variant.key == "naive_attention":
        n = (result.applied.get("explicit_attention") or {}).get("info", {}).get("modules", 0)
        return f"not the reference: {n} attention modules on the explicit softmax path"
    if variant.key in ("all", "config", *ALL_VARIANTS):
        on = sorted(name for name, rec in result.applied.items() if isinstance(rec, dict) and rec.get("applied"))
        return "on: " + (", ".join(on) if on else "nothing")
    found = [(n, r) for n, r in result.applied.items() if any(n == k or n.startswith(k + ":") for k in variant.records)]
    if not found:
        return "no record written"
    if variant.key == "tuned_batch":
        sizes = variant.overrides.get("data.bucket_batch_sizes")
        if sizes:
            return f"yes: {len(sizes)} bucket sizes, {min(sizes)}-{max(sizes)} items"
        return f"yes: batch_size={variant.overrides.get('data.batch_size')}"
    if variant.took_effect is not None:
        found = [(n, {**r, "applied": variant.took_effect(r)}) for n, r in found]
    if all(r.get("applied") for _, r in found):
        return "yes"
    reasons = "; ".join(str(r.get("detail", "")) for _, r in found if not r.get("applied"))
    return f"no: {reasons}"


@dataclass(frozen=True)
class Spread:
    """Median and range of repeated measurements (rates, or ratios of paired passes)."""

    median: float
    low: float
    high: float
    count: int

    @property
    def width(self) -> float:
        """(high - low) / median: the spread as a fraction of the median (0 for one value)."""
        return (self.high - self.low) / self.median if self.median > 0 else float("inf")

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread | None:
        """The spread of ``values`` (None when there are none)."""
        vals = sorted(values)
        if not vals:
            return None
        return cls(statistics.median(vals), vals[0], vals[-1], len(vals))


class RowStatus(str, Enum):
    """Where a ladder row stands."""

    MEASURED = "measured"
    SKIPPED = "skipped"
    NOT_APPLICABLE = "not applicable"
    FAILED = "failed"
    TIMED_OUT = "timed out"
    PENDING = "not measured yet"


@dataclass
class LadderRow:
    """A row of the ladder: the variant, its median pass (None when skipped or failed) and the audio-s/s of
    every pass (``rates[r]``: pass ``r``, None where that pass did not measure it). A row that was not
    measured says why: ``status``, ``error`` (one line), ``error_lines`` (the first lines of the error its
    process printed) and ``log`` (the file with that process's whole output)."""

    variant: Variant
    result: RunResult | None
    error: str | None = None
    rates: list[float | None] = field(default_factory=list)
    status: RowStatus = RowStatus.MEASURED
    error_lines: list[str] = field(default_factory=list)
    log: str | None = None


#: called after every measurement of :func:`run_ladder` with the ladder so far and the index of that row
OnResult = Callable[[list[LadderRow], int], None]


@dataclass
class _LadderState:
    """What :func:`run_ladder` has measured so far."""

    variants: Sequence[Variant]
    runs: dict[int, list[RunResult | None]]
    errors: dict[int, RunFailed] = field(default_factory=dict)
    logs: dict[int, str] = field(default_factory=dict)

    def rows(self) -> list[LadderRow]:
        """The ladder as it stands: measured rows with their median pass, the others with their reason."""
        rows = []
        for i, variant in enumerate(self.variants):
            if i not in self.runs:
                rows.append(LadderRow(variant, None, variant.skip_reason, status=RowStatus.SKIPPED))
                continue
            err = self.errors.get(i)
            rates = [None if res is None else res.audio_seconds_per_second for res in self.runs[i]]
            row = _median_row([LadderRow(variant, res) for res in self.runs[i]] or [LadderRow(variant, None)])
            row.rates, row.log = rates, self.logs.get(i)
            if row.result is None:
                row.status, row.error = _failure(err)
                row.error_lines = list(err.lines) if err is not None else []
                row.log = err.log if err is not None and err.log else row.log
            rows.append(row)
        return rows


def _failure(err: RunFailed | None) -> tuple[RowStatus, str]:
    if err is None:
        return RowStatus.PENDING, "not measured yet (the ladder stopped before this row)"
    if isinstance(err, RowNotApplicable):
        return RowStatus.NOT_APPLICABLE, str(err)
    if isinstance(err, RowTimedOut):
        return RowStatus.TIMED_OUT, str(err)
    return RowStatus.FAILED, f"failed: {err}"


def run_ladder(
    variants: Sequence[Variant],
    specs: Sequence[RunSpec | None],
    *,
    repeat: int = 1,
    isolate: bool = True,
    time_limit: float | Callable[[int], float] | None = None,
    on_row: Callable[[int, Variant, int], None] | None = None,
    execute: Execute | None = None,
    row_timeout: float | None = None,
    log_dir: Path | None = None,
    on_result: OnResult | None = None,
    profile: int = 0,
    progress: Progress | None = None,
) -> list[LadderRow]:
    """Measure every row that has a spec, ``repeat`` passes, interleaved round-robin.

    Pass ``r`` runs the rows in ladder order rotated by ``r * rows / repeat``, so a load that drifts
    during the ladder falls on every row alike and no row always runs first or last after another.
    Each row keeps its median pass by audio-s/s and the rate of every pass (the spread). A row that
    fails, times out or does not apply in one pass is not measured again. ``time_limit``: seconds of timing
    per measurement, or a function of the row index (a demo that shares out what is left of its
    budget). ``row_timeout``: seconds a row's fresh process may take in all (start, warm-up, compilation);
    past it the row is killed and marked timed out. ``log_dir``: each row's output goes to
    ``log_dir/<key>.log`` (a failed row's report names it). ``on_row(i, variant, pass)`` is called before each
    measurement, ``on_result(rows so far, i)`` after it. ``profile`` > 0: after the passes, each measured row
    runs once more under the profiler (not ranked) and keeps its :func:`~speechtrain.bench.measure.profile_view`.
    ``execute`` measures a row in this process (needed with ``isolate=False``). ``progress``: a line as each
    measurement starts (``row k of n (pass p of P): NAME``, with the time left at the mean of the measurements
    so far) and one with its figures as it ends.
    """
    repeat = max(1, repeat)
    measured = [i for i, spec in enumerate(specs) if spec is not None and not variants[i].skip_reason]
    state = _LadderState(variants, {i: [] for i in measured})
    say = _LadderLines(progress, repeat)
    for r in range(repeat):
        shift = (r * len(measured)) // repeat
        todo = [i for i in measured[shift:] + measured[:shift] if i not in state.errors]
        for i in measured[shift:] + measured[:shift]:
            if i in state.errors:
                state.runs[i].append(None)
                continue
            later = sum(1 for j in todo[todo.index(i) + 1 :] if j not in state.errors)
            later += (repeat - r - 1) * (len(measured) - len(state.errors))
            say.start(todo.index(i) + 1, len(todo), r, variants[i], later)
            if on_row is not None:
                on_row(i, variants[i], r)
            limit = time_limit(i) if callable(time_limit) else time_limit
            spec = specs[i]
            assert spec is not None
            if limit is not None:
                spec = replace(spec, time_limit=limit)
            log = log_dir / f"{variants[i].key}.log" if log_dir is not None else None
            if log is not None:
                state.logs[i] = str(log)
            try:
                state.runs[i].append(run_spec(spec, isolate=isolate, execute=execute, timeout=row_timeout, log=log))
            except RunFailed as exc:
                state.errors[i] = exc
                state.runs[i].append(None)
            say.end(state.runs[i][-1], state.errors.get(i))
            if on_result is not None:
                on_result(state.rows(), i)
    rows = state.rows()
    if profile > 0:
        _profile_rows(rows, specs, profile, isolate, execute, row_timeout, log_dir, on_result, on_row, progress)
    return rows


@dataclass
class _LadderLines:
    """The ladder's progress lines: where it stands as a measurement starts, with the time left (the mean
    measurement so far times those to go, this one included), and the measurement's figures as it ends."""

    progress: Progress | None
    repeat: int
    started: int = 0
    where: str = ""
    since: float = 0.0

    def start(self, k: int, n: int, r: int, variant: Variant, later: int) -> None:
        if self.progress is None:
            return
        self.started += 1
        self.where = f"row {k} of {n}" + (f" (pass {r + 1} of {self.repeat})" if self.repeat > 1 else "")
        self.since = self.progress.now()
        self.progress.round(self.started, self.started + later, f"{self.where}: {variant.label}", numbered=False)

    def end(self, result: RunResult | None, error: RunFailed | None) -> None:
        if self.progress is None:
            return
        took = clock(self.progress.now() - self.since)
        if result is not None:
            figures = f"{result.audio_seconds_per_second:.1f} audio-s/s, {result.steps_per_second:.2f} steps/s"
        else:
            figures = _failure(error)[1]
        self.progress.log.info(f"{self.progress.job}: {self.where} took {took}: {figures}")


def _profile_rows(
    rows: list[LadderRow],
    specs: Sequence[RunSpec | None],
    top: int,
    isolate: bool,
    execute: Execute | None,
    row_timeout: float | None,
    log_dir: Path | None,
    on_result: OnResult | None,
    on_row: Callable[[int, Variant, int], None] | None,
    progress: Progress | None = None,
) -> None:
    """One more, profiled run per measured row (its rates are not the row's: the profiler slows the step);
    the row's result keeps the run's ``profile_view`` (or the reason it has none in ``profile_view.error``)."""
    profiled = [i for i, row in enumerate(rows) if row.result is not None and specs[i] is not None]
    for i, row in enumerate(rows):
        spec = specs[i]
        if row.result is None or spec is None:
            continue
        if progress is not None:
            k = profiled.index(i) + 1
            progress.stage(f"profiled run {k} of {len(profiled)} (not ranked): {row.variant.label}")
        if on_row is not None:
            on_row(i, row.variant, -1)
        log = log_dir / f"{row.variant.key}.profile.log" if log_dir is not None else None
        quick = replace(spec, profile=top, min_seconds=0.0, steps=min(spec.steps, 10))
        try:
            view = run_spec(quick, isolate=isolate, execute=execute, timeout=row_timeout, log=log).profile_view
        except RunFailed as exc:
            view = {"error": str(exc), "log": exc.log}
        row.result.profile_view = view
        if on_result is not None:
            on_result(rows, i)


def _median_row(runs: list[LadderRow]) -> LadderRow:
    """The run with the median audio-s/s among the passes that measured the row (else the first)."""
    measured = sorted((r for r in runs if r is not None and r.result is not None), key=_rate)
    if not measured:
        return next(r for r in runs if r is not None)
    return measured[(len(measured) - 1) // 2]


def _rate(row: LadderRow) -> float:
    return row.result.audio_seconds_per_second if row.result is not None else 0.0


def paired_ratios(row: LadderRow, reference: LadderRow) -> list[float]:
    """``row``'s rate over the reference's in each pass where both were measured: the rows of one
    pass ran minutes apart at most, so these ratios carry less of the machine's drift than the rates."""
    return [a / b for a, b in zip(row.rates, reference.rates) if a is not None and b]


class Verdict(str, Enum):
    """What a speed-up ratio with its spread allows one to say."""

    REFERENCE = "reference"
    FASTER = "faster"
    SLOWER = "slower"
    INCONCLUSIVE = "inconclusive"
    UNREPEATED = "one pass"
    IMPLAUSIBLE = "exceeds its mechanism"


def verdict(ratio: Spread | None, max_spread: float) -> tuple[Verdict, str]:
    """Faster or slower only when every pass agrees (the range of the paired ratios stays on one side
    of 1.0x) and the range is no wider than ``max_spread`` of the median; else inconclusive."""
    if ratio is None or ratio.count < 2:
        return Verdict.UNREPEATED, "one pass: no spread to judge (use --repeat 3 or more)"
    if ratio.low <= 1.0 <= ratio.high:
        return Verdict.INCONCLUSIVE, f"passes range {ratio.low:.2f}-{ratio.high:.2f}x, across 1.0x"
    if ratio.width > max_spread:
        return Verdict.INCONCLUSIVE, f"passes range {ratio.low:.2f}-{ratio.high:.2f}x, wider than {max_spread:.0%}"
    kind = Verdict.FASTER if ratio.low > 1.0 else Verdict.SLOWER
    return kind, f"passes range {ratio.low:.2f}-{ratio.high:.2f}x"


# ---------------------------------------------------------------------------------------------
# noise guard: what a rung's mechanism can give at most


@dataclass(frozen=True)
class Bound:
    """The largest speed-up a rung's mechanism can give over the row it sits on (``base``), and why."""

    limit: float
    base: str
    reason: str


#: a rung's measured gain may pass its bound by this fraction before it is flagged (the bound is itself
#: read from one measured row)
BOUND_SLACK = 0.05


def mechanism_bound(variant: Variant, result: RunResult | None, base: RunResult | None) -> Bound | None:
    """What the rung ``variant`` can gain at most over ``base`` (speechtrain all off, or the baseline), from
    ``base``'s own measurements; None where the mechanism sets no bound the bench can read.

    - loader workers only hide the wait for data: at most ``1 / (1 - data-wait share of base)``;
    - bucketing only removes padding: at most ``(1 / (1 - padding share of base))**2`` (squared: attention's
      cost grows with the square of the padded length);
    - a change whose record says it did not take effect gains nothing: 1.0x.
    """
    if base is None or result is None:
        return None
    if variant.records and applied_text(result, variant).startswith("no:"):
        return Bound(1.0, base.name, "the change did not take effect (its record says so), so it cannot gain")
    if variant.key == "loader":
        wait = base.data_wait_fraction
        if wait >= 1.0:
            return None
        return Bound(
            1.0 / (1.0 - wait),
            base.name,
            f"loader workers can only hide the data wait, {wait:.1%} of {base.name}'s wall time",
        )
    if variant.key == "bucketing":
        pad = base.padding_fraction
        if pad >= 1.0:
            return None
        return Bound(
            (1.0 / (1.0 - pad)) ** 2,
            base.name,
            f"bucketing can only remove padding, {pad:.1%} of {base.name}'s frames (bound squared for attention)",
        )
    return None


def exceeds_bound(gain: Spread | None, bound: Bound | None, slack: float = BOUND_SLACK) -> bool:
    """True when the median of a rung's paired gains over its base is above what its mechanism allows."""
    return gain is not None and bound is not None and gain.median > bound.limit * (1.0 + slack)
