"""The CPU allocator: keep large tensor buffers in the heap instead of a fresh mmap per allocation.

glibc's malloc serves every allocation above its mmap threshold (128 KiB, rising to at most 32 MiB
as it adapts) with a fresh ``mmap`` and gives it back with ``munmap`` when freed. A training step
on the CPU allocates and frees the same large activations again and again, e.g. the (B, heads, S, S)
scores of explicit attention, so every step pays page faults to zero fresh pages: measured on this
project's 2-core machine, 20 steps of a 16 x 4 x 600 x 600 explicit attention took 3.6 M minor
faults and 9 s of kernel time; with :func:`apply_cpu_allocator` 0.05 M faults and 0.5 s, and
the wall time fell 1.3x (``python bench/bench_allocator.py --repeat 3``, machine shared with other jobs).

The fix is two ``mallopt`` calls at run time: no mmap for large blocks (``M_MMAP_MAX = 0``) and a
high trim threshold, so freed blocks are reused instead of returned to the kernel. Same maths, same
results; the cost is that the process keeps its peak heap until it exits (what a training process
does anyway). Only glibc on Linux has these knobs: elsewhere the record says why it did not apply.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import platform
import sys
from typing import TYPE_CHECKING, Any

from speechtrain.accel.catalog import Acceleration, Card, Rung
from speechtrain.accel.record import AccelRecord

if TYPE_CHECKING:
    from speechtrain.accel.hardware import HardwareInfo

M_TRIM_THRESHOLD = -1  # glibc <malloc.h>
M_MMAP_MAX = -4
TRIM_THRESHOLD_BYTES = 1 << 30

_applied = False


def _glibc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    libc_name, _version = platform.libc_ver()
    if libc_name != "glibc":
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None


def apply_cpu_allocator(enabled: bool) -> AccelRecord:
    """Tune glibc malloc for training (process-wide, idempotent): see the module docstring."""
    global _applied
    if not enabled:
        if _applied:  # mallopt is process-wide and not undone here
            return AccelRecord(
                "cpu_allocator",
                False,
                True,
                "disabled here, but an earlier call already tuned malloc in this process (process-wide, not undone)",
            )
        return AccelRecord("cpu_allocator", False, True, "disabled (glibc defaults: large blocks mmap'ed per use)")
    libc = _glibc()
    if libc is None:
        return AccelRecord("cpu_allocator", False, True, f"not applied: needs glibc on Linux (this is {sys.platform})")
    if not _applied:
        ok = libc.mallopt(M_MMAP_MAX, 0) == 1 and libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES) == 1
        if not ok:
            return AccelRecord("cpu_allocator", False, True, "not applied: mallopt refused the settings")
        _applied = True
    return AccelRecord(
        "cpu_allocator",
        True,
        True,
        "glibc malloc: large blocks from the heap (M_MMAP_MAX=0), freed memory kept up to 1 GiB "
        "(M_TRIM_THRESHOLD): no page-fault storm from per-step mmap/munmap",
        {"M_MMAP_MAX": 0, "M_TRIM_THRESHOLD": TRIM_THRESHOLD_BYTES},
    )


def page_faults() -> int:
    """Minor page faults of this process so far (the number the allocator setting lowers)."""
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_minflt)


def _rule(info: HardwareInfo) -> tuple[Any, str]:
    if info.has_gpu:
        return False, "GPU training: the step's tensors live in CUDA memory, not in the host heap"
    if _glibc() is None:
        return False, "needs glibc on Linux (mallopt)"
    return True, (
        "CPU training on glibc Linux: keep large activations in the heap instead of mmap/munmap per step "
        "(page faults fall 5-70x; bench/bench_allocator.py)"
    )


ACCELERATION = Acceleration(
    key="accel.cpu_allocator",
    record="cpu_allocator",
    exact=True,
    order=35,  # process-wide, before the model changes
    apply=lambda on, ctx: apply_cpu_allocator(bool(on)),
    probe=_rule,
    rung=Rung(
        "cpu_allocator", "+ CPU allocator (glibc malloc tuned)", {"accel.cpu_allocator": True}, ("cpu_allocator",)
    ),
    card=Card(
        title="CPU allocator",
        what="`apply_cpu_allocator(True)` (`speechtrain/accel/allocator.py`) makes two `mallopt` calls: "
        "`M_MMAP_MAX=0` (large blocks come from the heap instead of a fresh `mmap` each) and a 1 GiB "
        "`M_TRIM_THRESHOLD` (freed memory is kept for the next step instead of returned to the kernel).",
        helps="CPU training, whose step allocates and frees the same large activations again and again (e.g. the "
        "(B, heads, S, S) scores of explicit attention): with glibc's defaults each one is a fresh mmap whose pages "
        "fault in again every step. `python bench/bench_allocator.py --repeat 3` counts the page faults and times "
        "both settings: on the 2-core development VM (2026-11-23), explicit attention 16x4x600x600, minor faults "
        "3,659,936 -> 34,500 and wall 26.1 s -> 18.8 s (x1.39). In the GPT-TTS ladder, whose attention is SDPA, "
        "faults per step fell 2226 -> 462 but the rate did not change (0.99x): it pays where a model's step frees "
        "and re-allocates large temporaries (docs/benchmarks.md).",
        costs="the process keeps its peak heap until it exits. Process-wide: it cannot be undone in the process (a "
        "later `apply_cpu_allocator(False)` says so in its record).",
        exact_note="(the same maths; only where memory comes from changes).",
        auto="on for CPU training on glibc Linux, off on GPUs (the step's tensors live in CUDA memory) and where there "
        'is no glibc (the record says why). The record is in `accel.json`; the ladder row "+ CPU allocator" '
        'measures it on top of "all off" (which keeps glibc\'s defaults, as the plain loop does).',
        own_loop="`apply_cpu_allocator(True)` once, before training.",
    ),
)
