"""`speechtrain train` end to end on the demo corpus: run dir contents, exact resume, injected OOM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from speechtrain.cli.main import main
from speechtrain.memory.oom import INJECT_ENV
from speechtrain.train.metrics import read_metrics

pytestmark = pytest.mark.slow

TOY = [
    "model.name=toy",
    "model.channels=16",
    "data.max_frames=2500",
    "train.log_every=1",
    "train.eval_every=4",
    "train.save_every=4",
    "train.progress=false",
    "train.tensorboard=false",
    "train.device=cpu",
    "accel.precision=fp32",  # exact comparisons below
]


def train(*args: str) -> int:
    return main(["train", *args])


def test_train_writes_a_complete_run_dir(demo_data: list[str], tmp_path: Path) -> None:
    run = tmp_path / "run"
    assert train(*TOY, *demo_data, "train.max_steps=8", f"train.output_dir={run}", "train.tensorboard=true") == 0
    assert {"config.yaml", "accel.json", "metrics.jsonl", "best.pt", "checkpoints", "tensorboard"} <= {
        p.name for p in run.iterdir()
    }
    rows = read_metrics(run)
    assert [r["step"] for r in rows] == list(range(1, 9))
    for key in ("loss", "l1", "lr", "grad_norm", "samples_seen", "audio_seconds_seen", "audio_seconds_per_second"):
        assert key in rows[0], key
    assert rows[-1]["samples_seen"] > rows[0]["samples_seen"] > 0
    assert read_metrics(run, split="eval")
    records = json.loads((run / "accel.json").read_text())
    assert {r["name"] for r in records["accelerations"]["records"]} >= {"precision", "sdpa", "compile", "channels_last"}


@pytest.mark.parametrize("workers", [0, 2])
def test_resume_continues_the_same_run(demo_data: list[str], tmp_path: Path, workers: int) -> None:
    common = [*TOY, *demo_data, f"data.num_workers={workers}", "optim.scheduler=exponential", "optim.gamma=0.95"]
    full, part = tmp_path / "full", tmp_path / "part"
    assert train(*common, "train.max_steps=10", f"train.output_dir={full}") == 0
    assert train(*common, "train.max_steps=4", f"train.output_dir={part}") == 0  # stops at 4, checkpoint at 4
    assert train("--resume", str(part), "train.max_steps=10") == 0
    assert [r["loss"] for r in read_metrics(part)] == [r["loss"] for r in read_metrics(full)]
    assert [r["lr"] for r in read_metrics(part)] == [r["lr"] for r in read_metrics(full)]


def test_injected_oom_run_finishes_and_reports(demo_data: list[str], tmp_path: Path, monkeypatch) -> None:
    ref, run = tmp_path / "ref", tmp_path / "oom"
    assert train(*TOY, *demo_data, "train.max_steps=6", f"train.output_dir={ref}") == 0
    monkeypatch.setenv(INJECT_ENV, "1200")  # below the 2500-frame batches
    assert train(*TOY, *demo_data, "train.max_steps=6", f"train.output_dir={run}") == 0
    rows, ref_rows = read_metrics(run), read_metrics(ref)
    assert rows[-1]["oom_recoveries"] >= 1
    events = [e for r in rows for e in r.get("events", [])]
    assert events and all(e["event"] == "oom_recovered" for e in events)
    last = {e["bucket"]: e for e in events}  # halving is recursive: the last cap per bucket fits
    for e in last.values():
        assert e["new_max_items"] * (e["padded_frames"] // e["failed_items"]) <= 1200
    # the same samples, the same losses as without OOMs
    assert [r["samples_seen"] for r in rows] == [r["samples_seen"] for r in ref_rows]
    assert [r["loss"] for r in rows] == pytest.approx([r["loss"] for r in ref_rows], rel=1e-4)


def test_resume_of_a_missing_run_is_a_clear_error(tmp_path: Path, capsys) -> None:
    assert train("--resume", str(tmp_path / "nope")) == 2
    assert "does not exist" in capsys.readouterr().err


def _spawn_train(args: list[str]) -> subprocess.Popen:
    """`speechtrain train ARGS` in its own process (the toy family registered first), to be killed for real."""
    code = (
        "import sys; from speechtrain.testing.toy import register; register(); "
        f"from speechtrain.cli.main import main; sys.exit(main({['train', *args]!r}))"
    )
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _kill_after_checkpoint(proc: subprocess.Popen, run: Path, past: int) -> None:
    """SIGKILL ``proc`` as soon as a checkpoint newer than step ``past`` is on disk (often mid-way through
    the next save)."""
    from speechtrain.train import checkpoint as ckpt

    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        steps = [s for s, _ in ckpt.list_checkpoints(run / "checkpoints")] if (run / "checkpoints").is_dir() else []
        if steps and max(steps) > past:
            break
        time.sleep(0.005)
    assert proc.poll() is None, "the run ended before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=60) == -signal.SIGKILL


def test_kill_9_twice_then_resume_gives_the_uninterrupted_losses(demo_data: list[str], tmp_path: Path) -> None:
    """Issue 14: a real kill -9 of `speechtrain train` (twice, the second kill of the resumed run), then
    `--resume`: every step is in metrics.jsonl once, with the losses of the run that was never killed, and no
    temporary file is left."""
    common = [*TOY, *demo_data, "train.save_every=2", "train.eval_every=1000", "train.max_steps=60"]
    full, part = tmp_path / "full", tmp_path / "part"
    assert train(*common, f"train.output_dir={full}") == 0
    _kill_after_checkpoint(_spawn_train([*common, f"train.output_dir={part}"]), part, past=4)
    _kill_after_checkpoint(_spawn_train(["--resume", str(part)]), part, past=12)
    assert train("--resume", str(part)) == 0
    rows, want = read_metrics(part), read_metrics(full)
    assert [r["step"] for r in rows] == list(range(1, 61))
    assert [r["loss"] for r in rows] == [r["loss"] for r in want]
    assert not [p.name for p in (part / "checkpoints").iterdir() if ".tmp" in p.name]
