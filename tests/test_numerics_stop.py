"""Issue 48 (numerics): a run with nothing left to fall back to stops after ``train.nan_fallback_after``
non-finite steps in a row with one ``error:`` naming the likely cause, the last finite checkpoint stays the one to
resume from, and sampling at an evaluation never raises on non-finite weights.

Before: ``optim.lr=1e12`` on gpt_tts_tiny (fp32) skipped steps 2-19 with nothing to fall back to (the stop came
only after 10 x nan_fallback_after in a row), kept the checkpoints of the poisoned weights, and ended in a
traceback from torch.multinomial at the evaluation (rc 1).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from speechtrain.accel.precision import resolve_precision
from speechtrain.errors import UserError
from speechtrain.recipes import build_task
from speechtrain.train.numerics import NumericsGuard
from tests.test_train_engine import ListLoader, NaNAfter, cfg_for, make_batch, make_trainer

ROOT = Path(__file__).resolve().parents[1]


def test_fp32_stops_after_k_nonfinite_steps_in_a_row_naming_the_cause() -> None:
    fp32 = resolve_precision("fp32", torch.device("cpu"))
    guard = NumericsGuard(fallback_after=3)
    for _ in range(2):
        guard.observe(torch.tensor(True))
    guard.observe(torch.tensor(False))  # recovered: a run of 2, not 3
    assert guard.settle(3, fp32) is None
    for _ in range(3):
        guard.observe(torch.tensor(True))
    with pytest.raises(UserError, match=r"3 non-finite steps in a row.*optim\.lr.*data"):
        guard.settle(6, fp32)


def test_a_diverged_run_keeps_its_last_finite_checkpoint(tmp_path: Path) -> None:
    """Every step from the 3rd is non-finite: step 2's checkpoint is the last written (the steps after it were
    skipped: their checkpoints are not written), and the stop names it as the one to resume from."""
    cfg = cfg_for("train.nan_fallback_after=3", "train.max_steps=20", "train.save_every=1")
    torch.manual_seed(0)
    tr = make_trainer(
        cfg, NaNAfter(build_task(cfg), start=3, stop=10**9), ListLoader([make_batch(0, [10, 8])]), None, tmp_path
    )
    with pytest.raises(UserError) as err:
        tr.fit()
    message = str(err.value)
    assert tr.step == 5 and "3 non-finite steps in a row" in message  # steps 3, 4, 5
    assert "step_00000002.pt" in message and "optim.lr" in message
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir())[-1] == "step_00000002.pt"  # none later


def test_gpt_sampling_survives_non_finite_logits() -> None:
    from speechtrain.models.gpt_tts.model import GPTTTS

    logits = torch.full((2, 6), float("nan"))
    logits[:, 0] = float("-inf")  # a code never emitted stays so
    got = GPTTTS._sample(logits, 1.0, None, torch.Generator().manual_seed(0))
    assert got.shape == (2,) and bool((got > 0).all())
    assert GPTTTS._sample(torch.full((1, 4), float("inf")), 0.7, 2, None).shape == (1,)


@pytest.mark.slow
def test_a_learning_rate_of_1e12_ends_with_one_error_line(demo_corpus: Path, tmp_path: Path) -> None:
    """``speechtrain train`` on gpt_tts_tiny with optim.lr=1e12: evaluations on the poisoned weights (steps 4 and 8,
    each sampling codes) and then one ``error:`` line at the host read of step 10 (log_every), no traceback and no
    checkpoint (the steps after the first were all non-finite)."""
    out = tmp_path / "run"
    cmd = [
        sys.executable, "-m", "speechtrain", "train", "--config", str(ROOT / "recipes" / "gpt_tts_tiny.yaml"),
        f"data.manifest={demo_corpus}", f"data.cache_dir={tmp_path / 'cache'}", f"train.output_dir={out}",
        "data.num_workers=0", "optim.lr=1e12", "train.max_steps=20", "train.eval_every=4", "train.save_every=20",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    text = done.stdout + done.stderr
    assert done.returncode == 2, text[-3000:]
    assert "Traceback" not in text
    errors = [line for line in text.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "optim.lr" in errors[0] and "non-finite" in errors[0], text[-3000:]
    assert "[eval] step 8" in text and not (out / "checkpoints").exists()
