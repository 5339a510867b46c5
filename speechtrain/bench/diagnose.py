"""Where the time goes: name the bottleneck of a measured run, with the numbers and the fix.

``diagnose(runs, device_info)`` looks at the configuration that matters (the ``all`` row of a
ladder, else the last run that is not the baseline) and returns ``{"kind", "evidence",
"advice"}``. Kinds, checked in this order:

- ``input-bound``: the step waited for the loader for a large share of the wall time;
- ``host-sync-bound`` (GPU): the GPU was idle much of the time although data was ready, so the
  Python/launch overhead or host-device syncs set the pace;
- ``memory-bound``: batches far below what memory allows (the tuned size, or a small share of
  the GPU's memory in use), so the device does too little work per step;
- ``compute-bound``: the device is busy with the model's maths (high MFU, or no other signal).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

INPUT_WAIT = 0.15  # data-wait share above which the input pipeline sets the pace
GPU_IDLE_BUSY = 0.70  # NVML busy share below which the GPU waits on the host
SMALL_BATCH = 0.5  # mean batch below this share of the tuned batch
SMALL_MEMORY = 0.25  # peak below this share of the GPU's memory
HIGH_MFU = 0.35


def _pick(runs: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    for run in runs:
        if str(run.get("name", "")).startswith("all"):
            return run
    rest = [r for r in runs if not str(r.get("name", "")).startswith("baseline")]
    return rest[-1] if rest else (runs[-1] if runs else None)


def diagnose(runs: Sequence[dict[str, Any]], device_info: dict[str, Any]) -> dict[str, Any]:
    """The bottleneck of the run that matters, with evidence numbers and concrete advice."""
    run = _pick(runs)
    if run is None:
        return {"kind": "unknown", "evidence": "no configuration was measured", "advice": []}
    name = run.get("name", "?")
    wait = float(run.get("data_wait_fraction") or 0.0)
    busy = run.get("gpu_busy_fraction")
    mfu = run.get("mfu")
    on_gpu = device_info.get("type") == "cuda"
    step_ms = 1000.0 / run["steps_per_second"] if run.get("steps_per_second") else None
    mean_batch = run.get("mean_batch_size")
    tuned = run.get("tuned_batch_size")
    peak = run.get("peak_memory_bytes")
    total = device_info.get("total_memory_bytes")
    base = f"'{name}': data wait {wait:.0%} of wall time"
    if step_ms is not None:
        base += f", {step_ms:.0f} ms per step"
    if busy is not None:
        base += f", GPU busy {busy:.0%} (NVML)"
    if mfu is not None:
        base += f", MFU {mfu:.1%}"

    if wait >= INPUT_WAIT:
        return {
            "kind": "input-bound",
            "evidence": base + f" (>= {INPUT_WAIT:.0%}: the step waits for the loader)",
            "advice": [
                "raise data.num_workers (one or two per GPU-feeding core) with data.persistent_workers=true "
                "and data.prefetch_factor=4",
                "prepare the feature cache once (`speechtrain prepare`) so workers read memory-mapped mels "
                "instead of decoding audio",
                "compute log-mels on the device (data.features_on_device=true) when the loader decodes audio",
                "pin host memory (data.pin_memory=true) so host-to-GPU copies overlap compute",
            ],
        }
    if on_gpu and busy is not None and busy < GPU_IDLE_BUSY:
        return {
            "kind": "host-sync-bound",
            "evidence": base + f" (GPU busy < {GPU_IDLE_BUSY:.0%} although data was ready: Python, kernel "
            "launches or host-device syncs set the pace)",
            "advice": [
                "compile with CUDA graphs: accel.compile=true accel.compile_mode=reduce-overhead (bucketing keeps "
                "the number of shapes small)",
                "use larger batches (run `speechtrain tune`) so each launch does more work",
                "use the fused optimizer (optim.implementation=fused) to replace per-parameter kernels",
                "remove .item()/.cpu() calls from the step (log every N steps instead)",
            ],
        }
    # the data may hold fewer items per bucket than the tuned size: then the batch is data-limited
    limit = run.get("items_per_batch_limit")
    target = min(float(tuned), float(limit)) if (tuned is not None and limit) else tuned
    small_batch = target is not None and mean_batch is not None and mean_batch < SMALL_BATCH * float(target)
    small_memory = on_gpu and peak is not None and total and peak < SMALL_MEMORY * float(total)
    if small_batch or small_memory:
        what = []
        if small_batch and target is not None and tuned is not None:
            what.append(f"mean batch {mean_batch:.1f} items vs {float(target):.1f} possible (tuned {float(tuned):.1f})")
        if small_memory and peak is not None and total:
            what.append(f"peak memory {peak / 2**30:.2f} GiB of {float(total) / 2**30:.1f} GiB")
        return {
            "kind": "memory-bound",
            "evidence": base + "; " + ", ".join(what) + " (batches far below what memory allows)",
            "advice": [
                "run `speechtrain tune` and keep its per-bucket batch sizes (data.bucket_batch_sizes)",
                "raise data.max_frames so that each batch carries more audio",
                "if memory is what stops larger batches: accel.activation_checkpointing=true and bf16/fp16",
            ],
        }
    if mfu is not None and mfu >= HIGH_MFU:
        evidence = base + f" (MFU >= {HIGH_MFU:.0%}: close to what the device can do)"
    else:
        evidence = base + " (little data wait"
        evidence += ", GPU busy" if busy is not None else ""
        evidence += "; the model's maths sets the pace)"
    advice = [
        _precision_advice(runs),
        "torch.compile to fuse elementwise work (accel.compile=true); keep SDPA attention on (accel.sdpa, the default)",
    ]
    if on_gpu:
        advice.append("TF32 for fp32 matmuls on Ampere+ (accel.tf32=true)")
    else:
        advice.insert(0, "train on a GPU: on the CPU the model's maths is the limit")
    return {"kind": "compute-bound", "evidence": evidence, "advice": advice}


def _precision_advice(runs: Sequence[dict[str, Any]]) -> str:
    """Lower precision, unless this ladder measured it slower than speechtrain with everything off."""
    by_key = {r.get("key"): r for r in runs}
    row, off = by_key.get("precision"), by_key.get("engine")
    if row and off and row.get("audio_seconds_per_second") and off.get("audio_seconds_per_second"):
        ratio = float(row["audio_seconds_per_second"]) / float(off["audio_seconds_per_second"])
        if ratio < 0.95:
            return (
                f"keep accel.precision=fp32 on this device: '{row.get('name')}' measured {ratio:.2f}x of "
                "'speechtrain, all off' here (no fast low-precision maths)"
            )
    return "lower precision where it is safe: accel.precision=bf16 (fp16 on pre-Ampere GPUs)"
