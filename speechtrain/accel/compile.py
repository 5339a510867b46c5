"""torch.compile in place (``model.compile``) and the compile counters that show whether it works."""

from __future__ import annotations

import os
import re
import shutil
from typing import Any

import torch
from torch import nn

from speechtrain.accel.record import AccelRecord

_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


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
) -> AccelRecord:
    """``model.compile(mode=..., dynamic=...)`` in place: state_dict keys stay unprefixed.

    Compilation happens at the first forward (minutes on the CPU); each new input shape may
    compile again, which :func:`recompile_count` reports (bucketed batches keep shapes few;
    ``dynamic=True`` compiles shape-generic kernels instead). Same maths; fused kernels may round
    differently.
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
    model.compile(mode=mode, dynamic=dynamic)
    info = {"mode": mode, "dynamic": dynamic, "backend": "inductor", "device": str(dev)}
    return AccelRecord(
        "compile",
        True,
        True,
        f"model.compile(mode={mode}, dynamic={dynamic}): compiles at the first step; see compile_stats()",
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
    }
