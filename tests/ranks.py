"""Two (or more) gloo ranks in spawned processes, for the tests of multi-process training."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def spawn_ranks(
    worker: Callable[..., None],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    timeout: float,
    nprocs: int = 2,
    hung: str = "a rank hung",
) -> list[int | None]:
    """Run ``worker(rank, init_file, out_dir)`` in ``nprocs`` spawned processes (``init_file`` for a
    ``file://`` rendezvous, ``out_dir`` = ``tmp_path``) and wait up to ``timeout`` seconds for each; a
    rank still running then is killed and the test fails with ``hung``. The ranks' exit codes."""
    import torch.multiprocessing as mp

    monkeypatch.setenv("PYTHONPATH", str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    ctx = mp.spawn(worker, args=(str(tmp_path / "init"), str(tmp_path)), nprocs=nprocs, join=False)
    for p in ctx.processes:
        p.join(timeout=timeout)
    alive = [p for p in ctx.processes if p.is_alive()]
    for p in alive:
        p.kill()
    assert not alive, hung
    return [p.exitcode for p in ctx.processes]
