"""speechtrain probe [--json] [--measure] [--device cuda:0]"""

from __future__ import annotations

import argparse
import json


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser("probe", help="show the hardware and the recommended settings, with reasons")
    p.add_argument("--json", action="store_true", help="print one JSON object {device, recommendation}")
    p.add_argument("--measure", action="store_true", help="also time a matmul (TFLOP/s) and a copy (GB/s)")
    p.add_argument("--device", default=None, help="device to probe (default: the current GPU, else the CPU)")
    return p


def _fmt(value: object, unit: str = "", digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}{unit}"
    return f"{value}{unit}"


def run(args: argparse.Namespace) -> int:
    from speechtrain.accel.probe import as_overrides, probe_hardware, recommend

    info = probe_hardware(measure=args.measure, device=args.device)
    recs = recommend(info)
    if args.json:
        print(json.dumps({"device": info.to_dict(), "recommendation": [r.to_dict() for r in recs]}, indent=2))
        return 0
    d = info.to_dict()
    rows = [
        ("device", info.device_type),
        ("GPU", _fmt(info.gpu_name)),
        ("GPU count", _fmt(info.gpu_count)),
        ("GPU memory", _fmt(d["gpu_memory_gib"], " GiB")),
        ("compute capability", _fmt(d["compute_capability"])),
        ("GPU bf16", "yes" if info.bf16_supported else "no"),
        ("peak bf16 matrix", _fmt(info.peak_bf16_tflops, " TFLOP/s")),
        ("peak fp16 matrix", _fmt(info.peak_fp16_tflops, " TFLOP/s")),
        ("peak fp32", _fmt(info.peak_fp32_tflops, " TFLOP/s")),
        ("memory bandwidth", _fmt(info.memory_bandwidth_gbs, " GB/s", 0)),
        ("peak figures from", info.peak_source),
    ]
    if args.measure:
        rows += [
            (f"measured matmul ({info.measured_matmul_dtype})", _fmt(info.measured_matmul_tflops, " TFLOP/s", 2)),
            ("measured copy", _fmt(info.measured_copy_gbs, " GB/s", 1)),
        ]
    rows += [
        ("CPU", f"{info.cpu_name} ({info.cpu_cores} cores)"),
        ("CPU bf16 units", "yes (AVX512-BF16/AMX)" if info.cpu_bf16 else "no"),
        ("RAM", _fmt(d["ram_gib"], " GiB")),
        ("torch", f"{info.torch_version} (CUDA {info.cuda_version or '-'}, cuDNN {info.cudnn_version or '-'})"),
        ("triton", "yes" if info.triton_available else "no"),
        ("C++ compiler", "yes" if info.compiler_available else "no"),
    ]
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    for note in info.notes:
        print(f"note: {note}")
    print("\nrecommendation:")
    kw = max(len(r.key) for r in recs)
    for r in recs:
        value = str(r.value).lower() if isinstance(r.value, bool) else r.value
        print(f"  {r.key:<{kw}} = {str(value):<8} {r.reason}")
    print("\nas overrides: " + " ".join(as_overrides(recs)))
    return 0
