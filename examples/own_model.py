"""Train your own model with speechtrain: write a Task, point a config at it, done.

    speechtrain train --config examples/own_model.yaml

The config names the factory below as ``model.name: examples.own_model:build_task`` (run from the
repository root so that ``examples`` is importable, or put this file in your own package).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from speechtrain.data.batch import Batch
from speechtrain.train.task import Needs, Task


class MelDenoiser(nn.Module):
    """Your model: any nn.Module. (B, n_mels, T_frames) -> (B, n_mels, T_frames)."""

    def __init__(self, n_mels: int, hidden: int) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv1d(n_mels, hidden, 5, padding=2), nn.GELU(), nn.Conv1d(hidden, n_mels, 5, padding=2)
        )

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        return mel + self.net(mel)


class DenoiseTask(Task):
    """How a batch becomes a loss: the only thing speechtrain needs from you."""

    def __init__(self, n_mels: int, hidden: int, noise: float) -> None:
        self.model = MelDenoiser(n_mels, hidden)
        self.noise = noise

    def needs(self) -> Needs:
        return Needs(mel=True)

    def modules(self) -> dict[str, nn.Module]:
        return {"model": self.model}

    def training_step(self, batch: Batch, stage: str, cache: dict[str, Any]) -> dict[str, torch.Tensor]:
        mel, lengths = batch["mel"], batch["mel_lengths"]  # (B, n_mels, T_frames), (B,)
        mask = (torch.arange(mel.shape[-1], device=mel.device)[None] < lengths[:, None]).unsqueeze(1)
        noisy = mel + self.noise * torch.randn_like(mel)
        err = (self.model(noisy) - mel).abs() * mask
        loss = err.sum() / (mask.sum() * mel.shape[1])
        return {"loss": loss, "l1": loss.detach()}


def build_task(model: Any, data: Any) -> Task:
    """Factory named in the config, called with the model section (your extra keys, unchecked, in
    ``model.model_extra``) and the data section (``speechtrain.config.DataConfig``)."""
    extra = model.model_extra or {}
    return DenoiseTask(data.n_mels, int(extra.get("hidden", 64)), float(extra.get("noise", 0.5)))
