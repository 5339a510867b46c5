"""The VITS inference graph as a runtime sees it (Piper's contract): token ids in, audio out, no Python
branch on a length, so that one exported graph serves every input length.

Inputs (Piper's names): ``input`` (1, T_tokens) int64 ids *as the model reads them* (blanks included),
``input_lengths`` (1,) int64, ``scales`` (3,) float32 = ``[noise_scale, length_scale, noise_w]``, and for a
multi-speaker model ``sid`` (1,) int64. Output: ``output`` (1, 1, T_samples) float32.

The maths is :meth:`VITSGenerator.infer`'s: the same modules, with the decoder's weight norm folded and
the text encoder's attention on its explicit path (the SDPA path's in-place band trick does not trace).
With both noise scales at 0 the graph is deterministic and equals ``task.synthesize`` with those scales.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from speechtrain.models.common import remove_weight_norm, sequence_mask
from speechtrain.models.vits.attentions import RelativeMultiHeadAttention
from speechtrain.models.vits.duration import StochasticDurationPredictor
from speechtrain.models.vits.model import VITSGenerator, generate_path

if TYPE_CHECKING:
    from speechtrain.models.vits.config import VITSConfig

INPUT_NAMES = ("input", "input_lengths", "scales")
SPEAKER_INPUT = "sid"
OUTPUT_NAME = "output"


class VITSInferenceGraph(nn.Module):
    """A frozen copy of a :class:`VITSGenerator` whose ``forward`` is Piper's signature (see the module doc)."""

    def __init__(self, generator: VITSGenerator, cfg: VITSConfig, max_frames: int) -> None:
        super().__init__()
        # a fresh generator with the trained weights (a deep copy of a weight-normed module shares its
        # parametrized class with the original), weight norm folded: the training model is left as it was
        n_vocab, spec_channels = generator.enc_p.emb.num_embeddings, generator.enc_q.pre.in_channels
        self.generator = VITSGenerator(cfg, n_vocab, spec_channels, generator.segment_frames).eval()
        self.generator.load_state_dict(generator.state_dict())
        self.generator.to(next(generator.parameters()).device)
        remove_weight_norm(self.generator)
        for module in self.generator.modules():
            if isinstance(module, RelativeMultiHeadAttention):
                module.use_sdpa = False
        self.max_frames = int(max_frames)
        self.multi_speaker = self.generator.emb_g is not None

    def forward(
        self, tokens: torch.Tensor, lengths: torch.Tensor, scales: torch.Tensor, sid: torch.Tensor | None = None
    ) -> torch.Tensor:
        gen = self.generator
        noise_scale, length_scale, noise_w = scales[0], scales[1], scales[2]
        g = gen.speaker_embedding(sid) if self.multi_speaker else None
        x, m_p, logs_p, x_mask = gen.enc_p(tokens, lengths)  # (B, C, T_tokens)
        if isinstance(gen.dp, StochasticDurationPredictor):
            logw = gen.dp.sample_log_durations(x, x_mask, g=g, noise_scale=noise_w)  # type: ignore[arg-type]
        else:
            logw = gen.dp(x, x_mask, g=g)
        w_ceil = torch.ceil(torch.exp(logw) * x_mask * length_scale)  # (B, 1, T_tokens) frames per token
        y_lengths = torch.clamp(torch.sum(w_ceil, [1, 2]), 1, self.max_frames).long()  # (B,)
        t_y = y_lengths.max()  # a tensor, not an int: the trace keeps the output length symbolic
        y_mask = sequence_mask(y_lengths, t_y).unsqueeze(1).to(x_mask.dtype)  # type: ignore[arg-type]
        attn = generate_path(w_ceil, x_mask.unsqueeze(2) * y_mask.unsqueeze(-1))  # (B, 1, T_frames, T_tokens)
        m_p = torch.matmul(attn.squeeze(1), m_p.transpose(1, 2)).transpose(1, 2)  # (B, C, T_frames)
        logs_p = torch.matmul(attn.squeeze(1), logs_p.transpose(1, 2)).transpose(1, 2)
        z_p = m_p + torch.randn_like(m_p) * torch.exp(logs_p) * noise_scale
        z = gen.flow(z_p, y_mask, g=g, reverse=True)
        return gen.dec(z * y_mask, g)  # (B, 1, T_frames * hop)
