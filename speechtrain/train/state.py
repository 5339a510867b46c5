"""The run state: where a run is (its step, what it has seen, its best evaluation), in one small object.

:class:`RunState` owns the counters every other part of the loop reads or moves on, and nothing else: the
:class:`~speechtrain.train.trainer.Trainer` advances them once per step, the
:class:`~speechtrain.train.eval_schedule.EvalSchedule` keeps the best metric in them, and the
:class:`~speechtrain.train.checkpointer.Checkpointer` saves and restores them (under the same checkpoint keys as
before they were gathered here: old checkpoints load as they are).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from speechtrain.train.metrics import Interval


@dataclass
class RunState:
    """The counters of one run (saved in every checkpoint, except the idle counters, which a resume restarts)."""

    step: int = 0
    samples_seen: int = 0
    audio_seconds_seen: float = 0.0
    trained_steps: int = 0  # steps with an update of some stage
    last_epoch: int = 0
    best_eval: float | None = None
    evals_since_best: int = 0  # evaluations in a row without a better best_metric (train.early_stop_patience)
    interval: Interval = field(default_factory=Interval)  # the steps since the last metrics row
    idle_steps: int = 0  # steps in a row in which every utterance was left out (nothing trained)
    idle_since_epoch: int | None = None

    def counters(self) -> dict[str, Any]:
        """The checkpoint's keys of the counters (the best metric's are the evaluation schedule's to write)."""
        return {
            "step": self.step,
            "samples_seen": self.samples_seen,
            "audio_seconds_seen": self.audio_seconds_seen,
            "trained_steps": self.trained_steps,
            "last_epoch": self.last_epoch,
        }

    def load_counters(self, state: dict[str, Any]) -> None:
        self.step, self.last_epoch = int(state["step"]), int(state["last_epoch"])
        self.samples_seen, self.audio_seconds_seen = int(state["samples_seen"]), float(state["audio_seconds_seen"])
        self.trained_steps = int(state.get("trained_steps", self.step))  # (older checkpoints: every step)
        self.interval = Interval()
        if state.get("interval") is not None:
            self.interval.load_state_dict(state["interval"])
