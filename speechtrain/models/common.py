"""Layers and helpers shared by the built-in model families (HiFi-GAN, VITS, CNN-LSTM, GPT-TTS).

Weight norm uses the parametrization API (``torch.nn.utils.parametrizations.weight_norm``), which
works with ``torch.compile`` and deep copies; :func:`remove_weight_norm` folds it back into plain
weights for inference.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import parametrize


def sequence_mask(lengths: torch.Tensor, max_length: int | None = None) -> torch.Tensor:
    """Boolean mask ``(B, T)``, True on real positions: ``mask[b, t] = t < lengths[b]``.

    Pass ``max_length`` (the padded length) to avoid a host-device sync on ``lengths.max()``.
    """
    if max_length is None:
        max_length = int(lengths.max())  # host-device sync; callers in hot paths pass max_length
    steps = torch.arange(max_length, device=lengths.device, dtype=lengths.dtype)
    return steps.unsqueeze(0) < lengths.unsqueeze(1)


def get_padding(kernel_size: int, dilation: int = 1) -> int:
    """'Same' padding of an odd kernel with dilation (output length = input length at stride 1)."""
    return (kernel_size * dilation - dilation) // 2


def conv_output_lengths(
    lengths: torch.Tensor, kernel_size: int, stride: int = 1, padding: int = 0, dilation: int = 1
) -> torch.Tensor:
    """Output lengths of a 1-D convolution (or one axis of a 2-D one) for input ``lengths``."""
    return torch.div(lengths + 2 * padding - dilation * (kernel_size - 1) - 1, stride, rounding_mode="floor") + 1


def init_weights(module: nn.Module, mean: float = 0.0, std: float = 0.01) -> None:
    """Normal init of convolution weights (HiFi-GAN / VITS habit); use with ``model.apply``."""
    if isinstance(module, (nn.Conv1d, nn.ConvTranspose1d, nn.Conv2d)):
        module.weight.data.normal_(mean, std)


def weight_norm(module: nn.Module, name: str = "weight", dim: int = 0) -> nn.Module:
    """Weight-normalise ``module.<name>`` (parametrization API); returns the module."""
    return nn.utils.parametrizations.weight_norm(module, name=name, dim=dim)


def spectral_norm(module: nn.Module, name: str = "weight") -> nn.Module:
    """Spectral-normalise ``module.<name>`` (parametrization API); returns the module."""
    return nn.utils.parametrizations.spectral_norm(module, name=name)


def norm_layer(module: nn.Module, use_spectral_norm: bool = False) -> nn.Module:
    """Weight norm, or spectral norm when asked (discriminators)."""
    return spectral_norm(module) if use_spectral_norm else weight_norm(module)


def has_weight_norm(module: nn.Module, name: str = "weight") -> bool:
    """True when ``module.<name>`` is parametrized (weight or spectral norm)."""
    return parametrize.is_parametrized(module, name)


def remove_weight_norm(module: nn.Module) -> int:
    """Fold every weight/spectral-norm parametrization under ``module`` into plain weights.

    Returns the number of layers changed (0 when there were none, so calling it twice is safe).
    Outputs are unchanged; inference gets faster because the norm is not recomputed per call.
    """
    count = 0
    for sub in module.modules():
        if parametrize.is_parametrized(sub):
            for name in list(sub.parametrizations.keys()):  # type: ignore[operator,union-attr,unused-ignore]
                parametrize.remove_parametrizations(sub, name, leave_parametrized=True)
                count += 1
    return count


def count_parameters(module: nn.Module, trainable_only: bool = True) -> int:
    """Number of parameters (weight-norm parametrizations counted as stored: g and v)."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad or not trainable_only)


def parameter_report(argv: list[str] | None = None) -> int:
    """``python -m speechtrain.models.<family> --config RECIPE [key=value ...]``: parameters per module.

    Builds the recipe's task on the CPU (no data needed) and prints one line per module and the total.
    """
    import argparse

    from speechtrain.config import load_config
    from speechtrain.registry import build_task

    p = argparse.ArgumentParser(description="Print the parameter count of each module of a recipe's model.")
    p.add_argument("--config", "-c", required=True, help="YAML recipe, e.g. recipes/vocoder_hifigan.yaml")
    p.add_argument("overrides", nargs="*", metavar="key=value")
    args = p.parse_args(argv)
    cfg = load_config(args.config, args.overrides)
    task = build_task(cfg.model, cfg.data)
    total = 0
    for name, module in task.modules().items():
        n = count_parameters(module)
        total += n
        print(f"{name:>14s}: {n:>12,d} parameters ({n / 1e6:.2f}M)")
    print(f"{'total':>14s}: {total:>12,d} parameters ({total / 1e6:.2f}M)")
    return 0


def attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None,
    causal: bool,
    dropout: float,
    use_sdpa: bool,
) -> torch.Tensor:
    """softmax(q k^T / sqrt(d)) v over (B, H, S, d); ``mask`` bool (True: may attend), broadcastable.
    ``use_sdpa``: torch's ``scaled_dot_product_attention``; else the explicit softmax path (the attention
    modules' ``use_sdpa`` switch, ``accel.sdpa``)."""
    if use_sdpa:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout, is_causal=causal)
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])  # (B, H, S, S_keys)
    if causal:
        mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril()
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores.float(), dim=-1).to(q.dtype)
    if dropout:
        weights = F.dropout(weights, dropout)
    return weights @ v  # (B, H, S, d)
