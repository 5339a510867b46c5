"""XTTS's discrete VAE (Tortoise's ``DiscreteVAE``, 1-D): mel -> audio codes, frozen during GPT training.

Names and buffers follow Coqui's ``TTS.tts.layers.xtts.dvae.DiscreteVAE`` as XTTS-v2's trainer builds it
(``channels=80, positional_dims=1, num_tokens=1024, codebook_dim=512, hidden_dim=512, num_resnet_blocks=3,
kernel_size=3, num_layers=2, use_transposed_convs=False``), so ``dvae.pth`` loads key for key:

- ``encoder``: per layer a stride-2 conv + ReLU (channels hidden x 2^i), residual blocks, a 1x1 conv to the
  codebook size; ``2^num_layers`` mel frames per code (4 x hop 256 = 1024 samples);
- ``codebook``: nearest-neighbour vector quantiser (``embed`` (dim, codes) and its EMA buffers);
- ``decoder`` (upsample + conv) and ``discrete_loss`` buffers: kept so that the checkpoint round-trips;
  XTTS never runs them.

Only the encoder and the nearest-code search run here (:meth:`DiscreteVAE.codes`), without any of the
training-time codebook updates; the module stays in eval mode whatever ``train()`` asks.
"""

from __future__ import annotations

import torch
from torch import nn


class ResBlock(nn.Module):
    """conv3 -> ReLU -> conv3 -> ReLU -> conv1, plus the input (``net.0``, ``net.2``, ``net.4``)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv1d(channels, channels, 3, padding=1),
            nn.ReLU(),
            nn.Conv1d(channels, channels, 3, padding=1),
            nn.ReLU(),
            nn.Conv1d(channels, channels, 1),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x) + x


class UpsampledConv(nn.Module):
    """Nearest-neighbour upsampling by ``stride`` then a conv (``conv``)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int, padding: int) -> None:
        super().__init__()
        self.stride = stride
        self.conv = nn.Conv1d(in_channels, out_channels, kernel_size, padding=padding)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(nn.functional.interpolate(x, scale_factor=self.stride, mode="nearest"))


class Quantize(nn.Module):
    """Codebook ``embed`` (dim, n_codes) with the EMA buffers ``cluster_size`` and ``embed_avg``."""

    embed: torch.Tensor
    cluster_size: torch.Tensor
    embed_avg: torch.Tensor

    def __init__(self, dim: int, n_codes: int) -> None:
        super().__init__()
        embed = torch.randn(dim, n_codes)
        self.register_buffer("embed", embed)
        self.register_buffer("cluster_size", torch.zeros(n_codes))
        self.register_buffer("embed_avg", embed.clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (..., dim) -> nearest code ids (...), the distance written as Coqui does."""
        flat = x.reshape(-1, x.shape[-1])
        dist = flat.pow(2).sum(1, keepdim=True) - 2 * flat @ self.embed + self.embed.pow(2).sum(0, keepdim=True)
        return (-dist).max(1).indices.view(*x.shape[:-1])


class DiscretizationLoss(nn.Module):
    """Only the buffers of Tortoise's discretisation loss (they are in ``dvae.pth``)."""

    def __init__(self, n_codes: int, store_past: int = 100) -> None:
        super().__init__()
        self.register_buffer("accumulator_index", torch.zeros(1, dtype=torch.long))
        self.register_buffer("accumulator_filled", torch.zeros(1, dtype=torch.long))
        self.register_buffer("accumulator", torch.zeros(store_past, n_codes))


class DiscreteVAE(nn.Module):
    """The frozen DVAE. ``codes(mel)``: (B, n_mels, T_frames) normalised log-mel -> (B, ceil(T_frames / 4))."""

    def __init__(
        self,
        channels: int = 80,
        num_tokens: int = 1024,
        codebook_dim: int = 512,
        hidden_dim: int = 512,
        num_layers: int = 2,
        num_resnet_blocks: int = 3,
        kernel_size: int = 3,
    ) -> None:
        super().__init__()
        self.downsample = 2**num_layers
        self.discrete_loss = DiscretizationLoss(num_tokens)
        enc_chans = [hidden_dim * 2**i for i in range(num_layers)]
        dec_chans = list(reversed(enc_chans))
        enc_io = list(zip([channels, *enc_chans][:-1], enc_chans))
        innermost = dec_chans[0]
        dec_io = list(zip([innermost if num_resnet_blocks else codebook_dim, *dec_chans][:-1], dec_chans))
        pad = (kernel_size - 1) // 2
        enc: list[nn.Module] = [
            nn.Sequential(nn.Conv1d(i, o, kernel_size, stride=2, padding=pad), nn.ReLU()) for i, o in enc_io
        ]
        dec: list[nn.Module] = [
            nn.Sequential(UpsampledConv(i, o, kernel_size, stride=2, padding=pad), nn.ReLU()) for i, o in dec_io
        ]
        for _ in range(num_resnet_blocks):
            dec.insert(0, ResBlock(innermost))
            enc.append(ResBlock(innermost))
        if num_resnet_blocks:
            dec.insert(0, nn.Conv1d(codebook_dim, innermost, 1))
        enc.append(nn.Conv1d(innermost, codebook_dim, 1))
        dec.append(nn.Conv1d(dec_chans[-1], channels, 1))
        self.encoder = nn.Sequential(*enc)
        self.decoder = nn.Sequential(*dec)
        self.codebook = Quantize(codebook_dim, num_tokens)
        self.requires_grad_(False)
        super().train(False)

    def train(self, mode: bool = True) -> DiscreteVAE:
        """Always eval: the DVAE is frozen (no codebook updates, whatever the Trainer sets)."""
        return super().train(False)

    @torch.no_grad()
    def codes(self, mel: torch.Tensor) -> torch.Tensor:
        """Audio codes of a normalised log-mel (B, n_mels, T_frames) -> (B, ceil(T_frames / 4)), fp32."""
        with torch.autocast(mel.device.type, enabled=False):
            latent = self.encoder(mel.float())  # (B, codebook_dim, T_codes)
            return self.codebook(latent.transpose(1, 2))  # (B, T_codes)
