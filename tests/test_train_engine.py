"""The Trainer on tiny toy tasks with in-memory batches: schedules, accumulation, GAN stages,
OOM guard, numerics guard, exact resume, checkpoint safety, signals."""

from __future__ import annotations

import math
import os
import signal
from pathlib import Path

import pytest
import torch

from speechtrain.config import load_config
from speechtrain.data.batch import Batch
from speechtrain.errors import CheckpointError
from speechtrain.memory.oom import INJECT_ENV
from speechtrain.recipes import build_task
from speechtrain.recipes.train import TrainRecipe
from speechtrain.train import checkpoint as ckpt
from speechtrain.train.metrics import read_metrics
from speechtrain.train.trainer import Trainer

N_MELS = 8


def make_batch(seed: int, lengths: list[int], bucket: int | None = 0) -> Batch:
    g = torch.Generator().manual_seed(seed)
    t = max(lengths)
    mel = torch.full((len(lengths), N_MELS, t), math.log(1e-5))
    for i, n in enumerate(lengths):
        mel[i, :, :n] = torch.randn(N_MELS, n, generator=g)
    ids = [f"u{seed}_{i}" for i in range(len(lengths))]
    return Batch({"mel": mel, "mel_lengths": torch.tensor(lengths)}, ids, 256, 22050, bucket=bucket)


class ListLoader:
    """Endless, resumable loader over fixed batches (an epoch = one pass)."""

    def __init__(self, batches: list[Batch]) -> None:
        self.batches, self.pos = batches, 0
        self.notes: list[str] = []

    @property
    def mean_batch_size(self) -> float:
        return sum(b.size for b in self.batches) / len(self.batches)

    @property
    def epoch(self) -> int:
        return self.pos // len(self.batches)

    def __iter__(self):
        while True:
            b = self.batches[self.pos % len(self.batches)]
            self.pos += 1
            yield b

    def state_dict(self) -> dict:
        return {"pos": self.pos}

    def load_state_dict(self, state: dict) -> None:
        self.pos = state["pos"]


def cfg_for(*overrides: str):
    base = [
        f"data.n_mels={N_MELS}",
        "model.channels=16",
        "train.progress=false",
        "train.tensorboard=false",
        "train.log_every=1",
        "train.device=cpu",
        "accel.precision=fp32",
    ]
    return load_config(None, base + list(overrides))


def make_trainer(cfg, task, loader=None, eval_loader=None, run_dir=None, oom_guard: bool = True) -> Trainer:
    """The Trainer the training recipe builds (process-wide settings applied) for ``task``."""
    return TrainRecipe(cfg).build_trainer(task, loader, eval_loader, run_dir, oom_guard=oom_guard)


def trainer_for(cfg, loader=None, run_dir=None) -> Trainer:
    torch.manual_seed(0)
    task = build_task(cfg)
    return make_trainer(cfg, task, loader, None, run_dir)


def params(tr: Trainer) -> dict[str, torch.Tensor]:
    return {f"{m}.{k}": v.detach().clone() for m, mod in tr.modules.items() for k, v in mod.state_dict().items()}


def assert_params_close(a: dict, b: dict, atol: float = 1e-6) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert torch.allclose(a[k], b[k], atol=atol, rtol=0), f"{k}: max diff {(a[k] - b[k]).abs().max():.3g}"


@pytest.mark.parametrize("kind,gamma", [("exponential", 0.9), ("warmup_cosine", None)])
def test_lr_follows_schedule(kind: str, gamma: float | None) -> None:
    cfg = cfg_for(
        "optim.lr=0.01", f"optim.scheduler={kind}", "optim.gamma=0.9", "optim.warmup_steps=2", "train.max_steps=6"
    )
    tr = trainer_for(cfg)
    seen = []
    for i in range(6):
        seen.append(tr.optimizers["main"].param_groups[0]["lr"])
        tr.train_step([make_batch(i, [12, 9])])
    if kind == "exponential":
        expected = [0.01 * 0.9**n for n in range(6)]
    else:  # linear warm-up over 2 steps, then cosine over the remaining 4 to 0
        expected = [0.005, 0.01] + [0.01 * 0.5 * (1 + math.cos(math.pi * (n - 2) / 4)) for n in range(2, 6)]
    assert seen == pytest.approx(expected, rel=1e-9)


def test_scheduler_per_epoch_steps_only_at_epoch_boundaries(tmp_path: Path) -> None:
    cfg = cfg_for(
        "optim.scheduler=exponential", "optim.gamma=0.5", "optim.scheduler_interval=epoch", "train.max_steps=4"
    )
    loader = ListLoader([make_batch(0, [10, 8]), make_batch(1, [10, 8])])  # 2 steps per epoch
    tr = trainer_for(cfg, loader, tmp_path)
    tr.fit()
    lrs = [r["lr"] for r in read_metrics(tmp_path)]
    assert lrs == pytest.approx([2e-4, 1e-4, 1e-4, 5e-5])


@pytest.mark.parametrize("model", ["toy", "toy_gan"])
def test_accumulated_gradients_equal_one_large_batch(model: str) -> None:
    # plain SGD with lr 1: a parameter's change is exactly its gradient
    common = [f"model.name={model}", "optim.name=sgd", "optim.lr=1.0", "optim.grad_clip=null"]
    if model == "toy":
        common.append("model.heads=2")
    big = trainer_for(cfg_for(*common))
    small = trainer_for(cfg_for(*common, "train.grad_accum=2"))
    assert_params_close(params(big), params(small), atol=0)
    whole = make_batch(7, [14, 11, 9, 13])
    big.train_step([whole])
    small.train_step(whole.split(2))  # the same items as two micro-batches
    assert_params_close(params(big), params(small), atol=1e-6)


@pytest.mark.parametrize("model", ["toy", "toy_gan"])
def test_oom_guard_splits_and_finishes_the_same_step(model: str, monkeypatch: pytest.MonkeyPatch) -> None:
    common = [f"model.name={model}", "optim.name=sgd", "optim.lr=0.05", "optim.grad_clip=null"]
    ref = trainer_for(cfg_for(*common))
    guarded = trainer_for(cfg_for(*common))
    batches = [make_batch(s, [16, 12, 15, 9], bucket=3) for s in range(3)]
    ref_losses = [float(ref.train_step([b])["loss"]) for b in batches]
    monkeypatch.setenv(INJECT_ENV, str(2 * 16))  # at most two items of 16 frames fit
    guarded_losses = [float(guarded.train_step([b])["loss"]) for b in batches]
    assert guarded_losses == pytest.approx(ref_losses, abs=1e-5)
    assert_params_close(params(ref), params(guarded), atol=1e-5)
    assert guarded.oom_recoveries == 1  # later steps use the learned cap without failing again
    assert guarded.bucket_caps == {3: 2}
    assert guarded.samples_seen == ref.samples_seen == 12


def test_oom_guard_gives_up_at_one_item(monkeypatch: pytest.MonkeyPatch) -> None:
    from speechtrain.errors import UserError

    tr = trainer_for(cfg_for("train.oom_single_utterance=stop"))  # the default (skip) leaves it out instead
    monkeypatch.setenv(INJECT_ENV, "5")
    with pytest.raises(UserError, match="single utterance"):
        tr.train_step([make_batch(0, [16, 12])])


def test_oom_without_guard_propagates(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = cfg_for()
    torch.manual_seed(0)
    tr = make_trainer(cfg, build_task(cfg), oom_guard=False)
    monkeypatch.setenv(INJECT_ENV, "5")
    with pytest.raises(torch.OutOfMemoryError):
        tr.train_step([make_batch(0, [16, 12])])


class NaNAfter:
    """Wraps a task so that training losses are NaN from a given step on."""

    def __init__(self, task, start: int, stop: int) -> None:
        self.task, self.start, self.stop, self.calls = task, start, stop, 0

    def __getattr__(self, name):
        return getattr(self.task, name)

    def training_step(self, batch, stage, cache):
        self.calls += 1
        out = self.task.training_step(batch, stage, cache)
        if self.start <= self.calls < self.stop:
            out["loss"] = out["loss"] * float("nan")
        return out


def test_numerics_guard_skips_nonfinite_steps_in_fp32() -> None:
    # 2 in a row, under train.nan_fallback_after: skipped and the run goes on (3 would stop it, fp32 having no
    # safer precision: tests/test_numerics_stop.py)
    cfg = cfg_for("train.nan_fallback_after=3")
    torch.manual_seed(0)
    task = NaNAfter(build_task(cfg), start=2, stop=4)
    tr = make_trainer(cfg, task)
    before = None
    for i in range(5):
        if i == 1:
            before = params(tr)
        out = tr.train_step([make_batch(i, [10, 8])])
        if i in (1, 2):
            assert not out["finite"]
            assert_params_close(before, params(tr), atol=0)  # skipped: nothing changed
    assert tr.nonfinite_steps == 2
    assert tr.precision.name == "fp32" and tr.precision_fallbacks == []


def test_numerics_guard_falls_back_from_fp16(tmp_path: Path) -> None:
    cfg = cfg_for("accel.precision=fp16", "train.nan_fallback_after=3", "train.max_steps=8", "train.save_every=100")
    torch.manual_seed(0)
    task = NaNAfter(build_task(cfg), start=3, stop=6)
    loader = ListLoader([make_batch(i, [10, 8]) for i in range(4)])
    tr = make_trainer(cfg, task, loader, None, tmp_path)
    assert tr.precision.name == "fp16"
    summary = tr.fit()
    assert summary["steps"] == 8
    assert summary["precision"] in ("bf16", "fp32")
    assert len(summary["precision_fallbacks"]) == 1
    rows = read_metrics(tmp_path)
    events = [e for r in rows for e in r.get("events", [])]
    assert any(e["event"] == "precision_fallback" for e in events)
    assert rows[-1]["precision"] == summary["precision"]


@pytest.mark.parametrize("model", ["toy", "toy_gan"])
def test_exact_resume_gives_the_same_losses(tmp_path: Path, model: str) -> None:
    batches = [make_batch(i, [9 + i, 7, 8]) for i in range(5)]
    over = [
        "train.max_steps=8",
        "train.save_every=3",
        "optim.scheduler=exponential",
        "optim.gamma=0.9",
        f"model.name={model}",
    ]
    full = trainer_for(cfg_for(*over), ListLoader(batches), tmp_path / "full")
    full.fit()
    full_rows = read_metrics(tmp_path / "full")

    part_dir = tmp_path / "part"
    first = trainer_for(cfg_for(*over[1:], "train.max_steps=3"), ListLoader(batches), part_dir)
    first.fit()
    second = trainer_for(cfg_for(*over), ListLoader(batches), part_dir)
    assert second.resume() and second.step == 3
    second.fit()
    part_rows = read_metrics(part_dir)
    for key in ("loss", "grad_norm") + (("disc_loss", "grad_norm_disc") if model == "toy_gan" else ()):
        assert [r[key] for r in part_rows] == [r[key] for r in full_rows], key  # exactly equal on the CPU


def test_kill_during_checkpoint_write_keeps_the_previous(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tr = trainer_for(cfg_for("train.keep_checkpoints=5"), run_dir=tmp_path)
    tr.train_step([make_batch(0, [10, 8])])
    good = tr.save_checkpoint()
    tr.train_step([make_batch(1, [10, 8])])

    def dying_save(obj, fh):
        fh.write(b"PK\x03\x04 half a checkpoint")
        raise KeyboardInterrupt("killed mid-write")

    monkeypatch.setattr(torch, "save", dying_save)
    with pytest.raises(KeyboardInterrupt):
        tr.save_checkpoint()
    monkeypatch.undo()
    assert [p.name for _, p in ckpt.list_checkpoints(tmp_path / "checkpoints")] == [good.name]
    assert not list((tmp_path / "checkpoints").glob(".*tmp*"))
    path, state = ckpt.latest_loadable(tmp_path / "checkpoints")
    assert path == good and state["step"] == 1


def test_truncated_foreign_and_pickled_checkpoints_are_refused(tmp_path: Path) -> None:
    tr = trainer_for(cfg_for(), run_dir=tmp_path)
    tr.train_step([make_batch(0, [10, 8])])
    good = tr.save_checkpoint()
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    with pytest.raises(CheckpointError, match="truncated or corrupt"):
        ckpt.safe_load(truncated)
    foreign = tmp_path / "foreign.pt"
    torch.save({"weight": torch.zeros(2)}, foreign)
    with pytest.raises(CheckpointError, match="not a speechtrain checkpoint"):
        ckpt.safe_load(foreign)
    evil = tmp_path / "evil.pt"
    torch.save({ckpt.FORMAT_KEY: ckpt.FORMAT_VERSION, "hook": os.system}, evil)
    with pytest.raises(CheckpointError, match="refused"):
        ckpt.safe_load(evil)


def test_sigterm_saves_and_exits_cleanly(tmp_path: Path) -> None:
    cfg = cfg_for("train.max_steps=50", "train.save_every=100")
    torch.manual_seed(0)
    inner = build_task(cfg)

    class KillAtThree(NaNAfter):
        def training_step(self, batch, stage, cache):
            self.calls += 1
            if self.calls == 3:
                os.kill(os.getpid(), signal.SIGTERM)
            return self.task.training_step(batch, stage, cache)

    tr = make_trainer(cfg, KillAtThree(inner, 0, 0), ListLoader([make_batch(0, [9, 8])]), None, tmp_path)
    summary = tr.fit()
    assert summary["stopped"] == "signal SIGTERM" and summary["steps"] == 3
    assert ckpt.list_checkpoints(tmp_path / "checkpoints")[-1][0] == 3
