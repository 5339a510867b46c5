"""The NSF-HiFiGAN vocoder as DiffSinger's exporter and OpenUtau see it: ``mel`` (1, n_frames, n_mels)
natural-log mel (``mel_base: e``) and ``f0`` (1, n_frames) Hz -> ``waveform`` (1, n_samples).

f0 is kept below the source's Nyquist frequency as ``task.vocode`` does; the log-linear filling of unvoiced
gaps (``model.f0_interpolate``) stays with the caller (its running max/min has no ONNX operator; OpenUtau's
f0 curve has no gaps). The harmonic source's random parts (overtone phases, noise) are random nodes of the
graph, as in PyTorch; :func:`deterministic_source` switches them off in PyTorch for a check.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

from speechtrain.models.nsf_hifigan.model import NSFGenerator, SineGen


class NSFHiFiGANGraph(nn.Module):
    """``forward(mel, f0) -> waveform`` in DiffSinger's layout (see the module doc)."""

    def __init__(self, generator: NSFGenerator) -> None:
        super().__init__()
        self.generator = generator
        self.f0_ceiling = 0.49 * float(generator.source_rate)

    def forward(self, mel: torch.Tensor, f0: torch.Tensor) -> torch.Tensor:
        mel = mel.transpose(1, 2)  # (B, n_mels, n_frames)
        return self.generator(mel, torch.clamp(f0, max=self.f0_ceiling)).squeeze(1)


@contextmanager
def deterministic_source(module: nn.Module) -> Iterator[None]:
    """Inside the block every :class:`SineGen` under ``module`` starts its overtones at phase 0 and adds no noise."""
    gens = [m for m in module.modules() if isinstance(m, SineGen)]
    for g in gens:
        g.random = False
    try:
        yield
    finally:
        for g in gens:
            g.random = True
