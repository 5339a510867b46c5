"""The numerics guard: non-finite steps are skipped and counted; fp16 that keeps failing falls back.

A step whose loss or gradient norm is not finite is skipped (no optimizer update). An fp16 overflow
that the grad scaler absorbs by lowering its scale is routine and not counted. After
``fallback_after`` non-finite steps in a row the guard asks for the next safer precision
(:meth:`speechtrain.accel.precision.PrecisionPlan.fallback`: fp16 -> bf16 where supported, else
fp32); the Trainer then reloads the last good state and continues in it. Where there is nothing to
fall back to, ``10 x fallback_after`` in a row stop the run with the advice.
"""

from __future__ import annotations

from typing import Any

import torch

from speechtrain.accel.precision import PrecisionPlan
from speechtrain.errors import UserError
from speechtrain.logs import get_logger

log = get_logger(__name__)


class NumericsGuard:
    """Counts non-finite steps and decides when to change precision."""

    def __init__(self, fallback_after: int = 3) -> None:
        if fallback_after < 1:
            raise ValueError(f"fallback_after must be >= 1, got {fallback_after}")
        self.fallback_after = fallback_after
        self.nonfinite_steps = 0
        self.in_row = 0
        self.fallbacks: list[str] = []  # one note per precision change
        self.events: list[dict[str, Any]] = []  # taken by the next metrics row

    @staticmethod
    def routine_overflow(scaler: torch.amp.GradScaler) -> bool:
        """An fp16 overflow that the grad scaler handles by backing off its scale (not a numerics fault)."""
        return scaler.is_enabled() and scaler.get_scale() >= 1.0  # host sync, only after an overflow

    def update(self, finite: bool, step: int, precision: PrecisionPlan) -> PrecisionPlan | None:
        """Count the step's outcome; the plan to fall back to when it is time, else None."""
        if finite:
            self.in_row = 0
            return None
        self.nonfinite_steps += 1
        self.in_row += 1
        log.warning(f"[numerics] step {step}: non-finite loss or gradient, step skipped ({self.in_row} in a row)")
        k = self.fallback_after
        if self.in_row < k:
            return None
        fallback = precision.fallback()
        if fallback is None or fallback.name == precision.name:
            if self.in_row >= 10 * k:
                raise UserError(
                    f"training diverged: {self.in_row} non-finite steps in a row in {precision.name}; "
                    f"lower optim.lr, set optim.grad_clip, or check the data"
                )
            return None
        return fallback

    def fell_back(self, old: str, new: PrecisionPlan, step: int) -> None:
        """Record the change the Trainer made after :meth:`update` asked for it."""
        self.in_row = 0
        note = (
            f"{old} -> {new.name} after {self.fallback_after} non-finite steps in a row (reloaded the last good state)"
        )
        self.fallbacks.append(note)
        self.events.append({"event": "precision_fallback", "step": step, "detail": note})
        log.info(f"[numerics] precision fallback: {note}")

    def take_events(self) -> list[dict[str, Any]]:
        """The fallbacks since the last call (for the metrics row)."""
        events, self.events = self.events, []
        return events

    def state_dict(self) -> dict[str, Any]:
        return {
            "nonfinite_steps": self.nonfinite_steps,
            "precision_fallbacks": list(self.fallbacks),
            "numerics_events": [dict(e) for e in self.events],  # not yet in a metrics row
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.nonfinite_steps = int(state["nonfinite_steps"])
        self.fallbacks = list(state["precision_fallbacks"])
        self.events = [dict(e) for e in state.get("numerics_events") or []]
