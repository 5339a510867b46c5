"""Building blocks of VITS: the WaveNet stack (posterior encoder, flow couplings), the mean-only
residual coupling layer, and the pieces of the stochastic duration predictor (dilated depth-separable
convolutions, element-wise affine flow, log flow, and spline coupling with rational-quadratic splines).

Every flow module has ``forward(x, mask, g=None, reverse=False)`` and returns ``(y, logdet)`` when
going forward (``logdet`` per item, ``(B,)``) and ``y`` alone in reverse.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from speechtrain.models.common import get_padding, weight_norm
from speechtrain.models.vits.attentions import ChannelLayerNorm


class WaveNet(nn.Module):
    """Non-causal WaveNet: gated dilated convolutions with residual and skip paths, optional global
    conditioning ``g`` (B, gin_channels, 1). ``(B, C, T)`` -> skip sum ``(B, C, T)``."""

    def __init__(
        self,
        channels: int,
        kernel_size: int,
        dilation_rate: int,
        n_layers: int,
        gin_channels: int = 0,
        p_dropout: float = 0.0,
    ) -> None:
        super().__init__()
        assert kernel_size % 2 == 1, "WaveNet kernel must be odd"
        self.channels, self.n_layers = channels, n_layers
        self.drop = nn.Dropout(p_dropout)
        self.cond = weight_norm(nn.Conv1d(gin_channels, 2 * channels * n_layers, 1)) if gin_channels else None
        self.in_layers = nn.ModuleList()
        self.res_skip_layers = nn.ModuleList()
        for i in range(n_layers):
            dilation = dilation_rate**i
            pad = get_padding(kernel_size, dilation)
            conv = nn.Conv1d(channels, 2 * channels, kernel_size, dilation=dilation, padding=pad)
            self.in_layers.append(weight_norm(conv))
            out = 2 * channels if i < n_layers - 1 else channels
            self.res_skip_layers.append(weight_norm(nn.Conv1d(channels, out, 1)))

    def forward(self, x: torch.Tensor, mask: torch.Tensor, g: torch.Tensor | None = None) -> torch.Tensor:
        skip = torch.zeros_like(x)
        cond = self.cond(g) if (g is not None and self.cond is not None) else None
        c = self.channels
        for i, (in_layer, res_skip) in enumerate(zip(self.in_layers, self.res_skip_layers)):
            h = in_layer(x)
            if cond is not None:
                h = h + cond[:, i * 2 * c : (i + 1) * 2 * c]
            acts = self.drop(torch.tanh(h[:, :c]) * torch.sigmoid(h[:, c:]))
            rs = res_skip(acts)
            if i < self.n_layers - 1:
                x = (x + rs[:, :c]) * mask
                skip = skip + rs[:, c:]
            else:
                skip = skip + rs
        return skip * mask


class ResidualCouplingLayer(nn.Module):
    """Affine coupling (mean-only by default, as VITS): half the channels shift the other half."""

    def __init__(
        self,
        channels: int,
        hidden_channels: int,
        kernel_size: int,
        dilation_rate: int,
        n_layers: int,
        gin_channels: int = 0,
        mean_only: bool = True,
    ) -> None:
        super().__init__()
        assert channels % 2 == 0, "coupling channels must be even"
        self.half_channels, self.mean_only = channels // 2, mean_only
        self.pre = nn.Conv1d(self.half_channels, hidden_channels, 1)
        self.enc = WaveNet(hidden_channels, kernel_size, dilation_rate, n_layers, gin_channels)
        self.post = nn.Conv1d(hidden_channels, self.half_channels * (1 if mean_only else 2), 1)
        self.post.weight.data.zero_()  # starts as the identity
        assert self.post.bias is not None
        self.post.bias.data.zero_()

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor, g: torch.Tensor | None = None, reverse: bool = False
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        x0, x1 = x[:, : self.half_channels], x[:, self.half_channels :]
        stats = self.post(self.enc(self.pre(x0) * mask, mask, g)) * mask
        if self.mean_only:
            m, logs = stats, torch.zeros_like(stats)
        else:
            m, logs = stats[:, : self.half_channels], stats[:, self.half_channels :]
        if not reverse:
            x1 = m + x1 * torch.exp(logs) * mask
            return torch.cat([x0, x1], 1), torch.sum(logs, [1, 2])
        x1 = (x1 - m) * torch.exp(-logs) * mask
        return torch.cat([x0, x1], 1)


class Flip(nn.Module):
    """Reverses the channel order (so the next coupling transforms the other half)."""

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor, g: torch.Tensor | None = None, reverse: bool = False
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        x = torch.flip(x, [1])
        if reverse:
            return x
        return x, torch.zeros(x.shape[0], dtype=x.dtype, device=x.device)


class ElementwiseAffine(nn.Module):
    """y = m + exp(logs) * x per channel (learned)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.m = nn.Parameter(torch.zeros(channels, 1))
        self.logs = nn.Parameter(torch.zeros(channels, 1))

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor, g: torch.Tensor | None = None, reverse: bool = False
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        if not reverse:
            y = (self.m + torch.exp(self.logs) * x) * mask
            return y, torch.sum(self.logs * mask, [1, 2])
        return (x - self.m) * torch.exp(-self.logs) * mask


class LogFlow(nn.Module):
    """y = log(x) (x > 0), the duration predictor's bridge from durations to the real line."""

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor, g: torch.Tensor | None = None, reverse: bool = False
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        if not reverse:
            y = torch.log(torch.clamp_min(x, 1e-5)) * mask
            return y, torch.sum(-y, [1, 2])
        return torch.exp(x) * mask


class DDSConv(nn.Module):
    """Dilated depth-separable convolutions with layer norm and GELU, residual (duration predictor)."""

    def __init__(self, channels: int, kernel_size: int, n_layers: int, p_dropout: float = 0.0) -> None:
        super().__init__()
        self.drop = nn.Dropout(p_dropout)
        self.convs_sep = nn.ModuleList()
        self.convs_1x1 = nn.ModuleList()
        self.norms_1 = nn.ModuleList()
        self.norms_2 = nn.ModuleList()
        for i in range(n_layers):
            dilation = kernel_size**i
            padding = (kernel_size * dilation - dilation) // 2
            self.convs_sep.append(
                nn.Conv1d(channels, channels, kernel_size, groups=channels, dilation=dilation, padding=padding)
            )
            self.convs_1x1.append(nn.Conv1d(channels, channels, 1))
            self.norms_1.append(ChannelLayerNorm(channels))
            self.norms_2.append(ChannelLayerNorm(channels))

    def forward(self, x: torch.Tensor, mask: torch.Tensor, g: torch.Tensor | None = None) -> torch.Tensor:
        if g is not None:
            x = x + g
        for sep, pw, n1, n2 in zip(self.convs_sep, self.convs_1x1, self.norms_1, self.norms_2):
            y = F.gelu(n1(sep(x * mask)))
            y = self.drop(F.gelu(n2(pw(y))))
            x = x + y
        return x * mask


def rational_quadratic_spline(
    x: torch.Tensor,
    widths: torch.Tensor,
    heights: torch.Tensor,
    derivatives: torch.Tensor,
    inverse: bool = False,
    tail_bound: float = 5.0,
    min_bin_width: float = 1e-3,
    min_bin_height: float = 1e-3,
    min_derivative: float = 1e-3,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Monotonic rational-quadratic spline on ``[-B, B]`` with linear tails (Durkan et al. 2019).

    ``x`` (...,); unnormalised ``widths``/``heights`` (..., K) and inner ``derivatives`` (..., K-1).
    Returns ``(y, log|dy/dx|)`` forward, or ``(x, log|dx/dy|)`` with ``inverse``. Outside the
    interval the map is the identity (log-derivative 0).
    """
    inside = (x >= -tail_bound) & (x <= tail_bound)
    n_bins = widths.shape[-1]
    # knots: widths and heights as softmax shares of the interval, a floor per bin
    w = F.softmax(widths, dim=-1)
    w = min_bin_width + (1 - min_bin_width * n_bins) * w
    cw = F.pad(torch.cumsum(w, dim=-1), (1, 0))
    cw = 2 * tail_bound * cw - tail_bound
    cw[..., 0], cw[..., -1] = -tail_bound, tail_bound
    w = cw[..., 1:] - cw[..., :-1]
    h = F.softmax(heights, dim=-1)
    h = min_bin_height + (1 - min_bin_height * n_bins) * h
    ch = F.pad(torch.cumsum(h, dim=-1), (1, 0))
    ch = 2 * tail_bound * ch - tail_bound
    ch[..., 0], ch[..., -1] = -tail_bound, tail_bound
    h = ch[..., 1:] - ch[..., :-1]
    # derivatives at the knots; the boundary ones are 1 so the tails join smoothly
    boundary = math.log(math.exp(1 - min_derivative) - 1)
    d = F.pad(derivatives, (1, 1), value=boundary)
    d = min_derivative + F.softplus(d)

    xc = x.clamp(-tail_bound, tail_bound)
    knots = ch if inverse else cw
    edges = knots.clone()
    edges[..., -1] += 1e-6
    idx = (torch.sum(xc.unsqueeze(-1) >= edges, dim=-1) - 1).clamp(0, n_bins - 1).unsqueeze(-1)

    def pick(t: torch.Tensor) -> torch.Tensor:
        return t.gather(-1, idx).squeeze(-1)

    x_k, w_k, y_k, h_k = pick(cw[..., :-1]), pick(w), pick(ch[..., :-1]), pick(h)
    d_k, d_k1 = pick(d[..., :-1]), pick(d[..., 1:])
    s = h_k / w_k
    if not inverse:
        xi = (xc - x_k) / w_k
        xi1 = xi * (1 - xi)
        denom = s + (d_k1 + d_k - 2 * s) * xi1
        y = y_k + h_k * (s * xi.pow(2) + d_k * xi1) / denom
        dnum = s.pow(2) * (d_k1 * xi.pow(2) + 2 * s * xi1 + d_k * (1 - xi).pow(2))
        logdet = torch.log(dnum) - 2 * torch.log(denom)
        return torch.where(inside, y, x), torch.where(inside, logdet, torch.zeros_like(logdet))
    # inverse: solve the quadratic a xi^2 + b xi + c = 0 for xi in [0, 1]
    dy = xc - y_k
    a = h_k * (s - d_k) + dy * (d_k1 + d_k - 2 * s)
    b = h_k * d_k - dy * (d_k1 + d_k - 2 * s)
    c = -s * dy
    disc = (b.pow(2) - 4 * a * c).clamp_min(0)
    xi = (2 * c) / (-b - torch.sqrt(disc))
    xv = xi * w_k + x_k
    xi1 = xi * (1 - xi)
    denom = s + (d_k1 + d_k - 2 * s) * xi1
    dnum = s.pow(2) * (d_k1 * xi.pow(2) + 2 * s * xi1 + d_k * (1 - xi).pow(2))
    logdet = -(torch.log(dnum) - 2 * torch.log(denom))
    return torch.where(inside, xv, x), torch.where(inside, logdet, torch.zeros_like(logdet))


class ConvFlow(nn.Module):
    """Spline coupling: the first half of 2 channels parameterises a rational-quadratic spline of the
    second half through DDSConv."""

    def __init__(
        self, in_channels: int, filter_channels: int, kernel_size: int, n_layers: int, num_bins: int = 10
    ) -> None:
        super().__init__()
        self.half_channels, self.filter_channels, self.num_bins = in_channels // 2, filter_channels, num_bins
        self.tail_bound = 5.0
        self.pre = nn.Conv1d(self.half_channels, filter_channels, 1)
        self.convs = DDSConv(filter_channels, kernel_size, n_layers)
        self.proj = nn.Conv1d(filter_channels, self.half_channels * (num_bins * 3 - 1), 1)
        self.proj.weight.data.zero_()
        assert self.proj.bias is not None
        self.proj.bias.data.zero_()

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor, g: torch.Tensor | None = None, reverse: bool = False
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        x0, x1 = x[:, : self.half_channels], x[:, self.half_channels :]
        h = self.proj(self.convs(self.pre(x0), mask, g)) * mask
        b, c, t = x0.shape
        h = h.reshape(b, c, -1, t).permute(0, 1, 3, 2)  # (B, half, T, 3K-1)
        k = self.num_bins
        scale = math.sqrt(self.filter_channels)
        widths, heights, derivs = h[..., :k] / scale, h[..., k : 2 * k] / scale, h[..., 2 * k :]
        x1, logdet = rational_quadratic_spline(x1, widths, heights, derivs, inverse=reverse, tail_bound=self.tail_bound)
        x = torch.cat([x0, x1], 1) * mask
        if reverse:
            return x
        return x, torch.sum(logdet * mask, [1, 2])
