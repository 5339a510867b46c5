"""Accelerations as pure functions that say whether they took effect, and the hardware probe.

Each ``apply_xxx`` works on a model (or the process backends) and returns an
:class:`AccelRecord`; a user's own training loop can call them without the Trainer. Each lives in its
own module, which declares it (``ACCELERATION``, see :mod:`speechtrain.accel.catalog`): the probe, the
apply path, the ablation ladder and the docs cards read that table.
:func:`apply_accelerations` applies a whole ``accel`` config section, resolving ``auto`` through
:func:`recommend`'s rules for the device. See docs/accelerations.md.
"""

from speechtrain.accel.allocator import apply_cpu_allocator
from speechtrain.accel.apply import AccelPlan, apply_accelerations
from speechtrain.accel.catalog import Acceleration, Card, Rung, accelerations
from speechtrain.accel.checkpointing import (
    apply_activation_checkpointing,
    find_repeated_blocks,
    remove_activation_checkpointing,
)
from speechtrain.accel.compile import apply_compile, compile_stats, recompile_count
from speechtrain.accel.cudnn_benchmark import apply_cudnn_benchmark
from speechtrain.accel.deterministic import apply_deterministic
from speechtrain.accel.memory_format import apply_channels_last
from speechtrain.accel.optim import (
    CombinedOptimizer,
    FlatMuon,
    SingingVocodersMuon,
    build_optimizer,
    muon_partition,
)
from speechtrain.accel.precision import PrecisionPlan, bf16_supported, fp32_region, resolve_precision
from speechtrain.accel.probe import (
    HardwareInfo,
    Recommendation,
    as_overrides,
    decide,
    lookup_gpu,
    peak_flops,
    probe_hardware,
    recommend,
)
from speechtrain.accel.record import AccelRecord, merge_records
from speechtrain.accel.sdpa import apply_sdpa, attention_modules, sdpa_backends
from speechtrain.accel.tf32 import apply_tf32

__all__ = [
    "AccelPlan",
    "AccelRecord",
    "Acceleration",
    "Card",
    "Rung",
    "accelerations",
    "CombinedOptimizer",
    "FlatMuon",
    "SingingVocodersMuon",
    "HardwareInfo",
    "PrecisionPlan",
    "Recommendation",
    "apply_accelerations",
    "apply_activation_checkpointing",
    "apply_channels_last",
    "apply_compile",
    "apply_cpu_allocator",
    "apply_cudnn_benchmark",
    "apply_deterministic",
    "apply_sdpa",
    "apply_tf32",
    "as_overrides",
    "attention_modules",
    "bf16_supported",
    "build_optimizer",
    "compile_stats",
    "decide",
    "find_repeated_blocks",
    "fp32_region",
    "lookup_gpu",
    "merge_records",
    "muon_partition",
    "peak_flops",
    "probe_hardware",
    "recommend",
    "recompile_count",
    "remove_activation_checkpointing",
    "resolve_precision",
    "sdpa_backends",
]
