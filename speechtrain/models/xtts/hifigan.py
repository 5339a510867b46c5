"""XTTS's HiFi-GAN decoder: GPT latents + a speaker embedding -> 24 kHz audio; and its speaker encoder.

Names follow Coqui's ``TTS.tts.layers.xtts.hifigan_decoder`` (``waveform_decoder.*``, ``speaker_encoder.*``).
Weight norm uses the parametrization API (state keys ``parametrizations.weight.original0/1``); Coqui
checkpoints saved with the older API hold ``weight_g``/``weight_v`` instead, which the checkpoint loader
maps (see :mod:`speechtrain.models.xtts.checkpoint`). ``conv_pre`` and ``conv_post`` carry no weight norm
(XTTS removes it), ``conv_post`` no bias.

Decoder forward (Coqui's ``HifiDecoder``): latents (B, T_codes, width) are linearly interpolated by
``code_stride / output_hop`` (4) and by ``output_sr / input_sr`` (24000 / 22050), then the generator
upsamples by 256 with the speaker embedding added after ``conv_pre`` and after every upsampling layer.
The module is frozen during GPT fine-tuning and stays in eval mode (the speaker encoder's BatchNorms).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from speechtrain.models.common import get_padding, weight_norm
from speechtrain.models.xtts.audio import MelSpectrogram

LRELU_SLOPE = 0.1


class ResBlock1(nn.Module):
    """HiFi-GAN residual block type 1: (lrelu, dilated conv, lrelu, conv) x len(dilation), residual each."""

    def __init__(self, channels: int, kernel_size: int, dilation: list[int]) -> None:
        super().__init__()

        def conv(d: int) -> nn.Module:
            return weight_norm(
                nn.Conv1d(channels, channels, kernel_size, 1, dilation=d, padding=get_padding(kernel_size, d))
            )

        self.convs1 = nn.ModuleList([conv(d) for d in dilation])
        self.convs2 = nn.ModuleList([conv(1) for _ in dilation])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for c1, c2 in zip(self.convs1, self.convs2):
            x = c2(F.leaky_relu(c1(F.leaky_relu(x, LRELU_SLOPE)), LRELU_SLOPE)) + x
        return x


def _weight_last(conv: nn.Conv1d) -> nn.Conv1d:
    # Coqui builds conv_pre with weight norm and removes it, which registers `weight` again after `bias`:
    # the same registration order gives the same state-dict key order as Coqui's checkpoints
    weight = conv.weight
    del conv.weight
    conv.weight = weight
    return conv


class HifiganGenerator(nn.Module):
    """XTTS's HiFi-GAN generator with a global speaker condition (``cond_layer``, ``conds``)."""

    def __init__(
        self,
        in_channels: int,
        upsample_initial_channel: int,
        upsample_rates: list[int],
        upsample_kernel_sizes: list[int],
        resblock_kernel_sizes: list[int],
        resblock_dilation_sizes: list[list[int]],
        cond_channels: int,
        cond_in_each_up_layer: bool = True,
    ) -> None:
        super().__init__()
        self.num_kernels = len(resblock_kernel_sizes)
        self.conv_pre = _weight_last(nn.Conv1d(in_channels, upsample_initial_channel, 7, 1, padding=3))
        self.ups = nn.ModuleList(
            weight_norm(
                nn.ConvTranspose1d(
                    upsample_initial_channel // 2**i,
                    upsample_initial_channel // 2 ** (i + 1),
                    k,
                    u,
                    padding=(k - u) // 2,
                )
            )
            for i, (u, k) in enumerate(zip(upsample_rates, upsample_kernel_sizes))
        )
        channels = [upsample_initial_channel // 2 ** (i + 1) for i in range(len(upsample_rates))]
        self.resblocks = nn.ModuleList(
            ResBlock1(ch, k, d) for ch in channels for k, d in zip(resblock_kernel_sizes, resblock_dilation_sizes)
        )
        self.conv_post = nn.Conv1d(channels[-1], 1, 7, 1, padding=3, bias=False)
        self.cond_layer = nn.Conv1d(cond_channels, upsample_initial_channel, 1)
        self.cond_in_each_up_layer = cond_in_each_up_layer
        if cond_in_each_up_layer:
            self.conds = nn.ModuleList(nn.Conv1d(cond_channels, ch, 1) for ch in channels)

    def forward(self, x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        """x (B, width, T) latent frames, g (B, d_vector, 1) -> (B, 1, T x prod(upsample_rates)) in [-1, 1]."""
        o = self.conv_pre(x) + self.cond_layer(g)
        for i, up in enumerate(self.ups):
            o = up(F.leaky_relu(o, LRELU_SLOPE))
            if self.cond_in_each_up_layer:
                o = o + self.conds[i](g)
            blocks = self.resblocks[i * self.num_kernels : (i + 1) * self.num_kernels]
            o = sum(block(o) for block in blocks) / self.num_kernels
        return torch.tanh(self.conv_post(F.leaky_relu(o)))  # default slope 0.01 here, as Coqui's generator


# -------------------------------------------------------------------------------------- speaker encoder
class PreEmphasis(nn.Module):
    """y[t] = x[t] - coefficient * x[t - 1] (reflect-padded), ``filter`` buffer as in the checkpoint."""

    filter: torch.Tensor

    def __init__(self, coefficient: float = 0.97) -> None:
        super().__init__()
        self.register_buffer("filter", torch.tensor([-coefficient, 1.0]).view(1, 1, 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.pad(x.unsqueeze(1), (1, 0), "reflect")
        return F.conv1d(x, self.filter).squeeze(1)


class SELayer(nn.Module):
    """Squeeze-and-excitation over channels (``fc.0``, ``fc.2``)."""

    def __init__(self, channels: int, reduction: int = 8) -> None:
        super().__init__()
        self.fc = nn.Sequential(
            nn.Linear(channels, channels // reduction),
            nn.ReLU(inplace=True),
            nn.Linear(channels // reduction, channels),
            nn.Sigmoid(),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(x.mean(dim=(2, 3)))  # (B, C)
        return x * y[:, :, None, None]


class SEBasicBlock(nn.Module):
    """conv -> ReLU -> BN -> conv -> BN -> SE, plus the (downsampled) input, ReLU (Coqui's order)."""

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.se = SELayer(planes)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.bn1(F.relu(self.conv1(x)))
        out = self.se(self.bn2(self.conv2(out)))
        residual = x if self.downsample is None else self.downsample(x)
        return F.relu(out + residual)


class ResNetSpeakerEncoder(nn.Module):
    """SE-ResNet with attentive statistics pooling: 16 kHz audio (B, T) -> speaker embedding (B, proj_dim)."""

    def __init__(
        self,
        input_dim: int = 64,
        proj_dim: int = 512,
        layers: list[int] | None = None,
        filters: list[int] | None = None,
    ) -> None:
        super().__init__()
        layers = layers or [3, 4, 6, 3]
        filters = filters or [32, 64, 128, 256]
        self.conv1 = nn.Conv2d(1, filters[0], kernel_size=3, stride=1, padding=1)
        self.bn1 = nn.BatchNorm2d(filters[0])
        self.inplanes = filters[0]
        self.layer1 = self._stage(filters[0], layers[0])
        self.layer2 = self._stage(filters[1], layers[1], stride=2)
        self.layer3 = self._stage(filters[2], layers[2], stride=2)
        self.layer4 = self._stage(filters[3], layers[3], stride=2)
        self.instancenorm = nn.InstanceNorm1d(input_dim)
        self.torch_spec = nn.Sequential(
            PreEmphasis(0.97),
            MelSpectrogram(16000, 512, 160, 400, input_dim, window_fn=torch.hamming_window, persistent=True),
        )
        channels = filters[3] * (input_dim // 8)
        self.attention = nn.Sequential(
            nn.Conv1d(channels, 128, kernel_size=1),
            nn.ReLU(),
            nn.BatchNorm1d(128),
            nn.Conv1d(128, channels, kernel_size=1),
            nn.Softmax(dim=2),
        )
        self.fc = nn.Linear(2 * channels, proj_dim)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def _stage(self, planes: int, blocks: int, stride: int = 1) -> nn.Sequential:
        downsample = None
        if stride != 1 or self.inplanes != planes:
            downsample = nn.Sequential(
                nn.Conv2d(self.inplanes, planes, kernel_size=1, stride=stride, bias=False), nn.BatchNorm2d(planes)
            )
        out = [SEBasicBlock(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes
        out += [SEBasicBlock(planes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*out)

    def forward(self, audio: torch.Tensor, l2_norm: bool = True) -> torch.Tensor:
        """audio (B, T_samples) at 16 kHz -> (B, proj_dim), L2-normalised by default (as XTTS uses it)."""
        with torch.autocast(audio.device.type, enabled=False):
            x = self.torch_spec(audio.float())  # (B, n_mels, T_frames)
            x = self.instancenorm((x + 1e-6).log()).unsqueeze(1)  # (B, 1, n_mels, T_frames)
            x = self.bn1(F.relu(self.conv1(x)))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            x = x.reshape(x.shape[0], -1, x.shape[-1])  # (B, C x n_mels / 8, T')
            w = self.attention(x)
            mu = torch.sum(x * w, dim=2)
            sg = torch.sqrt((torch.sum(x**2 * w, dim=2) - mu**2).clamp(min=1e-5))
            x = self.fc(torch.cat([mu, sg], dim=1))
            return F.normalize(x, p=2, dim=1) if l2_norm else x


class HifiDecoder(nn.Module):
    """``waveform_decoder`` + ``speaker_encoder``; frozen, always in eval mode."""

    def __init__(self, arch: Any) -> None:
        super().__init__()
        a = arch
        self.input_sample_rate, self.output_sample_rate = a.input_sample_rate, a.output_sample_rate
        self.output_hop_length, self.code_stride_len = a.output_hop_length, a.gpt_code_stride_len
        self.waveform_decoder = HifiganGenerator(
            a.decoder_input_dim,
            a.decoder_upsample_initial_channel,
            a.decoder_upsample_rates,
            a.decoder_upsample_kernel_sizes,
            a.decoder_resblock_kernel_sizes,
            a.decoder_resblock_dilation_sizes,
            a.d_vector_dim,
            a.cond_d_vector_in_each_upsampling_layer,
        )
        self.speaker_encoder = ResNetSpeakerEncoder(
            a.speaker_input_dim, a.d_vector_dim, a.speaker_layers, a.speaker_num_filters
        )
        self.requires_grad_(False)
        super().train(False)

    def train(self, mode: bool = True) -> HifiDecoder:
        """Always eval: frozen during GPT fine-tuning (BatchNorm statistics stay as loaded)."""
        return super().train(False)

    @torch.no_grad()
    def forward(self, latents: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        """latents (B, T_codes, width), g (B, d_vector, 1) -> audio (B, 1, T_samples) at output_sample_rate."""
        with torch.autocast(latents.device.type, enabled=False):
            z = F.interpolate(
                latents.float().transpose(1, 2),
                scale_factor=[self.code_stride_len / self.output_hop_length],
                mode="linear",
            )  # (B, width, 4 T_codes)
            if self.output_sample_rate != self.input_sample_rate:
                z = F.interpolate(z, scale_factor=[self.output_sample_rate / self.input_sample_rate], mode="linear")
            return self.waveform_decoder(z, g.float())
