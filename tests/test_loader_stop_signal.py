"""The UI's Stop (SIGTERM to the process group) at the moment a loader starts its workers: a worker forked then
died of it before its worker_init_fn could ignore it, and the run ended in "DataLoader worker ... exited
unexpectedly" inside an evaluation (seen in the full suite: tests/test_cluster_cli.py's UI stop test). Workers are
now started with the stop signals blocked."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import os, signal, sys, time
import torch
from speechtrain.data import loader as L

got = []
signal.signal(signal.SIGTERM, lambda s, f: got.append(s))  # the trainer's handler: stop at the next step


def slow_init(worker_id):  # the window between a worker's fork and its worker_init_fn, made wide
    time.sleep(1.0)
    L._worker_ignores_stop_signals(worker_id)


class Items(torch.utils.data.Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        return torch.tensor([i])


dl = torch.utils.data.DataLoader(
    Items(), batch_size=2, num_workers=2, worker_init_fn=slow_init, multiprocessing_context=L._stop_proof_context()
)
it = L.start_workers(dl) if sys.argv[1] == "blocked" else iter(dl)
os.killpg(os.getpgid(0), signal.SIGTERM)  # the UI's Stop, while the workers are still starting
n = sum(1 for _ in it)
print("batches", n, "signals", len(got))
"""


def test_a_stop_while_workers_start_leaves_them_alive() -> None:
    """With ``iter(loader)`` as before (the child's "plain" start) the same script hung past a 120 s timeout: the
    workers had died of the signal and the loader waited for their batches."""
    if sys.platform != "linux":
        pytest.skip("POSIX process groups and signal masks")
    out = subprocess.run(
        [sys.executable, "-c", CHILD, "blocked"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        start_new_session=True,  # its own process group: the SIGTERM reaches it and its workers only
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["batches", "4", "signals", "1"], out.stdout + out.stderr
