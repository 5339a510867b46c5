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


class SpectralNorm(nn.Module):
    """Spectral-norm parametrization ``weight / sigma`` whose power iteration runs in the order of torch's original
    hook (``torch.nn.utils.spectral_norm``, which HiFi-GAN, VITS and SingingVocoders use): each training-mode call
    updates ``v = W^T u / |W^T u|``, then ``u = W v / |W v|``, and divides by ``sigma = u . W v``.

    ``torch.nn.utils.parametrizations.spectral_norm`` updates ``u`` first, then ``v``: from the same ``u``/``v`` it
    reads another sigma (HiFi-GAN's first scale discriminator's first conv at jik876's initial ``u``/``v``: 1.702
    against 1.780), which moved the discriminator's losses by up to 1e-2 at step 1 (bench/peers/same_start.py).
    Buffers and their names are torch's parametrization's (``parametrizations.weight.original``, ``...0._u``,
    ``...0._v``), and so is the start (random ``u``, ``v`` and 15 iterations), so a checkpoint saved with either
    loads into the other. ``u``/``v`` are updated in place (DataParallel replicas share them) and cloned before use
    (a backward through two forwards, real then fake, needs the values each forward saw)."""

    _u: torch.Tensor  # (out_channels,) left singular vector estimate
    _v: torch.Tensor  # (in_channels * kernel,) right singular vector estimate

    def __init__(self, weight: torch.Tensor, dim: int = 0, eps: float = 1e-12) -> None:
        super().__init__()
        self.dim, self.eps = dim, eps
        if weight.ndim > 1:
            h, w = self._matrix(weight).shape
            u = F.normalize(weight.new_empty(h).normal_(0, 1), dim=0, eps=eps)
            v = F.normalize(weight.new_empty(w).normal_(0, 1), dim=0, eps=eps)
            self.register_buffer("_u", u)
            self.register_buffer("_v", v)
            self._power_iteration(self._matrix(weight), 15)

    def _matrix(self, weight: torch.Tensor) -> torch.Tensor:
        if self.dim != 0:
            weight = weight.movedim(self.dim, 0)
        return weight.flatten(1)  # (out_channels, in_channels * kernel)

    @torch.no_grad()
    def _power_iteration(self, weight_mat: torch.Tensor, n: int) -> None:
        for _ in range(n):
            self._v = F.normalize(torch.mv(weight_mat.t(), self._u), dim=0, eps=self.eps, out=self._v)
            self._u = F.normalize(torch.mv(weight_mat, self._v), dim=0, eps=self.eps, out=self._u)

    def forward(self, weight: torch.Tensor) -> torch.Tensor:
        if weight.ndim == 1:
            return F.normalize(weight, dim=0, eps=self.eps)
        weight_mat = self._matrix(weight)
        if self.training:
            self._power_iteration(weight_mat, 1)
        u = self._u.clone(memory_format=torch.contiguous_format)
        v = self._v.clone(memory_format=torch.contiguous_format)
        sigma = torch.dot(u, torch.mv(weight_mat, v))
        return weight / sigma

    def right_inverse(self, value: torch.Tensor) -> torch.Tensor:
        return value  # the stored weight is the unnormalised one


def spectral_norm(module: nn.Module, name: str = "weight") -> nn.Module:
    """Spectral-normalise ``module.<name>`` (:class:`SpectralNorm`, the power iteration of torch's original hook,
    as a parametrization); returns the module. ``dim`` 1 for transposed convolutions, as torch's."""
    weight = getattr(module, name)
    transposed = isinstance(module, (nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d))
    parametrize.register_parametrization(module, name, SpectralNorm(weight, dim=1 if transposed else 0))
    return module


def has_power_iteration(module: nn.Module) -> bool:
    """True when calling ``module`` now moves a spectral norm's power iteration on (training mode, a
    :class:`SpectralNorm` inside): each call then sees another weight, so such a module must be called as often,
    and on the same inputs in the same order, as the reference calls it."""
    return module.training and any(isinstance(m, SpectralNorm) for m in module.modules())


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
