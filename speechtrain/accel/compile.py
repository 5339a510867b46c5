"""torch.compile in place (``model.compile``) and the compile counters that show whether it works."""

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
        lambda m: apply_compile(m, bool(on), ctx.section.compile_mode, ctx.section.compile_dynamic, ctx.device),
    ),
    probe=_rule,
    rung=Rung("compile", "+ torch.compile", {"accel.compile": True}, ("compile",), skip_keeps_off=True),
    options=("compile_mode", "compile_dynamic"),
    card=Card(
        title="torch.compile",
        what="`model.compile(mode=..., dynamic=...)` in place (state_dict keys keep no `_orig_mod.` prefix). "
        "Inductor fuses elementwise ops into generated kernels at the first step.",
        helps="long GPU runs with few distinct shapes (bucketing, `data.pad_multiple`).",
        costs="compile time at the first step and at every new shape. `recompile_count()` and `compile_stats()` "
        "read the dynamo counters: a count that keeps growing during training means endless recompiles — use "
        "`compile_dynamic=true`, coarser buckets, or turn compile off. Needs Triton on the GPU and a C++ compiler "
        "on the CPU (the record says when one is missing).",
        exact_note="(same maths; fused kernels may round differently).",
        auto="on for Ampere+ GPUs with Triton; off on the CPU (compiling takes minutes there). The config default "
        "is `false`: set `accel.compile=auto` to follow the probe.",
        own_loop='`apply_compile(model, True, mode="default", dynamic=None)`, then `print(compile_stats())` after '
        "some steps.",
    ),
)
