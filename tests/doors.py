"""Helpers of the door tests (tests/test_matrix.py, tests/test_doors_regressions.py): a command in this
process, a command under ``torchrun`` on 2 gloo processes, and the tiny overrides every run takes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECIPES = ROOT / "recipes"

#: what every tiny run of the door tests takes: a few steps, one save at the end, no progress bar
TINY = [
    "train.device=cpu",
    "train.log_every=1",
    "train.progress=false",
    "train.tensorboard=false",
    "train.eval_audio_samples=1",
]


def steps(n: int) -> list[str]:
    """``n`` steps, evaluated and saved at the last one."""
    return [f"train.max_steps={n}", f"train.eval_every={n}", f"train.save_every={n}"]


def torchrun(args: list[str], cwd: Path, timeout: float = 400, nproc: int = 2) -> subprocess.CompletedProcess[str]:
    """``torchrun --standalone --nproc-per-node nproc -m speechtrain ARGS`` in ``cwd`` (gloo on the CPU)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}"]
    return subprocess.run(
        [*cmd, "-m", "speechtrain", *args], env=env, capture_output=True, text=True, timeout=timeout, cwd=cwd
    )


def output(proc: subprocess.CompletedProcess[str], n: int = 4000) -> str:
    """The end of a finished command's stdout and stderr, for an assert message."""
    return proc.stdout[-n:] + "\n--- stderr ---\n" + proc.stderr[-n:]
