"""torch.compile in place (``model.compile``) and the compile counters that show whether it works.

Over duration buckets: :func:`choose_dynamic` picks ``dynamic`` from the batch shapes the loader plans (few:
one static graph per shape, with dynamo's recompile limit raised to hold them all; many: shape-generic
kernels), :func:`limit_compile_workers` keeps inductor's compile subprocesses few enough to live beside the
loader's workers, :func:`compile_seconds` is the compile time that the Trainer reports apart from the rate,
and :func:`is_compile_error` / :func:`disable_compile` / :func:`failure_record` let a run whose compile
fails go on in eager with the reason recorded.
"""

from __future__ import annotations

import os
import re
import shutil
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from speechtrain.accel.catalog import Acceleration, Card, Rung
from speechtrain.accel.record import AccelRecord

if TYPE_CHECKING:
    from speechtrain.accel.hardware import HardwareInfo

_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")

#: at most this many distinct batch shapes are compiled one static graph each (dynamo's own recompile limit is 8)
STATIC_SHAPES_MAX = 8
#: inductor's parallel compile subprocesses at most (its default is one per CPU core)
COMPILE_WORKERS_MAX = 4


def choose_dynamic(configured: bool | None, shapes: int | None, buckets: int | None = None) -> tuple[bool | None, str]:
    """``dynamic`` for ``model.compile`` and why: the configured value when set; else from ``shapes``, the
    distinct batch shapes the loader plans for an epoch (over ``buckets`` duration buckets). Few shapes
    (<= :data:`STATIC_SHAPES_MAX`): static, one graph per shape, each compiled once. More: ``dynamic=True``,
    kernels generic in the batch and time axes (one graph, no compile per shape; dynamo would give up after
    its recompile limit and run the rest in eager). Unknown: torch decides (static first, dynamic after the
    first shape change)."""
    where = f" over {buckets} bucket(s)" if buckets else ""
    if configured is not None:
        return configured, f"accel.compile_dynamic={configured}"
    if shapes is None:
        return None, "batch shapes unknown: torch decides (static first, dynamic after a shape change)"
    if shapes <= STATIC_SHAPES_MAX:
        return False, f"{shapes} batch shape(s) planned{where}: one static graph each"
    return True, f"{shapes} batch shapes planned{where} (more than {STATIC_SHAPES_MAX}): shape-generic kernels"


def cuda_graphs_record(
    mode: str, device_type: str, dynamic: bool | None, shapes: int | None, buckets: int | None
) -> AccelRecord:
    """Whether ``compile_mode=reduce-overhead`` (inductor's CUDA graphs: one graph recorded per input shape,
    replayed with one launch) applies, or why not. It needs a CUDA device, static shapes (a graph holds one
    shape), and at most one batch shape per bucket (each shape records a graph and keeps its memory pool). A
    host sync inside the compiled model would split it into graphs that inductor does not capture: those
    skips are counted by :func:`compile_stats` (``cudagraph_skips``) while training. (The Trainer's own step
    issues no host sync; see ``tests/test_step_syncs.py``.) An OOM-split micro-batch is a new, smaller shape:
    it records its own graph, and the OOM guard splits as it does in eager."""
    if mode != "reduce-overhead":
        return AccelRecord("cuda_graphs", False, True, f"not applied: compile_mode={mode}")
    if device_type != "cuda":
        return AccelRecord("cuda_graphs", False, True, f"not applied: {device_type.upper()} (CUDA graphs need CUDA)")
    if dynamic:
        return AccelRecord(
            "cuda_graphs",
            False,
            True,
            "not applied: dynamic shapes (a graph holds one shape; set compile_dynamic=false)",
        )
    if shapes is not None and buckets and shapes > buckets:
        return AccelRecord(
            "cuda_graphs",
            False,
            True,
            f"not applied: {shapes} batch shapes planned over {buckets} bucket(s), more than one graph per bucket "
            "(pad the batches of a bucket to one length: data.pad_multiple, or fixed data.batch_size with crop)",
            {"planned_shapes": shapes, "buckets": buckets},
        )
    graphs = f"at most {shapes} graph(s), one per bucket shape" if shapes else "one graph per batch shape"
    return AccelRecord("cuda_graphs", True, True, f"applied: {graphs}", {"planned_shapes": shapes, "buckets": buckets})


def _raise_recompile_limit(graphs: int) -> int:
    """Let dynamo keep ``graphs`` graphs per frame (its default, 8, sends the rest to eager); the limit now."""
    import torch._dynamo.config as dynamo_config

    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(dynamo_config, name) and getattr(dynamo_config, name) < graphs:
            setattr(dynamo_config, name, graphs)
    return int(getattr(dynamo_config, "recompile_limit", getattr(dynamo_config, "cache_size_limit", graphs)))


def limit_compile_workers(loader_workers: int, cpus: int | None = None) -> int:
    """Inductor's parallel compile subprocesses: at most :data:`COMPILE_WORKERS_MAX`, and no more than the CPU
    cores the loader's workers leave. Each is a Python process with torch imported (hundreds of MiB); by
    default there is one per core, beside ``data.num_workers`` forked loader workers that each hold a
    copy-on-write image of the trainer: on a many-core GPU host the sum can exhaust host memory, and the
    kernel's OOM killer then takes a loader worker ("DataLoader worker ... killed by signal: Killed"). Set
    only when the user has not (``TORCHINDUCTOR_COMPILE_THREADS``). Returns the count in effect."""
    import torch._inductor.config as inductor_config

    if os.environ.get("TORCHINDUCTOR_COMPILE_THREADS"):
        return int(inductor_config.compile_threads or 1)
    cpus = cpus or os.cpu_count() or 1
    threads = max(1, min(COMPILE_WORKERS_MAX, cpus - loader_workers - 1))
    inductor_config.compile_threads = threads
    return threads


def compile_seconds() -> float:
    """Seconds dynamo and its backend spent compiling in this process so far (forward graphs, and the
    backward graphs that AOT autograd compiles at their first backward)."""
    from torch._dynamo.utils import compilation_time_metrics

    keys = [k for k in compilation_time_metrics if k == "_compile.compile_inner" or "backward" in k]
    return float(sum(sum(compilation_time_metrics[k]) for k in keys))


def is_compile_error(exc: BaseException) -> bool:
    """An error of torch.compile itself (dynamo, AOT autograd, inductor, the C++/Triton compiler), not of the
    model: those are what :class:`TorchDynamoException` covers, whatever the backend raised inside."""
    from torch._dynamo.exc import TorchDynamoException

    return isinstance(exc, TorchDynamoException)


def disable_compile(modules: dict[str, nn.Module]) -> list[str]:
    """Undo ``model.compile`` on ``modules`` (eager from the next call) and drop dynamo's caches; the names of
    the modules that were compiled."""
    undone = []
    for name, module in modules.items():
        if getattr(module, "_compiled_call_impl", None) is not None:
            module._compiled_call_impl = None
            undone.append(name)
    torch._dynamo.reset()
    return undone


def failure_record(exc: BaseException, step: int, log_path: str | None, lines: int = 6) -> AccelRecord:
    """The compile record of a run whose compile failed at ``step``: the error's first lines (the real error,
    not torch's closing hint) and where the whole traceback was written."""
    text = [ln for ln in str(exc).splitlines() if ln.strip()]
    head = " | ".join(text[:lines])[:1500] or type(exc).__name__
    where = f"; full traceback: {log_path}" if log_path else ""
    return AccelRecord(
        "compile",
        False,
        True,
        f"not applied: torch.compile failed at step {step} ({type(exc).__name__}: {head}){where}; "
        "the run continued in eager",
        {"failed_at_step": step, "error": head, "error_type": type(exc).__name__, "log": log_path},
    )


def _compiler_missing(device: torch.device) -> str | None:
    """Why inductor cannot generate code for ``device`` (None when it can)."""
    if device.type == "cuda":
        import importlib.util

        if importlib.util.find_spec("triton") is None:
            return "triton is not installed (pip install triton) so inductor cannot generate GPU kernels"
        return None
    if not any(shutil.which(c) for c in (os.environ.get("CXX", "g++"), "c++", "clang++")):
        return "no C++ compiler found (install g++) so inductor cannot generate CPU kernels"
    return None


def apply_compile(
    model: nn.Module,
    enabled: bool,
    mode: str = "default",
    dynamic: bool | None = None,
    device: str | torch.device | None = None,
    shapes: int | None = None,
    buckets: int | None = None,
    loader_workers: int = 0,
) -> AccelRecord:
    """``model.compile(mode=..., dynamic=...)`` in place: state_dict keys stay unprefixed.

    Compilation happens at the first forward (minutes on the CPU); each new input shape may
    compile again, which :func:`recompile_count` reports (bucketed batches keep shapes few;
    ``dynamic=True`` compiles shape-generic kernels instead). Same maths; fused kernels may round
    differently.

    ``shapes``/``buckets``: the distinct batch shapes the loader plans for an epoch and its buckets, from which
    :func:`choose_dynamic` picks ``dynamic`` when it is None; ``loader_workers``: its worker processes (see
    :func:`limit_compile_workers`). Compilation runs in this (the main) process only: loader workers collate
    host tensors and never call the model.
    """
    if not enabled:
        return AccelRecord("compile", False, True, "disabled (eager mode)")
    if mode not in _MODES:
        from speechtrain.config import ConfigError

        raise ConfigError(f"accel.compile_mode: unknown mode '{mode}' (one of {', '.join(_MODES)})")
    if device is None:
        param = next(model.parameters(), None)
        device = param.device if param is not None else "cpu"
    dev = torch.device(device)
    missing = _compiler_missing(dev)
    if missing:
        return AccelRecord("compile", False, True, f"not applied: {missing}")
    dynamic, why = choose_dynamic(dynamic, shapes, buckets)
    graphs = cuda_graphs_record(mode, dev.type, dynamic, shapes, buckets)
    if mode == "reduce-overhead" and not graphs.applied:
        mode = "default"  # the same compile without CUDA graphs; the record says why
    limit = _raise_recompile_limit(shapes + 2) if dynamic is False and shapes else None
    workers = limit_compile_workers(loader_workers)
    model.compile(mode=mode, dynamic=dynamic)
    info = {
        "mode": mode,
        "dynamic": dynamic,
        "dynamic_why": why,
        "planned_shapes": shapes,
        "buckets": buckets,
        "recompile_limit": limit,
        "compile_workers": workers,
        "backend": "inductor",
        "device": str(dev),
        "cuda_graphs": graphs.to_dict(),
    }
    return AccelRecord(
        "compile",
        True,
        True,
        f"model.compile(mode={mode}, dynamic={dynamic}: {why}): compiles at the first step of each shape, "
        f"timed apart from the rate (compile_warmup_seconds); CUDA graphs {graphs.detail}; see compile_stats()",
        info,
    )


def recompile_count() -> int:
    """How many times dynamo compiled a frame again after its first compile in this process
    (guard failures, mostly new input shapes). A number that keeps growing during training means
    endless recompiles: use bucketing, ``accel.compile_dynamic=true`` or turn compile off."""
    from torch._dynamo.utils import guard_failures

    total = 0
    for failures in guard_failures.values():
        # each entry reads "<frame>/<compile>: reason"; compile indices 0..k failed, so k+1 recompiles
        indices = [int(m.group(1)) for f in failures if (m := re.match(r"\s*\d+/(\d+)", str(f)))]
        total += (max(indices) + 1) if indices else len(failures)
    return total


def compile_stats() -> dict[str, Any]:
    """Dynamo counters of this process: frames compiled, graphs, graph breaks, recompiles."""
    from torch._dynamo.utils import counters

    frames = dict(counters.get("frames", {}))
    stats = dict(counters.get("stats", {}))
    breaks = dict(counters.get("graph_break", {}))
    return {
        "frames_compiled": int(frames.get("total", 0)),
        "frames_ok": int(frames.get("ok", 0)),
        "unique_graphs": int(stats.get("unique_graphs", 0)),
        "graph_breaks": int(sum(breaks.values())),
        "graph_break_reasons": {str(k)[:200]: int(v) for k, v in list(breaks.items())[:10]},
        "recompiles": recompile_count(),
        # inductor's CUDA graphs (reduce-overhead): graphs it would not capture, e.g. after a host sync or a CPU op
        "cudagraph_skips": int(dict(counters.get("inductor", {})).get("cudagraph_skips", 0)),
    }


def _rule(info: HardwareInfo) -> tuple[Any, str]:
    if not info.has_gpu:
        found = "" if info.compiler_available else " (none found)"
        return False, "CPU: compiling takes minutes with a C++ compiler" + found
    cc = info.compute_capability or (0, 0)
    if not info.ampere_or_newer:
        return (
            False,
            f"compute capability {cc[0]}.{cc[1]}: smaller gains from torch.compile on pre-Ampere GPUs; try it if asked",
        )
    if not info.triton_available:
        return False, "triton is not installed: torch.compile cannot generate GPU kernels"
    return True, (
        "fuses elementwise ops; pays off on long runs with few distinct shapes (bucketing); verify with "
        "`speechtrain bench`"
    )


ACCELERATION = Acceleration(
    key="accel.compile",
    record="compile",
    exact=True,
    order=90,  # last: it compiles what the other accelerations made of the modules
    apply=lambda on, ctx: ctx.per_module(
        "compile",
        lambda m: apply_compile(
            m,
            bool(on),
            ctx.section.compile_mode,
            ctx.section.compile_dynamic,
            ctx.device,
            shapes=ctx.batch_shapes,
            buckets=ctx.buckets,
            loader_workers=ctx.loader_workers,
        ),
    ),
    probe=_rule,
    rung=Rung("compile", "+ torch.compile", {"accel.compile": True}, ("compile",), skip_keeps_off=True),
    options=("compile_mode", "compile_dynamic"),
    card=Card(
        title="torch.compile",
        what="`model.compile(mode=..., dynamic=...)` in place (state_dict keys keep no `_orig_mod.` prefix). "
        "Inductor fuses elementwise ops into generated kernels at the first step of each shape. Over buckets, "
        "`compile_dynamic` unset follows the batch shapes the loader plans for an epoch: at most 8, one static "
        "graph each (dynamo's recompile limit raised to hold them); more, `dynamic=True`. "
        "`compile_mode=reduce-overhead` adds CUDA graphs where they fit: CUDA, static shapes, at most one "
        "planned shape per bucket; elsewhere it compiles without them and the record's `cuda_graphs` says why "
        "(CPU, dynamic shapes, too many shapes). Compilation runs in the main process only; inductor's compile "
        "subprocesses are capped at 4 (and at the cores the loader's workers leave) unless "
        "`TORCHINDUCTOR_COMPILE_THREADS` is set.",
        helps="long GPU runs with few distinct shapes (bucketing, `data.pad_multiple`); CUDA graphs: small "
        "batches whose step is launch-bound.",
        costs="compile time at the first step of every shape: the steps that compiled are timed apart "
        "(`compile_warmup_seconds`, `compile_steps` in the metrics rows) and left out of the rates. The rows "
        "carry `recompiles` (warned above 4 per bucket) and `graph_breaks` (and `cudagraph_skips`). A compile that "
        "fails does not stop the run: its stage is redone in eager, the record (and `accel.json`, and a "
        "`compile_failed` event) gives the error's first lines and the whole traceback is in the run's "
        "`compile_error.log`. Needs Triton on the GPU and a C++ compiler on the CPU (the record says when one is "
        "missing).",
        exact_note="(same maths; fused kernels may round differently).",
        auto="on for Ampere+ GPUs with Triton; off on the CPU (compiling takes minutes there). The config default "
        "is `false`: set `accel.compile=auto` to follow the probe.",
        own_loop='`apply_compile(model, True, mode="default", dynamic=None, shapes=N, buckets=B)`, then '
        "`print(compile_stats())` after some steps.",
    ),
)
