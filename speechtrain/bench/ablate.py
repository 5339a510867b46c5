"""The ablation ladder: the baseline, each change alone on top of it, then everything on.

Rows, all on the same model, data and device, measured in one invocation:

1. ``baseline``: the plain PyTorch loop (:mod:`speechtrain.bench.baseline`) with the model's standard
   attention (``scaled_dot_product_attention``, the families' default): the reference of every ratio.
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
4. ``all``: every setting the hardware recommendation switches on, plus bucketing and the tuned
   batch sizes.

The rows run ``repeat`` passes, interleaved (:func:`run_ladder`); every speed-up is the ratio of a
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
from typing import TYPE_CHECKING, Any

from speechtrain.bench.lightning_row import INSTALL_HINT, lightning_available
from speechtrain.bench.measure import Execute, RowNotApplicable, RunFailed, RunResult, RunSpec, run_spec

if TYPE_CHECKING:
    from speechtrain.config import DataConfig

#: rows of the ladder that are not an acceleration: before the accelerations' rungs, and after them
LEADING_RUNGS = ("baseline", "naive_attention", "lightning", "engine", "bucketing", "loader")
TRAILING_RUNGS = ("tuned_batch", "all")


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
    rows.append(Variant("tuned_batch", "+ tuned batch sizes", tuned_over, records=("bucketing",)))
    rows.append(Variant("all", "all (recommended settings)", all_over, records=()))
    for row in rows:
        if row.key in skip:
            row.skip_reason = "skipped (--skip " + row.key + ")"
        elif row.key == "lightning" and not lightning_available():
            row.skip_reason = INSTALL_HINT
        elif row.key == "tuned_batch" and not tuned:
            row.skip_reason = "no tuned batch sizes in the config: run `speechtrain tune` first or pass --tune"
    return rows


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
    if variant.key == "engine":
        return "everything off"
    if variant.key == "lightning":
        rec = result.applied.get("lightning") or {}
        return f"not speechtrain: {rec.get('detail', 'lightning')}"
    if variant.key == "naive_attention":
        n = (result.applied.get("explicit_attention") or {}).get("info", {}).get("modules", 0)
        return f"not the reference: {n} attention modules on the explicit softmax path"
    if variant.key in ("all", "config"):
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


@dataclass
class LadderRow:
    """A row of the finished ladder: the variant, its median pass (None when skipped or failed) and
    the audio-s/s of every pass (``rates[r]``: pass ``r``, None where that pass did not measure it)."""

    variant: Variant
    result: RunResult | None
    error: str | None = None
    rates: list[float | None] = field(default_factory=list)


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


def run_ladder(
    variants: Sequence[Variant],
    specs: Sequence[RunSpec | None],
    *,
    repeat: int = 1,
    isolate: bool = True,
    time_limit: float | Callable[[int], float] | None = None,
    on_row: Callable[[int, Variant, int], None] | None = None,
    execute: Execute | None = None,
) -> list[LadderRow]:
    """Measure every row that has a spec, ``repeat`` passes, interleaved round-robin.

    Pass ``r`` runs the rows in ladder order rotated by ``r * rows / repeat``, so a load that drifts
    during the ladder falls on every row alike and no row always runs first or last after another.
    Each row keeps its median pass by audio-s/s and the rate of every pass (the spread). A row that
    fails, or does not apply, in one pass is not measured again. ``time_limit``: seconds of timing
    per measurement, or a function of the row index (a demo that shares out what is left of its
    budget). ``on_row(i, variant, pass)`` is called before each measurement. ``execute`` measures a
    row in this process (needed with ``isolate=False``).
    """
    repeat = max(1, repeat)
    measured = [i for i, spec in enumerate(specs) if spec is not None and not variants[i].skip_reason]
    runs: dict[int, list[RunResult | None]] = {i: [] for i in measured}
    errors: dict[int, str] = {}
    for r in range(repeat):
        shift = (r * len(measured)) // repeat
        for i in measured[shift:] + measured[:shift]:
            if i in errors:
                runs[i].append(None)
                continue
            if on_row is not None:
                on_row(i, variants[i], r)
            limit = time_limit(i) if callable(time_limit) else time_limit
            spec = specs[i]
            assert spec is not None
            if limit is not None:
                spec = replace(spec, time_limit=limit)
            try:
                runs[i].append(run_spec(spec, isolate=isolate, execute=execute))
            except RowNotApplicable as exc:
                errors[i] = str(exc)
                runs[i].append(None)
            except RunFailed as exc:
                errors[i] = f"failed: {exc}"
                runs[i].append(None)
    rows = []
    for i, variant in enumerate(variants):
        if i not in runs:
            rows.append(LadderRow(variant, None))
            continue
        rates = [None if res is None else res.audio_seconds_per_second for res in runs[i]]
        row = _median_row([LadderRow(variant, res, errors.get(i)) for res in runs[i]])
        if row.result is None:
            row.error = errors.get(i, row.error)
        row.rates = rates
        rows.append(row)
    return rows


def _median_row(runs: list[LadderRow | None]) -> LadderRow:
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
