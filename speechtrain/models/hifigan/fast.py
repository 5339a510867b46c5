"""SingingVocoders' fast discriminators: FastMPD (waveform folded by period) and FastMRD (log spectrograms).

openvpi/SingingVocoders' ``modules/fast_D/discriminator.py`` (their ``nsf_hifigan_fast`` task) replaces the
convolution stacks of HiFi-GAN's MPD and UnivNet's MRD by RMS-normed residual blocks of linear layers gated
by a soft-sign GLU, and folds time into channels between blocks (``strides``), so most of the work is a few
matrix products over short sequences. With their defaults FastMPD has ~1.4M parameters per period (9.9M for 7
periods, against 57.6M for HiFi-GAN's MPD with the same periods) and FastMRD ~0.41M per resolution (1.2M).

Every sub-discriminator returns ``(logits (B, N), feature maps)``: the feature maps are the RMS-normed inputs
of the second and later blocks (the first block's input and the logits are not matched), as theirs.
Module and parameter names are ours; :mod:`speechtrain.models.nsf_hifigan.importers` maps theirs
(``pre``, ``residual_layers.K.net.J``, ``layers.K.net.J``, ``post``) onto them.

Their fast task scores these discriminators with the mean over real and fake items together (targets 1
and 0), half the usual LSGAN sum: :data:`DISC_LOSS_SCALE`.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from speechtrain.models.hifigan.model import _run_pair

#: SingingVocoders' fast task (``univloss.D2loss``) averages the squared error over the real and the fake items
#: of a batch together: with as many of each, half of HiFi-GAN's mean((1 - D(y))^2) + mean(D(y_hat)^2)
DISC_LOSS_SCALE = 0.5


class _SoftSignGLU(torch.autograd.Function):
    """``softsign(a) * softsign(b)``, keeping only the two partial derivatives for the backward."""

    @staticmethod
    def forward(ctx, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:  # noqa: ANN001
        da, db = a.abs() + 1.0, b.abs() + 1.0
        sa, sb = a / da, b / db
        ctx.save_for_backward(sb / (da * da), sa / (db * db))  # d/da, d/db of the product
        return sa * sb

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # noqa: ANN001
        d_a, d_b = ctx.saved_tensors
        return grad * d_a, grad * d_b


def softsign_glu(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Gated linear unit with soft-sign on both halves of ``x`` along ``dim`` (the first half is the value)."""
    a, b = torch.split(x, x.shape[dim] // 2, dim=dim)
    return _SoftSignGLU.apply(a, b)


def _rms(x: torch.Tensor) -> torch.Tensor:
    return F.rms_norm(x, (x.shape[-1],))


class FastPeriodBlock(nn.Module):
    """Residual block over ``(N, T, C)``: a conv along time (depthwise after the first block), then
    ``C -> 2C`` GLU, ``C -> 2C`` GLU, ``C -> C``. Takes the RMS-normed input it adds to."""

    def __init__(self, channels: int, kernel_size: int, depthwise: bool) -> None:
        super().__init__()
        groups = channels if depthwise else 1
        self.conv = nn.Conv1d(channels, channels, kernel_size, padding=kernel_size // 2, groups=groups)
        self.fc1 = nn.Linear(channels, 2 * channels)
        self.fc2 = nn.Linear(channels, 2 * channels)
        self.proj = nn.Linear(channels, channels)

    def forward(self, x: torch.Tensor, normed: torch.Tensor) -> torch.Tensor:  # (N, T, C) each
        h = self.conv(normed.transpose(1, 2)).transpose(1, 2)
        h = softsign_glu(self.fc1(h))
        h = softsign_glu(self.fc2(h))
        return x + self.proj(h)


class FastPeriodDiscriminator(nn.Module):
    """One period of FastMPD: the waveform cut to whole ``period x prod(strides)`` segments, read per phase
    as rows of ``strides[0]`` samples, lifted to ``init_channel x strides[0]`` channels, then one block per
    stride with ``strides[i]`` time steps merged into channels before block ``i > 0``."""

    def __init__(self, period: int, init_channel: int = 8, strides: list[int] | None = None, kernel_size: int = 11):
        super().__init__()
        self.period = period
        self.strides = list(strides or [4, 4, 4])
        self.segment = period * math.prod(self.strides)  # samples consumed per output step
        self.pre = nn.Linear(self.strides[0], init_channel * self.strides[0])
        dims = [init_channel * math.prod(self.strides[: i + 1]) for i in range(len(self.strides))]
        self.blocks = nn.ModuleList(FastPeriodBlock(d, kernel_size, depthwise=i > 0) for i, d in enumerate(dims))
        self.post = nn.Linear(dims[-1], 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        b, t = x.shape[0], x.shape[-1]  # (B, 1, T_samples)
        usable = (t // self.segment) * self.segment
        if usable == 0:
            raise ValueError(
                f"FastMPD period {self.period} needs at least {self.segment} samples (period x prod(strides)), "
                f"got {t}: use longer crops (data.crop_frames)"
            )
        x = x[..., :usable].reshape(b, -1, self.period).transpose(1, 2)  # (B, period, T / period)
        x = x.reshape(b * self.period, -1, self.strides[0])  # (B * period, T / (period s0), s0)
        x = F.gelu(self.pre(x))
        fmaps = []
        for i, block in enumerate(self.blocks):
            if i > 0 and self.strides[i] > 1:
                x = x.reshape(x.shape[0], -1, x.shape[2] * self.strides[i])  # merge s_i steps into channels
            normed = _rms(x)
            if i > 0:
                fmaps.append(normed.reshape(b, -1))
            x = block(x, normed)
        return self.post(_rms(x)).reshape(b, -1), fmaps  # (B, period x steps)


class FastSpectrogramBlock(nn.Module):
    """Residual block over ``(B, F, T, C)``: a 3x3 conv over (frequency, time) to ``2C`` channels, GLU, ``C -> C``."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, 2 * channels, 3, padding=1)
        self.proj = nn.Linear(channels, channels)

    def forward(self, x: torch.Tensor, normed: torch.Tensor) -> torch.Tensor:
        h = self.conv(normed.permute(0, 3, 1, 2)).permute(0, 2, 3, 1)  # (B, F, T, 2C)
        return x + self.proj(softsign_glu(h))


class FastSpectrogramDiscriminator(nn.Module):
    """One resolution of FastMRD: the log10 STFT magnitude ``(B, F, T)`` (``torch.stft``, centred, Hann),
    ``strides[0]`` frames per row lifted to channels plus a learned offset per frequency bin (from its
    position in [-1, 1]), then one block per stride with time merged into channels as FastMPD does."""

    def __init__(
        self,
        n_fft: int,
        hop_length: int,
        win_length: int,
        init_channel: int = 8,
        strides: list[int] | None = None,
    ) -> None:
        super().__init__()
        self.window: torch.Tensor
        self.bin_position: torch.Tensor
        self.n_fft, self.hop_length, self.win_length = n_fft, hop_length, win_length
        self.strides = list(strides or [4, 2, 2])
        self.expansion = math.prod(self.strides)
        self.register_buffer("window", torch.hann_window(win_length), persistent=False)
        self.register_buffer("bin_position", torch.linspace(-1, 1, n_fft // 2 + 1).view(-1, 1, 1), persistent=False)
        self.pre = nn.Linear(self.strides[0], init_channel * self.strides[0])
        self.freq = nn.Linear(1, init_channel * self.strides[0])
        dims = [init_channel * math.prod(self.strides[: i + 1]) for i in range(len(self.strides))]
        self.blocks = nn.ModuleList(FastSpectrogramBlock(d) for d in dims)
        self.post = nn.Linear(dims[-1], 1)

    def log_magnitude(self, x: torch.Tensor) -> torch.Tensor:
        """log10 |STFT| of ``(B, 1, T_samples)``, floored at 1e-5, in fp32: ``(B, n_fft // 2 + 1, T_frames)``."""
        with torch.autocast(x.device.type, enabled=False):
            spec = torch.stft(
                x.squeeze(1).float(), self.n_fft, self.hop_length, self.win_length, self.window, return_complex=True
            )
            return spec.abs().clamp_min(1e-5).log10()

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        mag = self.log_magnitude(x)
        b, f, t = mag.shape
        usable = (t // self.expansion) * self.expansion
        if usable == 0:
            raise ValueError(
                f"FastMRD resolution (n_fft {self.n_fft}, hop {self.hop_length}) needs at least {self.expansion} "
                f"frames, got {t}: use longer crops (data.crop_frames)"
            )
        h = mag[:, :, :usable].reshape(b, f, -1, self.strides[0])  # (B, F, T / s0, s0)
        h = self.pre(h) + self.freq(self.bin_position)
        fmaps = []
        for i, block in enumerate(self.blocks):
            if i > 0:
                h = h.reshape(b, f, -1, h.shape[3] * self.strides[i])
            normed = _rms(h)
            if i > 0:
                fmaps.append(normed)
            h = block(h, normed)
        return self.post(_rms(h)).reshape(b, -1), fmaps  # (B, F x steps)


class FastMultiPeriodDiscriminator(nn.Module):
    """SingingVocoders' FastMPD: one :class:`FastPeriodDiscriminator` per period."""

    def __init__(
        self,
        periods: list[int] | tuple[int, ...] = (2, 3, 5, 7, 11),
        init_channel: int = 8,
        strides: list[int] | None = None,
        kernel_size: int = 11,
    ) -> None:
        super().__init__()
        self.periods = list(periods)
        self.discriminators = nn.ModuleList(
            FastPeriodDiscriminator(p, init_channel, strides, kernel_size) for p in self.periods
        )

    def forward(
        self, y: torch.Tensor, y_hat: torch.Tensor
    ) -> tuple[list[torch.Tensor], list[torch.Tensor], list[list[torch.Tensor]], list[list[torch.Tensor]]]:
        return _run_pair(self.discriminators, [(y, y_hat)] * len(self.discriminators))


class FastMultiResolutionDiscriminator(nn.Module):
    """SingingVocoders' FastMRD: one :class:`FastSpectrogramDiscriminator` per ``(n_fft, hop, win)``."""

    def __init__(
        self,
        resolutions: list[tuple[int, int, int]] | tuple[tuple[int, int, int], ...] = (
            (512, 64, 512),
            (1024, 128, 1024),
            (2048, 256, 2048),
        ),
        init_channel: int = 8,
        strides: list[int] | None = None,
    ) -> None:
        super().__init__()
        self.discriminators = nn.ModuleList(
            FastSpectrogramDiscriminator(n, h, w, init_channel, strides) for n, h, w in resolutions
        )

    def forward(
        self, y: torch.Tensor, y_hat: torch.Tensor
    ) -> tuple[list[torch.Tensor], list[torch.Tensor], list[list[torch.Tensor]], list[list[torch.Tensor]]]:
        return _run_pair(self.discriminators, [(y, y_hat)] * len(self.discriminators))
