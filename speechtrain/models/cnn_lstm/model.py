"""The CNN-LSTM network.

Padding never changes an item's output: the input is normalised over real frames only and every
conv block zeroes padded frames again (zero is what the convs pad with), pooling keeps only frames
whose window is fully real, and the LSTM runs on a packed sequence. So a batch split in halves gives
the same per-item logits (the OOM guard's and accumulation's invariant). No batch norm for the same
reason: its statistics would mix items and padding.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from speechtrain.models.common import sequence_mask


class ConvBlock(nn.Module):
    """Conv2d over (mel, time) -> ReLU -> max-pool (2 bands, ``pool_time`` frames), padded frames kept at zero."""

    def __init__(self, c_in: int, c_out: int, kernel_size: int, pool_time: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, kernel_size, padding=kernel_size // 2)
        self.pool_time = pool_time

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # x (B, C, F, T_frames) with zeros on padded frames, lengths (B,) real frames
        x = F.relu(self.conv(x)) * sequence_mask(lengths, x.shape[-1]).to(x.dtype)[:, None, None, :]
        x = F.max_pool2d(x, (2, self.pool_time))  # (B, C_out, F / 2, T_frames / pool_time)
        # a window that reaches into padding (or past the padded end) is not a real frame: zero it
        lengths = torch.div(lengths, self.pool_time, rounding_mode="floor")
        return x * sequence_mask(lengths, x.shape[-1]).to(x.dtype)[:, None, None, :], lengths


class CNNLSTM(nn.Module):
    """Log-mel ``(B, n_mels, T_frames)`` + lengths -> logits ``(B, num_classes)``."""

    def __init__(
        self,
        n_mels: int,
        num_classes: int,
        conv_channels: Sequence[int] = (32, 64, 64),
        kernel_size: int = 3,
        pool_time: Sequence[int] = (2, 2, 1),
        lstm_hidden: int = 128,
        lstm_layers: int = 1,
        bidirectional: bool = True,
        pooling: str = "mean_max",
        dropout: float = 0.2,
    ) -> None:
        super().__init__()
        if n_mels // 2 ** len(conv_channels) < 1:
            raise ValueError(f"{len(conv_channels)} conv blocks halve n_mels={n_mels} below one band")
        self.blocks = nn.ModuleList()
        c_in = 1
        for c, p in zip(conv_channels, pool_time):
            self.blocks.append(ConvBlock(c_in, c, kernel_size, p))
            c_in = c
        self.time_stride = math.prod(pool_time)
        bands = n_mels // 2 ** len(conv_channels)
        self.lstm = nn.LSTM(
            c_in * bands,
            lstm_hidden,
            num_layers=lstm_layers,
            batch_first=True,
            bidirectional=bidirectional,
            dropout=dropout if lstm_layers > 1 else 0.0,
        )
        self.pooling = pooling
        width = lstm_hidden * (2 if bidirectional else 1) * (2 if pooling == "mean_max" else 1)
        self.dropout = nn.Dropout(dropout)
        self.head = nn.Linear(width, num_classes)

    def output_lengths(self, lengths: Sequence[int]) -> list[int]:
        """Frames after the conv front end for host-side input lengths (at least 1)."""
        out = []
        for n in lengths:
            for block in self.blocks:
                assert isinstance(block, ConvBlock)
                n = n // block.pool_time
            out.append(max(1, int(n)))
        return out

    def forward(
        self, mel: torch.Tensor, lengths: torch.Tensor, host_lengths: Sequence[int] | None = None
    ) -> torch.Tensor:
        """``mel`` (B, n_mels, T_frames), ``lengths`` (B,) real frames on the device; ``host_lengths`` the same
        on the host (avoids a device->host copy for packing)."""
        if host_lengths is None:
            host_lengths = [int(n) for n in lengths.cpu().tolist()]  # host-device sync: pass host_lengths
        t = mel.shape[-1]
        mask = sequence_mask(lengths, t).to(mel.dtype)  # (B, T_frames)
        x = _normalise(mel.float(), mask.float()).to(mel.dtype).unsqueeze(1)  # (B, 1, n_mels, T_frames)
        cur = lengths
        for block in self.blocks:
            x, cur = block(x, cur)
        b, c, f, t_out = x.shape  # (B, C, F', T')
        x = x.permute(0, 3, 1, 2).reshape(b, t_out, c * f)  # (B, T', C * F')
        out_lengths = self.output_lengths(host_lengths)
        # pack_padded_sequence reads its lengths on the host: a CPU tensor of host ints, no device sync
        packed = pack_padded_sequence(
            x, torch.tensor(out_lengths, dtype=torch.int64), batch_first=True, enforce_sorted=False
        )
        y, _ = self.lstm(packed)
        y, _ = pad_packed_sequence(y, batch_first=True, total_length=t_out)  # (B, T', H * directions)
        # host list -> device: non_blocking, a plain torch.tensor(..., device=cuda) copy waits for the stream
        real = torch.tensor(out_lengths).to(y.device, non_blocking=True)
        m = sequence_mask(real, t_out).unsqueeze(-1)  # (B, T', 1)
        pooled = []
        if self.pooling in ("mean_max", "mean"):
            pooled.append((y * m).sum(1) / real.unsqueeze(1).to(y.dtype))
        if self.pooling in ("mean_max", "max"):
            pooled.append(y.masked_fill(~m, float("-inf")).amax(1))
        return self.head(self.dropout(torch.cat(pooled, dim=-1)))  # (B, num_classes)


def _normalise(mel: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per-item zero mean, unit variance over real frames (all bands); padded frames set to 0."""
    m = mask.unsqueeze(1)  # (B, 1, T_frames)
    count = (m.sum(dim=(1, 2)) * mel.shape[1]).clamp(min=1).view(-1, 1, 1)
    mean = (mel * m).sum(dim=(1, 2), keepdim=True) / count
    var = (((mel - mean) * m) ** 2).sum(dim=(1, 2), keepdim=True) / count
    return (mel - mean) / torch.sqrt(var + 1e-5) * m
