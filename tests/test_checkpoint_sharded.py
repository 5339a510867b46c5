"""Sharded checkpoints (DCP) in one process: the layout (step_N.dcp beside step_N.pt, the step file written
last), loading into plain modules without a process group, what counts as broken (missing, incomplete,
cut-short, replaced or pickled shard folders) and the fall-back to the previous checkpoint, pruning and
killed saves, and the readers of a run's weights (synthesis/export, init_from) on this layout.

The 2-rank FSDP2 writer is tested in tests/test_train_ddp.py; here one process writes the same layout."""

from __future__ import annotations

import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from speechtrain.errors import CheckpointError
from speechtrain.train import checkpoint as ckpt
from speechtrain.train.distributed import save_sharded
from speechtrain.train.rundir import RunDir
from tests.test_train_engine import assert_params_close, cfg_for, make_batch, params, trainer_for

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _sharded_save(tr, run_dir: Path, keep: int = 5, best: bool = False) -> Path:
    """What Trainer.save_checkpoint does under FSDP, by one process: shards to a temporary folder, then the
    step file last."""
    run = RunDir(run_dir)
    tmp = run.shard_temp(tr.step, os.getpid())
    rest = save_sharded(tr.modules, tr.optimizers, tr.checkpointer.stage_modules(), tmp)
    state = {**tr.checkpointer.run_state(), ckpt.SHARD_REST_KEY: rest, "shard_ranks": 1}
    return run.save(state, keep, best, tmp)


def _trained(run_dir: Path, steps: int, keep: int = 5) -> tuple:
    tr = trainer_for(cfg_for("optim.name=sgd", "optim.lr=0.1"))
    saved = {}
    for step in range(steps):
        tr.train_step([make_batch(step, [10, 8, 6])])
        saved[tr.step] = (_sharded_save(tr, run_dir, keep, best=tr.step == 1), params(tr))
    return tr, saved


def test_sharded_layout_loads_into_plain_modules_and_goes_on(tmp_path: Path) -> None:
    tr, saved = _trained(tmp_path, 2)
    path, weights = saved[2]
    assert path.name == "step_00000002.pt"
    assert {p.name for p in (tmp_path / "checkpoints" / "step_00000002.dcp").iterdir()} == {
        ".metadata",
        "__0_0.distcp",
    }
    assert not list((tmp_path / "checkpoints").glob(".*")), "no temporary folder is left"
    raw = torch.load(path, weights_only=True)
    assert "modules" not in raw and raw["shards"] == "step_00000002.dcp"
    assert raw["shard_rest"]["optimizers"]["main"]["param_groups"][0]["params"]  # FQNs, for set_optimizer_state_dict
    found = RunDir(tmp_path).latest()
    assert found is not None and found[0] == path
    fresh = trainer_for(cfg_for("optim.name=sgd", "optim.lr=0.1"))
    fresh.load_state_dict(found[1])
    assert_params_close(params(fresh), weights, atol=0)
    batch = make_batch(7, [9, 9])
    assert float(fresh.train_step([batch])["loss"]) == float(tr.train_step([batch])["loss"])
    assert_params_close(params(fresh), params(tr), atol=0)  # the momentum buffers came back too
    # best.pt names its own copy of the shards
    best = ckpt.safe_load(tmp_path / "best.pt")
    assert Path(best["shards"]) == tmp_path / "best.dcp"
    full = ckpt.module_states(best, tmp_path / "best.pt")
    assert_params_close({f"model.{k}": v for k, v in full["model"].items()}, saved[1][1], atol=0)


def test_a_broken_shard_folder_is_a_clear_error_and_resume_falls_back(tmp_path: Path) -> None:
    _, saved = _trained(tmp_path, 3)
    ck = tmp_path / "checkpoints"
    (ck / "step_00000003.dcp" / "__0_0.distcp").unlink()
    with pytest.raises(CheckpointError, match=r"step_00000003\.pt: shard file .*__0_0\.distcp is missing"):
        ckpt.safe_load(ck / "step_00000003.pt")
    shutil.rmtree(ck / "step_00000002.dcp")
    with pytest.raises(CheckpointError, match=r"step_00000002\.pt: its shard folder step_00000002\.dcp is missing"):
        ckpt.safe_load(ck / "step_00000002.pt")
    found = RunDir(tmp_path).latest(quarantine=True)
    assert found is not None and found[0].name == "step_00000001.pt" and found[1]["step"] == 1
    assert (ck / "step_00000003.pt.corrupt").is_file() and (ck / "step_00000003.dcp.corrupt").is_dir()
    assert [s for s, _ in ckpt.list_checkpoints(ck)] == [1]


def test_cut_short_replaced_and_pickled_shard_folders_are_refused(tmp_path: Path) -> None:
    _, saved = _trained(tmp_path, 2)
    ck = tmp_path / "checkpoints"
    shard = ck / "step_00000002.dcp" / "__0_0.distcp"
    shard.write_bytes(shard.read_bytes()[:100])
    with pytest.raises(CheckpointError, match="is cut short"):
        ckpt.safe_load(ck / "step_00000002.pt")
    # the folder of another save under this name: its .metadata is not the one the step file recorded
    shutil.copy(ck / "step_00000001.dcp" / ".metadata", ck / "step_00000002.dcp" / ".metadata")
    with pytest.raises(CheckpointError, match="not the one it was saved with"):
        ckpt.safe_load(ck / "step_00000002.pt")
    # a .metadata carrying a callable is refused before anything runs
    (ck / "step_00000001.dcp" / ".metadata").write_bytes(pickle.dumps(os.system))
    with pytest.raises(CheckpointError, match="refused: it holds Python objects other than DCP's metadata"):
        ckpt.safe_load(ck / "step_00000001.pt")


def test_pruning_and_killed_saves_remove_shard_folders(tmp_path: Path) -> None:
    ck = tmp_path / "checkpoints"
    ck.mkdir(parents=True)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    leftover = ck / f".step_00000009.dcp.tmp-{int(dead.stdout)}"  # a save killed before its rename
    leftover.mkdir()
    (leftover / "__0_0.distcp").write_bytes(b"half")
    orphan = ck / "step_00000000.dcp"  # renamed, but killed before its step file was written
    orphan.mkdir()
    _trained(tmp_path, 3, keep=2)
    assert sorted(p.name for p in ck.iterdir()) == [
        "step_00000002.dcp",
        "step_00000002.pt",
        "step_00000003.dcp",
        "step_00000003.pt",
    ]


def test_a_sharded_run_feeds_synthesis_and_init_from(tmp_path: Path) -> None:
    from speechtrain.models.importing import import_for_init
    from speechtrain.recipes import build_task
    from speechtrain.recipes.inference import load_modules

    _, saved = _trained(tmp_path, 2)
    path = tmp_path / "checkpoints" / "step_00000002.pt"
    cfg = cfg_for()
    task = build_task(cfg)
    load_modules(task, ckpt.safe_load(path), path, "toy")
    got = {f"{m}.{k}": v for m, mod in task.modules().items() for k, v in mod.state_dict().items()}
    assert_params_close(got, saved[2][1], atol=0)
    (tmp_path / "best.pt").unlink()
    imported = import_for_init([str(tmp_path)])  # a run directory: its newest step checkpoint
    task = build_task(cfg)
    assert imported.load_into(task, strict=True) == ["model"]
    got = {f"{m}.{k}": v for m, mod in task.modules().items() for k, v in mod.state_dict().items()}
    assert_params_close(got, saved[2][1], atol=0)
    shutil.rmtree(tmp_path / "checkpoints" / "step_00000002.dcp")
    with pytest.raises(CheckpointError, match="its shard folder step_00000002.dcp is missing"):
        import_for_init([str(tmp_path)])


def test_a_sharded_run_named_by_a_relative_path_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 26 (e), in one process: best.pt's shard folder is found whatever path names the run (relative, with
    '..', or the working directory changed after the RunDir was made)."""
    from speechtrain.recipes.inference import load_task

    run = tmp_path / "runs" / "toy"
    _, saved = _trained(run, 2)
    monkeypatch.chdir(tmp_path)
    for path in (Path("runs/toy"), Path("runs/../runs/toy")):
        found = RunDir(path).load_weights("best")
        full = ckpt.module_states(found[1], found[0])
        assert_params_close({f"model.{k}": v for k, v in full["model"].items()}, saved[1][1], atol=0)
    made_here = RunDir("runs/toy")
    monkeypatch.chdir(run)
    assert made_here.best == run / "best.pt" and made_here.load_weights("latest")[1]["step"] == 2
    cfg_dir = run / "config.yaml"
    from speechtrain.config import save_config
    from tests.test_train_engine import cfg_for

    save_config(cfg_for("optim.name=sgd"), cfg_dir)
    monkeypatch.chdir(tmp_path)
    _, task = load_task("runs/toy", device="cpu")
    assert task.modules()
