"""Benchmarks that prove every speed-up in speech units (audio seconds per second).

``run_bench(cfg, ...)`` measures the plain-PyTorch baseline and speechtrain on the same model and
data in one invocation (``ablate=True``: the whole ladder of :mod:`speechtrain.bench.ablate`) and
returns the report dict (see :mod:`speechtrain.bench.report`). Parts:

- :mod:`~speechtrain.bench.measure`  one configuration: timed loop, data wait, peak memory
- :mod:`~speechtrain.bench.baseline` the plain PyTorch loop every speed-up is compared with
- :mod:`~speechtrain.bench.ablate`   the ladder of changes, one at a time, then all
- :mod:`~speechtrain.bench.diagnose` where the time goes (input, host sync, memory, compute)
- :mod:`~speechtrain.bench.report`   JSON, markdown table, PNG chart
- :mod:`~speechtrain.bench.nvml`, :mod:`~speechtrain.bench.flops`  GPU busy share, MFU

Importing this package is light; torch is imported when a benchmark runs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any


def run_bench(
    cfg: Any,
    *,
    steps: int | None = None,
    warmup: int | None = None,
    ablate: bool = False,
    skip: Sequence[str] = (),
    isolate: bool = True,
    fake_data: int | None = None,
    time_limit: float | Callable[[int], float] | None = None,
    measure_peak: bool = True,
    tuned: dict[str, Any] | None = None,
    repeat: int = 1,
    threads: int | None = None,
    command: str = "",
    on_row: Callable[[int, int, str], None] | None = None,
    execute: Any = None,
) -> dict[str, Any]:
    """Measure the baseline and speechtrain on ``cfg`` (or the whole ladder) and build the report.

    ``steps``/``warmup`` default to ``cfg.bench``. ``isolate`` runs each configuration in a fresh
    process (per-configuration peak memory on the CPU). ``fake_data`` benchmarks on that many
    synthetic LJSpeech-like utterances instead of ``data.manifest``. ``time_limit`` bounds each
    configuration's timed region (seconds, at least 2 steps; or a function of the row index).
    ``measure_peak`` times a matmul on the CPU so that MFU has a (measured, not specified) peak.
    ``tuned``: the tuner's overrides (``speechtrain.bench.ablate.tuned_overrides(report.config,
    cfg)``) for the tuned-batch rung and the ``all`` row. ``repeat``: passes over the ladder (every
    other one reversed), each row's median kept: steadier figures on a shared machine.
    ``threads``: torch threads in each measuring process (1 keeps OpenMP from spinning against other
    processes on a shared CPU). ``on_row(i, n, label)`` is called before each row. ``execute``
    measures a row in this process (``isolate=False``); :func:`speechtrain.recipes.bench.run_bench`
    passes it.
    """
    from speechtrain.bench.ablate import Variant, plan_ladder, run_ladder, tuned_batch_size
    from speechtrain.bench.measure import device_info, probe
    from speechtrain.bench.report import build_report
    from speechtrain.device import resolve_device

    dev = resolve_device(cfg.train.device)
    import torch

    saved_threads = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)  # the measured CPU peak must use the rows' thread count
    try:
        probe_result = probe(measure=measure_peak and dev.type == "cpu")
    finally:
        torch.set_num_threads(saved_threads)
    steps = cfg.bench.steps if steps is None else steps
    warmup = cfg.bench.warmup if warmup is None else warmup
    if ablate:
        variants = plan_ladder(cfg, dev.type, probe_result, skip, tuned)
    else:
        variants = [
            Variant("baseline", "baseline (plain PyTorch loop)", kind="baseline"),
            Variant("config", "speechtrain (this config)", records=()),
        ]
    total = len(variants)
    rows = run_ladder(
        cfg,
        variants,
        device_type=dev.type,
        steps=steps,
        warmup=warmup,
        isolate=isolate,
        fake_data=fake_data,
        time_limit=time_limit,
        on_row=(lambda i, v: on_row(i, total, v.label)) if on_row else None,
        repeat=repeat,
        threads=threads,
        execute=execute,
    )
    notes = [f"{steps} timed steps after {warmup} warm-up steps per configuration (fewer if time-limited)"]
    if threads:
        notes.append(f"torch.set_num_threads({threads}) in every measuring process")
    if repeat > 1:
        notes.append(f"{repeat} passes over the ladder (alternating order); each row is its median pass")
    if fake_data:
        notes.append(f"data: {fake_data} synthetic LJSpeech-like utterances (--fake-data)")
    info = device_info(probe_result, cfg.train.device)
    if threads:
        info["torch_threads"] = threads
    tuned_size = tuned_batch_size(tuned) or tuned_batch_size(_own_tuned(cfg))
    return build_report(rows, info, probe_result, command, notes, tuned_batch_size=tuned_size)


def _own_tuned(cfg: Any) -> dict[str, Any] | None:
    sizes = cfg.data.bucket_batch_sizes
    return {"data.bucket_batch_sizes": sizes} if sizes else None


__all__ = ["run_bench"]
