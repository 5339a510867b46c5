"""Hardware probe: JSON shape, GPU table, and the recommendation rules for each class of machine."""

from __future__ import annotations

import json

import pytest

from speechtrain.accel import HardwareInfo, as_overrides, decide, lookup_gpu, peak_flops, probe_hardware, recommend
from speechtrain.cli.main import main
from speechtrain.config import load_config

GIB = 1024**3


def _gpu(name: str, gib: float, cc: tuple[int, int], triton: bool = True) -> HardwareInfo:
    spec = lookup_gpu(name, int(gib * GIB))
    return HardwareInfo(
        device_type="cuda",
        gpu_name=name,
        gpu_count=1,
        gpu_memory_bytes=int(gib * GIB),
        compute_capability=cc,
        bf16_supported=cc >= (8, 0),
        peak_bf16_tflops=spec.bf16_tflops if spec else None,
        peak_fp16_tflops=spec.fp16_tflops if spec else None,
        peak_fp32_tflops=spec.fp32_tflops if spec else None,
        cpu_cores=16,
        triton_available=triton,
    )


def _values(info: HardwareInfo) -> dict:
    return {k: r.value for k, r in decide(info).items()}


def test_probe_cli_json_shape(capsys):
    assert main(["probe", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"device", "recommendation"}
    assert {"device_type", "cpu_cores", "ram_bytes", "torch_version", "gpu_name"} <= set(out["device"])
    assert out["recommendation"] and all(set(r) == {"key", "value", "reason"} for r in out["recommendation"])
    assert all(r["reason"] for r in out["recommendation"])


def test_probe_cli_table(capsys):
    assert main(["probe"]) == 0
    text = capsys.readouterr().out
    assert "recommendation:" in text and "accel.precision" in text and "torch" in text


def test_probe_cpu_machine_and_measure():
    info = probe_hardware(device="cpu", measure=True)
    assert info.device_type == "cpu" and info.cpu_cores >= 1 and info.ram_bytes and info.ram_bytes > 0
    assert info.measured_matmul_tflops > 0 and info.measured_copy_gbs > 0
    assert peak_flops(info, "fp32") == pytest.approx(info.measured_matmul_tflops * 1e12)
    json.dumps(info.to_dict())


def test_no_gpu_rules():
    info = HardwareInfo(device_type="cpu", cpu_cores=2)
    v = _values(info)
    assert v["accel.precision"] == "fp32" and v["accel.compile"] is False and v["accel.tf32"] is False
    assert v["optim.implementation"] == "foreach" and v["data.num_workers"] == 0
    assert _values(HardwareInfo(device_type="cpu", cpu_cores=32))["data.num_workers"] == 4
    assert "no GPU" in decide(info)["accel.precision"].reason
    with_bf16 = HardwareInfo(device_type="cpu", cpu_cores=2, cpu_bf16=True)  # AVX512-BF16 / AMX
    assert _values(with_bf16)["accel.precision"] == "fp32"  # model-dependent on a CPU: opt in
    assert "accel.precision=bf16" in decide(with_bf16)["accel.precision"].reason


def test_small_gpu_rules_every_memory_saver():
    v = _values(_gpu("NVIDIA GeForce RTX 4060", 7.6, (8, 9)))
    assert v["accel.activation_checkpointing"] is True and v["accel.precision"] == "bf16"
    assert v["note.frame_budget"] == "smaller"
    old_small = _values(_gpu("NVIDIA GeForce GTX 1070", 7.9, (6, 1)))
    assert old_small["accel.precision"] == "fp16" and old_small["accel.activation_checkpointing"] is True


def test_mid_gpu_rules_sdpa_and_checkpointing():
    v = _values(_gpu("Tesla T4", 15.0, (7, 5)))
    assert v["accel.sdpa"] is True and v["accel.activation_checkpointing"] is True
    assert "note.frame_budget" not in v


def test_ampere_plus_rules():
    recs = decide(_gpu("NVIDIA A100-SXM4-80GB", 79.2, (8, 0)))
    v = {k: r.value for k, r in recs.items()}
    assert v["accel.precision"] == "bf16" and v["accel.tf32"] is True and v["accel.cudnn_benchmark"] is True
    assert v["optim.implementation"] == "fused" and v["accel.compile"] is True
    assert v["accel.activation_checkpointing"] is False and v["data.pin_memory"] is True
    assert "8.0" in recs["accel.precision"].reason
    assert _values(_gpu("NVIDIA H100 80GB HBM3", 79.6, (9, 0), triton=False))["accel.compile"] is False


def test_older_gpu_rules_fp16_with_scaler():
    recs = decide(_gpu("Tesla V100-SXM2-32GB", 31.7, (7, 0)))
    assert recs["accel.precision"].value == "fp16" and "grad scaler" in recs["accel.precision"].reason
    assert recs["accel.tf32"].value is False and recs["accel.compile"].value is False


def test_recommendations_are_valid_config_overrides():
    for info in (
        HardwareInfo(device_type="cpu", cpu_cores=8),
        _gpu("NVIDIA L4", 22.0, (8, 9)),
        _gpu("Tesla T4", 15.0, (7, 5)),
        _gpu("NVIDIA GeForce RTX 4060", 7.6, (8, 9)),
    ):
        overrides = as_overrides(recommend(info))
        assert not any(o.startswith("note.") for o in overrides)
        load_config(None, overrides)  # every key and value is accepted by the config


@pytest.mark.parametrize(
    "name,gib,expected",
    [
        ("Tesla T4", 15, "T4"),
        ("Tesla V100-SXM2-16GB", 16, "V100"),
        ("NVIDIA A10", 22, "A10"),
        ("NVIDIA A100-SXM4-40GB", 39.4, "A100 40GB"),
        ("NVIDIA A100-SXM4-80GB", 79.2, "A100 80GB SXM"),
        ("NVIDIA A100 80GB PCIe", 79.2, "A100 80GB PCIe"),
        ("NVIDIA L4", 22, "L4"),
        ("NVIDIA L40S", 44.5, "L40S"),
        ("NVIDIA GeForce RTX 3090", 24, "RTX 3090"),
        ("NVIDIA GeForce RTX 4060", 8, "RTX 4060"),
        ("NVIDIA GeForce RTX 4070", 12, "RTX 4070"),
        ("NVIDIA GeForce RTX 4080", 16, "RTX 4080"),
        ("NVIDIA GeForce RTX 4090", 24, "RTX 4090"),
        ("NVIDIA GeForce RTX 5090", 32, "RTX 5090"),
        ("NVIDIA H100 80GB HBM3", 79.6, "H100 SXM"),
        ("NVIDIA H100 PCIe", 79.6, "H100 PCIe"),
        ("NVIDIA H200", 139.8, "H200"),
        ("NVIDIA B200", 178, "B200"),
    ],
)
def test_gpu_table_lookup(name, gib, expected):
    spec = lookup_gpu(name, int(gib * GIB))
    assert spec is not None and spec.name == expected
    assert spec.fp16_tflops > spec.fp32_tflops and spec.bandwidth_gbs > 0


def test_peak_flops_by_dtype():
    info = _gpu("NVIDIA H100 80GB HBM3", 79.6, (9, 0))
    assert peak_flops(info, "bf16") == pytest.approx(989.5e12)
    info.peak_tf32_tflops = 494.7
    assert peak_flops(info, "float32", tf32=True) == pytest.approx(494.7e12)
    assert peak_flops(info, "tf32") == pytest.approx(494.7e12)
    assert peak_flops(_gpu("Tesla T4", 15, (7, 5)), "bf16") is None  # no bf16 tensor cores
    assert peak_flops(HardwareInfo(device_type="cpu"), "fp32") is None
    with pytest.raises(ValueError, match="unknown dtype"):
        peak_flops(info, "int8")
