"""The CPU allocator acceleration: applied on glibc/Linux with a record either way, and it stops the
page-fault storm of repeatedly allocated large buffers (counted, in a fresh process; not timed)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from speechtrain.accel.allocator import _glibc, apply_cpu_allocator


def test_disabled_record_says_so() -> None:
    rec = apply_cpu_allocator(False)
    assert not rec.applied and rec.exact and "disabled" in rec.detail


_CHILD = textwrap.dedent(
    """
    import json, sys, torch
    from speechtrain.accel.allocator import apply_cpu_allocator, page_faults
    rec = apply_cpu_allocator(sys.argv[1] == "on")
    for _ in range(6):  # warm up: the heap grows to its peak (the first few rounds may still fault)
        x = torch.ones(64, 1024, 1024)
        del x
    before = page_faults()
    for _ in range(30):
        y = torch.ones(64, 1024, 1024)  # 256 MiB, far above the mmap threshold
        del y
    print(json.dumps({"applied": rec.applied, "faults": page_faults() - before}))
    """
)


@pytest.mark.skipif(_glibc() is None, reason="mallopt is a glibc (Linux) knob")
def test_reused_heap_blocks_fault_far_less() -> None:
    def run(mode: str) -> dict:
        out = subprocess.run([sys.executable, "-c", _CHILD, mode], capture_output=True, text=True, check=True)
        return json.loads(out.stdout)

    off, on = run("off"), run("on")
    assert on["applied"] and not off["applied"]
    assert off["faults"] > 30 * 65536  # each fresh 256 MiB mmap faults in its 65536 pages
    # with the setting, at most a few rounds still fault while the heap settles (0 or 3 of 30 seen on
    # the 2-core machines), never the one-per-round storm
    assert on["faults"] < off["faults"] / 4
