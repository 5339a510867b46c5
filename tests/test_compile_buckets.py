"""torch.compile over duration buckets (issue 36): ``dynamic`` from the planned batch shapes, inductor's compile
workers kept few beside the loader's, the warm-up timed apart from the rate, recompiles reported, and a compile
that fails goes on in eager with the real error recorded (never a lost run)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.doors import RECIPES

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_dynamic_follows_the_planned_shapes_unless_configured() -> None:
    from speechtrain.accel.compile import STATIC_SHAPES_MAX, choose_dynamic

    assert choose_dynamic(True, 3, 2)[0] is True  # the config decides when set
    assert choose_dynamic(False, 300, 20)[0] is False
    assert choose_dynamic(None, None)[0] is None  # unknown: torch decides
    few, why = choose_dynamic(None, STATIC_SHAPES_MAX, 4)
    assert few is False and "one static graph each" in why and "4 bucket" in why
    many, why = choose_dynamic(None, STATIC_SHAPES_MAX + 1, 10)
    assert many is True and "shape-generic" in why


def test_inductor_compile_workers_leave_room_for_the_loader(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch._inductor.config as inductor_config

    from speechtrain.accel.compile import COMPILE_WORKERS_MAX, limit_compile_workers

    monkeypatch.delenv("TORCHINDUCTOR_COMPILE_THREADS", raising=False)
    monkeypatch.setattr(inductor_config, "compile_threads", inductor_config.compile_threads)
    assert limit_compile_workers(loader_workers=2, cpus=16) == COMPILE_WORKERS_MAX  # not one per core
    assert inductor_config.compile_threads == COMPILE_WORKERS_MAX
    assert limit_compile_workers(loader_workers=2, cpus=2) == 1
    monkeypatch.setenv("TORCHINDUCTOR_COMPILE_THREADS", "3")
    monkeypatch.setattr(inductor_config, "compile_threads", 3)
    assert limit_compile_workers(loader_workers=8, cpus=4) == 3  # the user's own setting is kept


def test_a_failure_record_keeps_the_first_lines_not_the_closing_hint() -> None:
    from speechtrain.accel.compile import failure_record

    exc = RuntimeError("backend failed: C++ compile error\nsome/file.cpp:12: error: boom\n\nSet TORCHDYNAMO_VERBOSE=1")
    rec = failure_record(exc, 7, "/runs/x/compile_error.log")
    assert not rec.applied and "step 7" in rec.detail and "C++ compile error" in rec.detail
    assert "error: boom" in rec.detail and "/runs/x/compile_error.log" in rec.detail and "eager" in rec.detail


def _gpt_tts(demo_data: list[str], tmp_path: Path, *extra: str) -> list[str]:
    return [
        *demo_data,
        "train.device=cpu",
        "train.progress=false",
        "train.tensorboard=false",
        "train.log_every=1",
        "train.eval_every=1000",
        "train.save_every=1000",
        "train.eval_audio_samples=0",
        "data.persistent_workers=false",
        "accel.compile=true",
        f"train.output_dir={tmp_path / 'run'}",
        *extra,
    ]


@pytest.mark.slow
def test_a_compile_that_fails_goes_on_in_eager_with_the_error_recorded(
    demo_data: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The backend raises (as inductor did on the GPU): the run trains its steps in eager; the compile record,
    accel.json and a metrics event say why, with the error's first line; the traceback is in the run dir."""
    import torch._inductor.compile_fx as compile_fx

    from speechtrain.config import load_config
    from speechtrain.recipes.train import train_from_config
    from speechtrain.train.metrics import read_metrics

    def broken_backend(*args: object, **kwargs: object) -> None:
        raise RuntimeError("the backend could not compile this graph (forced by the test)")

    monkeypatch.setattr(compile_fx, "compile_fx", broken_backend)
    cfg = load_config(
        RECIPES / "gpt_tts_tiny.yaml", _gpt_tts(demo_data, tmp_path, "train.max_steps=3", "data.num_workers=0")
    )
    run, summary = train_from_config(cfg)
    assert summary["steps"] == 3
    assert "forced by the test" in summary["compile"] and "eager" in summary["compile"]
    records = json.loads((run / "accel.json").read_text())["accelerations"]["records"]
    record = next(r for r in records if r["name"] == "compile")
    assert record["applied"] is False and "forced by the test" in record["detail"]
    assert "forced by the test" in (run / "compile_error.log").read_text()
    rows = read_metrics(run)
    assert [r["step"] for r in rows] == [1, 2, 3]
    events = [e for r in rows for e in r.get("events", [])]
    assert [e["event"] for e in events] == ["compile_failed"] and events[0]["step"] == 1


@pytest.mark.slow
def test_compile_with_loader_workers_trains_over_every_bucket_and_reports_recompiles(
    demo_data: list[str], tmp_path: Path
) -> None:
    """accel.compile=true on gpt_tts_tiny with 2 loader workers: 30 steps over every bucket, the dynamic choice
    from the planned shapes in the record, the recompiles and the warm-up in the rows, kept out of the rate.
    (On the shared 2-core VM: 676 s with an eval set and inductor's on-disk cache cold, under load; 48 s without
    the eval set and the cache warm. 30 steps trained with 1 recompile over 16 planned shapes in 5 buckets,
    dynamic=True.)"""
    from speechtrain.config import load_config
    from speechtrain.recipes.train import train_from_config
    from speechtrain.train.metrics import read_metrics

    cfg = load_config(
        RECIPES / "gpt_tts_tiny.yaml",
        # no eval set: its no-grad graphs would compile too (minutes of C++ on a 2-core CPU, nothing to learn here)
        _gpt_tts(demo_data, tmp_path, "train.max_steps=30", "data.num_workers=2", "data.eval_utterances=0"),
    )
    run, summary = train_from_config(cfg)
    assert summary["steps"] == 30
    records = json.loads((run / "accel.json").read_text())["accelerations"]["records"]
    record = next(r for r in records if r["name"] == "compile")
    assert record["applied"] is True, record["detail"]
    info = record["info"]["modules"] if "modules" in record["info"] else {"model": record["info"]}
    first = next(iter(info.values()))
    assert first["planned_shapes"] and first["buckets"] >= 1 and first["dynamic_why"]
    rows = read_metrics(run)
    assert len(rows) == 30 and all("recompiles" in r and "compile_warmup_seconds" in r for r in rows)
    assert rows[-1]["epoch"] >= 1  # a whole epoch went by: every bucket's batches were trained
    assert rows[-1]["recompiles"] <= first["buckets"]  # shape-generic: not one compile per shape
    assert rows[-1]["compile_steps"] >= 1 and rows[-1]["compile_warmup_seconds"] > 0
    assert "compile_failed" not in {e["event"] for r in rows for e in r.get("events", [])}
    # the rate counts only the steps that did not compile: steps that compiled add their losses, not their time
    assert any(r["audio_seconds_per_second"] > 0 for r in rows)


@pytest.mark.parametrize(
    ("mode", "device", "dynamic", "shapes", "buckets", "applied", "why"),
    [
        ("default", "cuda", False, 4, 4, False, "compile_mode=default"),
        ("reduce-overhead", "cpu", False, 4, 4, False, "CPU"),
        ("reduce-overhead", "cuda", True, 4, 4, False, "dynamic shapes"),
        ("reduce-overhead", "cuda", False, 12, 4, False, "more than one graph per bucket"),
        ("reduce-overhead", "cuda", False, 4, 4, True, "at most 4 graph(s)"),
        ("reduce-overhead", "cuda", None, None, None, True, "one graph per batch shape"),
    ],
)
def test_cuda_graphs_apply_only_on_cuda_with_one_static_shape_per_bucket(
    mode: str, device: str, dynamic: bool | None, shapes: int | None, buckets: int | None, applied: bool, why: str
) -> None:
    from speechtrain.accel.compile import cuda_graphs_record

    rec = cuda_graphs_record(mode, device, dynamic, shapes, buckets)
    assert rec.name == "cuda_graphs" and rec.applied is applied and why in rec.detail


def test_reduce_overhead_on_the_cpu_compiles_without_cuda_graphs_and_says_so() -> None:
    import torch

    from speechtrain.accel.compile import apply_compile

    model = torch.nn.Sequential(torch.nn.Linear(4, 4))
    rec = apply_compile(model, True, "reduce-overhead", None, "cpu", shapes=3, buckets=3)
    assert rec.applied and rec.info["mode"] == "default"  # compiled, without CUDA graphs
    assert rec.info["cuda_graphs"]["applied"] is False and "CPU" in rec.info["cuda_graphs"]["detail"]
    assert rec.info["dynamic"] is False and rec.info["recompile_limit"] >= 5


@pytest.mark.gpu
def test_cuda_graphs_per_bucket_train_and_the_oom_guard_still_splits(
    demo_data: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CUDA only: reduce-overhead on gpt_tts_tiny with static shapes trains, its record says applied (or why
    not), and an injected OOM on the longest batches is split by the OOM guard (new shapes, new graphs)."""
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from speechtrain.config import load_config
    from speechtrain.memory.oom import INJECT_ENV
    from speechtrain.recipes.train import train_from_config

    monkeypatch.setenv(INJECT_ENV, "400")
    over = _gpt_tts(demo_data, tmp_path, "train.max_steps=12", "data.num_workers=0", "train.device=cuda")
    over += ["accel.compile_mode=reduce-overhead", "accel.compile_dynamic=false"]
    run, summary = train_from_config(load_config(RECIPES / "gpt_tts_tiny.yaml", over))
    assert summary["steps"] == 12 and summary["oom_recoveries"] >= 1
    records = json.loads((run / "accel.json").read_text())["accelerations"]["records"]
    record = next(r for r in records if r["name"] == "compile")
    assert record["applied"] and "CUDA graphs" in record["detail"]
