"""The VITS generator (text encoder, posterior encoder, flow, duration predictor, HiFi-GAN decoder)
and its helpers: alignment expansion and per-item random slices."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from speechtrain.models.common import sequence_mask
from speechtrain.models.hifigan.model import Generator
from speechtrain.models.vits.attentions import Encoder
from speechtrain.models.vits.duration import DurationPredictor, StochasticDurationPredictor
from speechtrain.models.vits.mas import maximum_path
from speechtrain.models.vits.modules import Flip, ResidualCouplingLayer, WaveNet

if TYPE_CHECKING:
    from speechtrain.models.vits.config import VITSConfig

LOG_2PI = math.log(2 * math.pi)


class TextEncoder(nn.Module):
    """Tokens (B, T_tokens) -> encoding h, prior mean m_p and log-std logs_p (B, C, T_tokens), mask (B, 1, T_tokens)."""

    def __init__(
        self,
        n_vocab: int,
        out_channels: int,
        hidden_channels: int,
        filter_channels: int,
        n_heads: int,
        n_layers: int,
        kernel_size: int,
        p_dropout: float,
        window_size: int,
        attn_dropout: float | None = None,
    ) -> None:
        super().__init__()
        self.hidden_channels, self.out_channels = hidden_channels, out_channels
        self.emb = nn.Embedding(n_vocab, hidden_channels)
        nn.init.normal_(self.emb.weight, 0.0, hidden_channels**-0.5)
        self.encoder = Encoder(
            hidden_channels, filter_channels, n_heads, n_layers, kernel_size, p_dropout, window_size, attn_dropout
        )
        self.proj = nn.Conv1d(hidden_channels, out_channels * 2, 1)

    def forward(
        self, tokens: torch.Tensor, lengths: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        x = self.emb(tokens) * math.sqrt(self.hidden_channels)  # (B, T_tokens, C)
        x = x.transpose(1, 2)  # (B, C, T_tokens)
        mask = sequence_mask(lengths, x.shape[2]).unsqueeze(1).to(x.dtype)  # (B, 1, T_tokens)
        x = self.encoder(x * mask, mask)
        stats = self.proj(x) * mask
        m, logs = stats[:, : self.out_channels], stats[:, self.out_channels :]
        return x, m, logs, mask


class PosteriorEncoder(nn.Module):
    """Linear spectrogram (B, n_fft/2+1, T_frames) -> sampled z, mean, log-std (B, C, T_frames),
    mask (B, 1, T_frames)."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        hidden_channels: int,
        kernel_size: int,
        dilation_rate: int,
        n_layers: int,
        gin_channels: int = 0,
    ) -> None:
        super().__init__()
        self.out_channels = out_channels
        self.pre = nn.Conv1d(in_channels, hidden_channels, 1)
        self.enc = WaveNet(hidden_channels, kernel_size, dilation_rate, n_layers, gin_channels)
        self.proj = nn.Conv1d(hidden_channels, out_channels * 2, 1)

    def forward(
        self, spec: torch.Tensor, lengths: torch.Tensor, g: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        mask = sequence_mask(lengths, spec.shape[2]).unsqueeze(1).to(spec.dtype)  # (B, 1, T_frames)
        x = self.enc(self.pre(spec) * mask, mask, g)
        stats = self.proj(x) * mask
        m, logs = stats[:, : self.out_channels], stats[:, self.out_channels :]
        z = (m + torch.randn_like(m) * torch.exp(logs)) * mask
        return z, m, logs, mask


class ResidualCouplingBlock(nn.Module):
    """The flow f: posterior z -> prior space z_p (mean-only couplings interleaved with flips)."""

    def __init__(
        self,
        channels: int,
        hidden_channels: int,
        kernel_size: int,
        dilation_rate: int,
        n_layers: int,
        n_flows: int = 4,
        gin_channels: int = 0,
    ) -> None:
        super().__init__()
        self.flows = nn.ModuleList()
        for _ in range(n_flows):
            self.flows.append(
                ResidualCouplingLayer(
                    channels, hidden_channels, kernel_size, dilation_rate, n_layers, gin_channels, mean_only=True
                )
            )
            self.flows.append(Flip())

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor, g: torch.Tensor | None = None, reverse: bool = False
    ) -> torch.Tensor:
        flows = reversed(self.flows) if reverse else self.flows
        for flow in flows:
            out = flow(x, mask, g=g, reverse=reverse)
            x = out if reverse else out[0]
        return x


def generate_path(durations: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Hard alignment from integer durations: ``durations`` (B, 1, T_tokens), ``mask`` (B, 1, T_frames, T_tokens)
    -> path (B, 1, T_frames, T_tokens) with path[b, 0, t, s] = 1 when frame t belongs to token s."""
    b, _, t_y, t_x = mask.shape
    ends = torch.cumsum(durations, -1).reshape(b * t_x)  # (B*T_tokens,) last frame + 1 of each token
    path = sequence_mask(ends, t_y).to(mask.dtype).view(b, t_x, t_y)
    path = path - nn.functional.pad(path, (0, 0, 1, 0))[:, :-1]  # frames of token s minus those of s-1
    return path.transpose(1, 2).unsqueeze(1) * mask


def random_slice_starts(lengths: torch.Tensor, segment_frames: int) -> torch.Tensor:
    """Random start frame per item so that the slice lies inside its real frames when it fits, (B,) long."""
    room = (lengths - segment_frames + 1).clamp(min=1)
    return (torch.rand(lengths.shape, device=lengths.device) * room).long().clamp(max=room - 1)


def slice_segments(x: torch.Tensor, starts: torch.Tensor, size: int) -> torch.Tensor:
    """Per-item slices ``x[b, :, starts[b] : starts[b] + size]`` of (B, C, T) -> (B, C, size), zero past the end."""
    if x.shape[-1] < int(size):
        x = nn.functional.pad(x, (0, size - x.shape[-1]))
    idx = starts.unsqueeze(1) + torch.arange(size, device=x.device).unsqueeze(0)  # (B, size)
    idx = idx.clamp(max=x.shape[-1] - 1)
    out = x.gather(2, idx.unsqueeze(1).expand(-1, x.shape[1], -1))
    inside = (starts.unsqueeze(1) + torch.arange(size, device=x.device).unsqueeze(0)) < x.shape[-1]
    return out * inside.unsqueeze(1).to(out.dtype)


@dataclass
class VITSOutput:
    """What the generator's training forward returns (shapes in comments)."""

    audio_hat: torch.Tensor  # (B, 1, segment_samples) decoder output on the slices
    slice_starts: torch.Tensor  # (B,) start frame of each item's slice
    dur_loss: torch.Tensor  # () duration loss (nats per token or squared log error per token)
    z_p: torch.Tensor  # (B, C, T_frames) posterior sample mapped through the flow
    logs_q: torch.Tensor  # (B, C, T_frames)
    m_p: torch.Tensor  # (B, C, T_frames) prior mean expanded by the alignment
    logs_p: torch.Tensor  # (B, C, T_frames)
    y_mask: torch.Tensor  # (B, 1, T_frames)
    attn: torch.Tensor  # (B, 1, T_frames, T_tokens) hard alignment


class VITSGenerator(nn.Module):
    """Everything but the discriminator."""

    def __init__(self, cfg: VITSConfig, n_vocab: int, spec_channels: int, segment_frames: int) -> None:
        super().__init__()
        self.segment_frames = segment_frames
        self.n_speakers = cfg.n_speakers
        gin = cfg.gin_channels if cfg.n_speakers > 1 else 0
        self.use_sdp = cfg.use_sdp
        self.enc_p = TextEncoder(
            n_vocab,
            cfg.inter_channels,
            cfg.hidden_channels,
            cfg.filter_channels,
            cfg.n_heads,
            cfg.n_layers,
            cfg.kernel_size,
            cfg.p_dropout,
            cfg.window_size,
            cfg.attn_dropout,
        )
        self._dec_args: tuple[tuple[Any, ...], dict[str, Any]] = (
            (
                cfg.inter_channels,
                cfg.upsample_initial_channel,
                list(cfg.upsample_rates),
                list(cfg.upsample_kernel_sizes),
                list(cfg.resblock_kernel_sizes),
                [list(d) for d in cfg.resblock_dilation_sizes],
            ),
            {"resblock": cfg.resblock, "gin_channels": gin, "post_bias": False},  # VITS: conv_post bias=False
        )
        self.dec = self.new_decoder()
        self.enc_q = PosteriorEncoder(
            spec_channels,
            cfg.inter_channels,
            cfg.hidden_channels,
            cfg.posterior_kernel_size,
            cfg.posterior_dilation_rate,
            cfg.posterior_layers,
            gin,
        )
        self.flow = ResidualCouplingBlock(
            cfg.inter_channels,
            cfg.hidden_channels,
            cfg.flow_kernel_size,
            1,
            cfg.flow_wn_layers,
            cfg.flow_couplings,
            gin,
        )
        if cfg.use_sdp:
            self.dp: StochasticDurationPredictor | DurationPredictor = StochasticDurationPredictor(
                cfg.hidden_channels, cfg.hidden_channels, 3, 0.5, cfg.sdp_flows, gin, cfg.sdp_bins
            )
        else:
            self.dp = DurationPredictor(cfg.hidden_channels, cfg.duration_filter_channels, 3, 0.5, gin)
        self.emb_g = nn.Embedding(cfg.n_speakers, gin) if gin else None

    def new_decoder(self) -> Generator:
        """A freshly initialised decoder of the same shape (inference copies load the trained weights
        into one: a deep copy of a weight-normed module shares its parametrized class with the original)."""
        args, kwargs = self._dec_args
        return Generator(*args, **kwargs)

    def speaker_embedding(self, speakers: torch.Tensor | None) -> torch.Tensor | None:
        """(B,) speaker ids -> (B, gin_channels, 1), or None for a single-speaker model."""
        if self.emb_g is None or speakers is None:
            return None
        return self.emb_g(speakers).unsqueeze(-1)

    def forward(
        self,
        tokens: torch.Tensor,
        token_lengths: torch.Tensor,
        spec: torch.Tensor,
        spec_lengths: torch.Tensor,
        speakers: torch.Tensor | None = None,
    ) -> VITSOutput:
        g = self.speaker_embedding(speakers)
        x, m_p, logs_p, x_mask = self.enc_p(tokens, token_lengths)  # (B, C, T_tokens)
        z, m_q, logs_q, y_mask = self.enc_q(spec, spec_lengths, g)  # (B, C, T_frames)
        z_p = self.flow(z, y_mask, g=g)

        with torch.no_grad():
            attn_mask = x_mask.unsqueeze(2) * y_mask.unsqueeze(-1)  # (B, 1, T_frames, T_tokens)
            log_p = prior_log_likelihood(z_p, m_p, logs_p)  # (B, T_frames, T_tokens)
            attn = maximum_path(log_p, attn_mask.squeeze(1)).unsqueeze(1).detach()

        w = attn.sum(2)  # (B, 1, T_tokens) frames per token
        if isinstance(self.dp, StochasticDurationPredictor):  # cfg.use_sdp
            dur_loss = self.dp.nll(x, x_mask, w, g=g).sum() / x_mask.sum()
        else:
            logw_target = torch.log(w + 1e-6) * x_mask
            logw = self.dp(x, x_mask, g=g)
            dur_loss = torch.sum((logw - logw_target) ** 2) / x_mask.sum()

        m_p = torch.matmul(attn.squeeze(1), m_p.transpose(1, 2)).transpose(1, 2)  # (B, C, T_frames)
        logs_p = torch.matmul(attn.squeeze(1), logs_p.transpose(1, 2)).transpose(1, 2)

        starts = random_slice_starts(spec_lengths, self.segment_frames)
        z_slice = slice_segments(z, starts, self.segment_frames)  # (B, C, segment_frames)
        audio_hat = self.dec(z_slice, g=g)  # (B, 1, segment_samples)
        return VITSOutput(audio_hat, starts, dur_loss, z_p, logs_q, m_p, logs_p, y_mask, attn)

    @torch.no_grad()
    def infer(
        self,
        tokens: torch.Tensor,
        token_lengths: torch.Tensor,
        speakers: torch.Tensor | None = None,
        noise_scale: float = 0.667,
        noise_scale_w: float = 0.8,
        length_scale: float = 1.0,
        max_frames: int | None = None,
        decoder: nn.Module | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Text -> audio (B, 1, T_samples) and frame lengths (B,)."""
        g = self.speaker_embedding(speakers)
        x, m_p, logs_p, x_mask = self.enc_p(tokens, token_lengths)
        if isinstance(self.dp, StochasticDurationPredictor):  # cfg.use_sdp
            logw = self.dp.sample_log_durations(x, x_mask, g=g, noise_scale=noise_scale_w)
        else:
            logw = self.dp(x, x_mask, g=g)
        w_ceil = torch.ceil(torch.exp(logw) * x_mask * length_scale)  # (B, 1, T_tokens) frames per token
        y_lengths = torch.clamp_min(torch.sum(w_ceil, [1, 2]), 1).long()
        if max_frames is not None:
            y_lengths = y_lengths.clamp(max=max_frames)
        t_y = int(y_lengths.max())  # host-device sync: the output length decides the tensor shapes
        y_mask = sequence_mask(y_lengths, t_y).unsqueeze(1).to(x_mask.dtype)
        attn = generate_path(w_ceil, x_mask.unsqueeze(2) * y_mask.unsqueeze(-1))
        m_p = torch.matmul(attn.squeeze(1), m_p.transpose(1, 2)).transpose(1, 2)  # (B, C, T_frames)
        logs_p = torch.matmul(attn.squeeze(1), logs_p.transpose(1, 2)).transpose(1, 2)
        z_p = m_p + torch.randn_like(m_p) * torch.exp(logs_p) * noise_scale
        z = self.flow(z_p, y_mask, g=g, reverse=True)
        audio = (decoder or self.dec)(z * y_mask, g)
        return audio, y_lengths


def prior_log_likelihood(z_p: torch.Tensor, m_p: torch.Tensor, logs_p: torch.Tensor) -> torch.Tensor:
    """log N(z_p[:, :, t]; m_p[:, :, s], exp(logs_p[:, :, s])) summed over channels, (B, T_frames, T_tokens), fp32."""
    z_p, m_p, logs_p = z_p.float(), m_p.float(), logs_p.float()
    s_p_sq_r = torch.exp(-2 * logs_p)  # (B, C, T_tokens)
    term1 = torch.sum(-0.5 * LOG_2PI - logs_p, [1], keepdim=True)  # (B, 1, T_tokens)
    term2 = torch.matmul(-0.5 * (z_p**2).transpose(1, 2), s_p_sq_r)  # (B, T_frames, T_tokens)
    term3 = torch.matmul(z_p.transpose(1, 2), m_p * s_p_sq_r)
    term4 = torch.sum(-0.5 * (m_p**2) * s_p_sq_r, [1], keepdim=True)
    return term1 + term2 + term3 + term4


def kl_loss(
    z_p: torch.Tensor, logs_q: torch.Tensor, m_p: torch.Tensor, logs_p: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """KL between the posterior (through the flow) and the text prior: summed over channels and
    averaged over real frames (the VITS normalisation), fp32."""
    z_p, logs_q, m_p, logs_p = z_p.float(), logs_q.float(), m_p.float(), logs_p.float()
    kl = logs_p - logs_q - 0.5 + 0.5 * ((z_p - m_p) ** 2) * torch.exp(-2.0 * logs_p)
    return torch.sum(kl * mask) / torch.sum(mask)
