"""``speechtrain estimate``: the memory of a training run, before running it.

:class:`EstimateRecipe` builds a fresh task of the config's model, sets it up on synthetic data,
places it on the device with the run's accelerations (compile off: it does not change what is
kept for backward) and finds the longest utterance (the prepared training set's, else
``data.max_duration``); :func:`speechtrain.memory.estimate.estimate` measures the rest.
"""

from __future__ import annotations

from typing import Any

import torch

from speechtrain.accel.apply import apply_accelerations
from speechtrain.accel.precision import resolve_precision
from speechtrain.config import Config
from speechtrain.device import resolve_device
from speechtrain.errors import UserError
from speechtrain.memory.estimate import estimate
from speechtrain.recipes.common import build_task, place
from speechtrain.recipes.data import DataRecipe
from speechtrain.train.task import Task


class EstimateRecipe:
    """Estimate the memory of training ``cfg``."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.data, self.accel, self.optim = cfg.data, cfg.accel, cfg.optim
        self.device_name = cfg.train.device
        self.max_text_tokens = getattr(cfg.model, "max_text_tokens", None)  # the families that cap text do
        self.data_recipe = DataRecipe(cfg)

    def run(
        self,
        task: Task | None = None,
        device: torch.device | str | None = None,
        longest_frames: int | None = None,
        lengths: tuple[int, int] | None = None,
    ) -> dict[str, Any]:
        """The estimate (a dict of bytes and figures; ``format_estimate`` prints it).

        ``task`` defaults to a fresh task of the config's model, set up on synthetic data, with the
        accelerations of ``accel`` applied (compile excepted), so that activation checkpointing, SDPA
        and the precision show in the figures; a given ``task`` is measured as it is (its modules are
        moved to the device). ``device`` defaults to ``train.device``; ``longest_frames`` to the
        prepared training set's longest utterance (else ``data.max_duration``); ``lengths`` are the two
        measured lengths in frames.
        """
        dev = resolve_device(self.device_name) if device is None else torch.device(device)
        accelerations = None
        if task is None:
            self.data_recipe.resolve_symbols(prepare=False)  # a prepared corpus sizes the text embedding
            task = build_task(self.cfg)
            place(task, dev)
            self._setup_on_synthetic_data(task)
            no_compile = self.accel.model_copy(update={"compile": False})
            plan = apply_accelerations(no_compile, task.modules(), dev, self.cfg.model.avoid_bf16)
            precision = plan.precision
            accelerations = [r.name for r in plan.records if r.applied]
        else:
            for module in task.modules().values():
                module.to(dev)
            precision = resolve_precision(self.accel.precision, dev, self.cfg.model.avoid_bf16)
        source = "training set"
        if longest_frames is None:
            longest_frames = self.data_recipe.longest_train_frames()
            source = "prepared training set"
            if longest_frames is None:
                longest_frames = int(self.data.max_duration * self.data.sample_rate / self.data.hop_length)
                source = "data.max_duration"
        return estimate(
            task,
            data=self.data,
            optimizer=self.optim.name,
            device=dev,
            precision=precision,
            longest_frames=longest_frames,
            longest_source=source,
            max_text_tokens=self.max_text_tokens,
            accelerations=accelerations,
            lengths=lengths,
        )

    def _setup_on_synthetic_data(self, task: Task) -> None:
        """``task.setup`` (codebooks, normalisation) on a synthetic set, so that it can take a step."""
        try:
            task.setup(self.data_recipe.setup_set())
        except (ValueError, RuntimeError, UserError) as exc:
            raise UserError(
                f"estimate: the task's setup() failed on synthetic data ({exc}); pass a task that is already set up"
            ) from exc
