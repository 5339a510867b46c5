"""The evaluation schedule: when a run evaluates, which metric picks ``best.pt``, and when patience is spent.

:class:`EvalSchedule` owns the :class:`~speechtrain.train.evaluate.Evaluator` of a run (None: no eval set, or a
rank that does not evaluate), the ``best_metric`` (``train.best_metric``, else the task's default quality metric),
the eval rows it writes, and the early-stop rule (``train.early_stop_patience`` evaluations in a row without a
better ``best_metric`` after ``train.best_after``). The best value and the evaluations since it are kept in the
:class:`~speechtrain.train.state.RunState` (they are saved in checkpoints). Under a process group rank 0
evaluates (sharded: every rank runs the forward) and every rank agrees on its verdicts.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import torch

from speechtrain.config import TrainConfig
from speechtrain.data.batch import Batch
from speechtrain.errors import UserError
from speechtrain.logs import get_logger
from speechtrain.quality.catalog import METRICS, BestMetric
from speechtrain.train.distributed import any_rank
from speechtrain.train.evaluate import Evaluator
from speechtrain.train.metrics import MetricsWriter
from speechtrain.train.state import RunState
from speechtrain.train.wrapping import StageWrapping

log = get_logger(__name__)


class EvalSchedule:
    """When to evaluate (every ``train.eval_every`` steps, the last step, ``train.max_audio_seconds`` heard) and
    what an evaluation decides: a new best (``best.pt``) and, with a patience, an early stop."""

    def __init__(
        self,
        evaluator: Evaluator | None,
        best_metric: BestMetric,
        train: TrainConfig,
        state: RunState,
        metrics: MetricsWriter,
        device: torch.device,
        wrapping: StageWrapping,
    ) -> None:
        self.evaluator, self.best_metric, self.train, self.state = evaluator, best_metric, train, state
        self.metrics, self.device, self.wrapping = metrics, device, wrapping
        self.fit_start: float | None = None  # set by the loop when it starts
        self._eval_seconds = 0.0  # this process's evaluations, summed (left out of the eval rows' train_seconds)
        self._seconds_before = 0.0  # train_seconds of the processes before a resume (from the checkpoint)

    def train_seconds(self) -> float:
        """Wall seconds spent training this run, evaluations left out: what a time-to-quality counts. A resumed run
        continues from its checkpoint's count (the time between that checkpoint and the stop is not in it)."""
        here = 0.0 if self.fit_start is None else time.perf_counter() - self.fit_start - self._eval_seconds
        return self._seconds_before + here

    def due(self, step: int, heard: bool) -> bool:
        t = self.train
        return step % t.eval_every == 0 or step == t.max_steps or heard

    def run(self, prepare: Callable[[Batch], Batch], autocast: Callable[[], Any]) -> tuple[bool, bool]:
        """Evaluate now: (a new best on every rank's word, patience spent on every rank's word)."""
        best = any_rank(self._evaluate(prepare, autocast), self.device, self.wrapping.world_size)  # rank 0 evaluates
        return best, self._patience_spent()

    def _patience_spent(self) -> bool:
        """Whether ``train.early_stop_patience`` evaluations in a row brought no better best_metric (every rank
        agrees: rank 0 evaluates)."""
        patience = self.train.early_stop_patience
        spent = patience is not None and self.state.evals_since_best >= patience
        return any_rank(spent, self.device, self.wrapping.world_size) if patience is not None else False

    def _evaluate(self, prepare: Callable[[Batch], Batch], autocast: Callable[[], Any]) -> bool:
        """Evaluate and write the eval row; True when its ``best_metric`` is the best so far (after best_after)."""
        if self.evaluator is None:
            return False
        step = self.state.step
        t0 = time.perf_counter()
        summary = self.evaluator.run(step, prepare, autocast)
        self._eval_seconds += time.perf_counter() - t0
        if summary is None:
            return False
        summary["audio_seconds_seen"] = self.state.audio_seconds_seen
        if self.fit_start is not None:  # wall time training, evaluations left out: what a time-to-quality counts
            summary["train_seconds"] = round(self.train_seconds(), 3)
        if self.evaluator.quality is not None and self.fit_start is not None:
            elapsed = time.perf_counter() - self.fit_start
            summary["quality_share"] = round(self.evaluator.quality_seconds / elapsed, 4) if elapsed > 0 else 0.0
        self.metrics.write({"split": "eval", "step": step, **summary})
        log.info(f"[eval] step {step}: " + ", ".join(f"{k}={v:.4g}" for k, v in summary.items() if _num(v)))
        return self.track_best(summary)

    def track_best(self, summary: dict[str, Any]) -> bool:
        """Whether this evaluation's ``best_metric`` beats the best so far (counted for early stopping after
        ``train.best_after``); a UserError when the eval row lacks a key of the user's own naming."""
        name, s = self.best_metric.name, self.state
        if name not in summary and name not in METRICS:  # a metric of the catalogue may be absent (no item left)
            bookkeeping = ("audio_seconds_seen", "train_seconds")
            numeric = sorted(
                k for k, v in summary.items() if _num(v) and not k.startswith("quality_") and k not in bookkeeping
            )
            raise UserError(
                f"train.best_metric={name}: the eval row has no '{name}' (it has {', '.join(numeric)}); set "
                f"train.best_metric to one of them"
            )
        if s.step < self.train.best_after:
            return False
        value = float(summary[name]) if _num(summary.get(name)) else math.nan
        if math.isfinite(value) and self.best_metric.better(value, s.best_eval):
            s.best_eval, s.evals_since_best = value, 0
            return True
        s.evals_since_best += 1
        return False

    def state_dict(self) -> dict[str, Any]:
        s = self.state
        return {
            "best_eval": s.best_eval,
            "best_metric": self.best_metric.name,
            "evals_since_best": s.evals_since_best,
            "train_seconds": self.train_seconds(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        s = self.state
        s.best_eval, s.evals_since_best = state["best_eval"], int(state.get("evals_since_best", 0))
        self._seconds_before = float(state.get("train_seconds", 0.0))  # checkpoints before 2026-11-29: none kept
        if state.get("best_metric", "loss") != self.best_metric.name:  # another metric now: its best starts afresh
            s.best_eval, s.evals_since_best = None, 0

    def stop_note(self) -> str:
        t, s, name = self.train, self.state, self.best_metric.name
        return (
            f"early stop at step {s.step}: {name} has not improved for {s.evals_since_best} evaluations "
            f"(train.early_stop_patience={t.early_stop_patience}); best {name}={s.best_eval}"
        )


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)
