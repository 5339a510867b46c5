"""Toy tasks: a next-frame mel predictor (one optimizer) and a tiny mel GAN (two stages).

Both are causal in time (causal convs, causal attention with a key mask), so an item's real
outputs never depend on padding: a batch split in halves gives the same per-item losses, which
is what the OOM guard and accumulation tests rely on. Losses are means over real frames and
``batch_weight`` is the number of real frames, so split/accumulated gradients equal one batch.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from speechtrain.data.batch import Batch
from speechtrain.train.gan import DISC, GANStages
from speechtrain.train.task import Needs, OptimizerSpec, Task


def frame_mask(lengths: torch.Tensor, max_len: int) -> torch.Tensor:
    """(B,) lengths -> (B, T) bool mask of real frames."""
    return torch.arange(max_len, device=lengths.device)[None, :] < lengths[:, None]


class CausalConv1d(nn.Conv1d):
    """Conv1d padded on the left only, so output t sees inputs <= t."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pad = (self.kernel_size[0] - 1) * self.dilation[0]
        return super().forward(F.pad(x, (pad, 0)))


class ToyAttention(nn.Module):
    """Causal self-attention; ``use_sdpa`` switches between SDPA and the explicit math path."""

    def __init__(self, channels: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(channels, 3 * channels)
        self.out = nn.Linear(channels, channels)
        self.use_sdpa = True  # SDPA by default, as a PyTorch 2 user writes it

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, T, C)
        b, t, c = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        if self.use_sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-1, -2)) / (k.shape[-1] ** 0.5)
            causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
            y = att.masked_fill(~causal, float("-inf")).softmax(-1) @ v
        return self.out(y.transpose(1, 2).reshape(b, t, c))


class ToyBlock(nn.Module):
    """Causal conv + causal attention, residual, pre-norm."""

    def __init__(self, channels: int, heads: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(channels)
        self.conv = CausalConv1d(channels, channels, 3)
        self.norm2 = nn.LayerNorm(channels)
        self.attn = ToyAttention(channels, heads)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, C, T)
        x = x + self.conv(F.gelu(self.norm1(x.transpose(1, 2)).transpose(1, 2)))
        return x + self.attn(self.norm2(x.transpose(1, 2))).transpose(1, 2)


class ToyMelModel(nn.Module):
    """Predicts mel frame t+1 from frames <= t: (B, n_mels, T) -> (B, n_mels, T)."""

    def __init__(self, n_mels: int, channels: int, blocks: int, heads: int, conv2d_front: bool = False) -> None:
        super().__init__()
        # a (1 x 1) 2-D conv over (mel, time) keeps causality and gives channels-last something to do
        self.front2d = nn.Conv2d(1, 4, kernel_size=(3, 1), padding=(1, 0)) if conv2d_front else None
        self.inp = CausalConv1d(n_mels * (4 if conv2d_front else 1), channels, 3)
        self.blocks = nn.ModuleList(ToyBlock(channels, heads) for _ in range(blocks))
        self.out = nn.Conv1d(channels, n_mels, 1)

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        if self.front2d is not None:
            b, m, t = mel.shape
            mel = self.front2d(mel.unsqueeze(1)).reshape(b, -1, t)  # (B, 4 * n_mels, T)
        x = self.inp(mel)
        for block in self.blocks:
            x = block(x)
        return self.out(x)


def masked_l1(pred: torch.Tensor, target: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Mean absolute error over real frames: pred/target (B, n_mels, T), lengths (B,)."""
    mask = frame_mask(lengths, target.shape[-1]).unsqueeze(1).to(pred.dtype)  # (B, 1, T)
    return ((pred.float() - target.float()).abs() * mask).sum() / (mask.sum() * target.shape[1]).clamp(min=1)


def _next_frame(batch: Batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    mel = batch["mel"]  # (B, n_mels, T)
    lengths = (batch["mel_lengths"] - 1).clamp(min=0)
    return mel[..., :-1], mel[..., 1:], lengths


class ToyTask(Task):
    """Next-frame mel regression with one optimizer."""

    headline_metric = "loss"

    def __init__(self, n_mels: int = 80, channels: int = 32, blocks: int = 2, heads: int = 2, conv2d: bool = False):
        self.model = ToyMelModel(n_mels, channels, blocks, heads, conv2d)

    def needs(self) -> Needs:
        return Needs(mel=True)

    def modules(self) -> dict[str, nn.Module]:
        return {"model": self.model}

    def batch_weight(self, batch: Batch) -> float:
        return float(sum(max(n - 1, 0) for n in batch.frame_lengths))

    def training_step(self, batch: Batch, stage: str, cache: dict[str, Any]) -> dict[str, torch.Tensor]:
        inp, target, lengths = _next_frame(batch)
        loss = masked_l1(self.model(inp), target, lengths)
        return {"loss": loss, "l1": loss.detach()}


class ToyDiscriminator(nn.Module):
    """Per-frame logits from causal convs; returns (logits (B, T), feature maps)."""

    def __init__(self, n_mels: int, channels: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList([CausalConv1d(n_mels, channels, 3), CausalConv1d(channels, channels, 3)])
        self.head = nn.Conv1d(channels, 1, 1)

    def forward(self, mel: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        fmaps = []
        x = mel
        for layer in self.layers:
            x = F.leaky_relu(layer(x), 0.1)
            fmaps.append(x)
        return self.head(x).squeeze(1), fmaps


class ToyGANTask(Task):
    """A tiny LSGAN over mels: ``disc`` stage then ``gen`` stage, generator output cached between them."""

    headline_metric = "l1"

    def __init__(self, n_mels: int = 80, channels: int = 16, blocks: int = 2, fm_weight: float = 2.0) -> None:
        self.generator = ToyMelModel(n_mels, channels, blocks, heads=2)
        self.discriminator = ToyDiscriminator(n_mels, channels)
        self.fm_weight = fm_weight
        self.stages = GANStages(self.modules(), generators=["generator"], discriminators=["discriminator"])

    def needs(self) -> Needs:
        return Needs(mel=True)

    def modules(self) -> dict[str, nn.Module]:
        return {"generator": self.generator, "discriminator": self.discriminator}

    def optimizer_specs(self) -> list[OptimizerSpec]:
        return self.stages.optimizer_specs()

    def batch_weight(self, batch: Batch) -> float:
        return float(sum(max(n - 1, 0) for n in batch.frame_lengths))

    def _masked_mean(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:  # x (B, T)
        mask = frame_mask(lengths, x.shape[-1]).to(x.dtype)
        return (x.float() * mask).sum() / mask.sum().clamp(min=1)

    def training_step(self, batch: Batch, stage: str, cache: dict[str, Any]) -> dict[str, torch.Tensor]:
        self.stages.check(stage, "toy_gan")
        inp, target, lengths = _next_frame(batch)
        with self.stages.stage(stage, cache, lambda: self.generator(inp)) as fake:  # (B, n_mels, T - 1)
            return self._disc(fake, target, lengths) if stage == DISC else self._gen(fake, target, lengths)

    def _disc(self, fake: torch.Tensor, target: torch.Tensor, lengths: torch.Tensor) -> dict[str, torch.Tensor]:
        real_logits, _ = self.discriminator(target)
        fake_logits, _ = self.discriminator(fake.detach())
        loss = self._masked_mean((real_logits - 1) ** 2 + fake_logits**2, lengths)
        return {"loss": loss, "disc": loss.detach()}

    def _gen(self, fake: torch.Tensor, target: torch.Tensor, lengths: torch.Tensor) -> dict[str, torch.Tensor]:
        fake_logits, fake_maps = self.discriminator(fake)
        _, real_maps = self.discriminator(target)
        adv = self._masked_mean((fake_logits - 1) ** 2, lengths)
        fm: torch.Tensor = sum(  # type: ignore[assignment]  # a sum of tensors is a tensor
            self._masked_mean((r.detach() - f).abs().mean(1), lengths) for r, f in zip(real_maps, fake_maps)
        )
        l1 = masked_l1(fake, target, lengths)
        loss = 10.0 * l1 + adv + self.fm_weight * fm
        return {"loss": loss, "l1": l1.detach(), "adv": adv.detach(), "fm": fm.detach()}


def build_task(model: Any, data: Any) -> Task:
    """Build the toy task named by ``model.name`` (toy or toy_gan)."""
    m, n_mels = model, data.n_mels
    if m.name == "toy_gan":
        return ToyGANTask(n_mels, m.channels, m.blocks, m.feature_match_weight)
    return ToyTask(n_mels, m.channels, m.blocks, m.heads, m.conv2d_front)


def build_toy(model: Any, data: Any) -> Task:
    """``model.name=speechtrain.testing.toy.task:build_toy``: the toy task without registering the family
    (keys unchecked; ``channels``, ``blocks``, ``heads`` default as in ToyConfig)."""
    extra = getattr(model, "model_extra", None) or {}
    return ToyTask(data.n_mels, int(extra.get("channels", 32)), int(extra.get("blocks", 2)), int(extra.get("heads", 2)))
