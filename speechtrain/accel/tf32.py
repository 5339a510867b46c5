"""TF32 tensor cores for the fp32 matmuls and convolutions (Ampere and newer)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from speechtrain.accel.catalog import Acceleration, Card, Rung
from speechtrain.accel.record import AccelRecord

if TYPE_CHECKING:
    from speechtrain.accel.hardware import HardwareInfo


def cuda_capability(device: torch.device) -> tuple[int, int] | None:
    """The compute capability of a CUDA ``device``; None for other devices or without CUDA."""
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    index = device.index if device.index is not None else torch.cuda.current_device()
    return torch.cuda.get_device_capability(index)


def apply_tf32(enabled: bool, device: str | torch.device) -> AccelRecord:
    """TF32 tensor cores for fp32 matmuls and convolutions (Ampere and newer; approximate:
    10-bit mantissa inputs, fp32 accumulate). Disabled: fp32 matmuls in full precision."""
    dev = torch.device(device)
    cc = cuda_capability(dev)
    if dev.type != "cuda":
        return AccelRecord("tf32", False, False, f"not applicable on {dev.type}: TF32 is an NVIDIA GPU format")
    if not enabled:
        torch.set_float32_matmul_precision("highest")
        torch.backends.cudnn.allow_tf32 = False
        return AccelRecord("tf32", False, True, "disabled: fp32 matmuls and convs in full precision")
    if cc is None or cc < (8, 0):
        return AccelRecord("tf32", False, True, f"not applied: compute capability {cc} < 8.0 has no TF32")
    torch.set_float32_matmul_precision("high")  # matmuls may use TF32
    torch.backends.cudnn.allow_tf32 = True
    return AccelRecord(
        "tf32",
        True,
        False,
        "fp32 matmuls and cuDNN convs use TF32 tensor cores",
        {"float32_matmul_precision": torch.get_float32_matmul_precision(), "cudnn_allow_tf32": True},
    )


def _rule(info: HardwareInfo) -> tuple[Any, str]:
    if not info.has_gpu:
        return False, "no GPU: TF32 is an NVIDIA tensor-core format (Ampere and newer)"
    cc = info.compute_capability or (0, 0)
    if info.ampere_or_newer:
        return (
            True,
            f"compute capability {cc[0]}.{cc[1]}: TF32 tensor cores for the fp32 matmuls/convs left outside autocast",
        )
    return False, f"compute capability {cc[0]}.{cc[1]}: TF32 needs Ampere (8.0) or newer"


ACCELERATION = Acceleration(
    key="accel.tf32",
    record="tf32",
    exact=False,
    order=10,
    apply=lambda on, ctx: apply_tf32(bool(on), ctx.device),
    probe=_rule,
    rung=Rung("tf32", "+ TF32", {"accel.tf32": True}, ("tf32",)),
    devices=("cuda",),
    device_note="TF32 is an NVIDIA tensor-core format",
    card=Card(
        title="TF32",
        what='fp32 matmuls (`torch.set_float32_matmul_precision("high")`) and cuDNN convolutions '
        "(`cudnn.allow_tf32`) use TF32 tensor cores (10-bit mantissa inputs, fp32 accumulate).",
        helps="whatever stays in fp32 (precision fp32, or ops autocast keeps in fp32) on Ampere+.",
        costs="precision of those matmuls. Off sets `highest` precision.",
        auto="on for compute capability 8.0+; not applicable on the CPU or older GPUs.",
        own_loop='`apply_tf32(True, "cuda")`.',
    ),
)
