"""NSF-HiFiGAN generator: a harmonic-plus-noise source from f0 added inside a HiFi-GAN generator.

Shapes: mel ``(B, n_mels, T_frames)`` and f0 ``(B, T_frames)`` in Hz (0 = unvoiced) -> waveform
``(B, 1, T_frames * hop)``. Parameter names follow SingingVocoders' ``Generator``
(``conv_pre``, ``ups``, ``resblocks``, ``noise_convs``, ``m_source.l_linear``, ``source_conv``,
``conv_post``), so a state dict in their layout loads once its weight-norm names are renamed
(:mod:`speechtrain.models.nsf_hifigan.importers`).

The source phase is accumulated frame by frame in cycles and wrapped to [-0.5, 0.5) per frame, so that it
stays exact in fp32 over any length: inside frame ``t`` sample ``j = 1 .. upp`` sits at
``start_t + j * f0_t / sr`` cycles (the harmonic source), or with f0 ramped linearly towards the next
frame's (the fast source).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from speechtrain.models.common import init_weights, remove_weight_norm, weight_norm
from speechtrain.models.hifigan.model import LRELU_SLOPE, ResBlock1, ResBlock2, multi_receptive_field

#: dtype of the running phase sum (float64: see source_phase)
PHASE_DTYPE = torch.float64


def source_phase(f0: torch.Tensor, upp: int, sample_rate: float, ramp: bool = False) -> torch.Tensor:
    """Phase in cycles of a sine following ``f0`` (B, T_frames) Hz, ``upp`` samples per frame at
    ``sample_rate``: (B, T_frames * upp). ``ramp``: f0 moves linearly to the next frame's within a frame."""
    k = torch.arange(1, upp + 1, device=f0.device, dtype=torch.float32)  # (upp,)
    step = f0.float().unsqueeze(-1) / sample_rate  # (B, T_frames, 1) cycles per sample
    within = step * k  # (B, T_frames, upp) cycles since the frame started
    if ramp:
        slope = F.pad(step[:, 1:] - step[:, :-1], (0, 0, 0, 1))  # change to the next frame (0 for the last)
        within = within + 0.5 * slope * k * (k - 1) / upp
    per_frame = torch.remainder(within[..., -1:] + 0.5, 1.0) - 0.5  # cycles per frame, wrapped
    # the running sum over frames grows to thousands of cycles on a long input: in float32 its rounding (and
    # onnxruntime's other summation order) reached the overtones' phase, 1.35e-4 of drift between the ONNX
    # graph and PyTorch at 6000 frames; in float64 both agree to float32 precision (bench/nsf_onnx_drift.py)
    ends = torch.remainder(per_frame.to(PHASE_DTYPE).cumsum(dim=1), 1.0).float()  # phase at each frame's end
    starts = F.pad(ends[:, :-1], (0, 0, 1, 0))  # (B, T_frames, 1)
    return (within + starts).reshape(f0.shape[0], -1)  # (B, T_samples)


class SineGen(nn.Module):
    """Sine and overtones from f0, with noise: (B, T_frames) Hz -> (B, T_frames * upp, harmonic_num + 1).

    Voiced samples carry ``sine_amp`` x sin(2 pi h phase) plus noise of std ``noise_std``; unvoiced
    samples (f0 <= ``voiced_threshold``) carry noise of std ``sine_amp / 3`` only. Overtones start at a
    random phase. No parameters.
    """

    def __init__(
        self,
        sample_rate: int,
        harmonic_num: int = 0,
        sine_amp: float = 0.1,
        noise_std: float = 0.003,
        voiced_threshold: float = 0.0,
    ) -> None:
        super().__init__()
        self.sample_rate = sample_rate
        self.harmonics = harmonic_num + 1
        self.sine_amp, self.noise_std, self.voiced_threshold = sine_amp, noise_std, voiced_threshold
        self.random = True  # False: overtones at phase 0 and no noise (an export's check against its runtime)

    @torch.no_grad()
    def forward(self, f0: torch.Tensor, upp: int) -> torch.Tensor:
        phase = source_phase(f0, upp, self.sample_rate).unsqueeze(-1)  # (B, T_samples, 1)
        h = torch.arange(1, self.harmonics + 1, device=f0.device, dtype=phase.dtype)
        # the fundamental starts at phase 0, overtones anywhere
        offset = torch.rand(self.harmonics, device=f0.device) * (h > 1) if self.random else torch.zeros_like(h)
        sines = self.sine_amp * torch.sin(2 * math.pi * (phase * h + offset))  # (B, T_samples, H)
        voiced = (f0 > self.voiced_threshold).float().repeat_interleave(upp, dim=1).unsqueeze(-1)
        noise_amp = voiced * self.noise_std + (1 - voiced) * self.sine_amp / 3
        noise = torch.randn_like(sines) if self.random else torch.zeros_like(sines)
        return sines * voiced + noise_amp * noise


class SourceModuleHnNSF(nn.Module):
    """Harmonic-plus-noise source: the :class:`SineGen` channels merged by ``l_linear`` and tanh."""

    def __init__(self, sample_rate: int, harmonic_num: int = 8, **sine_kwargs: float) -> None:
        super().__init__()
        self.l_sin_gen = SineGen(sample_rate, harmonic_num, **sine_kwargs)
        self.l_linear = nn.Linear(harmonic_num + 1, 1)

    def forward(self, f0: torch.Tensor, upp: int) -> torch.Tensor:
        sines = self.l_sin_gen(f0, upp)  # (B, T_samples, H)
        return torch.tanh(self.l_linear(sines.to(self.l_linear.weight.dtype)))  # (B, T_samples, 1)


class NSFGenerator(nn.Module):
    """HiFi-GAN generator with an f0-driven source added after upsampling stages.

    ``mini_nsf=False``: the harmonic-plus-noise source at the output rate, brought to every stage's rate
    by ``noise_convs[i]`` (a conv with stride = the remaining upsampling). ``mini_nsf=True``: one sine at
    ``sample_rate / prod(upsample_rates[2:])``, added after the second stage by ``source_conv``.
    ``noise_sigma > 0`` adds Gaussian noise after ``conv_pre`` in training mode.
    """

    def __init__(
        self,
        in_channels: int,
        sample_rate: int,
        upsample_initial_channel: int,
        upsample_rates: list[int],
        upsample_kernel_sizes: list[int],
        resblock_kernel_sizes: list[int],
        resblock_dilation_sizes: list[list[int]],
        resblock: str = "1",
        mini_nsf: bool = False,
        harmonic_num: int = 8,
        sine_amp: float = 0.1,
        noise_std: float = 0.003,
        voiced_threshold: float = 0.0,
        noise_sigma: float = 0.0,
    ) -> None:
        super().__init__()
        if len(upsample_rates) != len(upsample_kernel_sizes):
            raise ValueError("upsample_rates and upsample_kernel_sizes must have the same length")
        if mini_nsf and len(upsample_rates) < 2:
            raise ValueError("mini_nsf needs at least two upsampling stages")
        self.upsample_rates = list(upsample_rates)
        self.hop_length = math.prod(upsample_rates)
        self.num_kernels = len(resblock_kernel_sizes)
        self.num_upsamples = len(upsample_rates)
        self.mini_nsf = mini_nsf
        self.noise_sigma = noise_sigma
        if mini_nsf:
            self.upp = math.prod(upsample_rates[:2])
            self.source_rate = sample_rate / math.prod(upsample_rates[2:])
        else:
            self.upp = self.hop_length
            self.source_rate = float(sample_rate)
            self.m_source = SourceModuleHnNSF(
                sample_rate,
                harmonic_num,
                sine_amp=sine_amp,
                noise_std=noise_std,
                voiced_threshold=voiced_threshold,
            )
            self.noise_convs = nn.ModuleList()
        block_cls = ResBlock1 if str(resblock) == "1" else ResBlock2
        self.conv_pre = weight_norm(nn.Conv1d(in_channels, upsample_initial_channel, 7, padding=3))
        self.ups = nn.ModuleList()
        self.resblocks = nn.ModuleList()
        ch = upsample_initial_channel
        for i, (u, k) in enumerate(zip(upsample_rates, upsample_kernel_sizes)):
            if (k - u) % 2 or k < u:
                raise ValueError(f"upsample kernel {k} must be >= rate {u} with an even difference")
            out_ch = ch // 2
            self.ups.append(weight_norm(nn.ConvTranspose1d(ch, out_ch, k, u, padding=(k - u) // 2)))
            for kr, dr in zip(resblock_kernel_sizes, resblock_dilation_sizes):
                self.resblocks.append(block_cls(out_ch, kr, list(dr)))
            if not mini_nsf:
                stride = math.prod(upsample_rates[i + 1 :])
                if stride > 1:  # output rate -> this stage's rate, T_samples / stride long (odd strides: kernel - 1)
                    kernel = 2 * stride if stride % 2 == 0 else 2 * stride - 1
                    conv = nn.Conv1d(1, out_ch, kernel, stride=stride, padding=stride // 2)
                else:
                    conv = nn.Conv1d(1, out_ch, 1)
                self.noise_convs.append(conv)
            elif i == 1:
                self.source_conv = nn.Conv1d(1, out_ch, 1)
                self.source_conv.apply(init_weights)
            ch = out_ch
        self.conv_post = weight_norm(nn.Conv1d(ch, 1, 7, padding=3))
        self.ups.apply(init_weights)
        self.conv_post.apply(init_weights)

    def source(self, f0: torch.Tensor) -> torch.Tensor:
        """The excitation for f0 (B, T_frames): (B, 1, T_frames * upp) at the source rate."""
        if self.mini_nsf:
            return torch.sin(2 * math.pi * source_phase(f0, self.upp, self.source_rate, ramp=True)).unsqueeze(1)
        return self.m_source(f0, self.upp).transpose(1, 2)

    def forward(self, x: torch.Tensor, f0: torch.Tensor) -> torch.Tensor:
        if f0.dim() == 3:
            f0 = f0.squeeze(1)  # (B, 1, T_frames) is accepted
        if f0.shape[-1] != x.shape[-1]:
            raise ValueError(f"f0 has {f0.shape[-1]} frames but the mel has {x.shape[-1]}: one f0 per mel frame")
        src = self.source(f0).to(x.dtype)  # (B, 1, T_frames * upp)
        x = self.conv_pre(x)  # (B, C0, T_frames)
        if self.noise_sigma > 0 and self.training:
            x = x + self.noise_sigma * torch.randn_like(x)
        for i, up in enumerate(self.ups):
            x = up(F.leaky_relu(x, LRELU_SLOPE))  # (B, C0 / 2^(i+1), T_frames * prod(rates[: i + 1]))
            if not self.mini_nsf:
                x = x + self.noise_convs[i](src)
            elif i == 1:
                x = x + self.source_conv(src)
            x = multi_receptive_field(self.resblocks, i, self.num_kernels, x)
        x = self.conv_post(F.leaky_relu(x))  # (B, 1, T_samples)
        return torch.tanh(x)

    def remove_weight_norm(self) -> int:
        """Fold weight norm into plain weights for inference (same outputs, faster); returns layers changed."""
        return remove_weight_norm(self)
