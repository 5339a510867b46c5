"""Allocator statistics, memory cap record and the retry-storm detector (CPU)."""

from __future__ import annotations

import pytest
import torch

from speechtrain.memory.stats import (
    RetryStormDetector,
    format_bytes,
    memory_stats,
    peak_bytes,
    reset_peak,
    set_memory_fraction,
)


def test_cpu_stats_report_rss_and_leave_cuda_keys_empty() -> None:
    stats = memory_stats("cpu")
    assert stats["device"] == "cpu"
    assert isinstance(stats["rss"], int) and stats["rss"] > 0
    assert isinstance(stats["peak_rss"], int) and stats["peak_rss"] >= stats["rss"]
    for key in ("allocated", "reserved", "peak", "fragmentation", "alloc_retries", "num_ooms"):
        assert stats[key] is None
    assert peak_bytes("cpu") >= stats["peak_rss"]  # a high-water mark only falls on reset


def test_cpu_peak_rss_grows_with_a_large_allocation() -> None:
    import mmap

    size = 64 * 1024 * 1024
    before = memory_stats("cpu")["peak_rss"]
    block = mmap.mmap(-1, size)  # 64 MiB of its own pages (malloc's settings cannot keep them after close)
    for offset in range(0, size, mmap.PAGESIZE):
        block[offset] = 1  # touched
    after = memory_stats("cpu")["peak_rss"]
    assert after >= before
    assert memory_stats("cpu")["rss"] >= size // 2
    block.close()
    if reset_peak("cpu"):  # Linux: the high-water mark restarts from the current RSS
        stats = memory_stats("cpu")
        assert stats["peak_rss"] < after
        assert stats["peak_rss"] - stats["rss"] < 16 * 1024 * 1024


def test_memory_fraction_is_not_applied_on_cpu_and_says_why() -> None:
    record = set_memory_fraction(0.5, "cpu")
    assert record.name == "memory_fraction"
    assert record.applied is False
    assert "cpu" in record.detail
    assert set_memory_fraction(None, "cpu").applied is False
    with pytest.raises(ValueError):
        set_memory_fraction(1.5, "cpu")


def test_format_bytes() -> None:
    assert format_bytes(3 * 1024**3) == "3.00 GiB"
    assert format_bytes(None) == "-"
    assert format_bytes(512 * 1024**2) == "0.500 GiB"
    assert format_bytes(3 * 1024**2) == "0.003 GiB (3.0 MiB)"


def test_retry_storm_detector_warns_only_when_retries_jump() -> None:
    det = RetryStormDetector(threshold=5)
    assert det.update({"alloc_retries": None}) is None  # CPU: nothing to watch
    assert det.update({"alloc_retries": 100, "fragmentation": 0.3}) is None  # first reading is the baseline
    assert det.update({"alloc_retries": 103, "fragmentation": 0.3}) is None  # +3 <= 5
    msg = det.update({"alloc_retries": 120, "fragmentation": 0.4})  # +17 > 5
    assert msg is not None
    assert "data.max_frames" in msg and "expandable_segments:True" in msg and "tune" in msg
    assert det.warnings == 1
    assert det.update({"alloc_retries": 121}) is None
    state = det.state_dict()
    other = RetryStormDetector(threshold=1)
    other.load_state_dict(state)
    assert other.threshold == 5 and other.last == 121 and other.warnings == 1


@pytest.mark.gpu
def test_cuda_stats_are_consistent() -> None:
    reset_peak("cuda")
    x = torch.empty(256 * 1024 * 1024, dtype=torch.uint8, device="cuda")
    stats = memory_stats("cuda")
    assert stats["allocated"] >= x.numel()
    assert stats["reserved"] >= stats["allocated"]
    assert stats["peak"] >= stats["allocated"]
    assert 0.0 <= stats["fragmentation"] <= 1.0
    assert stats["alloc_retries"] >= 0 and stats["num_ooms"] >= 0
    assert stats["rss"] is None
