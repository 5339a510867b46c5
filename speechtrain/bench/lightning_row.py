"""The Lightning row of the ladder: the same Task's model and loss in a ``LightningModule``, trained by
``lightning.Trainer`` from the plain ``DataLoader`` of the baseline, the way a Lightning user writes it.

- one ``torch.optim.AdamW`` per optimizer stage (torch's default kernel), returned by
  ``configure_optimizers``; one stage: automatic optimization with ``gradient_clip_val``; several
  (GANs): manual optimization, stage after stage as the Task orders them;
- precision: ``"32-true"`` on the CPU (Lightning's ``bf16-mixed`` is slower than fp32 on CPUs without
  bf16 units), ``"bf16-mixed"`` (``"16-mixed"`` before Ampere) on CUDA: what Lightning users pick;
- no logger, checkpointing, progress bar or sanity validation: they are not training.

A callback times the same window as :func:`speechtrain.bench.measure.timed_loop` (warm-up steps
excluded, then at least ``steps`` steps and ``min_seconds``), counting audio and frames per batch; data
wait is the time between one step's end and the next one's start (fetching the batch and moving it).

``lightning`` is an optional dependency (``pip install lightning``), imported only here, when the row runs.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import time
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from speechtrain.bench.measure import RowNotApplicable, _load_average, minor_faults, synchronize
from speechtrain.train.task import Task

if TYPE_CHECKING:
    from speechtrain.config import OptimConfig

INSTALL_HINT = "not installed: pip install lightning"


def lightning_available() -> bool:
    """Whether ``import lightning`` would work (without importing it)."""
    return importlib.util.find_spec("lightning") is not None


def lightning_precision(device: torch.device) -> tuple[str, str]:
    """Lightning's precision flag for ``device`` and our name for it."""
    if device.type != "cuda":
        return "32-true", "fp32"
    if torch.cuda.is_bf16_supported():
        return "bf16-mixed", "bf16"
    return "16-mixed", "fp16"


def run_lightning(
    task: Task,
    loader: torch.utils.data.DataLoader,
    optim: OptimConfig,
    device: torch.device,
    *,
    steps: int,
    warmup: int,
    min_seconds: float = 0.0,
    time_limit: float | None = None,
    features: nn.Module | None = None,
    progress: Callable[[int], None] | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Train ``task`` with ``lightning.Trainer`` on ``loader`` and time it: (counts as
    :func:`~speechtrain.bench.measure.timed_loop` returns them, the row's record)."""
    try:
        L: Any = importlib.import_module("lightning")  # optional dependency; typed as Any with or without it
    except ImportError:
        raise RowNotApplicable(INSTALL_HINT) from None
    for name in ("lightning", "lightning.pytorch", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.ERROR)  # no banners ("GPU available: False, ...")
    flag: Any
    flag, precision = lightning_precision(device)
    module = _module_class(L)(task, optim, features)
    timer = _timer_class(L)(steps, warmup, min_seconds, time_limit, device, progress)
    single = len(module.specs) == 1
    clip = module.specs[0].grad_clip if module.specs[0].grad_clip is not None else optim.grad_clip
    trainer = L.Trainer(
        accelerator="gpu" if device.type == "cuda" else "cpu",
        devices=[device.index or 0] if device.type == "cuda" else 1,
        precision=flag,
        max_epochs=-1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        gradient_clip_val=clip if single else None,
        callbacks=[timer],
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "the dataloader does not have many workers": it is the baseline's
        trainer.fit(module, train_dataloaders=loader)
    record = {
        "applied": True,
        "exact": precision == "fp32",
        "detail": f"lightning {L.__version__}: LightningModule + plain DataLoader, precision={flag}, "
        + ("automatic optimization" if single else f"manual optimization over {len(module.specs)} stages"),
        "info": {"version": L.__version__, "precision": flag},
    }
    return timer.counts(), {"lightning": record, "precision": precision}


def _module_class(L: Any) -> Any:
    class TaskModule(L.LightningModule):
        """A Task's modules and losses as a LightningModule."""

        def __init__(self, task: Task, optim: OptimConfig, features: nn.Module | None) -> None:
            super().__init__()
            self.__dict__["task"] = task  # the Task is not a module; its modules are registered below
            self.nets = nn.ModuleDict(task.modules())
            self.features = features
            self.optim = optim
            self.specs = list(task.optimizer_specs())
            self.automatic_optimization = len(self.specs) == 1

        def configure_optimizers(self) -> list[torch.optim.Optimizer]:
            o = self.optim
            out: list[torch.optim.Optimizer] = []
            for spec in self.specs:
                params = [p for name in spec.modules for p in self.nets[name].parameters() if p.requires_grad]
                lr, betas = o.lr * spec.lr_multiplier, (o.betas[0], o.betas[1])
                out.append(torch.optim.AdamW(params, lr=lr, betas=betas, eps=o.eps, weight_decay=o.weight_decay))
            return out

        def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
            return self.features(batch, training=True) if self.features is not None else batch

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            cache: dict[str, Any] = {}
            if self.automatic_optimization:
                return self.task.training_step(batch, self.specs[0].name, cache)["loss"]
            opts = self.optimizers()
            for spec, opt in zip(self.specs, opts if isinstance(opts, list) else [opts]):
                opt.zero_grad(set_to_none=True)
                loss = self.task.training_step(batch, spec.name, cache)["loss"]
                self.manual_backward(loss)
                clip = spec.grad_clip if spec.grad_clip is not None else self.optim.grad_clip
                if clip is not None:
                    self.clip_gradients(opt, gradient_clip_val=clip, gradient_clip_algorithm="norm")
                opt.step()
            return None

    return TaskModule


def _timer_class(L: Any) -> Any:
    class WindowTimer(L.Callback):
        """Times warm-up-excluded steps and stops the fit when the window is full."""

        def __init__(
            self,
            steps: int,
            warmup: int,
            min_seconds: float,
            time_limit: float | None,
            device: torch.device,
            progress: Callable[[int], None] | None,
        ) -> None:
            self.steps, self.warmup, self.min_seconds, self.time_limit = steps, warmup, min_seconds, time_limit
            self.device, self.progress = device, progress
            self.done = 0  # steps finished, warm-up included
            self.start: float | None = None
            self.cpu_start = 0.0
            self.last_end = 0.0
            self.wait = 0.0
            self.load_before: float | None = None
            self.faults: int | None = None
            self.totals = {"steps": 0, "samples": 0, "audio_seconds": 0.0, "padded_frames": 0, "real_frames": 0}
            self.seconds = 0.0
            self.cpu_seconds = 0.0

        def _start(self) -> None:
            synchronize(self.device)
            self.load_before = _load_average()
            self.faults = minor_faults()
            self.cpu_start = time.process_time()
            self.start = self.last_end = time.perf_counter()

        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            if self.warmup == 0:
                self._start()

        def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
            if self.start is None:
                return
            self.wait += time.perf_counter() - self.last_end
            t = self.totals
            t["steps"] += 1
            t["samples"] += batch.size
            t["audio_seconds"] += batch.audio_seconds
            t["padded_frames"] += batch.padded_frames
            t["real_frames"] += batch.real_frames

        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            self.done += 1
            if self.start is None:
                if self.done >= self.warmup:
                    self._start()
                return
            now = time.perf_counter()
            self.last_end = now
            timed = int(self.totals["steps"])
            if self.progress is not None:
                self.progress(timed)
            elapsed = now - self.start
            over = self.time_limit is not None and timed >= 2 and elapsed > self.time_limit
            if over or (timed >= self.steps and elapsed >= self.min_seconds):
                synchronize(self.device)
                self.seconds = time.perf_counter() - self.start
                self.cpu_seconds = time.process_time() - self.cpu_start
                after = minor_faults()
                self.faults = None if after is None or self.faults is None else after - self.faults
                trainer.should_stop = True

        def counts(self) -> dict[str, Any]:
            loads = [x for x in (self.load_before, _load_average()) if x is not None]
            return {
                **self.totals,
                "seconds": self.seconds,
                "data_wait_seconds": self.wait,
                "gpu_busy_fraction": None,
                "cpu_seconds": self.cpu_seconds,
                "host_load": max(loads) if loads else None,
                "page_faults": self.faults,
            }

    return WindowTimer
