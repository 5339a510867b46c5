"""Issue 14, at the Trainer level (toy tasks, in-memory batches): what a kill, a full disk, a damaged
checkpoint or a stray file must not break. Each test names the defect it reproduces."""

from __future__ import annotations

import errno
import io
import os
import zipfile
from pathlib import Path

import pytest
import torch

from speechtrain.errors import CheckpointError
from speechtrain.train import checkpoint as ckpt
from speechtrain.train.metrics import read_metrics
from tests.test_train_engine import ListLoader, cfg_for, make_batch, trainer_for


def _saved(tmp_path: Path, steps: int, keep: int = 5) -> list[Path]:
    """A run directory with checkpoints at steps 1..``steps``."""
    tr = trainer_for(cfg_for(f"train.keep_checkpoints={keep}"), run_dir=tmp_path)
    paths = []
    for i in range(steps):
        tr.train_step([make_batch(i, [10, 8])])
        paths.append(tr.save_checkpoint())
    return paths


# ---------------------------------------------------------------- defect 2: a 0-byte checkpoint
def test_empty_checkpoint_is_a_clear_error_and_resume_takes_the_previous(tmp_path: Path) -> None:
    first, second = _saved(tmp_path, 2)
    second.write_bytes(b"")
    with pytest.raises(CheckpointError, match="empty file"):
        ckpt.safe_load(second)
    tr = trainer_for(cfg_for(), run_dir=tmp_path)
    assert tr.resume() and tr.step == 1


# ---------------------------------------------------------------- defect 12: damaged files
def test_random_bytes_are_called_unreadable_not_a_pickled_callable(tmp_path: Path) -> None:
    junk = tmp_path / "junk.pt"
    for seed in range(5):
        junk.write_bytes(
            torch.randint(0, 256, (4096,), generator=torch.Generator().manual_seed(seed)).byte().numpy().tobytes()
        )
        with pytest.raises(CheckpointError, match="not a readable checkpoint"):
            ckpt.safe_load(junk)


def _flip_inside_largest_tensor(path: Path) -> None:
    with zipfile.ZipFile(path) as zf:
        info = max((i for i in zf.infolist() if "/data/" in i.filename), key=lambda i: i.file_size)
    raw = bytearray(path.read_bytes())
    name_len = int.from_bytes(raw[info.header_offset + 26 : info.header_offset + 28], "little")
    extra_len = int.from_bytes(raw[info.header_offset + 28 : info.header_offset + 30], "little")
    start = info.header_offset + 30 + name_len + extra_len
    raw[start + info.file_size // 2] ^= 0x10
    path.write_bytes(bytes(raw))


def test_flipped_byte_in_tensor_data_fails_the_checksum(tmp_path: Path) -> None:
    first, second = _saved(tmp_path, 2)
    _flip_inside_largest_tensor(second)
    with pytest.raises(CheckpointError, match="checksum"):
        ckpt.safe_load(second)
    tr = trainer_for(cfg_for(), run_dir=tmp_path)
    assert tr.resume() and tr.step == 1


def test_temporaries_left_by_a_kill_are_cleaned(tmp_path: Path) -> None:
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    dead = folder / ".step_00000007.pt.tmp-999999999"  # no such process
    dead.write_bytes(b"PK half")
    alive = folder / f".step_00000007.pt.tmp-{os.getppid()}"  # a running process may still be writing it
    alive.write_bytes(b"PK half")
    _saved(tmp_path, 1)
    assert not dead.exists() and alive.exists()


# ---------------------------------------------------------------- defect 1: pruning around corrupt files
def test_resume_past_corrupt_newer_checkpoints_never_prunes_the_new_ones(tmp_path: Path) -> None:
    _saved(tmp_path, 3, keep=2)
    for step in (9, 10):  # newer-numbered files that do not load (killed saves of an older version, say)
        (tmp_path / "checkpoints" / f"step_{step:08d}.pt").write_bytes(b"")
    tr = trainer_for(cfg_for("train.keep_checkpoints=2"), run_dir=tmp_path)
    assert tr.resume() and tr.step == 3
    tr.train_step([make_batch(3, [10, 8])])
    new = tr.save_checkpoint()
    assert new.exists()  # was deleted right after writing: the corrupt 9 and 10 were "the newest two"
    tr.train_step([make_batch(4, [10, 8])])
    tr.save_checkpoint()
    assert [s for s, _ in ckpt.list_checkpoints(tmp_path / "checkpoints")] == [4, 5]
    assert sorted(p.name for p in (tmp_path / "checkpoints").glob("*.corrupt")) == [
        "step_00000009.pt.corrupt",
        "step_00000010.pt.corrupt",
    ]


def test_prune_goes_by_age_and_keeps_the_checkpoint_just_written(tmp_path: Path) -> None:
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    for i, step in enumerate((50, 3, 4)):  # step 50 is the oldest file (a leftover of another run)
        p = folder / f"step_{step:08d}.pt"
        p.write_bytes(b"x")
        os.utime(p, (1000 + i, 1000 + i))
    new = folder / "step_00000005.pt"
    new.write_bytes(b"x")
    os.utime(new, (900, 900))  # even with a clock that went backwards
    assert sorted(p.name for p in ckpt.prune(folder, 2, protect=new)) == ["step_00000003.pt", "step_00000050.pt"]
    assert new.exists()


# ---------------------------------------------------------------- defect 6: a full disk during a save
class FullDisk(io.RawIOBase):
    """A file that takes ``room`` bytes, then fails as a full disk does."""

    def __init__(self, path: Path, room: int) -> None:
        self.fh, self.room = open(path, "wb"), room  # noqa: SIM115

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:  # noqa: ANN001
        if len(b) > self.room:
            self.fh.write(bytes(b)[: self.room])
            self.room = 0
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.room -= len(b)
        return self.fh.write(b)

    def fileno(self) -> int:
        return self.fh.fileno()

    def close(self) -> None:
        self.fh.close()
        super().close()


def test_full_disk_during_a_checkpoint_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (good,) = _saved(tmp_path, 1)
    tr = trainer_for(cfg_for(), run_dir=tmp_path)
    assert tr.resume()
    tr.train_step([make_batch(1, [10, 8])])
    monkeypatch.setattr(ckpt, "open", lambda path, mode="r": FullDisk(path, 2000), raising=False)
    with pytest.raises(CheckpointError, match=r"step_00000002\.pt: the disk is full .* GiB free") as info:
        tr.save_checkpoint()
    assert "--resume" in str(info.value)
    assert [p.name for _, p in ckpt.list_checkpoints(tmp_path / "checkpoints")] == [good.name]
    assert not list((tmp_path / "checkpoints").glob(".*tmp*"))
    assert ckpt.safe_load(good)["step"] == 1


def test_full_disk_during_fit_stops_with_the_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tr = trainer_for(cfg_for("train.max_steps=4", "train.save_every=2"), ListLoader([make_batch(0, [9, 8])]), tmp_path)
    monkeypatch.setattr(ckpt, "open", lambda path, mode="r": FullDisk(path, 100), raising=False)
    with pytest.raises(CheckpointError, match="disk is full"):
        tr.fit()
    assert [r["step"] for r in read_metrics(tmp_path)] == [1, 2]


# ---------------------------------------------------------------- the recipe with in-memory batches
def _recipe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *overrides: str, resume: bool = False, **kw):
    """A TrainRecipe on ``tmp_path`` whose data are fixed in-memory batches (no corpus, no cache)."""
    from speechtrain.recipes.train import TrainData, TrainRecipe

    loader = ListLoader([make_batch(i, [10, 8, 6]) for i in range(3)])
    monkeypatch.setattr(TrainRecipe, "build_data", lambda self, task: TrainData(None, loader, None))
    cfg = cfg_for(f"train.output_dir={tmp_path}", "train.save_every=2", *overrides)
    return TrainRecipe(cfg, resume=tmp_path if resume else None, **kw)


# ---------------------------------------------------------------- defects 1 and 8: a resume that finds nothing
def test_resume_with_no_loadable_checkpoint_is_an_error_and_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _recipe(tmp_path, monkeypatch, "train.max_steps=2").run()
    (only,) = ckpt.list_checkpoints(tmp_path / "checkpoints")
    only[1].write_bytes(b"")  # the one checkpoint is damaged
    config_before = (tmp_path / "config.yaml").read_text()
    metrics_before = (tmp_path / "metrics.jsonl").read_text()
    with pytest.raises(CheckpointError, match="no loadable checkpoint.*--start-over"):
        _recipe(tmp_path, monkeypatch, "train.max_steps=4", "optim.lr=0.5", resume=True).run()
    assert (tmp_path / "config.yaml").read_text() == config_before  # was rewritten before the checks
    assert (tmp_path / "metrics.jsonl").read_text() == metrics_before
    assert not list(tmp_path.glob(".*tmp*"))
    # asked to start over: from step 0, and the old rows are gone
    _, summary = _recipe(tmp_path, monkeypatch, "train.max_steps=3", resume=True, start_over=True).run()
    assert summary["steps"] == 3
    assert [r["step"] for r in read_metrics(tmp_path)] == [1, 2, 3]


def test_a_resume_whose_checks_fail_keeps_the_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _recipe(tmp_path, monkeypatch, "train.max_steps=2").run()
    before = (tmp_path / "config.yaml").read_text()
    with pytest.raises(Exception, match="does not match"):
        _recipe(tmp_path, monkeypatch, "train.max_steps=4", "model.channels=8", resume=True).run()
    assert (tmp_path / "config.yaml").read_text() == before


# ---------------------------------------------------------------- defect 3: metrics.jsonl on resume and torn lines
def test_resume_rewinds_metrics_to_the_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _recipe(tmp_path, monkeypatch, "train.max_steps=5", "train.save_every=2").run()
    # a kill after step 5's row and before its save (the final save at step 5 removed to mimic it)
    (tmp_path / "checkpoints" / "step_00000005.pt").unlink()
    with open(tmp_path / "metrics.jsonl", "a") as fh:
        fh.write('{"split": "train", "step": 6, "lo')  # and a torn line
    _recipe(tmp_path, monkeypatch, "train.max_steps=6", resume=True).run()
    assert [r["step"] for r in read_metrics(tmp_path)] == [1, 2, 3, 4, 5, 6]


def test_a_torn_line_does_not_break_reading_or_the_next_row(tmp_path: Path) -> None:
    # a row, then a write cut short by a full disk or a kill in an earlier process
    (tmp_path / "metrics.jsonl").write_text('{"split": "train", "step": 1, "loss": 1.0}\n{"split": "train", "st')
    tr = trainer_for(cfg_for(), ListLoader([make_batch(0, [9, 8])]), tmp_path)
    tr.metrics.write({"split": "train", "step": 2, "loss": 0.5})
    assert [r["step"] for r in read_metrics(tmp_path)] == [1, 2]


def test_a_metrics_write_on_a_full_disk_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from speechtrain.train import metrics

    tr = trainer_for(cfg_for(), ListLoader([make_batch(0, [9, 8])]), tmp_path)
    monkeypatch.setattr(metrics, "open", lambda path, mode="r": FullDisk(path, 10), raising=False)
    with pytest.raises(CheckpointError, match=r"metrics\.jsonl: the disk is full"):
        tr.metrics.write({"split": "train", "step": 1, "loss": 1.0})


# ---------------------------------------------------------------- defect 4: one run per directory
def test_a_second_run_on_a_directory_in_use_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from speechtrain.train.rundir import RunDirInUse, RunLock

    with RunLock(tmp_path):  # a live run holds the directory
        with pytest.raises(RunDirInUse, match=rf"in use by pid {os.getpid()} on host"):
            _recipe(tmp_path, monkeypatch, "train.max_steps=2").run()
        assert not (tmp_path / "checkpoints").exists() and not (tmp_path / "config.yaml").exists()
    _recipe(tmp_path, monkeypatch, "train.max_steps=2").run()  # released: the directory is free again
    assert not (tmp_path / ".lock").exists()


def test_a_stale_lock_of_a_killed_run_is_taken_over(tmp_path: Path) -> None:
    from speechtrain.train.rundir import RunLock

    (tmp_path / ".lock").write_text('{"pid": 999999999, "host": "elsewhere", "started": 0}\n')
    with RunLock(tmp_path) as lock:
        assert f'"pid": {os.getpid()}' in lock.path.read_text()


# ---------------------------------------------------------------- defect 12: only rank 0 writes run files
def test_ranks_other_than_0_write_no_run_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from speechtrain.recipes import train as train_recipe
    from speechtrain.train import wrapping

    monkeypatch.setattr(train_recipe, "world", lambda: (1, 1))
    monkeypatch.setattr(wrapping, "world", lambda: (1, 1))  # where the loop's parts learn their rank
    _recipe(tmp_path, monkeypatch, "train.max_steps=2").run()
    assert sorted(p.name for p in tmp_path.iterdir()) == []


# ---------------------------------------------------------------- defects 2 and 11: inference loading
def test_inference_skips_a_damaged_best_and_names_a_foreign_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from speechtrain.recipes.inference import load_task

    _recipe(tmp_path, monkeypatch, "train.max_steps=2", "train.save_every=1", "train.keep_checkpoints=2").run()
    (tmp_path / "best.pt").write_bytes(b"")  # synthesize/rtf/classify: IndexError before
    _, task = load_task(tmp_path, device="cpu")
    step2 = ckpt.safe_load(tmp_path / "checkpoints" / "step_00000002.pt")["modules"]
    for k, v in task.modules()["model"].state_dict().items():
        assert torch.equal(v, step2["model"][k])
    (tmp_path / "checkpoints" / "step_00000002.pt").write_bytes(b"PK\x03\x04 cut")
    _, task = load_task(tmp_path, device="cpu")  # the next newest: step 1
    for path in ckpt.list_checkpoints(tmp_path / "checkpoints"):
        path[1].write_bytes(b"")
    with pytest.raises(CheckpointError, match="none of its 3 checkpoint"):
        load_task(tmp_path, device="cpu")
    # a checkpoint of another model, and one with the marker and no modules: KeyError before
    foreign = {ckpt.FORMAT_KEY: ckpt.FORMAT_VERSION, "modules": {"generator": {}}, "config": {"model": {"name": "x"}}}
    ckpt.atomic_save(ckpt.with_checksum(foreign), tmp_path / "best.pt")
    with pytest.raises(CheckpointError, match=r"best\.pt \(saved by a 'x' run\) has no weights for module 'model'"):
        load_task(tmp_path, device="cpu")
    ckpt.atomic_save(ckpt.with_checksum({ckpt.FORMAT_KEY: ckpt.FORMAT_VERSION}), tmp_path / "best.pt")
    with pytest.raises(CheckpointError, match="holds no module weights"):
        load_task(tmp_path, device="cpu")


# ---------------------------------------------------------------- defect 7: one utterance that does not fit alone
def test_an_utterance_that_runs_out_of_memory_alone_is_skipped_and_remembered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from speechtrain.memory.oom import INJECT_ENV

    monkeypatch.setenv(INJECT_ENV, "20")  # a 30-frame utterance never fits, an 8-frame one does
    tr = trainer_for(cfg_for(), run_dir=tmp_path)
    out = tr.train_step([make_batch(0, [30, 8])])  # stopped the run before
    assert tr.step == 1 and bool(torch.isfinite(out["loss"]))
    assert tr.oom.skipped == {"u0_0": 30} and tr.bucket_caps == {}  # the halvings it caused are undone
    assert [e["event"] for e in tr.oom.take_events()] == ["oom_recovered", "oom_skipped"]
    tr.save_checkpoint()
    again = trainer_for(cfg_for(), run_dir=tmp_path)
    assert again.resume() and again.oom.skipped == {"u0_0": 30}  # resuming does not repeat it
    recoveries = again.oom_recoveries
    before = {k: v.clone() for k, v in again.modules["model"].state_dict().items()}
    again.train_step([make_batch(0, [30])])  # a batch of it alone: a step without an update
    assert again.step == 2 and again.oom_recoveries == recoveries
    assert all(torch.equal(v, again.modules["model"].state_dict()[k]) for k, v in before.items())


def test_a_run_over_only_unfittable_utterances_logs_and_finishes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from speechtrain.memory.oom import INJECT_ENV

    monkeypatch.setenv(INJECT_ENV, "20")
    tr = trainer_for(cfg_for("train.max_steps=3"), ListLoader([make_batch(0, [30]), make_batch(1, [9, 8])]), tmp_path)
    assert tr.fit()["steps"] == 3
    # no row before the first step that trains (issue 37): step 1's interval is in step 2's row
    assert [r["step"] for r in read_metrics(tmp_path)] == [2, 3]


def test_a_full_disk_when_writing_the_run_files_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from speechtrain.recipes import train as train_recipe

    def full(cfg, path) -> None:  # noqa: ANN001
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(train_recipe, "save_config", full)
    with pytest.raises(CheckpointError, match=r"config\.yaml: the disk is full .* GiB free"):  # OSError before
        _recipe(tmp_path, monkeypatch, "train.max_steps=2").run()


# ---------------------------------------------------------------- eval samples: ids with '/' and a full disk
class _AudioTask:
    """The eval side of a task that makes audio (two items a batch)."""

    produces_audio = True

    def modules(self) -> dict:
        return {"m": torch.nn.Linear(1, 1)}

    def eval_step(self, batch) -> dict:  # noqa: ANN001
        return {"loss": torch.tensor(1.0)}

    def batch_weight(self, batch) -> float:  # noqa: ANN001
        return float(batch.size)

    def eval_audio(self, batch, n: int) -> list:  # noqa: ANN001
        return [torch.zeros(256) for _ in range(min(n, batch.size))]

    # what a Task also has since the quality metrics (issue 38): the audio scored is the samples' own
    quality_audio = eval_audio
    samples_are_quality_audio = True

    def eval_summary(self, outputs: list) -> dict:
        return {"loss": 1.0}


def test_eval_samples_of_folder_ids_and_on_a_full_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import contextlib

    import soundfile

    from speechtrain.train.evaluate import Evaluator

    batch = make_batch(0, [9, 8])
    batch.ids = ["dog/a", "cat/b"]  # folder dataset ids: FileNotFoundError before
    ev = Evaluator(_AudioTask(), [batch], cfg_for().train, tmp_path)
    assert ev.run(4, lambda b: b, contextlib.nullcontext) == {"loss": 1.0}
    assert (tmp_path / "samples" / "step_00000004" / "dog" / "a.wav").is_file()

    def full(*args, **kw) -> None:  # noqa: ANN002,ANN003
        raise soundfile.LibsndfileError(0, "Error writing: disk full")

    monkeypatch.setattr(soundfile, "write", full)
    assert ev.run(5, lambda b: b, contextlib.nullcontext) == {"loss": 1.0}  # the run goes on


# ---------------------------------------------------------------- issue 37: a second SIGTERM 50 ms after the first
@pytest.mark.slow
def test_a_second_sigterm_while_the_run_winds_down_leaves_no_traceback_and_no_lease(
    demo_data: list[str], tmp_path: Path
) -> None:
    """SIGTERM, and again while the stopped run gave back its cache reader lease: a traceback ("Exception ignored
    in: ReaderLease.__del__ ... KeyboardInterrupt: SIGTERM") and the lease's file left behind. Now the stop
    checkpoint is written, the run exits 0, nothing is printed of the second signal and no lease is left."""
    import subprocess
    import sys

    from tests.test_train_ddp import ROOT, TOY_RUN

    run, cache = tmp_path / "run", tmp_path / "cache"
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    cmd = [sys.executable, str(ROOT / "tests" / "sigterm_twice.py"), "train", *TOY_RUN, *demo_data]
    cmd += [f"data.cache_dir={cache}", f"train.output_dir={run}", "train.max_steps=50", "train.save_every=100"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr, proc.stderr[-3000:]
    assert "stopped (signal SIGTERM) at step 2" in proc.stderr
    assert [s for s, _ in ckpt.list_checkpoints(run / "checkpoints")] == [2]
    assert list(cache.rglob("leases/*")) == []
