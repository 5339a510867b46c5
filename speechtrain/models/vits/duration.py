"""Duration predictors of VITS.

:class:`StochasticDurationPredictor` models the distribution of (integer) durations with a flow
conditioned on the text encoding, trained by variational dequantisation: its forward returns a
per-item negative log-likelihood bound, its reverse samples log-durations. :class:`DurationPredictor`
is the deterministic alternative (regresses log-durations; ``use_sdp: false``).
Both take the text encoding detached, so the duration loss does not shape the text encoder.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from speechtrain.models.vits.attentions import ChannelLayerNorm
from speechtrain.models.vits.modules import ConvFlow, DDSConv, ElementwiseAffine, Flip, LogFlow

LOG_2PI = math.log(2 * math.pi)


class StochasticDurationPredictor(nn.Module):
    """Flow-based duration model over ``(B, C, T_tokens)`` text encodings."""

    def __init__(
        self,
        in_channels: int,
        filter_channels: int,
        kernel_size: int = 3,
        p_dropout: float = 0.5,
        n_flows: int = 4,
        gin_channels: int = 0,
        num_bins: int = 10,
    ) -> None:
        super().__init__()
        self.log_flow = LogFlow()
        self.flows = nn.ModuleList([ElementwiseAffine(2)])
        self.post_flows = nn.ModuleList([ElementwiseAffine(2)])
        for _ in range(n_flows):
            self.flows.extend([ConvFlow(2, filter_channels, kernel_size, 3, num_bins), Flip()])
            self.post_flows.extend([ConvFlow(2, filter_channels, kernel_size, 3, num_bins), Flip()])
        self.pre = nn.Conv1d(in_channels, filter_channels, 1)
        self.convs = DDSConv(filter_channels, kernel_size, 3, p_dropout)
        self.proj = nn.Conv1d(filter_channels, filter_channels, 1)
        self.post_pre = nn.Conv1d(1, filter_channels, 1)
        self.post_convs = DDSConv(filter_channels, kernel_size, 3, p_dropout)
        self.post_proj = nn.Conv1d(filter_channels, filter_channels, 1)
        self.cond = nn.Conv1d(gin_channels, filter_channels, 1) if gin_channels else None

    def _condition(self, x: torch.Tensor, mask: torch.Tensor, g: torch.Tensor | None) -> torch.Tensor:
        x = self.pre(x.detach())
        if g is not None and self.cond is not None:
            x = x + self.cond(g.detach())
        return self.proj(self.convs(x, mask)) * mask  # (B, F, T_tokens)

    def nll(
        self, x: torch.Tensor, mask: torch.Tensor, durations: torch.Tensor, g: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Negative log-likelihood bound of ``durations`` (B, 1, T_tokens) in nats per item, (B,)."""
        h = self._condition(x, mask, g)
        h_w = self.post_proj(self.post_convs(self.post_pre(durations), mask)) * mask
        e_q = torch.randn(durations.shape[0], 2, durations.shape[2], device=x.device, dtype=x.dtype) * mask
        z_q, logdet_q = e_q, torch.zeros(x.shape[0], device=x.device, dtype=x.dtype)
        for flow in self.post_flows:
            z_q, ld = flow(z_q, mask, g=h + h_w)
            logdet_q = logdet_q + ld
        z_u, z1 = z_q[:, :1], z_q[:, 1:]
        u = torch.sigmoid(z_u) * mask  # dequantisation noise in (0, 1)
        z0 = (durations - u) * mask
        logdet_q = logdet_q + torch.sum((nn.functional.logsigmoid(z_u) + nn.functional.logsigmoid(-z_u)) * mask, [1, 2])
        log_q = torch.sum(-0.5 * (LOG_2PI + e_q**2) * mask, [1, 2]) - logdet_q
        z0, logdet = self.log_flow(z0, mask)
        z = torch.cat([z0, z1], 1)
        for flow in self.flows:
            z, ld = flow(z, mask, g=h)
            logdet = logdet + ld
        nll = torch.sum(0.5 * (LOG_2PI + z**2) * mask, [1, 2]) - logdet
        return nll + log_q

    def sample_log_durations(
        self, x: torch.Tensor, mask: torch.Tensor, g: torch.Tensor | None = None, noise_scale: float = 1.0
    ) -> torch.Tensor:
        """Sampled log-durations (B, 1, T_tokens)."""
        h = self._condition(x, mask, g)
        flows = list(reversed(self.flows))
        flows = flows[:-2] + [flows[-1]]  # the first ConvFlow only moves the unused z1 channel
        z = torch.randn(x.shape[0], 2, x.shape[2], device=x.device, dtype=x.dtype) * noise_scale
        for flow in flows:
            z = flow(z, mask, g=h, reverse=True)
        return z[:, :1]


class DurationPredictor(nn.Module):
    """Deterministic duration predictor: two conv-ReLU-norm-dropout layers -> log-duration per token."""

    def __init__(
        self,
        in_channels: int,
        filter_channels: int,
        kernel_size: int = 3,
        p_dropout: float = 0.5,
        gin_channels: int = 0,
    ) -> None:
        super().__init__()
        pad = kernel_size // 2
        self.conv_1 = nn.Conv1d(in_channels, filter_channels, kernel_size, padding=pad)
        self.norm_1 = ChannelLayerNorm(filter_channels)
        self.conv_2 = nn.Conv1d(filter_channels, filter_channels, kernel_size, padding=pad)
        self.norm_2 = ChannelLayerNorm(filter_channels)
        self.proj = nn.Conv1d(filter_channels, 1, 1)
        self.drop = nn.Dropout(p_dropout)
        self.cond = nn.Conv1d(gin_channels, in_channels, 1) if gin_channels else None

    def forward(self, x: torch.Tensor, mask: torch.Tensor, g: torch.Tensor | None = None) -> torch.Tensor:
        """Log-durations (B, 1, T_tokens)."""
        x = x.detach()
        if g is not None and self.cond is not None:
            x = x + self.cond(g.detach())
        x = self.drop(self.norm_1(torch.relu(self.conv_1(x * mask))))
        x = self.drop(self.norm_2(torch.relu(self.conv_2(x * mask))))
        return self.proj(x * mask) * mask
