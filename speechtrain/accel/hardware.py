"""What the machine has: GPU name, memory, compute capability, bf16, peak matrix TFLOP/s and memory
bandwidth (from a table of known GPUs or a quick measurement), CPU cores and bf16 units, RAM, torch
version. :mod:`speechtrain.accel.probe` turns it into the recommendation; each acceleration's module
holds its own rule (:class:`speechtrain.accel.catalog.Acceleration`)."""

from __future__ import annotations

import functools
import os
import platform
import re
import shutil
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

GIB = 1024**3


@dataclass(frozen=True)
class GpuSpec:
    """Vendor peak figures of one GPU: dense tensor-core TFLOP/s (no sparsity; fp32 accumulate
    on GeForce cards), plain fp32 TFLOP/s and memory bandwidth in GB/s (1e9 bytes/s)."""

    name: str
    bf16_tflops: float | None  # None: no bf16 tensor cores
    fp16_tflops: float
    tf32_tflops: float | None  # None: no TF32
    fp32_tflops: float
    bandwidth_gbs: float


# (regex on torch.cuda.get_device_name, min memory GiB to tell 40/80 GB parts apart, spec).
# Most specific first. Dense figures from the vendors' data sheets / architecture whitepapers.
GPU_TABLE: list[tuple[str, float, GpuSpec]] = [
    (r"B200", 0, GpuSpec("B200", 2250.0, 2250.0, 1100.0, 75.0, 8000.0)),
    (r"H200", 0, GpuSpec("H200", 989.5, 989.5, 494.7, 66.9, 4800.0)),
    (r"H100.*PCIe", 0, GpuSpec("H100 PCIe", 756.5, 756.5, 378.0, 51.2, 2000.0)),
    (r"H100", 0, GpuSpec("H100 SXM", 989.5, 989.5, 494.7, 66.9, 3350.0)),
    (r"A100.*(PCIe|PCIE)", 60, GpuSpec("A100 80GB PCIe", 312.0, 312.0, 156.0, 19.5, 1935.0)),
    (r"A100", 60, GpuSpec("A100 80GB SXM", 312.0, 312.0, 156.0, 19.5, 2039.0)),
    (r"A100", 0, GpuSpec("A100 40GB", 312.0, 312.0, 156.0, 19.5, 1555.0)),
    (r"L40S", 0, GpuSpec("L40S", 362.1, 362.1, 183.0, 91.6, 864.0)),
    (r"L40\b", 0, GpuSpec("L40", 181.0, 181.0, 90.5, 90.5, 864.0)),
    (r"\bL4\b", 0, GpuSpec("L4", 121.0, 121.0, 60.0, 30.3, 300.0)),
    (r"A10G", 0, GpuSpec("A10G", 70.0, 70.0, 35.0, 31.2, 600.0)),
    (r"\bA10\b", 0, GpuSpec("A10", 125.0, 125.0, 62.5, 31.2, 600.0)),
    (r"V100", 0, GpuSpec("V100", None, 125.0, None, 15.7, 900.0)),
    (r"\bT4\b", 0, GpuSpec("T4", None, 65.0, None, 8.1, 320.0)),
    (r"RTX 5090", 0, GpuSpec("RTX 5090", 209.5, 209.5, 104.8, 104.8, 1792.0)),
    (r"RTX 4090", 0, GpuSpec("RTX 4090", 165.2, 165.2, 82.6, 82.6, 1008.0)),
    (r"RTX 4080", 0, GpuSpec("RTX 4080", 97.5, 97.5, 48.7, 48.7, 716.8)),
    (r"RTX 4070", 0, GpuSpec("RTX 4070", 58.3, 58.3, 29.1, 29.1, 504.0)),
    (r"RTX 4060", 0, GpuSpec("RTX 4060", 30.2, 30.2, 15.1, 15.1, 272.0)),
    (r"RTX 3090", 0, GpuSpec("RTX 3090", 71.0, 71.0, 35.6, 35.6, 936.0)),
]


def lookup_gpu(name: str, memory_bytes: int = 0) -> GpuSpec | None:
    """The table entry for a GPU name as torch reports it (``None`` when unknown)."""
    for pattern, min_gib, spec in GPU_TABLE:
        if re.search(pattern, name) and memory_bytes / GIB >= min_gib:
            return spec
    return None


@dataclass
class HardwareInfo:
    """What the machine has. GPU fields are ``None`` on a CPU-only machine."""

    device_type: str  # "cuda" or "cpu"
    gpu_name: str | None = None
    gpu_count: int = 0
    gpu_memory_bytes: int | None = None
    compute_capability: tuple[int, int] | None = None
    bf16_supported: bool = False
    peak_bf16_tflops: float | None = None
    peak_fp16_tflops: float | None = None
    peak_tf32_tflops: float | None = None
    peak_fp32_tflops: float | None = None
    memory_bandwidth_gbs: float | None = None
    peak_source: str = "unknown"  # "table: <name>", "measured", "unknown"
    measured_matmul_tflops: float | None = None
    measured_matmul_dtype: str | None = None
    measured_copy_gbs: float | None = None
    cpu_cores: int = 1
    cpu_name: str = ""
    cpu_bf16: bool = False  # bf16 matrix instructions (AVX512-BF16 or AMX)
    ram_bytes: int | None = None
    torch_version: str = ""
    cuda_version: str | None = None
    cudnn_version: int | None = None
    triton_available: bool = False
    compiler_available: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def has_gpu(self) -> bool:
        return self.device_type == "cuda"

    @property
    def gpu_memory_gib(self) -> float | None:
        return None if self.gpu_memory_bytes is None else self.gpu_memory_bytes / GIB

    @property
    def ampere_or_newer(self) -> bool:
        return self.compute_capability is not None and self.compute_capability >= (8, 0)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if self.compute_capability is not None:
            out["compute_capability"] = f"{self.compute_capability[0]}.{self.compute_capability[1]}"
        out["gpu_memory_gib"] = None if self.gpu_memory_gib is None else round(self.gpu_memory_gib, 2)
        out["ram_gib"] = None if self.ram_bytes is None else round(self.ram_bytes / GIB, 2)
        return out


def _ram_bytes() -> int | None:
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def _cpuinfo(field: str) -> str | None:
    """The first value of ``field`` in /proc/cpuinfo (Linux), else None."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith(field):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def cpu_bf16_instructions() -> bool:
    """True when the CPU has bf16 matrix instructions (AVX512-BF16 or AMX-BF16)."""
    return bool(set((_cpuinfo("flags") or "").split()) & {"avx512_bf16", "amx_bf16"})


def cpu_name() -> str:
    return _cpuinfo("model name") or platform.processor() or platform.machine()


def _cpu_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _triton_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("triton") is not None


def _cuda_index(device: str | torch.device | None) -> int | None:
    """The CUDA device index to probe, or None for a CPU probe."""
    if device is None:
        return torch.cuda.current_device() if torch.cuda.is_available() else None
    dev = torch.device(device)
    if dev.type != "cuda":
        return None
    if not torch.cuda.is_available():
        from speechtrain.errors import UserError

        raise UserError(f"device '{device}' asked for, but torch sees no CUDA GPU (torch {torch.__version__})")
    return dev.index if dev.index is not None else torch.cuda.current_device()


def probe_hardware(measure: bool = False, device: str | torch.device | None = None) -> HardwareInfo:
    """Probe the machine: the GPU ``device`` (default: the current CUDA device if any, else CPU).

    With ``measure`` also time a matmul (TFLOP/s) and a copy (GB/s), a few seconds at most;
    the measured matmul figure then also serves as the peak for MFU when the GPU is not in the table.
    """
    info = HardwareInfo(
        device_type="cpu",
        cpu_cores=_cpu_cores(),
        cpu_name=cpu_name(),
        cpu_bf16=cpu_bf16_instructions(),
        ram_bytes=_ram_bytes(),
        torch_version=torch.__version__,
        cuda_version=torch.version.cuda,
        triton_available=_triton_available(),
        compiler_available=shutil.which(os.environ.get("CXX", "g++")) is not None
        or shutil.which("c++") is not None
        or shutil.which("clang++") is not None,
    )
    index = _cuda_index(device)
    if index is not None:
        props = torch.cuda.get_device_properties(index)
        info.device_type = "cuda"
        info.gpu_name = props.name
        info.gpu_count = torch.cuda.device_count()
        info.gpu_memory_bytes = int(props.total_memory)
        info.compute_capability = (props.major, props.minor)
        info.bf16_supported = info.compute_capability >= (8, 0)
        info.cudnn_version = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
        spec = lookup_gpu(props.name, props.total_memory)
        if spec is not None:
            info.peak_bf16_tflops = spec.bf16_tflops
            info.peak_fp16_tflops = spec.fp16_tflops
            info.peak_tf32_tflops = spec.tf32_tflops
            info.peak_fp32_tflops = spec.fp32_tflops
            info.memory_bandwidth_gbs = spec.bandwidth_gbs
            info.peak_source = f"table: {spec.name}"
        else:
            info.notes.append(f"'{props.name}' is not in the GPU table; use --measure for peak figures")
    if measure:
        try:
            _measure(info, index)
        except torch.OutOfMemoryError:
            info.notes.append("measurement skipped: not enough free memory for the test matrices")
            if index is not None:
                torch.cuda.empty_cache()
    return info


@functools.lru_cache(maxsize=8)
def cached_probe(device: str) -> HardwareInfo:
    """:func:`probe_hardware` for ``device``, probed once per process (no measurement)."""
    return probe_hardware(measure=False, device=device)


def _measure(info: HardwareInfo, index: int | None) -> None:
    if index is not None:
        dev = torch.device("cuda", index)
        dtype = torch.bfloat16 if info.bf16_supported else torch.float16
        n, reps = 8192, 20
        copy_bytes = 512 * 1024**2
    else:
        dev = torch.device("cpu")
        dtype = torch.float32
        n, reps = 1024, 5
        copy_bytes = 64 * 1024**2
    a = torch.randn(n, n, device=dev, dtype=dtype)
    b = torch.randn(n, n, device=dev, dtype=dtype)
    seconds = _timed(lambda: torch.mm(a, b), reps, dev)
    info.measured_matmul_tflops = 2 * n**3 / seconds / 1e12
    info.measured_matmul_dtype = str(dtype).replace("torch.", "")
    src = torch.empty(copy_bytes // 4, device=dev, dtype=torch.float32)
    dst = torch.empty_like(src)
    seconds = _timed(lambda: dst.copy_(src), reps, dev)
    info.measured_copy_gbs = 2 * copy_bytes / seconds / 1e9  # each copy reads and writes every byte
    if info.peak_source == "unknown":
        info.peak_source = "measured"
        if index is None:
            info.peak_fp32_tflops = info.measured_matmul_tflops
        elif info.bf16_supported:
            info.peak_bf16_tflops = info.peak_fp16_tflops = info.measured_matmul_tflops
        else:
            info.peak_fp16_tflops = info.measured_matmul_tflops
        info.memory_bandwidth_gbs = info.measured_copy_gbs


def _timed(fn: Any, reps: int, dev: torch.device) -> float:
    """Seconds per call of ``fn`` after one warm-up call."""
    fn()
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)  # host-device sync: timing needs the queue drained
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1000 / reps
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t0) / reps


def peak_flops(info: HardwareInfo, dtype: str | torch.dtype, tf32: bool = False) -> float | None:
    """Peak FLOP/s for matmuls in ``dtype`` (bf16, fp16, fp32, tf32; or ``tf32=True`` for fp32
    with TF32 on), for MFU.

    ``None`` when unknown (a GPU not in the table without ``measure``, a CPU without ``measure``).
    """
    name = str(dtype).replace("torch.", "")
    name = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32", "float": "fp32"}.get(name, name)
    if name == "tf32":
        name, tf32 = "fp32", True
    if name == "bf16":
        tflops = info.peak_bf16_tflops
    elif name == "fp16":
        tflops = info.peak_fp16_tflops
    elif name == "fp32":
        tflops = (info.peak_tf32_tflops if tf32 else None) or info.peak_fp32_tflops
    else:
        raise ValueError(f"peak_flops: unknown dtype '{dtype}' (bf16, fp16, fp32, tf32)")
    return None if tflops is None else tflops * 1e12
