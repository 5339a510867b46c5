"""Process-wide backend switches: TF32, cuDNN autotuning, deterministic algorithms."""

from __future__ import annotations

import os

import torch

from speechtrain.accel.record import AccelRecord


def _capability(device: torch.device) -> tuple[int, int] | None:
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    index = device.index if device.index is not None else torch.cuda.current_device()
    return torch.cuda.get_device_capability(index)


def apply_tf32(enabled: bool, device: str | torch.device) -> AccelRecord:
    """TF32 tensor cores for fp32 matmuls and convolutions (Ampere and newer; approximate:
    10-bit mantissa inputs, fp32 accumulate). Disabled: fp32 matmuls in full precision."""
    dev = torch.device(device)
    cc = _capability(dev)
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


def apply_deterministic(enabled: bool) -> AccelRecord:
    """Deterministic algorithms everywhere (same result every run; slower, and some ops raise).

    Sets ``torch.use_deterministic_algorithms``, ``cudnn.deterministic`` and, for cuBLAS,
    ``CUBLAS_WORKSPACE_CONFIG=:4096:8`` when not set (it must be set before the first cuBLAS call).
    Disabled: the defaults are restored (non-deterministic kernels allowed).
    """
    torch.use_deterministic_algorithms(bool(enabled))
    torch.backends.cudnn.deterministic = bool(enabled)
    if not enabled:
        return AccelRecord("deterministic", False, True, "off: fastest kernels, results may vary in the last bits")
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.backends.cudnn.benchmark = False
    return AccelRecord(
        "deterministic",
        True,
        True,
        "deterministic algorithms on, cuDNN autotuning off (slower; non-deterministic ops raise)",
        {"CUBLAS_WORKSPACE_CONFIG": os.environ["CUBLAS_WORKSPACE_CONFIG"]},
    )
