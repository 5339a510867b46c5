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


def test_apply_accelerations_records_the_allocator_and_auto_follows_the_probe() -> None:
    from speechtrain.accel import apply_accelerations
    from speechtrain.accel.probe import cached_probe, decide
    from speechtrain.config import AccelConfig

    plan = apply_accelerations(AccelConfig(cpu_allocator=False), {}, "cpu")
    rec = plan.record("cpu_allocator")
    assert rec is not None and not rec.applied and plan.resolved["cpu_allocator"]["value"] is False
    assert "cpu_allocator" in {r["name"] for r in plan.records_dict()["records"]}  # what accel.json holds
    rule = decide(cached_probe("cpu"))["accel.cpu_allocator"]
    assert rule.value is (_glibc() is not None)  # auto: on for CPU training on glibc Linux
    auto = apply_accelerations(AccelConfig(), {}, "cpu")
    assert auto.resolved["cpu_allocator"]["value"] is rule.value
    assert auto.record("cpu_allocator").applied is rule.value


def test_ladder_has_an_allocator_row_on_top_of_glibc_defaults() -> None:
    from speechtrain.bench.ablate import all_off, plan_ladder
    from speechtrain.config import DataConfig

    row = next(v for v in plan_ladder(DataConfig(), "cpu") if v.key == "cpu_allocator")
    assert row.overrides == {"accel.cpu_allocator": True} and row.records == ("cpu_allocator",)
    assert all_off("cpu")["accel.cpu_allocator"] is False
