"""The per-bucket batch-size tuner on the CPU, with injected OOMs as the memory limit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from speechtrain.config import load_config
from speechtrain.data.sampler import BucketBatchSampler
from speechtrain.memory.oom import INJECT_ENV
from speechtrain.memory.tune import (
    BucketResult,
    Trial,
    choose_grad_accum,
    scaled_start,
    search_batch_size,
)
from speechtrain.recipes.tune import TuneRecipe, write_tuned_config
from speechtrain.testing.datasets import fake_dataset
from speechtrain.testing.toy.task import ToyTask

LIMIT = 600  # injected OOM above this many padded frames


def _limit_trial(limit: int, length: int, aps: Any = None) -> Any:
    def trial(b: int) -> Trial:
        ok = b * length <= limit
        speed = aps(b) if aps else float(b)
        return Trial(b, ok, "fits" if ok else "oom", b * length, audio_seconds_per_second=speed if ok else None)

    return trial


@pytest.mark.parametrize("start", [1, 3, 50, 400])
@pytest.mark.parametrize("length", [7, 31, 60])
def test_search_finds_the_limit_within_tolerance(start: int, length: int) -> None:
    best, trials, limited = search_batch_size(_limit_trial(LIMIT, length), start=start, cap=1024, tolerance=0.05)
    assert limited == "memory"
    b = best.batch_size
    assert b * length <= LIMIT  # fits
    assert (b + max(1, 0.05 * b)) * length > LIMIT  # nothing more than 5% larger fits
    assert all(t.batch_size <= 1024 for t in trials)


def test_search_caps_reports_and_gives_up() -> None:
    best, _, limited = search_batch_size(_limit_trial(10**9, 10), start=1, cap=100)
    assert (best.batch_size, limited) == (100, "max_batch_size")
    best, trials, limited = search_batch_size(_limit_trial(5, 10), start=4, cap=100)
    assert best is None and limited == "does_not_fit"
    assert [t.batch_size for t in trials] == [4, 2, 1]


def test_search_throughput_objective_stops_when_speed_saturates() -> None:
    # audio-s/s rises until 8 items, then flat: the tuner keeps 8, far below the memory limit
    best, trials, limited = search_batch_size(
        _limit_trial(10**6, 10, aps=lambda b: float(min(b, 8))), objective="throughput", min_gain=0.05
    )
    assert (best.batch_size, limited) == (8, "throughput")
    assert max(t.batch_size for t in trials) == 32  # two doublings without gain
    # one noisy slow timing does not stop the growth
    noisy = {4: 1.0}
    best, _, limited = search_batch_size(
        _limit_trial(10**6, 10, aps=lambda b: noisy.get(b, float(min(b, 16)))), objective="throughput", min_gain=0.05
    )
    assert (best.batch_size, limited) == (16, "throughput")
    # the memory objective ignores speed
    best, _, limited = search_batch_size(_limit_trial(1000, 10, aps=lambda b: 1.0), objective="memory")
    assert limited == "memory" and best.batch_size * 10 <= 1000 < (best.batch_size * 1.05 + 1) * 10


def test_scaled_start_keeps_the_item_cost() -> None:
    assert scaled_start(10, 60, 30) == 20
    assert scaled_start(10, 60, 30, quadratic_frames=60.0) == 26  # attention: shorter items cost less than linearly


def test_grad_accum_reaches_the_target_seconds() -> None:
    def res(items: int, seconds: float, b: int) -> BucketResult:
        return BucketResult(
            bucket=0,
            upper_frames=10,
            max_item_frames=10,
            padded_frames=10,
            items=items,
            audio_seconds=seconds,
            batch_size=b,
            batch_frames=10 * b,
            limited_by="memory",
        )

    buckets = [res(40, 40.0, 10), res(20, 60.0, 5)]  # 4 + 4 batches, 100 s: 12.5 s per batch
    accum, mean, eff = choose_grad_accum(buckets, 60.0)
    assert mean == pytest.approx(12.5)
    assert accum == 5 and eff == pytest.approx(62.5) and eff >= 60.0
    assert choose_grad_accum(buckets, None, current=3)[0] == 3
    assert choose_grad_accum(buckets, 1.0)[0] == 1


def _toy_step(task: ToyTask) -> Any:
    opt = torch.optim.AdamW(task.model.parameters(), lr=1e-3)

    def step(batch: Any) -> None:
        opt.zero_grad(set_to_none=True)
        task.training_step(batch, "main", {})["loss"].backward()
        opt.step()

    return step


def _cfg(tmp_path: Path, *extra: str) -> Any:
    return load_config(
        None,
        [
            "data.n_mels=8",
            "data.hop_length=4",
            "data.sample_rate=400",
            "data.num_buckets=2",
            "train.device=cpu",
            "tune.objective=memory",
            "tune.steps_per_trial=1",
            f"train.output_dir={tmp_path / 'run'}",
            *extra,
        ],
    )


def test_tune_finds_the_injected_limit_per_bucket(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(INJECT_ENV, str(LIMIT))
    cfg = _cfg(tmp_path, "tune.target_batch_seconds=4", "data.pad_multiple=4")
    ds = fake_dataset(64, 10, 60, n_mels=8, fields=("mel",))  # buckets of more items than the limit's batches
    task = ToyTask(n_mels=8, channels=8, blocks=1, heads=2)
    report = TuneRecipe(cfg).run(task=task, dataset=ds, step_fn=_toy_step(task), with_estimate=False)

    assert report.mode == "bucketed" and len(report.buckets) == 2
    assert report.injected_oom_frames == LIMIT
    tol = cfg.tune.tolerance
    for b in report.buckets:
        assert b.padded_frames % 4 == 0 and b.padded_frames >= b.max_item_frames
        assert b.limited_by == "memory"
        assert b.batch_frames == b.batch_size * b.padded_frames
        assert b.batch_size * b.padded_frames <= LIMIT
        assert (b.batch_size + max(1, tol * b.batch_size)) * b.padded_frames > LIMIT
        assert b.peak_memory_bytes > 0 and b.step_seconds > 0 and b.audio_seconds_per_second > 0
        assert any(not t.ok and t.reason == "oom" for t in b.trials)
    assert report.buckets[0].batch_size >= report.buckets[1].batch_size  # shorter items, larger batches
    assert sum(b.items for b in report.buckets) == len(ds)
    # every bucket's bound is its longest item, the last is the longest utterance
    assert report.buckets[-1].upper_frames == int(ds.frames.max())

    # grad_accum: an optimizer step holds at least target_batch_seconds of audio
    assert report.effective_batch_seconds >= 4.0
    assert report.grad_accum == max(1, int(np.ceil(4.0 / report.mean_batch_seconds - 1e-9)))

    # the tuned YAML loads and the sampler uses the sizes, with every utterance inside a bucket
    path = write_tuned_config(report, tmp_path / "tuned.yaml")
    tuned = load_config(path)
    assert tuned.data.bucket_boundaries == [b.upper_frames for b in report.buckets]
    assert tuned.data.bucket_batch_sizes == [b.batch_size for b in report.buckets]
    assert tuned.train.grad_accum == report.grad_accum
    sampler = BucketBatchSampler.from_config(tuned.data, ds.frames)
    assert sampler.report.oversize == 0
    for key in sampler.epoch_keys():
        size = len(key.indices)
        padded = -(-int(ds.frames[list(key.indices)].max()) // 4) * 4
        assert size <= tuned.data.bucket_batch_sizes[key.bucket]
        assert size * padded <= LIMIT  # no batch of the tuned plan would hit the injected OOM

    text = report.table()
    assert "budget" in text and "grad_accum" in text
    d = report.to_dict()
    assert {"max_item_frames", "batch_size", "batch_frames", "peak_memory_bytes"} <= set(d["buckets"][0])
    assert d["grad_accum"] == report.grad_accum and d["seconds"] > 0


def test_a_bucket_batch_holds_at_most_the_buckets_items(tmp_path: Path) -> None:
    """Nothing limits the batch (no OOM, the memory objective, tune.max_batch_size 1024): each bucket's batch is all
    its items, never more (the web UI's tune once wrote 1024 for buckets of 13 to 41 items), and says so."""
    cfg = _cfg(tmp_path, "tune.max_batch_size=1024")
    ds = fake_dataset(24, 10, 60, n_mels=8, fields=("mel",))
    task = ToyTask(n_mels=8, channels=8, blocks=1, heads=2)
    report = TuneRecipe(cfg).run(task=task, dataset=ds, step_fn=_toy_step(task), with_estimate=False)
    assert len(report.buckets) == 2 and sum(b.items for b in report.buckets) == len(ds)
    for b in report.buckets:
        assert b.batch_size == b.items and b.limited_by == "bucket_size", b
        assert max(t.batch_size for t in b.trials) <= b.items
    assert report.config.data.bucket_batch_sizes == [b.items for b in report.buckets]


def test_tune_crop_mode_sets_the_batch_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(INJECT_ENV, "300")
    cfg = _cfg(tmp_path, "data.crop_frames=16", "tune.max_batch_size=64")
    ds = fake_dataset(32, 10, 40, n_mels=8, fields=("mel",))  # more items than the limit's batch of 18
    task = ToyTask(n_mels=8, channels=8, blocks=1, heads=2)
    report = TuneRecipe(cfg).run(task=task, dataset=ds, step_fn=_toy_step(task), with_estimate=False)
    assert report.mode == "crop" and len(report.buckets) == 1
    b = report.buckets[0]
    assert b.padded_frames == 16 and b.batch_size * 16 <= 300 < (b.batch_size + max(1, 0.05 * b.batch_size)) * 16
    assert report.config.data.batch_size == b.batch_size
    assert report.config.data.bucket_batch_sizes is None


def _demo_tune_config(tmp_path: Path, corpus: Path, model: str, **tune: Any) -> Path:
    """A config file: the toy model ``model`` on the demo corpus, the memory objective, one step per trial."""
    import yaml

    path = tmp_path / "cfg.yaml"
    raw = {
        "data": {"manifest": str(corpus), "eval_utterances": 4, "num_buckets": 2},
        "model": {"name": model, "channels": 8, "blocks": 1},
        "train": {"device": "cpu", "output_dir": str(tmp_path / "run"), "tensorboard": False},
        "tune": {"objective": "memory", "steps_per_trial": 1, **tune},
    }
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.mark.slow
def test_tune_command_then_train_never_hits_the_limit(
    tmp_path: Path, demo_corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """End to end: `speechtrain tune` on the demo corpus under an injected limit, then training with
    the tuned config under the same limit needs no OOM recovery."""
    import json

    from speechtrain.cli.main import main
    from speechtrain.recipes.train import train_from_config

    monkeypatch.setenv(INJECT_ENV, "3000")
    cfg_path = _demo_tune_config(tmp_path, demo_corpus, "toy", target_batch_seconds=20)
    out, rep = tmp_path / "tuned.yaml", tmp_path / "tune.json"
    assert main(["tune", "--config", str(cfg_path), "--out", str(out), "--json", str(rep), "--quiet"]) == 0
    report = json.loads(rep.read_text())
    assert report["seconds"] > 0 and report["grad_accum"] >= 1
    assert report["estimate"]["static_bytes"] > 0
    for b in report["buckets"]:
        assert b["batch_frames"] <= 3000 and b["batch_size"] >= 1
        assert b["peak_memory_bytes"] > 0 and b["audio_seconds_per_second"] > 0 and b["step_seconds"] > 0
    tuned = load_config(out, ["train.max_steps=2", "train.eval_every=1000", "train.progress=false"])
    assert tuned.data.bucket_batch_sizes == [b["batch_size"] for b in report["buckets"]]
    _, summary = train_from_config(tuned)
    assert summary["oom_recoveries"] == 0


@pytest.mark.gpu
def test_tune_on_cuda_finds_a_real_memory_limit(tmp_path: Path) -> None:
    """A real tune on a GPU: a 2 GiB budget binds, the chosen batches stay under it, and the
    per-process cap is given back afterwards."""
    total = torch.cuda.get_device_properties(0).total_memory
    fraction = 2 * 1024**3 / total
    cfg = _cfg(
        tmp_path,
        "train.device=cuda",
        "model.name=toy",
        "model.channels=128",
        "model.blocks=4",
        "data.n_mels=80",
        "accel.sdpa=false",  # the explicit attention keeps T x T scores: memory grows fast with length
        f"tune.memory_fraction={fraction}",
        "tune.margin_gib=0",
        "tune.max_batch_size=512",
    )
    ds = fake_dataset(32, 600, 1200, n_mels=80, fields=("mel",))
    report = TuneRecipe(cfg).run(dataset=ds)
    assert report.budget_bytes is not None and report.budget_bytes <= 2 * 1024**3
    for b in report.buckets:
        assert b.limited_by == "memory"
        assert b.peak_reserved_bytes <= report.budget_bytes
        assert any(not t.ok and t.batch_size <= (b.batch_size + max(1, 0.05 * b.batch_size)) for t in b.trials)
        assert b.estimate_bytes is not None and b.estimate_bytes > 0
    assert report.estimate["device"].startswith("cuda")
    x = torch.empty(int(0.5 * total), dtype=torch.uint8, device="cuda")  # the 2 GiB cap is gone
    del x


def test_ranks_tuned_alone_agree_on_the_smallest_batch_per_bucket(tmp_path: Path, monkeypatch) -> None:
    """merge_ranks: each bucket takes the rank whose batch was smallest; grad_accum counts every rank's batch."""
    from dataclasses import replace

    from speechtrain.memory.tune import merge_ranks

    monkeypatch.setenv(INJECT_ENV, str(LIMIT))
    cfg = _cfg(tmp_path, "tune.target_batch_seconds=20")
    task, ds = ToyTask(n_mels=8), fake_dataset(n=40, n_mels=8, min_frames=10, max_frames=60)
    task.setup(ds)
    one = TuneRecipe(cfg, quiet=True).run(task=task, dataset=ds, step_fn=_toy_step(task), with_estimate=False)
    halved = [replace(b, batch_size=max(1, b.batch_size // 2)) for b in one.buckets]
    other = replace(one, buckets=[halved[0], *one.buckets[1:]])  # rank 1: its shortest bucket fits half
    merged = merge_ranks([one, other], cfg.data, grad_accum=1)
    assert [b.batch_size for b in merged.buckets] == [halved[0].batch_size, *[b.batch_size for b in one.buckets[1:]]]
    assert merged.tuned.bucket_batch_sizes == [b.batch_size for b in merged.buckets]
    accum_alone = choose_grad_accum(merged.buckets, 20.0)[0]
    assert merged.grad_accum == choose_grad_accum(merged.buckets, 10.0)[0] <= accum_alone  # 2 ranks: half each
    assert "2 ranks" in merged.notes[-1]


@pytest.mark.slow
def test_tune_under_torchrun_takes_the_smallest_batch_of_any_rank(
    tmp_path: Path, demo_corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`torchrun --nproc-per-node 2 -m speechtrain tune`: rank 1's device holds half of rank 0's (injected
    limits 3000 and 1500 frames); the tuned config fits rank 1, and rank 0 alone writes it."""
    import json
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    # the CLI in a fresh process does not register the test families: the toy model by its factory
    cfg_path = _demo_tune_config(tmp_path, demo_corpus, "speechtrain.testing.toy.task:build_toy")
    env = {**os.environ, "PYTHONPATH": str(root) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env[INJECT_ENV] = "3000,1500"
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        env.pop(key, None)
    out, rep = tmp_path / "tuned.yaml", tmp_path / "tune.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m"]
    cmd += ["speechtrain", "tune", "--config", str(cfg_path), "--out", str(out), "--json", str(rep), "--quiet"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=500, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.count("wrote ") == 1, "rank 0 alone prints and writes"
    report = json.loads(rep.read_text())
    assert "2 ranks" in report["notes"][-1]
    for b in report["buckets"]:
        assert 1 <= b["batch_size"] and b["batch_frames"] <= 1500  # rank 1's limit binds every bucket
    assert any(b["batch_frames"] > 1500 * 0.6 for b in report["buckets"])  # and the search went near it
    tuned = load_config(out)
    assert tuned.data.bucket_batch_sizes == [b["batch_size"] for b in report["buckets"]]


@pytest.mark.parametrize("load, warned", [(9.0, True), (0.5, False)])
def test_tune_warns_when_other_processes_load_the_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, load: float, warned: bool
) -> None:
    """The throughput objective times trials: under load (it once wrote batch 1) the report, its table and the
    tuned YAML's header say the sizes are unreliable; a quiet host gets no such note."""
    import speechtrain.memory.tune as search

    monkeypatch.setattr(search, "load_average", lambda: load)
    cfg = _cfg(tmp_path, "tune.objective=throughput", "tune.max_batch_size=4")
    ds = fake_dataset(8, 10, 30, n_mels=8, fields=("mel",))
    task = ToyTask(n_mels=8, channels=8, blocks=1, heads=2)
    report = TuneRecipe(cfg).run(task=task, dataset=ds, step_fn=_toy_step(task), with_estimate=False)
    noted = [n for n in report.notes if n.startswith("other processes loaded the machine")]
    assert bool(noted) is warned
    header = write_tuned_config(report, tmp_path / "tuned.yaml").read_text().split("data:")[0]
    assert ("unreliable" in header) is warned and ("unreliable" in report.table()) is warned
    assert search.load_note([9.0], "memory") is None  # peaks, not times: load does not matter


def test_the_tuned_recipe_carries_the_batch_sizes_not_the_learned_symbols(tmp_path: Path, demo_data: list[str]) -> None:
    """Tuning builds the model, which learns the corpus's symbols into the config; the tuned YAML must not pin
    them (a run with another text front end would then learn mostly unknown symbols): everything but the batch
    sizes is the config as given."""
    cfg = load_config(
        None,
        [*demo_data, "model.name=toy", "model.channels=8", "model.blocks=1", "data.num_buckets=2", "train.device=cpu",
         "tune.objective=memory", "tune.steps_per_trial=1", "tune.max_batch_size=2",
         f"train.output_dir={tmp_path / 'run'}"],
    )  # fmt: skip
    given = cfg.to_dict()
    report = TuneRecipe(cfg, quiet=True).run(with_estimate=False)
    assert cfg.data.symbols, "building the model learned the corpus's symbols (what made the tuned YAML pin them)"
    tuned = load_config(write_tuned_config(report, tmp_path / "tuned.yaml")).to_dict()
    assert tuned["data"]["symbols"] is None
    changed = {
        f"{section}.{key}"
        for section in given
        if isinstance(given[section], dict)
        for key in set(given[section]) | set(tuned[section])
        if given[section].get(key) != tuned[section].get(key)
    }
    assert changed and changed <= set(report.tuned.overrides())  # the batch sizes, frame budgets, grad_accum
