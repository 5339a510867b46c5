"""channels-last (NHWC) memory format for 2-D convolution models."""

from __future__ import annotations

import torch
from torch import nn

from speechtrain.accel.record import AccelRecord


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
