"""Two CPU ranks (gloo): an OOM on one rank makes both redo the stage, nobody hangs, and the
gradient all-reduce keeps the ranks' weights identical."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from speechtrain.memory.oom import INJECT_ENV

pytestmark = pytest.mark.slow


def _worker(rank: int, init_file: str, out_dir: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    try:
        from tests.test_train_engine import cfg_for, make_batch, trainer_for

        tr = trainer_for(cfg_for("optim.name=sgd", "optim.lr=0.1"))
        assert tr.world_size == 2
        # rank 0's batch is over the injected limit (4 x 16 > 40 frames), rank 1's is not
        batch = make_batch(1, [16, 12, 15, 9]) if rank == 0 else make_batch(2, [8, 6])
        for _ in range(2):
            tr.train_step([batch])
        flat = torch.cat([p.detach().flatten() for p in tr.modules["model"].parameters()])
        torch.save({"params": flat, "oom": tr.oom_recoveries, "caps": tr.bucket_caps}, Path(out_dir) / f"{rank}.pt")
    finally:
        dist.destroy_process_group()


def test_oom_on_one_rank_does_not_hang_and_ranks_stay_in_sync(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(INJECT_ENV, "40")
    monkeypatch.setenv(
        "PYTHONPATH", str(Path(__file__).resolve().parents[1]) + os.pathsep + os.environ.get("PYTHONPATH", "")
    )
    ctx = mp.spawn(_worker, args=(str(tmp_path / "init"), str(tmp_path)), nprocs=2, join=False)
    for p in ctx.processes:
        p.join(timeout=240)
    alive = [p for p in ctx.processes if p.is_alive()]
    for p in alive:
        p.kill()
    assert not alive, "a rank hung"
    assert all(p.exitcode == 0 for p in ctx.processes)
    r0, r1 = (torch.load(tmp_path / f"{r}.pt") for r in (0, 1))
    assert r0["oom"] == 1 and r1["oom"] == 0
    assert r0["caps"] == {0: 2}
    assert torch.allclose(r0["params"], r1["params"], atol=0)
