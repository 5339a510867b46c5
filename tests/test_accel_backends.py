"""Backend switches and precision plans on the CPU (and their GPU counterparts, skipped here)."""

from __future__ import annotations

import pytest
import torch

from speechtrain.accel import (
    apply_cudnn_benchmark,
    apply_deterministic,
    apply_sdpa,
    apply_tf32,
    fp32_region,
    resolve_precision,
)
from speechtrain.config import ConfigError


@pytest.fixture
def restore_determinism():
    before = torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.deterministic
    yield
    torch.use_deterministic_algorithms(before[0])
    torch.backends.cudnn.deterministic = before[1]


def test_tf32_and_cudnn_not_applicable_on_cpu():
    rec = apply_tf32(True, "cpu")
    assert not rec.applied and not rec.exact and "not applicable on cpu" in rec.detail
    rec = apply_cudnn_benchmark(True, "cpu", deterministic=False)
    assert not rec.applied and "cuDNN" in rec.detail


def test_deterministic_switches_torch_and_back(restore_determinism):
    rec = apply_deterministic(True)
    assert rec.applied and torch.are_deterministic_algorithms_enabled() and torch.backends.cudnn.deterministic
    rec = apply_deterministic(False)
    assert not rec.applied and not torch.are_deterministic_algorithms_enabled()


def test_precision_auto_on_cpu_is_fp32_with_reason():
    plan = resolve_precision("auto", "cpu")
    assert plan.name == "fp32" and plan.amp_dtype is None and not plan.use_grad_scaler
    assert "no GPU" in plan.reason and plan.fallback() is None
    with plan.autocast():
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.float32
    assert not plan.record().applied and plan.record().exact


def test_precision_bf16_on_cpu_autocasts_and_falls_back_to_fp32():
    plan = resolve_precision("bf16", "cpu")
    assert plan.amp_dtype == torch.bfloat16 and not plan.use_grad_scaler
    with plan.autocast():
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.bfloat16
        with fp32_region():
            assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.float32
    rec = plan.record()
    assert rec.applied and not rec.exact
    assert plan.fallback().name == "fp32"


def test_precision_fp16_uses_scaler_and_falls_back_through_bf16():
    plan = resolve_precision("fp16", "cpu")
    assert plan.amp_dtype == torch.float16 and plan.use_grad_scaler and plan.grad_scaler().is_enabled()
    assert "grad scaler" in plan.record().detail
    nxt = plan.fallback()
    assert nxt.name == "bf16" and nxt.fallback().name == "fp32" and nxt.fallback().fallback() is None
    assert not nxt.grad_scaler().is_enabled()


def test_precision_bad_requests_fail_before_gpu_work():
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="precision=fp16"):
            resolve_precision("bf16", "cuda")
    with pytest.raises(ConfigError, match="unknown value"):
        resolve_precision("int8", "cpu")


@pytest.mark.gpu
def test_bf16_autocast_on_cuda():
    plan = resolve_precision("auto", "cuda")
    if torch.cuda.get_device_capability() >= (8, 0):
        assert plan.name == "bf16"
    else:
        assert plan.name == "fp16" and plan.use_grad_scaler
    with plan.autocast():
        x = torch.ones(4, 4, device="cuda")
        assert (x @ x).dtype == plan.amp_dtype


@pytest.mark.gpu
def test_tf32_and_cudnn_benchmark_on_cuda():
    rec = apply_tf32(True, "cuda")
    if torch.cuda.get_device_capability() >= (8, 0):
        assert rec.applied and torch.get_float32_matmul_precision() == "high"
    rec = apply_cudnn_benchmark(True, "cuda")
    assert rec.applied and torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = False
    torch.set_float32_matmul_precision("highest")


@pytest.mark.gpu
def test_flash_sdpa_usable_on_ampere():
    from torch import nn

    class Attn(nn.Module):
        use_sdpa = False

    rec = apply_sdpa(nn.Sequential(Attn()), True, "cuda")
    assert rec.applied and "math" in rec.info["usable_backends"]
    if torch.cuda.get_device_capability() >= (8, 0) and torch.backends.cuda.is_flash_attention_available():
        assert "flash" in rec.info["usable_backends"]
