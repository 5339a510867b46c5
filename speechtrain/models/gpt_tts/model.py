"""The GPT-style TTS transformer (XTTS-like): one causal sequence of text tokens then audio codes.

Sequence of one item: ``[bos, text..., eos, <pad>...] [start_audio, code_1 ... code_T, stop_audio, <pad>...]``.
Text and audio have their own embeddings, learned position tables and heads. The text part is padded
to the batch's longest text, so audio always starts at the same index; padded keys are masked out of
attention (``attention_mask=True``), which makes a padded item compute exactly what it would alone.

Attention uses ``torch.nn.functional.scaled_dot_product_attention`` when the attention module's
``use_sdpa`` is True (the default; ``accel.sdpa=false`` turns it off), else an explicit softmax(QK^T)V with
the same result. ``blocks`` is an ``nn.ModuleList`` of identical blocks whose forward returns one tensor, so
activation checkpointing can wrap them. Generation keeps a KV cache (or recomputes the whole
sequence each step with ``use_cache=False``: same tokens).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from speechtrain.models.common import attend

IGNORE_INDEX = -100


@dataclass
class LayerCache:
    """Keys and values of one attention layer for generation, preallocated to the longest sequence."""

    k: torch.Tensor  # (B, heads, S_max, head_dim)
    v: torch.Tensor  # (B, heads, S_max, head_dim)
    length: int = 0


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention; SDPA or the explicit math path by ``use_sdpa``."""

    def __init__(self, width: int, heads: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.heads, self.head_dim, self.dropout = heads, width // heads, dropout
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        # SDPA by default, as a PyTorch 2 user writes attention; the explicit path stays for `accel.sdpa=false`
        self.use_sdpa = True

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor | None = None, cache: LayerCache | None = None
    ) -> torch.Tensor:
        """x (B, S, width); mask (B, 1, S, S_keys) bool (True: may attend) or None for plain causal."""
        b, s, w = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)  # 3 x (B, H, S, hd)
        offset = 0
        if cache is not None:
            offset = cache.length
            cache.k[:, :, offset : offset + s] = k
            cache.v[:, :, offset : offset + s] = v
            cache.length = offset + s
            k, v = cache.k[:, :, : offset + s], cache.v[:, :, : offset + s]
        causal = mask is None
        if causal and offset and s == 1:
            causal = False  # one new query against the whole cache: nothing to hide
        elif causal and offset:
            mask = torch.ones(s, offset + s, dtype=torch.bool, device=x.device).tril(offset)  # (S, S_keys)
            causal = False
        p = self.dropout if self.training else 0.0
        y = attend(q, k, v, mask, causal, p, self.use_sdpa)
        return self.proj(y.transpose(1, 2).reshape(b, s, w))  # (B, S, width)


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, width: int, heads: int, ffn_mult: int = 4, dropout: float = 0.0) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(width)
        self.attn = CausalSelfAttention(width, heads, dropout)
        self.ln2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, ffn_mult * width), nn.GELU(), nn.Linear(ffn_mult * width, width))
        self.drop = nn.Dropout(dropout)

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor | None = None, cache: LayerCache | None = None
    ) -> torch.Tensor:
        x = x + self.drop(self.attn(self.ln1(x), mask, cache))
        return x + self.drop(self.mlp(self.ln2(x)))  # (B, S, width)


class GPTTTS(nn.Module):
    """Text tokens then audio codes through one causal transformer; text and audio heads."""

    def __init__(
        self,
        text_vocab: int,
        codebook_size: int,
        layers: int,
        width: int,
        heads: int,
        ffn_mult: int = 4,
        dropout: float = 0.0,
        max_text_tokens: int = 402,
        max_audio_codes: int = 605,
        attention_mask: bool = True,
    ) -> None:
        super().__init__()
        self.text_vocab, self.codebook_size = text_vocab, codebook_size
        self.start_audio, self.stop_audio = codebook_size, codebook_size + 1
        self.max_text_tokens, self.max_audio_codes = max_text_tokens, max_audio_codes
        self.attention_mask = attention_mask
        audio_vocab = codebook_size + 2
        self.text_embedding = nn.Embedding(text_vocab, width)
        self.audio_embedding = nn.Embedding(audio_vocab, width)
        self.text_pos = nn.Embedding(max_text_tokens, width)
        self.audio_pos = nn.Embedding(max_audio_codes + 2, width)  # start + codes + stop
        self.blocks = nn.ModuleList([Block(width, heads, ffn_mult, dropout) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(width)
        self.text_head = nn.Linear(width, text_vocab)
        self.audio_head = nn.Linear(width, audio_vocab)
        self.apply(self._init)
        for name, p in self.named_parameters():
            if name.endswith("proj.weight") or name.endswith("mlp.2.weight"):
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * layers))  # GPT-2: residual projections scaled by depth

    @staticmethod
    def _init(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    # -- embeddings -------------------------------------------------------------------------------
    def _embed_text(self, tokens: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(tokens.shape[1], device=tokens.device).clamp(max=self.max_text_tokens - 1)
        return self.text_embedding(tokens) + self.text_pos(pos)[None]  # (B, L, width)

    def _embed_audio(self, codes: torch.Tensor, start: int = 0) -> torch.Tensor:
        pos = (start + torch.arange(codes.shape[1], device=codes.device)).clamp(max=self.max_audio_codes + 1)
        return self.audio_embedding(codes) + self.audio_pos(pos)[None]  # (B, T, width)

    def _run_blocks(
        self, x: torch.Tensor, mask: torch.Tensor | None, caches: list[LayerCache] | None = None
    ) -> torch.Tensor:
        for i, block in enumerate(self.blocks):
            x = block(x, mask) if caches is None else block(x, mask, caches[i])
        return self.ln_f(x)

    # -- training ---------------------------------------------------------------------------------
    def forward(
        self,
        tokens: torch.Tensor,
        token_lengths: torch.Tensor,
        codes: torch.Tensor,
        code_lengths: torch.Tensor,
    ) -> dict[str, torch.Tensor]:
        """Logits and targets for teacher forcing.

        tokens (B, L) with bos/eos, token_lengths (B,); codes (B, T_codes), code_lengths (B,).
        Returns text_logits (B, L-1, V_text), text_targets (B, L-1), audio_logits (B, T+1, V_audio),
        audio_targets (B, T+1) (IGNORE_INDEX on padding).
        """
        b, n_text = tokens.shape
        n_codes = codes.shape[1]
        steps = torch.arange(n_codes + 1, device=codes.device)[None]  # (1, T+1)
        lengths = code_lengths[:, None]
        padded = torch.cat([codes, codes.new_zeros(b, 1)], dim=1)  # (B, T+1)
        audio_targets = torch.where(
            steps < lengths, padded, torch.where(steps == lengths, self.stop_audio, IGNORE_INDEX)
        )  # [c_1 .. c_T, stop, ignore...]
        start = codes.new_full((b, 1), self.start_audio)
        audio_in = torch.cat([start, torch.where(steps[:, :-1] < lengths, codes, self.stop_audio)], dim=1)
        text_steps = torch.arange(n_text, device=tokens.device)[None]  # (1, L)
        text_targets = torch.where(text_steps[:, 1:] < token_lengths[:, None], tokens[:, 1:], IGNORE_INDEX)

        x = torch.cat([self._embed_text(tokens), self._embed_audio(audio_in)], dim=1)  # (B, L+T+1, width)
        mask = None
        if self.attention_mask:
            valid = torch.cat([text_steps < token_lengths[:, None], steps <= lengths], dim=1)  # (B, S) real keys
            s = x.shape[1]
            causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()
            mask = (causal[None] & valid[:, None, :])[:, None]  # (B, 1, S, S)
        h = self._run_blocks(x, mask)
        return {
            "text_logits": self.text_head(h[:, : n_text - 1]),
            "text_targets": text_targets,
            "audio_logits": self.audio_head(h[:, n_text:]),
            "audio_targets": audio_targets,
        }

    # -- generation -------------------------------------------------------------------------------
    def _new_caches(self, batch: int, length: int, like: torch.Tensor) -> list[LayerCache]:
        caches = []
        for block in self.blocks:
            attn = block.attn
            assert isinstance(attn, CausalSelfAttention)
            shape = (batch, attn.heads, length, attn.head_dim)
            caches.append(LayerCache(like.new_empty(shape), like.new_empty(shape)))
        return caches

    def _next_logits(self, logits: torch.Tensor, n_generated: int) -> torch.Tensor:
        logits = logits.float().clone()  # (B, V_audio)
        logits[:, self.start_audio] = float("-inf")  # never emitted
        if n_generated == 0:
            logits[:, self.stop_audio] = float("-inf")  # at least one code
        return logits

    @staticmethod
    def _sample(
        logits: torch.Tensor, temperature: float, top_k: int | None, generator: torch.Generator | None
    ) -> torch.Tensor:
        if temperature <= 0:
            return logits.argmax(dim=-1)  # greedy
        logits = logits / temperature
        if top_k is not None and top_k < logits.shape[-1]:
            kth = logits.topk(top_k, dim=-1).values[:, -1:]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        probs = torch.softmax(logits, dim=-1)
        # non-finite weights (a diverged run's evaluation) give NaN probabilities, which multinomial refuses:
        # such a row draws evenly among the codes not ruled out (-inf), so sampling never raises
        fine = torch.isfinite(probs).all(dim=-1, keepdim=True)
        probs = torch.where(fine, probs, (logits != float("-inf")).to(probs.dtype))
        return torch.multinomial(probs, 1, generator=generator).squeeze(1)

    @torch.no_grad()
    def generate(
        self,
        tokens: torch.Tensor,
        max_codes: int,
        temperature: float = 1.0,
        top_k: int | None = None,
        generator: torch.Generator | None = None,
        use_cache: bool = True,
    ) -> list[torch.Tensor]:
        """Audio codes for texts tokens (B, L) (with bos/eos, no padding): one 1-D code tensor per item,
        stopped at its stop code or after ``max_codes``. ``temperature`` 0 is greedy decoding."""
        b, n_text = tokens.shape
        if n_text > self.max_text_tokens:
            raise ValueError(f"text of {n_text} tokens exceeds model.max_text_tokens={self.max_text_tokens}")
        max_codes = min(max_codes, self.max_audio_codes)
        audio = tokens.new_full((b, 1), self.start_audio)  # (B, 1 + generated)
        caches = None
        if use_cache:
            caches = self._new_caches(b, n_text + max_codes + 1, self.text_pos.weight)
            x = torch.cat([self._embed_text(tokens), self._embed_audio(audio)], dim=1)
            h = self._run_blocks(x, None, caches)  # prefill
        finished = torch.zeros(b, dtype=torch.bool, device=tokens.device)
        out: list[torch.Tensor] = []
        for step in range(max_codes):
            if not use_cache:
                x = torch.cat([self._embed_text(tokens), self._embed_audio(audio)], dim=1)
                h = self._run_blocks(x, None)
            logits = self._next_logits(self.audio_head(h[:, -1]), step)
            nxt = self._sample(logits, temperature, top_k, generator)  # (B,)
            nxt = torch.where(finished, self.stop_audio, nxt)
            out.append(nxt)
            finished = finished | (nxt == self.stop_audio)
            if bool(finished.all()):  # host sync once per generated code: decides whether to stop
                break
            audio = torch.cat([audio, nxt[:, None]], dim=1)
            if use_cache:
                h = self._run_blocks(self._embed_audio(nxt[:, None], start=audio.shape[1] - 1), None, caches)
        codes = torch.stack(out, dim=1) if out else tokens.new_zeros(b, 0)  # (B, n)
        result = []
        for row in codes:
            stops = (row == self.stop_audio).nonzero()
            result.append(row[: int(stops[0])] if len(stops) else row)
        return result
