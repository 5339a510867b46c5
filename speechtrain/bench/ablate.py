"""The ablation ladder: the baseline, each change alone on top of it, then everything on.

Rows, all on the same model, data and device, measured in one invocation:

1. ``baseline``: the plain PyTorch loop (:mod:`speechtrain.bench.baseline`).
2. ``speechtrain, all off``: our Trainer and loader with every change switched off (fp32,
   fixed-count random batches, no workers, plain AdamW kernel). Its ratio to the baseline is the
   engine's own overhead (OOM guard, numerics guard), so the rungs below are not flattered by it.
3. one row per change on top of (2): bucketing, loader settings, precision, TF32 and cuDNN
   autotune (CUDA), SDPA, activation checkpointing, compile, channels-last, fused optimizer,
   tuned per-bucket batch sizes (from ``speechtrain tune``).
4. ``all``: every setting the hardware recommendation switches on, plus bucketing and the tuned
   batch sizes.

Every row's speed-up is its audio-seconds/s over the baseline's. Whether a change took effect
comes from the AccelRecords the Trainer wrote (``applied``), never from the switch alone.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from speechtrain.bench.measure import Execute, RunFailed, RunResult, RunSpec, run_spec
from speechtrain.registry import registered_families

#: rung keys in ladder order (``--skip`` takes these)
RUNGS = (
    "baseline",
    "engine",
    "bucketing",
    "loader",
    "precision",
    "tf32",
    "cudnn_benchmark",
    "sdpa",
    "activation_checkpointing",
    "compile",
    "channels_last",
    "fused_optimizer",
    "tuned_batch",
    "all",
)

CUDA_ONLY = {"tf32": "TF32 is an NVIDIA tensor-core format", "cudnn_benchmark": "cuDNN runs only on NVIDIA GPUs"}


@dataclass
class Variant:
    """One row of the ladder: overrides on top of the all-off base (or the recommendation)."""

    key: str
    label: str
    overrides: dict[str, Any] = field(default_factory=dict)
    kind: str = "engine"
    records: tuple[str, ...] = ()  # AccelRecord names that say whether the change took effect
    skip_reason: str | None = None


#: set in every row: one micro-batch per step (steps/s is per micro-batch), no progress bar or event files
COMMON = {"train.grad_accum": 1, "train.progress": False, "train.tensorboard": False}


def all_off(device_type: str) -> dict[str, Any]:
    """Overrides that switch every change off (what the plain baseline does, on our engine)."""
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
        "accel.precision": "fp32",
        "accel.tf32": False,
        "accel.cudnn_benchmark": False,
        "accel.channels_last": False,
        "accel.compile": False,
        "accel.sdpa": False,
        "accel.activation_checkpointing": False,
        # torch's own default kernel choice for a plain AdamW: foreach on CUDA, a for-loop on the CPU
        "optim.implementation": "foreach" if device_type == "cuda" else "for_loop",
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


def tuned_overrides(tuned_cfg: Any, cfg: Any) -> dict[str, Any]:
    """The data keys the tuner changed (``tuned_cfg`` is ``TuneReport.config``), as overrides."""
    out = {
        f"data.{k}": getattr(tuned_cfg.data, k)
        for k in TUNED_KEYS
        if getattr(tuned_cfg.data, k) != getattr(cfg.data, k)
    }
    if tuned_cfg.data.bucket_batch_sizes:
        out["data.bucketing"] = True
    return out


def _config_tuned(cfg: Any) -> dict[str, Any] | None:
    d = cfg.data
    if not d.bucket_batch_sizes:
        return None
    return {
        "data.bucketing": True,
        "data.bucket_batch_sizes": d.bucket_batch_sizes,
        "data.bucket_boundaries": d.bucket_boundaries,
        "data.max_frames": d.max_frames,
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
    cfg: Any,
    device_type: str,
    probe_result: Any = None,
    skip: Sequence[str] = (),
    tuned: dict[str, Any] | None = None,
) -> list[Variant]:
    """The rows for ``cfg`` on this device; skipped or inapplicable rows carry their reason.

    ``tuned``: the tuner's overrides (:func:`tuned_overrides`); default: the per-bucket sizes
    already in ``cfg``, if any.
    """
    unknown = [s for s in skip if s not in RUNGS]
    if unknown:
        from speechtrain.errors import UserError

        raise UserError(f"--skip {', '.join(unknown)}: unknown rung; valid: {', '.join(RUNGS)}")
    rec = recommendation(probe_result)
    tuned = tuned if tuned is not None else _config_tuned(cfg)
    tuned_over = dict(tuned or {})
    loader_over, loader_note = _loader_overrides(rec, device_type)
    if device_type == "cuda":
        precision = rec.get("accel.precision", "bf16")
        precision = precision if precision in ("bf16", "fp16") else "bf16"
    else:
        precision = "bf16"  # CPU autocast exists; measured, though the recommendation keeps fp32 on CPUs
    rows = [
        Variant("baseline", "baseline (plain PyTorch loop)", kind="baseline"),
        Variant("engine", "speechtrain, all off"),
        Variant("bucketing", "+ bucketing", {"data.bucketing": True}, records=("bucketing",)),
        Variant("loader", "+ loader workers/pin/prefetch" + loader_note, loader_over, records=("loader",)),
        Variant("precision", f"+ {precision} autocast", {"accel.precision": precision}, records=("precision",)),
        Variant("tf32", "+ TF32", {"accel.tf32": True}, records=("tf32",)),
        Variant("cudnn_benchmark", "+ cuDNN autotune", {"accel.cudnn_benchmark": True}, records=("cudnn_benchmark",)),
        Variant("sdpa", "+ SDPA attention", {"accel.sdpa": True}, records=("sdpa",)),
        Variant(
            "activation_checkpointing",
            "+ activation checkpointing",
            {"accel.activation_checkpointing": True},
            records=("activation_checkpointing",),
        ),
        Variant("compile", "+ torch.compile", {"accel.compile": True}, records=("compile",)),
        Variant("channels_last", "+ channels-last", {"accel.channels_last": True}, records=("channels_last",)),
        Variant("fused_optimizer", "+ fused AdamW", {"optim.implementation": "fused"}, records=("optimizer",)),
        Variant("tuned_batch", "+ tuned batch sizes", tuned_over, records=("bucketing",)),
    ]
    all_over = {k: v for k, v in rec.items() if k.startswith(("accel.", "optim.", "data."))}
    all_over.update({"data.bucketing": True})
    all_over.update(tuned_over)
    if "compile" in skip:
        all_over["accel.compile"] = False
    rows.append(Variant("all", "all (recommended settings)", all_over, records=()))
    for row in rows:
        if row.key in skip:
            row.skip_reason = "skipped (--skip " + row.key + ")"
        elif row.key in CUDA_ONLY and device_type != "cuda":
            row.skip_reason = f"not applicable on {device_type}: {CUDA_ONLY[row.key]}"
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


def variant_raw(cfg: Any, variant: Variant, device_type: str) -> dict[str, Any]:
    """The raw config of a row: ``cfg`` + all-off + the row's overrides (``config``: ``cfg`` as it is)."""
    raw = copy.deepcopy(cfg.to_dict())
    base = COMMON if variant.key == "config" else all_off(device_type)
    for key, value in {**base, **variant.overrides}.items():
        set_dotted(raw, key, value)
    return raw


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
    if variant.key == "fused_optimizer":
        # the optimizer record is "applied" for foreach too; this rung is about the fused kernel
        found = [(n, {**r, "applied": (r.get("info") or {}).get("kernel") == "fused"}) for n, r in found]
    if all(r.get("applied") for _, r in found):
        return "yes"
    reasons = "; ".join(str(r.get("detail", "")) for _, r in found if not r.get("applied"))
    return f"no: {reasons}"


@dataclass
class LadderRow:
    """A row of the finished ladder: the variant and its result (None when skipped or failed)."""

    variant: Variant
    result: RunResult | None
    error: str | None = None


def run_ladder(
    cfg: Any,
    variants: Sequence[Variant],
    *,
    device_type: str,
    steps: int,
    warmup: int,
    isolate: bool = True,
    fake_data: int | None = None,
    time_limit: float | Callable[[int], float] | None = None,
    on_row: Callable[[int, Variant], None] | None = None,
    repeat: int = 1,
    threads: int | None = None,
    execute: Execute | None = None,
) -> list[LadderRow]:
    """Measure every row that is not skipped; a row that fails is kept with its error.

    ``time_limit``: seconds of timing per row, or a function of the row index (a demo that shares
    out what is left of its budget). The task's data-dependent setup runs once; later rows load it.
    ``repeat``: run the ladder that many times, every other pass in reverse order (so a load that
    drifts during the ladder hits every row alike), and keep each row's median run by audio-s/s.
    ``execute``: measures a row in this process (needed with ``isolate=False``).
    """
    import tempfile
    from pathlib import Path

    passes: list[list[LadderRow | None]] = []
    with tempfile.TemporaryDirectory(prefix="speechtrain-ladder-") as tmp:
        setup_state = str(Path(tmp) / "setup.pt")
        for r in range(max(1, repeat)):
            done: list[LadderRow | None] = [None] * len(variants)
            order = list(range(len(variants)))
            for i in order if r % 2 == 0 else order[::-1]:
                limit = time_limit(i) if callable(time_limit) else time_limit
                args = (device_type, steps, warmup, isolate, fake_data, limit, setup_state, threads)
                done[i] = _run_row(cfg, variants[i], i, *args, on_row, execute)
            passes.append(done)
    return [_median_row([p[i] for p in passes]) for i in range(len(variants))]


def _median_row(runs: list[LadderRow | None]) -> LadderRow:
    """The run with the median audio-s/s among the passes that measured the row (else the first)."""
    measured = sorted((r for r in runs if r is not None and r.result is not None), key=_rate)
    if not measured:
        return next(r for r in runs if r is not None)
    return measured[(len(measured) - 1) // 2]


def _rate(row: LadderRow) -> float:
    return row.result.audio_seconds_per_second if row.result is not None else 0.0


def _run_row(
    cfg: Any,
    variant: Variant,
    i: int,
    device_type: str,
    steps: int,
    warmup: int,
    isolate: bool,
    fake_data: int | None,
    time_limit: float | None,
    setup_state: str,
    threads: int | None,
    on_row: Callable[[int, Variant], None] | None,
    execute: Execute | None = None,
) -> LadderRow:
    if on_row is not None:
        on_row(i, variant)
    if variant.skip_reason:
        return LadderRow(variant, None)
    spec = RunSpec(
        name=variant.label,
        raw=variant_raw(cfg, variant, device_type),
        kind=variant.kind,
        steps=steps,
        warmup=warmup,
        count_flops=variant.kind == "baseline",
        fake_data=fake_data,
        time_limit=time_limit,
        setup_state=setup_state,
        threads=threads,
        families=registered_families(),
    )
    try:
        return LadderRow(variant, run_spec(spec, isolate=isolate, execute=execute))
    except RunFailed as exc:
        return LadderRow(variant, None, error=f"failed: {exc}")
