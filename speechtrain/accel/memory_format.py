"""channels-last (NHWC) memory format for 2-D convolution models."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from speechtrain.accel.catalog import Acceleration, Card, Rung
from speechtrain.accel.record import AccelRecord

if TYPE_CHECKING:
    from speechtrain.accel.hardware import HardwareInfo


def apply_channels_last(model: nn.Module) -> AccelRecord:
    """Store the model's 4-D tensors channels-last (NHWC), which tensor-core conv kernels read
    natively. Exact maths; only 2-D conv models gain, so a model without ``nn.Conv2d`` is left
    as it is. Call it after moving the model to its device; feed inputs with
    ``x.contiguous(memory_format=torch.channels_last)`` for the full effect (conv outputs follow
    the weights' format either way). state_dict keys and shapes are unchanged.
    """
    convs = [m for m in model.modules() if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d))]
    if not convs:
        n1d = sum(isinstance(m, (nn.Conv1d, nn.ConvTranspose1d)) for m in model.modules())
        why = f"{n1d} Conv1d layers only" if n1d else "no convolutions"
        return AccelRecord(
            "channels_last", False, True, f"not applied: no Conv2d in the model ({why}); channels-last is for 2-D convs"
        )
    model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]  # Module.to accepts it at run time
    four_d = [p for p in model.parameters() if p.dim() == 4]
    converted = sum(p.is_contiguous(memory_format=torch.channels_last) for p in four_d)
    return AccelRecord(
        "channels_last",
        converted > 0,
        True,
        f"{len(convs)} Conv2d layers, {converted}/{len(four_d)} 4-D weights now channels-last",
        {"conv2d_layers": len(convs), "weights_channels_last": converted, "weights_4d": len(four_d)},
    )


def _rule(info: HardwareInfo) -> tuple[Any, str]:
    if not info.has_gpu:
        return False, "CPU: channels-last gains are model-dependent; set true to try"
    cc = info.compute_capability or (0, 0)
    if cc >= (7, 0):
        return True, "tensor cores read NHWC natively (2-D conv models only)"
    return False, f"compute capability {cc[0]}.{cc[1]}: no tensor cores"


ACCELERATION = Acceleration(
    key="accel.channels_last",
    record="channels_last",
    exact=True,
    order=50,
    apply=lambda on, ctx: (
        ctx.per_module("channels_last", apply_channels_last) if on else AccelRecord("channels_last", False, True, "off")
    ),
    probe=_rule,
    rung=Rung("channels_last", "+ channels-last", {"accel.channels_last": True}, ("channels_last",)),
    card=Card(
        title="channels-last",
        what="stores 4-D weights NHWC (`model.to(memory_format=torch.channels_last)`), the layout tensor-core conv "
        "kernels read natively. Models without `nn.Conv2d` (Conv1d vocoders, transformers) are left alone and the "
        "record says so.",
        helps="2-D conv models on Volta+ GPUs (e.g. spectrogram classifiers, 2-D discriminators). Feed inputs as "
        "`x.contiguous(memory_format=torch.channels_last)` for the full effect.",
        costs="nothing in memory; on the CPU the gain is model-dependent (auto: off).",
        exact_note="state_dict keys and shapes are unchanged. Apply after `model.to(device)`.",
        auto="on for GPUs with tensor cores (compute capability 7.0+), off on the CPU.",
        own_loop="`apply_channels_last(model)`.",
    ),
)
