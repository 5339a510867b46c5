"""Transformer text encoder of VITS: self-attention with windowed relative positions (Shaw et al.)
and a convolutional feed-forward, post-norm.

Attention has two paths, chosen by the boolean attribute ``use_sdpa`` of each
:class:`RelativeMultiHeadAttention` (SDPA by default; ``accel.sdpa=false`` selects the math path):

- math: explicit scores ``(B, H, T, T)``, softmax, dropout on the weights;
- SDPA: one ``scaled_dot_product_attention`` call. The relative-key logits go in as an additive
  float ``attn_mask``. The relative-value term needs the attention weights on the window band
  (``|j - i| <= window``), which SDPA does not return, so one extra "sink" key is appended whose
  logit is the band's log-sum-exp and whose value is an indicator channel: its output ``rho`` gives
  the band's share of the softmax mass, from which the band weights and the plain output are
  recovered exactly. The SDPA path is taken when no attention-weight dropout is active (dropout
  would also hit the sink); otherwise the layer falls back to the math path (see ``sdpa_active``).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

MASK_VALUE = -1e4  # logit of a padded key (as in VITS); exp underflows to exactly 0 in fp32


class ChannelLayerNorm(nn.Module):
    """LayerNorm over the channel axis of ``(B, C, T)``."""

    def __init__(self, channels: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.channels, self.eps = channels, eps
        self.gamma = nn.Parameter(torch.ones(channels))
        self.beta = nn.Parameter(torch.zeros(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.layer_norm(x.transpose(1, -1), (self.channels,), self.gamma, self.beta, self.eps)
        return x.transpose(1, -1)


class RelativeMultiHeadAttention(nn.Module):
    """Self-attention with learned relative-position embeddings for keys and values within
    ``window_size`` (shared across heads); positions farther apart get no relative term."""

    def __init__(self, channels: int, n_heads: int, window_size: int, p_dropout: float = 0.0) -> None:
        super().__init__()
        assert channels % n_heads == 0
        self.channels, self.n_heads, self.window_size, self.p_dropout = channels, n_heads, window_size, p_dropout
        self.k_channels = channels // n_heads
        self.use_sdpa = True  # SDPA by default; the explicit path serves attention dropout and accel.sdpa=false
        self.conv_q = nn.Conv1d(channels, channels, 1)
        self.conv_k = nn.Conv1d(channels, channels, 1)
        self.conv_v = nn.Conv1d(channels, channels, 1)
        self.conv_o = nn.Conv1d(channels, channels, 1)
        std = self.k_channels**-0.5
        self.emb_rel_k = nn.Parameter(torch.randn(1, 2 * window_size + 1, self.k_channels) * std)
        self.emb_rel_v = nn.Parameter(torch.randn(1, 2 * window_size + 1, self.k_channels) * std)
        for conv in (self.conv_q, self.conv_k, self.conv_v):
            nn.init.xavier_uniform_(conv.weight)

    @property
    def sdpa_active(self) -> bool:
        """True when the next forward takes the SDPA path (use_sdpa and no attention dropout now)."""
        return self.use_sdpa and not (self.training and self.p_dropout > 0)

    def forward(self, x: torch.Tensor, key_mask: torch.Tensor) -> torch.Tensor:
        """``x`` (B, C, T), ``key_mask`` (B, T) bool True on real tokens -> (B, C, T)."""
        b, c, t = x.shape
        shape = (b, self.n_heads, self.k_channels, t)
        q = self.conv_q(x).view(shape).transpose(2, 3)  # (B, H, T, d)
        k = self.conv_k(x).view(shape).transpose(2, 3)
        v = self.conv_v(x).view(shape).transpose(2, 3)
        q = q / math.sqrt(self.k_channels)
        if self.sdpa_active:
            out = self._sdpa(q, k, v, key_mask)
        else:
            out = self._math(q, k, v, key_mask)
        return self.conv_o(out.transpose(2, 3).reshape(b, c, t))

    # --- relative positions -------------------------------------------------------------------
    def _relative_embeddings(self, emb: torch.Tensor, length: int) -> torch.Tensor:
        """Embeddings for offsets -(T-1)..(T-1): (1, 2T-1, d), zero beyond the window."""
        # padded by length - 1 on each side, offset 0 sits at w + length - 1: the slice starts at w for every
        # length, with no branch on it (an ONNX trace keeps the length symbolic; short inputs work too)
        w = self.window_size
        emb = F.pad(emb, (0, 0, length - 1, length - 1))
        return emb[:, w : w + 2 * length - 1]

    @staticmethod
    def _relative_to_absolute(x: torch.Tensor) -> torch.Tensor:
        """(B, H, T, 2T-1) indexed by offset j-i+T-1 -> (B, H, T, T) indexed by key j."""
        b, h, t, _ = x.shape
        x = F.pad(x, (0, 1))
        x = F.pad(x.reshape(b, h, t * 2 * t), (0, t - 1))
        return x.view(b, h, t + 1, 2 * t - 1)[:, :, :t, t - 1 :]

    @staticmethod
    def _absolute_to_relative(x: torch.Tensor) -> torch.Tensor:
        """(B, H, T, T) indexed by key j -> (B, H, T, 2T-1) indexed by offset j-i+T-1."""
        b, h, t, _ = x.shape
        x = F.pad(x, (0, t - 1))
        x = F.pad(x.reshape(b, h, t * (2 * t - 1)), (t, 0))
        return x.view(b, h, t, 2 * t)[:, :, :, 1:]

    def _math(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, key_mask: torch.Tensor) -> torch.Tensor:
        t = q.shape[2]
        scores = q @ k.transpose(-2, -1)  # (B, H, T, T)
        rel_k = self._relative_embeddings(self.emb_rel_k, t)  # (1, 2T-1, d)
        scores = scores + self._relative_to_absolute(q @ rel_k.unsqueeze(0).transpose(-2, -1))
        scores = scores.masked_fill(~key_mask[:, None, None, :], MASK_VALUE)
        weights = F.dropout(torch.softmax(scores, dim=-1), self.p_dropout, self.training)
        out = weights @ v
        rel_v = self._relative_embeddings(self.emb_rel_v, t)
        return out + self._absolute_to_relative(weights) @ rel_v.unsqueeze(0)  # (B, H, T, d)

    def _sdpa(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, key_mask: torch.Tensor) -> torch.Tensor:
        b, h, t, d = q.shape
        w = self.window_size
        n_band = 2 * w + 1
        key_bias = torch.zeros(b, 1, 1, t, dtype=q.dtype, device=q.device).masked_fill(
            ~key_mask[:, None, None, :], MASK_VALUE
        )
        rel_k = self._relative_embeddings(self.emb_rel_k, t)
        bias = self._relative_to_absolute(q @ rel_k.unsqueeze(0).transpose(-2, -1)) + key_bias  # (B, H, T, T)
        # logits on the band j = i + r, r in [-w, w]: (B, H, T, 2w+1); keys outside [0, T) are -inf
        k_pad = F.pad(k, (0, 0, w, w))
        k_band = k_pad.unfold(2, n_band, 1)  # (B, H, T, d, 2w+1)
        band = torch.einsum("bhtd,bhtdr->bhtr", q, k_band) + q @ self.emb_rel_k[0].transpose(0, 1)
        bias_pad = F.pad(key_bias.squeeze(2).squeeze(1), (w, w), value=float("-inf"))  # (B, T + 2w)
        band = band + bias_pad.unfold(1, n_band, 1)[:, None]  # (B, H, T, 2w+1)
        lse_band = torch.logsumexp(band, dim=-1, keepdim=True)  # (B, H, T, 1)
        # one sink key with logit lse_band, zero key and value, plus an indicator value channel (d);
        # q, k, v share one head size, padded with zeros to a multiple of 8 so fused kernels apply
        d_ext = (d + 1 + 7) // 8 * 8
        q_ext = F.pad(q, (0, d_ext - d))  # (B, H, T, d_ext)
        k_ext = F.pad(k, (0, d_ext - d, 0, 1))  # (B, H, T+1, d_ext)
        v_ext = F.pad(v, (0, d_ext - d, 0, 1))  # (B, H, T+1, d_ext)
        v_ext[:, :, -1, d] = 1.0
        bias_ext = torch.cat([bias, lse_band], dim=-1)  # (B, H, T, T+1)
        out = F.scaled_dot_product_attention(q_ext, k_ext, v_ext, attn_mask=bias_ext, scale=1.0)
        rho = out[..., d : d + 1]  # Zb / (Zb + Z): band mass against the whole row plus the sink
        content = out[..., :d] / (1 - rho)
        band_weights = torch.exp(band - lse_band) * (rho / (1 - rho))  # softmax weights on the band
        return content + band_weights @ self.emb_rel_v[0]


class ConvFeedForward(nn.Module):
    """Conv1d -> ReLU -> dropout -> Conv1d, masked (the VITS encoder's feed-forward)."""

    def __init__(self, channels: int, filter_channels: int, kernel_size: int, p_dropout: float) -> None:
        super().__init__()
        self.conv_1 = nn.Conv1d(channels, filter_channels, kernel_size, padding=kernel_size // 2)
        self.conv_2 = nn.Conv1d(filter_channels, channels, kernel_size, padding=kernel_size // 2)
        self.drop = nn.Dropout(p_dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = self.drop(torch.relu(self.conv_1(x * mask)))
        return self.conv_2(x * mask) * mask


class Encoder(nn.Module):
    """Post-norm transformer blocks over ``(B, C, T_tokens)`` with a ``(B, 1, T_tokens)`` mask."""

    def __init__(
        self,
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
        attn_p = p_dropout if attn_dropout is None else attn_dropout
        self.attn = nn.ModuleList(
            RelativeMultiHeadAttention(hidden_channels, n_heads, window_size, attn_p) for _ in range(n_layers)
        )
        self.norm_1 = nn.ModuleList(ChannelLayerNorm(hidden_channels) for _ in range(n_layers))
        self.ffn = nn.ModuleList(
            ConvFeedForward(hidden_channels, filter_channels, kernel_size, p_dropout) for _ in range(n_layers)
        )
        self.norm_2 = nn.ModuleList(ChannelLayerNorm(hidden_channels) for _ in range(n_layers))
        self.drop = nn.Dropout(p_dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        key_mask = mask[:, 0].bool()  # (B, T_tokens)
        x = x * mask
        for attn, norm_1, ffn, norm_2 in zip(self.attn, self.norm_1, self.ffn, self.norm_2):
            x = norm_1(x + self.drop(attn(x, key_mask)))
            x = norm_2(x + self.drop(ffn(x, mask)))
        return x * mask
