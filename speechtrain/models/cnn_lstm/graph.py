"""The CNN-LSTM classifier as an exported graph sees it: ``mel`` (B, n_mels, n_frames) natural-log mel of
clips of one length (no padding) -> ``logits`` and ``probs`` (B, num_classes).

Without padding the packed LSTM of training is a plain LSTM over every frame and the masked pooling a
plain mean and max, so the graph holds no packing (which does not export) and equals ``task.classify``.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from speechtrain.models.cnn_lstm.model import CNNLSTM, _normalise


class CNNLSTMGraph(nn.Module):
    """``forward(mel) -> (logits, probs)`` (see the module doc)."""

    def __init__(self, model: CNNLSTM) -> None:
        super().__init__()
        self.model = copy.deepcopy(model).eval()

    def forward(self, mel: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        m = self.model
        lengths = torch.ones_like(mel[:, 0, 0], dtype=torch.long) * mel.shape[-1]  # (B,) every frame real
        x = _normalise(mel.float(), torch.ones_like(mel[:, 0])).unsqueeze(1)  # (B, 1, n_mels, n_frames)
        for block in m.blocks:
            x, lengths = block(x, lengths)
        b, c, f, t_out = x.shape
        y, _ = m.lstm(x.permute(0, 3, 1, 2).reshape(b, t_out, c * f))  # (B, T', H * directions)
        pooled = []
        if m.pooling in ("mean_max", "mean"):
            pooled.append(y.mean(1))
        if m.pooling in ("mean_max", "max"):
            pooled.append(y.amax(1))
        logits = m.head(torch.cat(pooled, dim=-1))  # (B, num_classes)
        return logits, torch.softmax(logits, dim=-1)
