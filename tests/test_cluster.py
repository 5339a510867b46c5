"""Issue 27, at the Trainer, recipe and data level (toy tasks, in-memory batches, a small private corpus): what a
long run on a shared cluster meets around the core. Each test names the failure it reproduces; each failed on
the code before the fix."""

from __future__ import annotations

import argparse
import errno
import json
import os
import signal
from pathlib import Path

import numpy as np
import pytest
import torch

from speechtrain.errors import CheckpointError, DataError, UserError
from speechtrain.train import checkpoint as ckpt
from speechtrain.train.metrics import read_metrics
from speechtrain.train.rundir import RunDir
from tests.test_train_engine import ListLoader, NaNAfter, cfg_for, make_batch, make_trainer, trainer_for

pytestmark = pytest.mark.usefixtures("one_torch_thread")


# ---------------------------------------------------------------- pruning keeps exactly K
@pytest.mark.parametrize("keep,saves", [(5, 8), (8, 12), (3, 3)])
def test_pruning_keeps_exactly_the_newest_k(tmp_path: Path, keep: int, saves: int) -> None:
    """keep 5 -> 2-3 kept, keep 8 -> 4 before (``others[:len(others) - room]`` with a negative end)."""
    tr = trainer_for(cfg_for(f"train.keep_checkpoints={keep}"), run_dir=tmp_path)
    for i in range(saves):
        tr.train_step([make_batch(i, [10, 8])])
        tr.save_checkpoint(best=i == 0)
        kept = [s for s, _ in ckpt.list_checkpoints(tmp_path / "checkpoints")]
        assert kept == list(range(max(1, i + 2 - keep), i + 2)), f"after save {i + 1}: {kept}"
    assert (tmp_path / "best.pt").is_file()  # best.pt is kept besides the K


# ---------------------------------------------------------------- the rows after a resume
class Killed(Exception):
    """Stands for a kill -9 in the middle of a step (nothing after it runs)."""


class _DiesAt(ListLoader):
    """A ListLoader whose ``die_at``-th batch never comes (the process is killed while reading it)."""

    def __init__(self, batches, die_at: int) -> None:
        super().__init__(batches)
        self.die_at = die_at

    def __iter__(self):
        for b in super().__iter__():
            if self.pos == self.die_at:
                raise Killed
            yield b


def test_a_resumed_row_averages_the_same_steps_as_without_the_interruption(tmp_path: Path) -> None:
    """log_every=10, save_every=5, killed after step 15's checkpoint: the resumed step-20 row averaged steps 16-20
    (3.397 vs 3.484 in the issue); it must average 11-20 as the uninterrupted run does."""
    batches = [make_batch(i, [9 + i, 7, 8]) for i in range(7)]
    over = ("train.max_steps=20", "train.log_every=10", "train.save_every=5")
    trainer_for(cfg_for(*over), ListLoader(batches), tmp_path / "full").fit()
    with pytest.raises(Killed):
        trainer_for(cfg_for(*over), _DiesAt(batches, 17), tmp_path / "cut").fit()
    assert RunDir(tmp_path / "cut").latest()[1]["step"] == 15
    again = trainer_for(cfg_for(*over), ListLoader(batches), tmp_path / "cut")
    assert again.resume()
    again.fit()
    full, cut = read_metrics(tmp_path / "full"), read_metrics(tmp_path / "cut")
    assert [r["step"] for r in cut] == [r["step"] for r in full] == [10, 20]
    for key in ("loss", "grad_norm", "padding_fraction"):
        assert [r[key] for r in cut] == [r[key] for r in full], key
    assert cut[-1]["samples_seen"] == full[-1]["samples_seen"]


# ---------------------------------------------------------------- auto-resume, restarts
def _recipe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *overrides: str, loader=None, **kw):
    """A TrainRecipe on ``tmp_path`` whose data are fixed in-memory batches (no corpus, no cache)."""
    from speechtrain.recipes.train import TrainData, TrainRecipe

    batches = [make_batch(i, [10, 8, 6]) for i in range(3)]
    data = TrainData(None, loader if loader is not None else ListLoader(batches), None)
    monkeypatch.setattr(TrainRecipe, "build_data", lambda self, task: data)
    cfg = cfg_for(f"train.output_dir={tmp_path}", "train.save_every=2", *overrides)
    return TrainRecipe(cfg, **kw)


def test_the_same_command_again_continues_with_auto_resume(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a scheduler's restart does: the identical command. Refused before ("continue it with --resume")."""
    run = tmp_path / "run"
    ref = tmp_path / "ref"
    _recipe(ref, monkeypatch, "train.max_steps=6").run()
    _recipe(run, monkeypatch, "train.max_steps=4", "train.auto_resume=true").run()
    _, summary = _recipe(run, monkeypatch, "train.max_steps=6", "train.auto_resume=true").run()
    assert summary["steps"] == 6
    _, summary = _recipe(run, monkeypatch, "train.max_steps=6", "train.auto_resume=true").run()  # finished: no-op
    assert summary["steps"] == 6
    rows, want = read_metrics(run), read_metrics(ref)
    assert [r["step"] for r in rows] == list(range(1, 7))
    assert [r["loss"] for r in rows] == [r["loss"] for r in want]
    # without it, the identical command is still refused (it would start over on top of the checkpoints)
    with pytest.raises(UserError, match="auto-resume"):
        _recipe(run, monkeypatch, "train.max_steps=6").run()


def test_a_restart_before_the_first_checkpoint_starts_over_without_appending(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed before its first checkpoint, the identical command appended: metrics.jsonl steps 1,2,3,1,2,3,4..."""
    batches = [make_batch(i, [10, 8, 6]) for i in range(3)]
    with pytest.raises(Killed):
        _recipe(tmp_path, monkeypatch, "train.max_steps=6", "train.save_every=100", loader=_DiesAt(batches, 4)).run()
    assert [r["step"] for r in read_metrics(tmp_path)] == [1, 2, 3]
    assert not ckpt.list_checkpoints(tmp_path / "checkpoints")
    for auto in ("true", "false"):  # a plain start in the same folder as well
        _recipe(tmp_path, monkeypatch, "train.max_steps=4", "train.save_every=100", f"train.auto_resume={auto}").run()
        assert [r["step"] for r in read_metrics(tmp_path)] == [1, 2, 3, 4]
        for p in (tmp_path / "checkpoints").iterdir():
            p.unlink()


def test_auto_resume_past_damaged_checkpoints_starts_over(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _recipe(tmp_path, monkeypatch, "train.max_steps=2").run()
    for _, p in ckpt.list_checkpoints(tmp_path / "checkpoints"):
        p.write_bytes(b"")
    _, summary = _recipe(tmp_path, monkeypatch, "train.max_steps=3", "train.auto_resume=true").run()
    assert summary["steps"] == 3
    assert [r["step"] for r in read_metrics(tmp_path)] == [1, 2, 3]


# ---------------------------------------------------------------- a run in which nothing trains
def test_a_run_in_which_nothing_trains_stops_with_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every utterance out of memory alone: 10 steps of `loss: null`, no update, exit 0 before."""
    from speechtrain.memory.oom import INJECT_ENV

    monkeypatch.setenv(INJECT_ENV, "20")
    loader = ListLoader([make_batch(0, [30, 25]), make_batch(1, [40])])
    tr = trainer_for(cfg_for("train.max_steps=10"), loader, tmp_path)
    with pytest.raises(UserError, match=r"nothing trained.*out of memory on its own"):
        tr.fit()
    assert tr.step < 10


@pytest.mark.parametrize("max_steps", [20, 3], ids=["an-epoch", "shorter-than-an-epoch"])
def test_a_run_in_which_nothing_fits_ends_before_any_row_or_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, max_steps: int
) -> None:
    """Nothing fits anywhere: the error came after rows and checkpoints of untrained steps (one per step here)."""
    from speechtrain.memory.oom import INJECT_ENV

    monkeypatch.setenv(INJECT_ENV, "20")
    loader = ListLoader([make_batch(0, [30, 25]), make_batch(1, [40])])
    tr = trainer_for(
        cfg_for(f"train.max_steps={max_steps}", "train.save_every=1", "train.eval_every=1"), loader, tmp_path
    )
    with pytest.raises(UserError, match=r"nothing trained.*out of memory on its own"):
        tr.fit()
    assert read_metrics(tmp_path) == []
    assert not list((tmp_path / "checkpoints").glob("step_*")) and not (tmp_path / "best.pt").exists()


# ---------------------------------------------------------------- the stop save and a second signal
def test_a_second_signal_cannot_interrupt_the_stop_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The handlers were restored before the stop save: a second Ctrl-C killed it half-written."""
    cfg = cfg_for("train.max_steps=50", "train.save_every=100")
    torch.manual_seed(0)
    from speechtrain.recipes import build_task

    class InterruptAtThree(NaNAfter):
        def training_step(self, batch, stage, cache):
            self.calls += 1
            if self.calls == 3:
                os.kill(os.getpid(), signal.SIGINT)
            return self.task.training_step(batch, stage, cache)

    tr = make_trainer(cfg, InterruptAtThree(build_task(cfg), 0, 0), ListLoader([make_batch(0, [9, 8])]), None, tmp_path)
    real_save = ckpt.atomic_save

    def save_with_a_second_ctrl_c(obj, path) -> None:  # noqa: ANN001
        os.kill(os.getpid(), signal.SIGINT)  # the second Ctrl-C, while the stop checkpoint is being written
        real_save(obj, path)

    monkeypatch.setattr(ckpt, "atomic_save", save_with_a_second_ctrl_c)
    try:
        summary = tr.fit()
    except KeyboardInterrupt:
        pytest.fail("the second Ctrl-C interrupted the stop checkpoint")
    assert summary["stopped"] == "signal SIGINT" and summary["steps"] == 3
    assert ckpt.safe_load(tmp_path / "checkpoints" / "step_00000003.pt")["step"] == 3


# ---------------------------------------------------------------- a resume with a changed optimizer
def test_a_resume_with_another_optimizer_fails_in_one_line_and_keeps_the_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--resume RUN optim.name=sgd` on an AdamW run rewrote config.yaml, then KeyError: 'momentum' (every later
    plain --resume the same)."""
    _recipe(tmp_path, monkeypatch, "train.max_steps=2", "optim.name=adamw", resume=None).run()
    before = (tmp_path / "config.yaml").read_text()
    with pytest.raises(UserError, match=r"optimizer state.*adamw.*optim\.name=sgd") as info:
        _recipe(tmp_path, monkeypatch, "train.max_steps=4", "optim.name=sgd", resume=tmp_path).run()
    assert "\n" not in str(info.value)
    assert (tmp_path / "config.yaml").read_text() == before
    _, summary = _recipe(tmp_path, monkeypatch, "train.max_steps=4", "optim.name=adamw", resume=tmp_path).run()
    assert summary["steps"] == 4


# ---------------------------------------------------------------- init_from names the real key
def test_the_pickle_refusal_names_the_config_key(tmp_path: Path) -> None:
    from speechtrain.models.importing import read_checkpoint

    path = tmp_path / "lightning.ckpt"
    torch.save({"state_dict": {"w": torch.zeros(1)}, "hparams": argparse.Namespace(lr=1e-3)}, path)
    with pytest.raises(CheckpointError) as info:
        read_checkpoint(path)
    assert "train.init_trust_pickle=true" in str(info.value) and "--trust-pickle" not in str(info.value)


# ---------------------------------------------------------------- the run directory: a file, a full disk
def test_an_output_dir_that_is_a_file_is_a_one_line_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "run"
    target.write_text("not a folder")
    with pytest.raises(UserError, match=r"train\.output_dir .*run is a file"):  # FileExistsError before
        _recipe(target, monkeypatch, "train.max_steps=2").run()


def test_a_full_disk_when_taking_the_run_lock_is_a_one_line_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from speechtrain.train import rundir

    def full(fd: int, data: bytes) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(rundir, "_write_fd", full)
    with pytest.raises(UserError, match=r"\.lock: the disk is full .* GiB free"):  # OSError: [Errno 28] before
        _recipe(tmp_path, monkeypatch, "train.max_steps=2").run()
    assert not (tmp_path / ".lock").exists()


def test_the_run_lock_tells_who_holds_a_run(tmp_path: Path) -> None:
    """The UI's Resume on a run the CLI trains said "resuming..." then listed the run as failed."""
    from speechtrain.train.rundir import RunLock, lock_holder
    from speechtrain.ui import runs

    assert lock_holder(tmp_path) is None
    (tmp_path / "config.yaml").write_text("train: {max_steps: 10}\n")
    os.utime(tmp_path / "config.yaml", (1000, 1000))  # a long run: no file written in the last minute
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "step_00000002.pt").write_bytes(b"x")
    assert runs.run_info(tmp_path).status == "stopped"
    with RunLock(tmp_path):
        holder = lock_holder(tmp_path)
        assert holder is not None and holder["pid"] == os.getpid()
        assert runs.run_info(tmp_path).status == "running"
    assert lock_holder(tmp_path) is None


# ---------------------------------------------------------------- the feature cache: damage, locks, full disks
def _corpus(tmp_path: Path, n: int = 12) -> tuple[Path, list[str]]:
    from speechtrain.data.demo import make_demo_corpus

    corpus = make_demo_corpus(tmp_path / "corpus", utterances=n, seed=0)
    return corpus, [f"data.manifest={corpus}", f"data.cache_dir={tmp_path / 'cache'}", "data.eval_utterances=2"]


def _codes_feature():
    from speechtrain.data.derived import DerivedFeature

    def load():
        return lambda audio: (audio[::512] * 100).astype(np.int16)

    return DerivedFeature("codes", {"v": 1}, load, description="test codes")


def test_damaged_cache_files_are_a_clear_error_and_prepare_repair_mends_them(tmp_path: Path) -> None:
    """A truncated mel: raw `ValueError: mmap length is greater than file size`; a codes array of the wrong shape
    trained silently."""
    from speechtrain.data.dataset import SpeechDataset
    from speechtrain.data.prepare import prepare_dataset
    from speechtrain.data.store import derived_path, mel_path

    _, over = _corpus(tmp_path)
    data = cfg_for(*over).data
    feature = _codes_feature()
    prepare_dataset(data, workers=1, progress=False, derived=[feature])
    ds = SpeechDataset.from_config(data, fields=("mel", "audio", "codes"), derived=[feature])
    good = [ds[i] for i in range(len(ds))]
    items = ds._items
    mel = mel_path(ds.root, items[1].key)
    mel.write_bytes(mel.read_bytes()[: mel.stat().st_size // 2])
    with pytest.raises(DataError, match=r"damaged.*truncated.*prepare --repair") as info:
        ds[1]
    assert str(mel) in str(info.value) and items[1].id in str(info.value)
    codes = derived_path(ds.root, items[2].derived["codes"], "codes")
    np.save(codes, np.zeros((2, 7), dtype=np.int16))
    with pytest.raises(DataError, match=r"shape \(2, 7\).*prepare --repair"):
        ds[2]
    report = prepare_dataset(data, workers=1, progress=False, derived=[feature], repair=True)
    assert report.repaired == 2
    ds = SpeechDataset.from_config(data, fields=("mel", "audio", "codes"), derived=[feature])
    for want, got in zip(good, (ds[i] for i in range(len(ds)))):
        for key in ("mel", "audio", "codes"):
            assert np.array_equal(want[key], got[key]), key


def test_a_worker_of_the_loader_reports_a_damaged_file_in_one_line(tmp_path: Path) -> None:
    from speechtrain.data.dataset import SpeechDataset
    from speechtrain.data.loader import build_train_loader
    from speechtrain.data.prepare import prepare_dataset
    from speechtrain.data.store import audio_path
    from speechtrain.train.task import Needs

    _, over = _corpus(tmp_path)
    data = cfg_for(*over, "data.num_workers=1", "data.persistent_workers=false").data
    prepare_dataset(data, workers=1, progress=False)
    ds = SpeechDataset.from_config(data, fields=("mel", "audio"))
    loader = build_train_loader(data, ds, Needs(audio=True), seed=0)
    for it in ds._items:  # damaged after the loader was built: read by the worker
        path = audio_path(ds.root, it.audio_key)
        path.write_bytes(path.read_bytes()[:200])
    with pytest.raises(DataError) as info:
        next(iter(loader))
    message = str(info.value)  # before: "Caught DataError in DataLoader worker process 0. Original Traceback ..."
    assert "\n" not in message and "Traceback" not in message and "prepare --repair" in message


def test_the_cache_lock_names_its_holder_and_gives_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The next `prepare` waited forever without a word while another held the lock."""
    from speechtrain.data import store as store_module
    from speechtrain.data.store import FeatureStore

    _, over = _corpus(tmp_path, n=4)
    store = FeatureStore.from_data(cfg_for(*over).data)
    monkeypatch.setattr(store_module, "LOCK_WAIT_SECONDS", 0.3)
    with store.lock():  # the holder (this process, through another open file)
        with pytest.raises(DataError, match=rf"locked by pid {os.getpid()} .*gave up after") as info:
            with store.lock():
                pass
    assert "\n" not in str(info.value)
    with store.lock():  # free again
        pass


def test_a_full_disk_when_writing_the_cache_index_is_a_one_line_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from speechtrain.data import store as store_module
    from speechtrain.data.prepare import prepare_dataset
    from tests.test_train_robustness import FullDisk

    _, over = _corpus(tmp_path, n=4)
    data = cfg_for(*over).data
    monkeypatch.setattr(store_module, "open", lambda path, mode="r", **kw: FullDisk(path, 50), raising=False)
    with pytest.raises(DataError, match=r"index-.*\.json: the disk is full .* GiB free") as info:
        prepare_dataset(data, workers=1, progress=False)  # OSError: [Errno 28] before
    assert "\n" not in str(info.value)
    assert not list((tmp_path / "cache").rglob(".*tmp*"))


# ---------------------------------------------------------------- a peer that dies during a sharded save
def test_a_peer_dying_during_a_sharded_save_is_not_called_a_full_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch.distributed.checkpoint as dcp

    from speechtrain.train.distributed import save_sharded

    def reset(*args, **kw):
        raise RuntimeError("[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection reset by peer")

    monkeypatch.setattr(dcp, "save", reset)
    tr = trainer_for(cfg_for())
    with pytest.raises(UserError) as info:
        save_sharded(tr.modules, tr.optimizers, tr.checkpointer.stage_modules(), tmp_path / "shards")
    message = str(info.value)
    assert "another rank stopped answering" in message and "free some space" not in message


# ---------------------------------------------------------------- seeds per rank
def test_every_rank_draws_its_own_random_numbers(monkeypatch: pytest.MonkeyPatch) -> None:
    from speechtrain.recipes import common

    assert common.rank_seed(1234, 0) == 1234  # one process: the run's seed itself
    seeds = {common.rank_seed(1234, r) for r in range(8)}
    assert len(seeds) == 8 and common.rank_seed(1234, 3) == common.rank_seed(1234, 3)
    from speechtrain.recipes import train as train_recipe

    drawn = {}
    for rank in (0, 1):
        monkeypatch.setattr(train_recipe, "world", lambda rank=rank: (rank, 1))
        cfg = cfg_for()
        trainer_for(cfg)
        drawn[rank] = torch.rand(4)
    assert not torch.equal(drawn[0], drawn[1])


# ---------------------------------------------------------------- DDP options
def test_ddp_options_are_in_the_config() -> None:
    cfg = cfg_for()
    assert cfg.train.ddp_find_unused_parameters == "auto"
    assert cfg.train.ddp_static_graph is False and cfg.train.ddp_gradient_as_bucket_view is True
    with pytest.raises(UserError, match="ddp_find_unused_parameters"):
        cfg_for("train.ddp_find_unused_parameters=maybe")


# ---------------------------------------------------------------- the CLI configures logging
def test_every_command_logs_and_quiet_or_verbose_set_the_level(tmp_path: Path, capsys) -> None:
    import logging

    from speechtrain.cli.main import main

    corpus, over = _corpus(tmp_path, n=4)
    level = logging.getLogger("speechtrain").level
    assert main(["prepare", str(corpus), "--workers", "1", "--no-progress", *over[1:]]) == 0
    assert "computing features of 4 utterance(s)" in capsys.readouterr().err  # never shown before
    (tmp_path / "cache").rename(tmp_path / "cache_old")
    assert main(["--quiet", "prepare", str(corpus), "--workers", "1", "--no-progress", *over[1:]]) == 0
    assert "computing features" not in capsys.readouterr().err
    assert main(["prepare", str(corpus), "--verbose", "--workers", "1", "--no-progress", *over[1:]]) == 0
    assert logging.getLogger("speechtrain").level == level  # left as it was, for the caller


def test_the_oom_state_of_every_rank_merges_for_another_world_size() -> None:
    """A checkpoint of 2 ranks holds each rank's OOM state; one process resumes with the merged caps."""
    from speechtrain.train.oom_guard import OOMGuard, merge_rank_states

    a, b = OOMGuard(), OOMGuard()
    a.caps, b.caps = {0: 8, 1: 4}, {0: 2}
    a.recoveries, b.recoveries = 1, 4
    b.skipped = {"u9": 3000}
    merged = merge_rank_states([a.state_dict(), b.state_dict()])
    one = OOMGuard()
    one.load_state_dict(merged)
    assert one.caps == {0: 2, 1: 4} and one.recoveries == 5 and one.skipped == {"u9": 3000}
    json.dumps(merged)


# ---------------------------------------------------------------- export: atomic, never over its base, consolidation
class _ExportingTask:
    """A family's task whose export writes a Coqui-like folder (``fail_after`` files, then a full disk)."""

    def __init__(self, fail_after: int | None = None) -> None:
        self.fail_after = fail_after

    def export(self, out: Path) -> Path:
        for i, name in enumerate(("model.pth", "dvae.pth", "config.json")):
            if self.fail_after is not None and i == self.fail_after:
                (out / name).write_bytes(b"half")
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(out / name))
            (out / name).write_bytes(f"new {name}".encode())
        return out


def _export_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, task: _ExportingTask) -> tuple[Path, Path]:
    """A run fine-tuned from ``base`` (its model section names the folder); load_run gives ``task``."""
    from speechtrain.config import load_config
    from speechtrain.export import coqui
    from speechtrain.recipes import export as export_recipe

    base = tmp_path / "base"
    base.mkdir(exist_ok=True)
    (base / "model.pth").write_bytes(b"the original XTTS-v2 weights")
    cfg = load_config(None, ["model.name=speechtrain.testing.toy.task:build_toy", f"model.checkpoint_dir={base}"])
    # the run loads as ``task``, exported in the Coqui folder layout (the format that writes through task.export)
    monkeypatch.setattr(export_recipe, "load_run_config", lambda *a, **k: cfg)
    from speechtrain.recipes.inference import LoadedRun

    loaded = LoadedRun(cfg, task, tmp_path / "run" / "best.pt", 1)
    monkeypatch.setattr(export_recipe, "load_run", lambda *a, **k: loaded)
    monkeypatch.setattr(export_recipe, "format_for", lambda family, key: coqui.FORMAT)
    return tmp_path / "run", base


def test_export_refuses_the_base_folder_and_files_and_writes_atomically(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """`export RUN DIR` where DIR is the base folder replaced the original XTTS-v2 weights; onto existing files a raw
    FileExistsError; on a full disk a re-export left model.pth at 0 bytes, a first export a truncated one."""
    from speechtrain.cli.main import main

    run, base = _export_run(tmp_path, monkeypatch, _ExportingTask())
    assert main(["export", str(run), str(base)]) == 2
    assert "fine-tuned from" in capsys.readouterr().err
    assert (base / "model.pth").read_bytes() == b"the original XTTS-v2 weights"
    out = tmp_path / "out"
    assert main(["export", str(run), str(out)]) == 0
    assert (out / "model.pth").read_bytes() == b"new model.pth"
    assert main(["export", str(run), str(out)]) == 2  # files there: refused without --force
    assert "already holds files" in capsys.readouterr().err
    (tmp_path / "a_file").write_text("x")
    assert main(["export", str(run), str(tmp_path / "a_file")]) == 2
    assert "is a file" in capsys.readouterr().err
    # a full disk in the middle of a re-export (--force) and of a first export: nothing half-written anywhere
    (out / "model.pth").write_bytes(b"the good export")
    _export_run(tmp_path, monkeypatch, _ExportingTask(fail_after=1))
    assert main(["export", str(run), str(out), "--force"]) == 2
    err = capsys.readouterr().err
    assert "the disk is full" in err and "Nothing in" in err and "Traceback" not in err
    assert (out / "model.pth").read_bytes() == b"the good export"
    assert main(["export", str(run), str(tmp_path / "first")]) == 2
    assert not (tmp_path / "first").exists()
    assert not [p for p in tmp_path.iterdir() if "tmp" in p.name]
    # --force replaces the exported files (atomically) and keeps the others
    (out / "notes.txt").write_text("mine")
    _export_run(tmp_path, monkeypatch, _ExportingTask())
    assert main(["export", str(run), str(out), "--force"]) == 0
    assert (out / "model.pth").read_bytes() == b"new model.pth" and (out / "notes.txt").read_text() == "mine"


def test_export_consolidates_a_sharded_run_into_one_file(tmp_path: Path) -> None:
    """An FSDP run (DCP shards) could not be consolidated into one file."""
    from speechtrain.cli.main import main
    from speechtrain.config import save_config
    from speechtrain.models.importing import import_for_init
    from tests.test_checkpoint_sharded import _sharded_save
    from tests.test_train_engine import params

    run = tmp_path / "run"
    cfg = cfg_for("optim.name=sgd", f"train.output_dir={run}")
    tr = trainer_for(cfg)
    for step in range(2):
        tr.train_step([make_batch(step, [10, 8, 6])])
        _sharded_save(tr, run)
    save_config(cfg, run / "config.yaml")
    out = tmp_path / "single"
    assert main(["export", str(run), str(out), "--consolidate"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["config.yaml", "model.pt"]
    state = ckpt.safe_load(out / "model.pt")
    assert state["step"] == 2 and "shards" not in state
    want = params(tr)
    got = {f"{m}.{k}": v for m, sd in state["modules"].items() for k, v in sd.items()}
    assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want)
    fresh = trainer_for(cfg_for("optim.name=sgd"))
    fresh.train_step([make_batch(9, [7, 5])])  # other weights than the run's
    assert import_for_init([str(out / "model.pt")]).load_into(fresh.task, strict=True) == ["model"]  # init_from
    assert all(torch.equal(params(fresh)[k], want[k]) for k in want)


def test_a_full_disk_while_computing_features_stops_prepare_instead_of_skipping_every_item(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from speechtrain.data import prepare

    _, over = _corpus(tmp_path, n=4)
    real = prepare._save_npy
    calls = []

    def full_after_one(path: Path, array) -> None:  # noqa: ANN001
        calls.append(path)
        if len(calls) > 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        real(path, array)

    monkeypatch.setattr(prepare, "_save_npy", full_after_one)
    with pytest.raises(DataError, match=r"the disk is full .* GiB free.*1 item\(s\) were stored") as info:
        prepare.prepare_dataset(cfg_for(*over).data, workers=1, progress=False)
    assert "\n" not in str(info.value)
