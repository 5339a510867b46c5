"""Fused attention through ``torch.nn.functional.scaled_dot_product_attention``.

Convention: an attention module in a speechtrain model (or a user's model) carries a boolean
attribute ``use_sdpa``; with it true the module calls ``F.scaled_dot_product_attention``, with it
false it computes ``softmax(q k^T / sqrt(d)) v`` explicitly. :func:`apply_sdpa` sets the flag on
every such module and reports which fused backends this device can run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from speechtrain.accel.catalog import Acceleration, Card
from speechtrain.accel.record import AccelRecord

if TYPE_CHECKING:
    from speechtrain.accel.hardware import HardwareInfo


def sdpa_backends(device: str | torch.device) -> dict[str, dict[str, Any]]:
    """Which SDPA backends can run on ``device``: ``{name: {"usable": bool, "why": str}}`` for
    flash, memory-efficient, cuDNN and math. Which one runs for a call also depends on the
    dtype, head size and mask; torch picks the first usable in its priority order."""
    dev = torch.device(device)
    cuda = torch.backends.cuda
    if dev.type == "cuda" and torch.cuda.is_available():
        index = dev.index if dev.index is not None else torch.cuda.current_device()
        cc = torch.cuda.get_device_capability(index)
        cc_text = f"sm{cc[0]}{cc[1]}"
        flash_built = getattr(cuda, "is_flash_attention_available", lambda: True)()
        out = {
            "flash": _usable(
                cuda.flash_sdp_enabled(),
                flash_built and cc >= (8, 0),
                f"{cc_text}, fp16/bf16 only" if cc >= (8, 0) else f"{cc_text}: flash attention needs sm80+",
                "not built into this torch" if not flash_built else "",
            ),
            "memory_efficient": _usable(
                cuda.mem_efficient_sdp_enabled(),
                cc >= (5, 0),
                f"{cc_text}: fp32/fp16/bf16",
                "",
            ),
            "cudnn": _usable(
                cuda.cudnn_sdp_enabled(),
                cc >= (8, 0) and torch.backends.cudnn.is_available(),
                f"{cc_text}: cuDNN attention",
                "needs sm80+ and cuDNN",
            ),
            "math": _usable(cuda.math_sdp_enabled(), True, "reference implementation (always works)", ""),
        }
        return out
    return {
        "flash": _usable(cuda.flash_sdp_enabled(), True, f"{dev.type}: fused flash-attention CPU kernel", ""),
        "memory_efficient": {"usable": False, "why": "CUDA only"},
        "cudnn": {"usable": False, "why": "CUDA only"},
        "math": _usable(cuda.math_sdp_enabled(), True, "reference implementation (always works)", ""),
    }


def _usable(switch_on: bool, hardware_ok: bool, ok_text: str, no_text: str) -> dict[str, Any]:
    if not switch_on:
        return {"usable": False, "why": "disabled by torch.backends.cuda.enable_*_sdp(False)"}
    if not hardware_ok:
        return {"usable": False, "why": no_text or ok_text}
    return {"usable": True, "why": ok_text}


def attention_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """Modules that follow the ``use_sdpa`` convention, with their qualified names."""
    return [(name, m) for name, m in model.named_modules() if isinstance(getattr(m, "use_sdpa", None), bool)]


def apply_sdpa(model: nn.Module, enabled: bool, device: str | torch.device) -> AccelRecord:
    """Set ``use_sdpa`` on every attention module of ``model`` and report the usable backends.

    Exact maths (flash and memory-efficient kernels compute the same softmax attention in tiles;
    only the rounding order differs). A model without such modules is reported, not an error.
    """
    mods = attention_modules(model)
    backends = sdpa_backends(device)
    usable = [name for name, b in backends.items() if b["usable"]]
    info = {"modules": len(mods), "backends": backends, "usable_backends": usable}
    if not mods:
        return AccelRecord(
            "sdpa", False, True, "not applied: no attention module with a `use_sdpa` attribute in the model", info
        )
    for _, m in mods:
        setattr(m, "use_sdpa", bool(enabled))  # noqa: B010 - an attribute of the model's own attention class
    if not enabled:
        return AccelRecord("sdpa", False, True, f"disabled: {len(mods)} attention modules use explicit softmax", info)
    # a module may take SDPA only under conditions (e.g. no attention dropout): ask it in training mode
    was_training = model.training
    model.train()
    fallback = [name for name, m in mods if getattr(m, "sdpa_active", True) is False]
    model.train(was_training)
    info["fall_back_in_training"] = fallback
    detail = f"{len(mods)} attention modules use scaled_dot_product_attention; usable backends: {', '.join(usable)}"
    if fallback:
        detail += (
            f"; {len(fallback)} of them fall back to the explicit path while training "
            f"(their own condition, e.g. attention dropout > 0), and use SDPA in eval and inference"
        )
    return AccelRecord("sdpa", len(fallback) < len(mods), True, detail, info)


def _rule(info: HardwareInfo) -> tuple[Any, str]:
    if not info.has_gpu:
        return True, "the CPU has a fused attention kernel behind scaled_dot_product_attention"
    return True, "fused attention (flash / memory-efficient): less memory, faster"


ACCELERATION = Acceleration(
    key="accel.sdpa",
    record="sdpa",
    exact=True,
    order=55,
    apply=lambda on, ctx: ctx.per_module("sdpa", lambda m: apply_sdpa(m, bool(on), ctx.device)),
    probe=_rule,
    # the families default to SDPA and so does the plain baseline: "all off" keeps it on, no "+" row (the
    # ladder's "naive (explicit attention)" reference row turns it off instead)
    off=lambda device_type: True,
    card=Card(
        title="Fused attention (SDPA)",
        what="attention modules that carry a boolean `use_sdpa` attribute call `F.scaled_dot_product_attention` "
        "instead of an explicit `softmax(q k^T / sqrt(d)) v`. The built-in families default to SDPA (as a PyTorch 2 "
        "user writes attention), so the plain baseline of `speechtrain bench` uses it too and the ladder does not "
        'credit speechtrain with it; `accel.sdpa=false` selects the explicit path (the ladder\'s "naive" row). '
        "`apply_sdpa` sets the flag on all of them, counts them, and reports the usable backends on the device "
        '(`info["backends"]`): flash (sm80+, fp16/bf16), memory-efficient (sm50+), cuDNN (sm80+), math (always); '
        "on the CPU the fused flash CPU kernel and math.",
        helps="attention models (GPT-style TTS, transformer acoustic models): no T x T score matrix in memory, faster "
        "kernels.",
        costs="nothing; a model without attention modules is reported, not an error.",
        exact_note="(same softmax attention computed in tiles; rounding order differs).",
        auto="on everywhere.",
        more=("**Your own attention module**: add `self.use_sdpa = True` and branch on it in `forward`.",),
        own_loop="`apply_sdpa(model, True, device)`.",
    ),
)
