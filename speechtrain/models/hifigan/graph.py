"""The HiFi-GAN vocoder as an exported graph sees it: ``mel`` (B, n_mels, n_frames) natural-log mel ->
``audio`` (B, n_samples), weight norm folded (the same outputs as ``task.vocode``)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from speechtrain.models.common import has_weight_norm, remove_weight_norm


def folded_copy(module: nn.Module, build: Callable[[], nn.Module]) -> nn.Module:
    """A freshly built module with ``module``'s weights and weight norm folded, in eval mode (a deep copy of a
    weight-normed module would share its parametrized class with the original). ``module`` may already be
    folded (a task used for inference first, as ``rtf --runtime onnx`` does): then the copy is folded first."""
    copy = build().eval()
    folded = not any(has_weight_norm(m) for m in module.modules())
    if folded:
        remove_weight_norm(copy)
    copy.load_state_dict(module.state_dict())
    for p in module.parameters():
        copy.to(p.device)
        break
    if not folded:
        remove_weight_norm(copy)
    return copy


class HiFiGANGraph(nn.Module):
    """``forward(mel) -> audio``: (B, n_mels, n_frames) -> (B, n_frames * hop_length)."""

    def __init__(self, generator: nn.Module) -> None:
        super().__init__()
        self.generator = generator

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        return self.generator(mel).squeeze(1)
