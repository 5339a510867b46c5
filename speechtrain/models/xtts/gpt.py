"""The XTTS-v2 GPT: conditioning encoder + perceiver resampler, text/mel embeddings, a GPT-2 stack, heads.

Parameter names and layouts are those of Coqui's ``TTS.tts.layers.xtts.gpt.GPT`` (and of HuggingFace's
GPT-2 inside it: ``Conv1D`` weights stored ``(in, out)``), so a Coqui state dict loads key for key.

One training sequence (Coqui's arrangement, ``P`` conditioning latents, ``L`` text tokens, ``n`` codes)::

    [latent_1 .. latent_P] [START, t_1 .. t_L, STOP] [start_audio, c_1 .. c_n, stop x 4]
                            text targets: t_1 .. t_L, STOP, STOP     audio targets: c_1 .. c_n, stop x 4

``code_lengths = ceil(wav_samples / code_stride) + 3``: the model learns to emit the stop code on four
positions after the last code. Text and audio have their own learned position tables starting at 0;
latents have none. The GPT-2 output goes through its ``ln_f`` and then ``final_norm`` (XTTS normalises
twice). Padded positions are masked out as keys, so a padded item computes what it would alone.

Attention modules carry ``use_sdpa`` (True: ``F.scaled_dot_product_attention``, False: the explicit
softmax path); ``gpt.h`` and the conditioning encoder's ``attn`` are containers of identical blocks whose
forward returns one tensor, so activation checkpointing can wrap them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn

from speechtrain.models.common import attend

IGNORE_INDEX = -1  # Coqui's ignore_index for both cross-entropies


# ---------------------------------------------------------------------------------------------- GPT-2
class Conv1D(nn.Module):
    """HuggingFace GPT-2's linear layer: ``weight`` stored (in_features, out_features)."""

    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight = nn.Parameter(torch.empty(in_features, out_features))
        self.bias = nn.Parameter(torch.zeros(out_features))
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight.t(), self.bias)


@dataclass
class LayerCache:
    """Keys and values of one attention layer for generation, preallocated to the longest sequence."""

    k: torch.Tensor  # (B, heads, S_max, head_dim)
    v: torch.Tensor  # (B, heads, S_max, head_dim)
    length: int = 0


class GPT2Attention(nn.Module):
    """GPT-2 causal self-attention (``c_attn`` -> q, k, v; ``c_proj``), dropout on weights and output."""

    def __init__(self, width: int, heads: int, dropout: float = 0.1) -> None:
        super().__init__()
        self.heads, self.head_dim, self.dropout = heads, width // heads, dropout
        self.c_attn = Conv1D(width, 3 * width)
        self.c_proj = Conv1D(width, width)
        self.resid_dropout = nn.Dropout(dropout)
        self.use_sdpa = False

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor | None = None, cache: LayerCache | None = None
    ) -> torch.Tensor:
        """x (B, S, width); mask (B, 1, S, S_keys) bool or None for plain causal attention."""
        b, s, w = x.shape
        q, k, v = (
            t.view(b, s, self.heads, self.head_dim).transpose(1, 2) for t in self.c_attn(x).split(w, dim=2)
        )  # 3 x (B, H, S, hd)
        causal = mask is None
        if cache is not None:
            offset = cache.length
            cache.k[:, :, offset : offset + s] = k
            cache.v[:, :, offset : offset + s] = v
            cache.length = offset + s
            k, v = cache.k[:, :, : offset + s], cache.v[:, :, : offset + s]
            if offset and causal:
                causal = False
                if s > 1:  # several new queries against the cache: causal with an offset
                    mask = torch.ones(s, offset + s, dtype=torch.bool, device=x.device).tril(offset)
        p = self.dropout if self.training else 0.0
        y = attend(q, k, v, mask, causal, p, self.use_sdpa)
        return self.resid_dropout(self.c_proj(y.transpose(1, 2).reshape(b, s, w)))  # (B, S, width)


class GPT2MLP(nn.Module):
    """GPT-2 feed-forward: ``c_fc`` -> gelu (tanh approximation, HF's gelu_new) -> ``c_proj``."""

    def __init__(self, width: int, dropout: float = 0.1) -> None:
        super().__init__()
        self.c_fc = Conv1D(width, 4 * width)
        self.c_proj = Conv1D(4 * width, width)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.c_proj(F.gelu(self.c_fc(x), approximate="tanh")))


class GPT2Block(nn.Module):
    """Pre-norm block: x + attn(ln_1(x)), then x + mlp(ln_2(x))."""

    def __init__(self, width: int, heads: int, dropout: float = 0.1) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(width, eps=1e-5)
        self.attn = GPT2Attention(width, heads, dropout)
        self.ln_2 = nn.LayerNorm(width, eps=1e-5)
        self.mlp = GPT2MLP(width, dropout)

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor | None = None, cache: LayerCache | None = None
    ) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x), mask, cache)
        return x + self.mlp(self.ln_2(x))  # (B, S, width)


class GPT2Stack(nn.Module):
    """HuggingFace ``GPT2Model`` without token/position tables (XTTS deletes ``wte``/``wpe``): embedding
    dropout, blocks ``h``, final ``ln_f``."""

    def __init__(self, layers: int, width: int, heads: int, dropout: float = 0.1) -> None:
        super().__init__()
        self.drop = nn.Dropout(dropout)
        self.h = nn.ModuleList([GPT2Block(width, heads, dropout) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(width, eps=1e-5)

    def blocks(self) -> list[GPT2Block]:
        """The blocks ``h`` with their type (activation checkpointing may wrap them in place)."""
        return [cast(GPT2Block, b) for b in self.h]

    def forward(
        self, x: torch.Tensor, key_valid: torch.Tensor | None = None, caches: list[LayerCache] | None = None
    ) -> torch.Tensor:
        """x (B, S, width); key_valid (B, S) bool (False: padding, never attended) or None."""
        mask = None
        if key_valid is not None:
            s = x.shape[1]
            causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()
            mask = (causal[None] & key_valid[:, None, :])[:, None]  # (B, 1, S, S)
        x = self.drop(x)
        for i, block in enumerate(self.h):
            x = block(x, mask) if caches is None else block(x, mask, caches[i])
        return self.ln_f(x)


class LearnedPositionEmbeddings(nn.Module):
    """A learned position table ``emb`` (Coqui's name), positions from ``start``."""

    def __init__(self, seq_len: int, width: int) -> None:
        super().__init__()
        self.seq_len = seq_len
        self.emb = nn.Embedding(seq_len, width)
        nn.init.normal_(self.emb.weight, std=0.02)

    def forward(self, length: int, device: torch.device, start: int = 0) -> torch.Tensor:
        return self.emb(torch.arange(start, start + length, device=device))  # (length, width)


# ------------------------------------------------------------------------------- conditioning encoder
def group_norm_groups(channels: int) -> int:
    """Groups of Coqui's ``normalization(channels)``: 32, 16 up to 64 channels, 8 up to 16; halved until
    they divide ``channels``."""
    groups = 32 if channels > 64 else (16 if channels > 16 else 8)
    while channels % groups:
        groups //= 2
    if groups <= 2:
        raise ValueError(f"conditioning encoder width {channels} gives {groups} norm groups (need > 2)")
    return groups


class GroupNorm32(nn.GroupNorm):
    """GroupNorm computed in float32 (Coqui's GroupNorm32)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.float()).to(x.dtype)


class QKVAttention(nn.Module):
    """Tortoise's attention over a packed (B, H * 3 * ch, T) qkv tensor, heads outermost."""

    def __init__(self, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.use_sdpa = False

    def forward(self, qkv: torch.Tensor) -> torch.Tensor:
        b, width, t = qkv.shape
        ch = width // (3 * self.heads)
        q, k, v = qkv.reshape(b * self.heads, 3 * ch, t).split(ch, dim=1)  # 3 x (B * H, ch, T)
        if self.use_sdpa:
            q, k, v = (x.view(b, self.heads, ch, t).transpose(-1, -2) for x in (q, k, v))  # (B, H, T, ch)
            a = F.scaled_dot_product_attention(q, k, v).transpose(-1, -2)  # (B, H, ch, T)
            return a.reshape(b, -1, t)
        scale = 1 / math.sqrt(math.sqrt(ch))  # both sides scaled: steadier in fp16 than dividing afterwards
        weight = torch.einsum("bct,bcs->bts", q * scale, k * scale)  # (B * H, T, T)
        weight = torch.softmax(weight.float(), dim=-1).to(weight.dtype)
        return torch.einsum("bts,bcs->bct", weight, v).reshape(b, -1, t)  # (B, H * ch, T)


class AttentionBlock(nn.Module):
    """Conditioning-encoder block: norm -> qkv (1x1 conv) -> attention -> proj_out, added to the *normed*
    input (as Coqui's block does)."""

    def __init__(self, channels: int, heads: int) -> None:
        super().__init__()
        self.norm = GroupNorm32(group_norm_groups(channels), channels)
        self.qkv = nn.Conv1d(channels, 3 * channels, 1)
        self.attention = QKVAttention(heads)
        self.proj_out = nn.Conv1d(channels, channels, 1)
        nn.init.zeros_(self.proj_out.weight)
        nn.init.zeros_(cast(torch.Tensor, self.proj_out.bias))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm(x)  # (B, C, T)
        return x + self.proj_out(self.attention(self.qkv(x)))


class ConditioningEncoder(nn.Module):
    """Mel (B, n_mels, T_frames) -> (B, width, T_frames): a 1x1 conv then attention blocks."""

    def __init__(self, n_mels: int, width: int, blocks: int, heads: int) -> None:
        super().__init__()
        self.init = nn.Conv1d(n_mels, width, 1)
        self.attn = nn.Sequential(*[AttentionBlock(width, heads) for _ in range(blocks)])

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        return self.attn(self.init(mel))


# -------------------------------------------------------------------------------- perceiver resampler
class RMSNorm(nn.Module):
    """``normalize(x) * sqrt(dim) * gamma``."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.scale = dim**0.5
        self.gamma = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.normalize(x, dim=-1) * self.scale * self.gamma


class GEGLU(nn.Module):
    """x, gate = chunk(2); gelu(gate) * x."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x, gate = x.chunk(2, dim=-1)
        return F.gelu(gate) * x


class PerceiverAttention(nn.Module):
    """Latents attend to [latents; context] (no biases, no mask)."""

    def __init__(self, dim: int, dim_head: int, heads: int) -> None:
        super().__init__()
        self.heads, self.dim_head = heads, dim_head
        inner = dim_head * heads
        self.to_q = nn.Linear(dim, inner, bias=False)
        self.to_kv = nn.Linear(dim, 2 * inner, bias=False)
        self.to_out = nn.Linear(inner, dim, bias=False)
        self.use_sdpa = False

    def forward(self, latents: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        b, n, _ = latents.shape
        context = torch.cat([latents, context], dim=1)  # (B, N + T, dim)
        q = self.to_q(latents)
        k, v = self.to_kv(context).chunk(2, dim=-1)
        q, k, v = (t.view(b, t.shape[1], self.heads, self.dim_head).transpose(1, 2) for t in (q, k, v))
        out = attend(q, k, v, None, False, 0.0, self.use_sdpa)  # (B, H, N, dh)
        return self.to_out(out.transpose(1, 2).reshape(b, n, -1))


def feed_forward(dim: int, mult: int) -> nn.Sequential:
    """Linear -> GEGLU -> Linear with Coqui's inner size ``int(dim * mult * 2 / 3)`` (keys 0 and 2)."""
    inner = int(dim * mult * 2 / 3)
    return nn.Sequential(nn.Linear(dim, 2 * inner), GEGLU(), nn.Linear(inner, dim))


class PerceiverLayer(nn.ModuleList):
    """Children ``0`` (attention) and ``1`` (feed-forward), Coqui's ``layers.i.0`` / ``layers.i.1``."""

    def __init__(self, dim: int, dim_head: int, heads: int, ff_mult: int) -> None:
        super().__init__([PerceiverAttention(dim, dim_head, heads), feed_forward(dim, ff_mult)])

    def forward(self, latents: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        attn, ff = self[0], self[1]
        latents = attn(latents, context) + latents
        return ff(latents) + latents  # (B, N, dim)


class PerceiverResampler(nn.Module):
    """(B, T, dim) -> (B, num_latents, dim): learned latents cross-attend to the conditioning frames."""

    def __init__(self, dim: int, depth: int, num_latents: int, dim_head: int, heads: int, ff_mult: int) -> None:
        super().__init__()
        self.latents = nn.Parameter(torch.randn(num_latents, dim) * 0.02)
        self.layers = nn.ModuleList([PerceiverLayer(dim, dim_head, heads, ff_mult) for _ in range(depth)])
        self.norm = RMSNorm(dim)

    def forward(self, context: torch.Tensor) -> torch.Tensor:
        latents = self.latents.unsqueeze(0).expand(context.shape[0], -1, -1)
        for layer in self.layers:
            latents = layer(latents, context)
        return self.norm(latents)


# ------------------------------------------------------------------------------------------ the GPT
@dataclass
class SamplingSettings:
    """XTTS's generation settings (HuggingFace ``generate`` semantics; ``length_penalty`` only matters for
    beam search, which XTTS does not use, so it has no effect here either)."""

    temperature: float = 0.75
    top_k: int | None = 50
    top_p: float | None = 0.85
    repetition_penalty: float = 10.0
    length_penalty: float = 1.0
    do_sample: bool = True


class XttsGPT(nn.Module):
    """Coqui's XTTS-v2 ``GPT`` (perceiver conditioning). ``arch``: :class:`speechtrain.models.xtts.config.XttsArch`."""

    def __init__(self, arch: Any, dropout: float = 0.1) -> None:
        super().__init__()
        a = arch
        width = a.gpt_n_model_channels
        self.width = width
        self.start_text_token, self.stop_text_token = a.gpt_start_text_token, a.gpt_stop_text_token
        self.start_audio_token, self.stop_audio_token = a.gpt_start_audio_token, a.gpt_stop_audio_token
        self.code_stride_len = a.gpt_code_stride_len
        self.max_gen_mel_tokens = a.gpt_max_audio_tokens - 3  # Coqui: max_mel_tokens - 1 conditioning input - 2
        # registration order follows Coqui's, so state_dict() lists keys in its order
        self.conditioning_encoder = ConditioningEncoder(a.n_mels, width, a.cond_attn_blocks, a.gpt_n_heads)
        self.text_embedding = nn.Embedding(a.gpt_number_text_tokens, width)
        self.mel_embedding = nn.Embedding(a.gpt_num_audio_tokens, width)
        self.gpt = GPT2Stack(a.gpt_layers, width, a.gpt_n_heads, dropout)
        self.mel_pos_embedding = LearnedPositionEmbeddings(a.gpt_max_audio_tokens + 3, width)
        self.text_pos_embedding = LearnedPositionEmbeddings(a.gpt_max_text_tokens + 2, width)
        self.final_norm = nn.LayerNorm(width)
        self.text_head = nn.Linear(width, a.gpt_number_text_tokens)
        self.mel_head = nn.Linear(width, a.gpt_num_audio_tokens)
        self.conditioning_perceiver = PerceiverResampler(
            width, a.perceiver_depth, a.perceiver_latents, a.perceiver_dim_head, a.perceiver_heads, a.perceiver_ff_mult
        )
        self._init_weights(a.gpt_layers)

    def _init_weights(self, layers: int) -> None:
        # GPT-2's initialisation (weights of random checkpoints; a loaded checkpoint overwrites them)
        for name, module in self.named_modules():
            if isinstance(module, (nn.Embedding, nn.Linear)) and not name.startswith("conditioning_"):
                nn.init.normal_(module.weight, std=0.02)
                if isinstance(module, nn.Linear) and module.bias is not None:
                    nn.init.zeros_(module.bias)
        for block in self.gpt.blocks():
            for proj in (block.attn.c_proj, block.mlp.c_proj):
                nn.init.normal_(proj.weight, std=0.02 / math.sqrt(2 * layers))

    @property
    def num_text_tokens(self) -> int:
        return self.text_embedding.num_embeddings

    # -- conditioning ------------------------------------------------------------------------------
    def conditioning_latents(self, cond_mel: torch.Tensor) -> torch.Tensor:
        """Style mel (B, n_mels, T_frames) -> conditioning latents (B, num_latents, width)."""
        frames = self.conditioning_encoder(cond_mel)  # (B, width, T_frames)
        return self.conditioning_perceiver(frames.transpose(1, 2))

    # -- training ----------------------------------------------------------------------------------
    def code_lengths(self, wav_lengths: torch.Tensor) -> torch.Tensor:
        """Coqui's ``ceil(wav_samples / code_stride) + 3`` (the codes plus three extra stop positions)."""
        return torch.div(wav_lengths + self.code_stride_len - 1, self.code_stride_len, rounding_mode="floor") + 3

    def arrange(
        self,
        text_tokens: torch.Tensor,
        text_lengths: torch.Tensor,
        codes: torch.Tensor,
        code_lengths: torch.Tensor,
        max_text: int,
        max_codes: int,
    ) -> dict[str, torch.Tensor]:
        """Inputs, targets and key masks of Coqui's ``GPT.forward``, vectorised on the device.

        text_tokens (B, >= max_text) BPE ids without start/stop; codes (B, T_codes) DVAE codes;
        code_lengths from :meth:`code_lengths`; ``max_text``/``max_codes`` their maxima (host ints, so
        that nothing here syncs). Returns text_inputs/text_targets/text_valid (B, max_text + 2) and
        mel_inputs/mel_targets/mel_valid (B, max_codes + 2); targets hold IGNORE_INDEX past the end.
        """
        b, dev = text_tokens.shape[0], text_tokens.device
        text = text_tokens[:, :max_text]
        if text.shape[1] < max_text:
            text = F.pad(text, (0, max_text - text.shape[1]))
        steps = torch.arange(max_text + 1, device=dev)[None]
        text = F.pad(text, (0, 1), value=self.stop_text_token)
        text = torch.where(steps < text_lengths[:, None], text, self.stop_text_token)  # (B, L + 1)
        text_inputs = F.pad(text, (1, 0), value=self.start_text_token)  # (B, L + 2)
        text_targets = F.pad(text, (0, 1), value=self.stop_text_token)
        text_valid = torch.arange(max_text + 2, device=dev)[None] <= text_lengths[:, None]
        text_targets = torch.where(text_valid, text_targets, IGNORE_INDEX)

        audio = codes[:, :max_codes]
        if audio.shape[1] < max_codes:
            audio = F.pad(audio, (0, max_codes - audio.shape[1]))
        audio = F.pad(audio, (0, 1), value=self.stop_audio_token)  # (B, M + 1)
        real = (code_lengths - 3)[:, None]
        audio = torch.where(torch.arange(max_codes + 1, device=dev)[None] < real, audio, self.stop_audio_token)
        mel_inputs = F.pad(audio, (1, 0), value=self.start_audio_token)  # (B, M + 2)
        mel_targets = F.pad(audio, (0, 1), value=self.stop_audio_token)
        mel_valid = torch.arange(max_codes + 2, device=dev)[None] <= code_lengths[:, None]
        mel_targets = torch.where(mel_valid, mel_targets, IGNORE_INDEX)
        del b
        return {
            "text_inputs": text_inputs,
            "text_targets": text_targets,
            "text_valid": text_valid,
            "mel_inputs": mel_inputs,
            "mel_targets": mel_targets,
            "mel_valid": mel_valid,
        }

    def forward(
        self,
        text_inputs: torch.Tensor,
        mel_inputs: torch.Tensor,
        cond_latents: torch.Tensor,
        key_valid: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Teacher-forced logits.

        text_inputs (B, L + 2), mel_inputs (B, M + 2) from :meth:`arrange`; cond_latents (B, P, width);
        key_valid (B, L + 2 + M + 2) bool (False on padding) or None when nothing is padded.
        Returns text_logits (B, L + 2, V_text) and mel_logits (B, M + 2, V_audio).
        """
        dev = text_inputs.device
        n_text, n_mel = text_inputs.shape[1], mel_inputs.shape[1]
        text = self.text_embedding(text_inputs) + self.text_pos_embedding(n_text, dev)[None]
        mel = self.mel_embedding(mel_inputs) + self.mel_pos_embedding(n_mel, dev)[None]
        x = torch.cat([cond_latents.to(text.dtype), text, mel], dim=1)  # (B, P + L + 2 + M + 2, width)
        n_prompt = cond_latents.shape[1]
        if key_valid is not None:
            prompt = torch.ones(x.shape[0], n_prompt, dtype=torch.bool, device=dev)
            key_valid = torch.cat([prompt, key_valid], dim=1)
        h = self.final_norm(self.gpt(x, key_valid)[:, n_prompt:])
        return self.text_head(h[:, :n_text]), self.mel_head(h[:, n_text:])

    # -- generation --------------------------------------------------------------------------------
    def _new_caches(self, batch: int, length: int, like: torch.Tensor) -> list[LayerCache]:
        caches = []
        for block in self.gpt.blocks():
            shape = (batch, block.attn.heads, length, block.attn.head_dim)
            caches.append(LayerCache(like.new_empty(shape), like.new_empty(shape)))
        return caches

    @staticmethod
    def process_logits(logits: torch.Tensor, seen: torch.Tensor, s: SamplingSettings) -> torch.Tensor:
        """HuggingFace's processors in ``generate``'s order: repetition penalty over the ids seen so far,
        then temperature, top-k and top-p (nucleus). logits (B, V) float32; seen (B, V) bool."""
        if s.repetition_penalty != 1.0:
            penalised = torch.where(logits < 0, logits * s.repetition_penalty, logits / s.repetition_penalty)
            logits = torch.where(seen, penalised, logits)
        if not s.do_sample or s.temperature <= 0:
            return logits
        if s.temperature != 1.0:
            logits = logits / s.temperature
        if s.top_k:
            k = min(max(int(s.top_k), 1), logits.shape[-1])
            kth = torch.topk(logits, k).values[..., -1:]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        if s.top_p is not None and s.top_p < 1.0:
            sorted_logits, order = torch.sort(logits, descending=False)
            cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
            remove = cumulative <= (1 - s.top_p)
            remove[..., -1:] = False  # keep at least the likeliest
            logits = logits.masked_fill(remove.scatter(1, order, remove), float("-inf"))
        return logits

    @torch.no_grad()
    def generate(
        self,
        cond_latents: torch.Tensor,
        text_tokens: torch.Tensor,
        settings: SamplingSettings,
        max_new_tokens: int | None = None,
        generator: torch.Generator | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Audio codes for one text, with the GPT latents the HiFi-GAN decoder reads.

        cond_latents (1, P, width); text_tokens (1, L) BPE ids (language tag first, no start/stop).
        Returns codes (n,) including the stop code when one was produced, and latents (1, n, width):
        the final-normed hidden state that produced each code (what Coqui recomputes with
        ``return_latent=True``). KV cache; one host sync per code (the stop decision).
        """
        dev = text_tokens.device
        limit = self.max_gen_mel_tokens if max_new_tokens is None else min(max_new_tokens, self.max_gen_mel_tokens)
        text = F.pad(F.pad(text_tokens, (0, 1), value=self.stop_text_token), (1, 0), value=self.start_text_token)
        n_text = text.shape[1]
        if n_text > self.text_pos_embedding.seq_len:
            raise ValueError(f"text of {n_text - 2} tokens exceeds the text position table")
        prefix = self.text_embedding(text) + self.text_pos_embedding(n_text, dev)[None]
        start = torch.full((1, 1), self.start_audio_token, dtype=torch.long, device=dev)
        first = self.mel_embedding(start) + self.mel_pos_embedding(1, dev)[None]
        x = torch.cat([cond_latents.to(prefix.dtype), prefix, first], dim=1)  # (1, P + L + 2 + 1, width)
        caches = self._new_caches(1, x.shape[1] + limit, x)
        hidden = self.final_norm(self.gpt(x, None, caches)[:, -1])  # (1, width)
        vocab = self.mel_head.out_features
        seen = torch.zeros(1, vocab, dtype=torch.bool, device=dev)
        seen[:, self.start_audio_token] = True
        seen[:, 1] = True  # HF generate sees the prefix as placeholder ids 1 and penalises that code too
        codes, latents = [], []
        for step in range(limit):
            logits = self.process_logits(self.mel_head(hidden).float(), seen, settings)
            if settings.do_sample and settings.temperature > 0:
                probs = torch.softmax(logits, dim=-1)
                # non-finite weights (a diverged run's evaluation): an even draw among the codes not ruled out
                fine = torch.isfinite(probs).all(dim=-1, keepdim=True)
                probs = torch.where(fine, probs, (logits != float("-inf")).to(probs.dtype))
                nxt = torch.multinomial(probs, 1, generator=generator)  # (1, 1)
            else:
                nxt = logits.argmax(dim=-1, keepdim=True)
            codes.append(nxt[0, 0])
            latents.append(hidden)
            seen.scatter_(1, nxt, True)
            if int(nxt) == self.stop_audio_token:  # host sync once per code: decides whether to stop
                break
            emb = self.mel_embedding(nxt) + self.mel_pos_embedding(1, dev, start=step + 1)[None]
            hidden = self.final_norm(self.gpt(emb, None, caches)[:, -1])
        return torch.stack(codes), torch.stack(latents, dim=1)  # (n,), (1, n, width)

    def resize_text_vocab(self, rows: int, init: str = "mean", keep_identity: bool = True) -> int:
        """Grow (or set) the text embedding and text head to ``rows`` tokens; new rows are the mean of the
        existing ones (``init="mean"``) or normal(0, 0.02) with a zero head bias. Returns rows added.

        ``keep_identity``: replace the tensors inside the same Parameter objects, so that an optimizer
        built before (a resumed run) still holds them."""
        old = self.text_embedding.num_embeddings
        if rows == old:
            return 0
        emb, head_w, head_b = self.text_embedding.weight, self.text_head.weight, self.text_head.bias
        with torch.no_grad():
            new = []
            for t in (emb, head_w, head_b):
                grown = t.new_empty((rows, *t.shape[1:]))
                keep = min(old, rows)
                grown[:keep] = t[:keep]
                if rows > old:
                    if init == "mean":
                        grown[old:] = t.mean(dim=0, keepdim=True)
                    elif t is head_b:
                        grown[old:] = 0
                    else:
                        grown[old:].normal_(0.0, 0.02)
                new.append(grown)
        if keep_identity:
            emb.data, head_w.data, head_b.data = new
        else:
            self.text_embedding.weight = nn.Parameter(new[0])
            self.text_head.weight, self.text_head.bias = nn.Parameter(new[1]), nn.Parameter(new[2])
        self.text_embedding.num_embeddings = rows
        self.text_head.out_features = rows
        return rows - old

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str, *args: Any, **kwargs: Any) -> None:
        # a run's state may hold a vocabulary grown by a new language: take its size before loading
        rows = state_dict.get(prefix + "text_embedding.weight")
        if rows is not None and rows.shape[0] != self.text_embedding.num_embeddings:
            self.resize_text_vocab(int(rows.shape[0]))
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
