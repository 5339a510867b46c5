"""cuDNN autotuning: the fastest conv algorithm is searched once per input shape."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from speechtrain.accel.catalog import Acceleration, Card, Rung
from speechtrain.accel.record import AccelRecord

if TYPE_CHECKING:
    from speechtrain.accel.hardware import HardwareInfo


def apply_cudnn_benchmark(enabled: bool, device: str | torch.device, deterministic: bool = False) -> AccelRecord:
    """cuDNN autotuning: the fastest conv algorithm is searched once per input shape (exact maths;
    each new shape pays a search, so it suits bucketed batches that repeat shapes)."""
    dev = torch.device(device)
    if dev.type != "cuda":
        return AccelRecord("cudnn_benchmark", False, True, f"not applicable on {dev.type}: cuDNN runs on CUDA GPUs")
    if deterministic and enabled:
        torch.backends.cudnn.benchmark = False
        return AccelRecord(
            "cudnn_benchmark", False, True, "turned off by accel.deterministic (autotuning picks kernels by timing)"
        )
    if not torch.backends.cudnn.is_available():
        return AccelRecord("cudnn_benchmark", False, True, "not applied: cuDNN is not available in this torch build")
    torch.backends.cudnn.benchmark = bool(enabled)
    if not enabled:
        return AccelRecord("cudnn_benchmark", False, True, "disabled: cuDNN picks conv algorithms by heuristics")
    return AccelRecord(
        "cudnn_benchmark",
        True,
        True,
        "cuDNN autotunes conv algorithms per input shape",
        {"cudnn_version": torch.backends.cudnn.version()},
    )


def _rule(info: HardwareInfo) -> tuple[Any, str]:
    if not info.has_gpu:
        return False, "no GPU: cuDNN is not used on the CPU"
    return True, "cuDNN autotunes each conv shape once; bucketed batches repeat shapes"


ACCELERATION = Acceleration(
    key="accel.cudnn_benchmark",
    record="cudnn_benchmark",
    exact=True,
    order=20,
    apply=lambda on, ctx: apply_cudnn_benchmark(bool(on), ctx.device, bool(ctx.section.deterministic)),
    probe=_rule,
    rung=Rung("cudnn_benchmark", "+ cuDNN autotune", {"accel.cudnn_benchmark": True}, ("cudnn_benchmark",)),
    devices=("cuda",),
    device_note="cuDNN runs only on NVIDIA GPUs",
    card=Card(
        title="cuDNN autotuning",
        what="`torch.backends.cudnn.benchmark = True`: cuDNN times its conv algorithms once per input shape and "
        "keeps the fastest.",
        helps="conv models (vocoders, CNN classifiers) whose shapes repeat — duration-bucketed batches with "
        "`data.pad_multiple` keep the number of shapes small.",
        costs="one search per new shape (a slow first step per bucket); extra workspace memory.",
        exact_note="(same maths, maybe different algorithm). Turned off by `accel.deterministic`.",
        auto="on with a GPU.",
        own_loop='`apply_cudnn_benchmark(True, "cuda", deterministic=False)`.',
    ),
)
