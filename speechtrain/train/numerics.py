"""The numerics guard: non-finite steps are skipped and counted; fp16 that keeps failing falls back.

A step whose loss or gradient norm is not finite is skipped (no optimizer update). An fp16 overflow
that the grad scaler absorbs by lowering its scale is routine and not counted. After
``fallback_after`` non-finite steps in a row the guard asks for the next safer precision
(:meth:`speechtrain.accel.precision.PrecisionPlan.fallback`: fp16 -> bf16 where supported, else
fp32); the Trainer then reloads the last good state and continues in it. Where there is nothing to
fall back to, ``fallback_after`` in a row (seen at a host read) stop the run with :class:`Diverged`, which names
the likely cause (the learning rate, the data); the checkpointer writes no checkpoint while the steps are
non-finite (:meth:`NumericsGuard.in_streak`), so the last finite one stays the one to resume from.

The decision is made on the device, so that a step issues no host sync (the CPU keeps queueing the
next step while the GPU works): :func:`nonfinite` gives a 0-dim bool tensor, :class:`SkippableStep`
runs the optimizer step so that it changes nothing where that tensor is set, and :meth:`NumericsGuard.observe`
counts it in device tensors. The host reads the counts (:meth:`NumericsGuard.settle`) at the Trainer's
log, save and last steps only: the fallback is then decided there, on the run of non-finite steps seen
since the last read. On the CPU the device is the host, so a step there is decided on the host
(:meth:`SkippableStep._host_step`: no restoring copy of the parameters to pay for).
"""

from __future__ import annotations

from typing import Any

import torch

from speechtrain.accel.precision import PrecisionPlan
from speechtrain.errors import UserError
from speechtrain.logs import get_logger

log = get_logger(__name__)


class Diverged(UserError):
    """Non-finite steps in a row with no safer precision to fall back to: the run stops."""


class NumericsGuard:
    """Counts non-finite steps and decides when to change precision."""

    def __init__(self, fallback_after: int = 3) -> None:
        if fallback_after < 1:
            raise ValueError(f"fallback_after must be >= 1, got {fallback_after}")
        self.fallback_after = fallback_after
        self._nonfinite_steps = 0
        self.in_row = 0
        self.fallbacks: list[str] = []  # one note per precision change
        self.events: list[dict[str, Any]] = []  # taken by the next metrics row
        #: device counts since the last :meth:`settle`: (non-finite steps, in a row now, most in a row)
        self._pending: torch.Tensor | None = None

    def observe(self, bad: torch.Tensor) -> None:
        """Count a step's outcome on the device (``bad``: a 0-dim bool tensor, the step was skipped as
        non-finite). No host sync: the counts are read by :meth:`settle`."""
        b = bad.detach().reshape(()).to(torch.float32)
        if self._pending is None:  # the host's run so far, as a kernel argument (no copy from the host)
            zero = torch.zeros((), device=b.device)
            self._pending = torch.stack([zero, zero + self.in_row, zero + self.in_row])
        count, row, most = self._pending.unbind()
        row = (row + 1) * b  # 0 after a finite step
        self._pending = torch.stack([count + b, row, torch.maximum(most, row)])

    def _read(self) -> tuple[int, int, int]:
        """(non-finite steps, in a row now, most in a row) since the last read; folds them into the host
        counters."""
        if self._pending is None:
            return 0, self.in_row, self.in_row
        count, row, most = (int(v) for v in self._pending.tolist())  # host sync: at log/save steps only
        self._pending = None
        self._nonfinite_steps += count
        self.in_row = row
        return count, row, most

    @property
    def nonfinite_steps(self) -> int:
        """Non-finite steps skipped so far (reads the device counts: a host sync, outside the step)."""
        self._read()
        return self._nonfinite_steps

    def settle(self, step: int, precision: PrecisionPlan) -> PrecisionPlan | None:
        """Read the device counts since the last call (the host sync of the guard; the Trainer calls it at
        log, save and last steps): warn about skipped steps, and return the plan to fall back to when
        ``fallback_after`` steps in a row were non-finite since the last fallback, else None."""
        count, row, most = self._read()
        if count:
            log.warning(
                f"[numerics] step {step}: {count} non-finite step(s) since the last report skipped ({row} in a row now)"
            )
        return self._decide(max(row, most), row, precision)

    def in_streak(self) -> bool:
        """Whether the latest step was non-finite (reads the device counts: a host sync, outside the step)."""
        self._read()
        return self.in_row > 0

    @staticmethod
    def routine_overflow(scaler: torch.amp.GradScaler) -> torch.Tensor | bool:
        """Whether an fp16 overflow is one that the grad scaler handles by backing off its scale (not a
        numerics fault): its scale, after :meth:`~torch.amp.GradScaler.update`, is still >= 1. A device
        bool (no host sync); False without a scaler."""
        if not scaler.is_enabled():
            return False
        scale = getattr(scaler, "_scale", None)  # the scale tensor GradScaler keeps on the device
        return scale.reshape(()) >= 1.0 if isinstance(scale, torch.Tensor) else scaler.get_scale() >= 1.0

    def update(self, finite: bool, step: int, precision: PrecisionPlan) -> PrecisionPlan | None:
        """Count one step's outcome known on the host; the plan to fall back to when it is time, else None."""
        self._read()
        if finite:
            self.in_row = 0
            return None
        self._nonfinite_steps += 1
        self.in_row += 1
        log.warning(f"[numerics] step {step}: non-finite loss or gradient, step skipped ({self.in_row} in a row)")
        return self._decide(self.in_row, self.in_row, precision)

    def _decide(self, most: int, row: int, precision: PrecisionPlan) -> PrecisionPlan | None:
        k = self.fallback_after
        if most < k:
            return None
        fallback = precision.fallback()
        if fallback is None or fallback.name == precision.name:
            if row >= k:
                raise Diverged(
                    f"training diverged: {row} non-finite steps in a row in {precision.name} (every one skipped; "
                    f"train.nan_fallback_after={k}) and no safer precision to fall back to. The likely cause is the "
                    f"learning rate (lower optim.lr, or set optim.grad_clip) or the data (an utterance with broken "
                    f"audio or features: speechtrain prepare --strict)"
                )
            return None
        return fallback

    def fell_back(self, old: str, new: PrecisionPlan, step: int) -> None:
        """Record the change the Trainer made after :meth:`settle` asked for it."""
        self._read()
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
            "nonfinite_steps": self.nonfinite_steps,  # (reads the device counts)
            "precision_fallbacks": list(self.fallbacks),
            "numerics_events": [dict(e) for e in self.events],  # not yet in a metrics row
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._pending = None
        self._nonfinite_steps = int(state["nonfinite_steps"])
        self.fallbacks = list(state["precision_fallbacks"])
        self.events = [dict(e) for e in state.get("numerics_events") or []]


def nonfinite(loss: torch.Tensor, grad_norm: torch.Tensor) -> torch.Tensor:
    """A 0-dim bool tensor on the device: the step's loss or gradient norm is not finite."""
    return ~(torch.isfinite(loss.detach()).reshape(()) & torch.isfinite(grad_norm.detach()).reshape(()))


def _local(t: torch.Tensor) -> torch.Tensor:
    """A DTensor's local shard (FSDP2), else the tensor itself."""
    to_local = getattr(t, "to_local", None)
    return to_local() if callable(to_local) else t


class SkippableStep:
    """The optimizer step of one stage, skipped on the device where ``skip`` (a 0-dim bool tensor) is set.

    - Optimizers whose step takes ``found_inf`` (torch's fused Adam/AdamW/SGD, on CUDA and the CPU; what
      GradScaler hands them) skip the update and the step count in their own kernel.
    - Any other optimizer (foreach or for-loop kernels, Muon, a combined optimizer): the parameters and their
      optimizer state on the device are copied before the step and put back where ``skip`` is set
      (``torch.where``): exact, at the cost of one copy of them per step. A state tensor on another device
      is not put back: the host-side step counter of a non-capturable Adam on CUDA still advances on a
      skipped step (its bias correction runs one step ahead; the fused kernel, the CUDA default, has no
      such counter). The lists are cached and rebuilt when the optimizer's state is replaced (a resume, a
      fallback) or grows.
    - On the CPU the step is decided on the host (:meth:`_host_step`): there is no device queue to keep fed.
    - The first update of a stage makes the optimizer's state: there is nothing to copy yet, so that step is
      decided on the host (one host sync, in the first step only).
    """

    def __init__(self, opt: torch.optim.Optimizer, on_host: bool | None = None) -> None:
        self.opt = opt
        self.on_host = on_host  # None: decided on the host where ``skip`` is a CPU tensor (tests force False)
        self._state_ref: Any = None
        self._states = -1
        self._targets: list[torch.Tensor] = []
        self._copies: list[torch.Tensor] = []

    @property
    def on_device(self) -> bool:
        """The optimizer consumes ``found_inf`` itself (fused kernels)."""
        return bool(getattr(self.opt, "_step_supports_amp_scaling", False))

    @torch.no_grad()
    def __call__(self, skip: torch.Tensor, with_grad: int) -> None:
        """Step unless ``skip``; ``with_grad``: how many parameters of the stage have a gradient now."""
        opt = self.opt
        if self.on_device:
            opt.grad_scale = None  # type: ignore[attr-defined]  # gradients are already unscaled
            opt.found_inf = skip.to(torch.float32).reshape(())  # type: ignore[attr-defined]
            try:
                opt.step()
            finally:
                del opt.grad_scale, opt.found_inf  # type: ignore[attr-defined]
            return
        if skip.device.type == "cpu" if self.on_host is None else self.on_host:
            self._host_step(skip)
            return
        if len(opt.state) < with_grad:  # a parameter without optimizer state yet: the first update
            if not bool(skip):  # host sync: only in an update that makes optimizer state (the first)
                opt.step()
            return
        targets, copies = self._cached(skip.device)
        torch._foreach_copy_(copies, targets)
        opt.step()
        for t, old in zip(targets, copies):
            torch.where(skip, old, t, out=t)

    def _host_step(self, skip: torch.Tensor) -> None:
        """On the CPU the device is the host: ``skip`` is already computed, reading it waits for nothing, and a
        step that is not taken costs nothing; the restoring copy would read and write the parameters and the
        optimizer state twice per step (in the NSF peer row 138M elements per step, 553 MB kept for it)."""
        if not bool(skip):  # a CPU value: no device to wait for
            self.opt.step()

    def _cached(self, device: torch.device) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        opt = self.opt
        if self._state_ref is not opt.state or self._states != len(opt.state):
            params = [p for g in opt.param_groups for p in g["params"]]
            tensors = [p for p in params] + [
                t for p in params for t in opt.state.get(p, {}).values() if isinstance(t, torch.Tensor)
            ]
            self._targets = [x for t in tensors for x in [_local(t)] if x.device == device]
            self._copies = [torch.empty_like(t) for t in self._targets]
            self._state_ref, self._states = opt.state, len(opt.state)
        return self._targets, self._copies
