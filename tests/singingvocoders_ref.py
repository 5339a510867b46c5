"""SingingVocoders (openvpi) references for the NSF-HiFiGAN tests.

Two kinds:

- **Their own classes**, when a copy of their repository is at hand: ``SPEECHTRAIN_SINGINGVOCODERS`` names a
  checkout or a bare git directory (``git clone --bare https://github.com/openvpi/SingingVocoders``);
  :func:`their_module` imports ``models/nsf_HiFigan/models.py`` or ``modules/fast_D/discriminator.py`` from it
  (both need only numpy and torch). Tests that need them skip without it; CI has no copy (their code is
  CC BY-NC-SA and is not vendored here).
- **Their layout, written here**: modules whose state dicts have their names and shapes (random weights), and
  functional forwards that read such a state dict, written from their description. These always run.
"""

from __future__ import annotations

import importlib.util
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType

import torch
import torch.nn.functional as F
from torch import nn

ENV = "SPEECHTRAIN_SINGINGVOCODERS"


def their_module(relpath: str) -> ModuleType | None:
    """Their ``relpath`` (e.g. ``modules/fast_D/discriminator.py``) imported from ``$SPEECHTRAIN_SINGINGVOCODERS``,
    or None when that is unset or lacks the file."""
    root = os.environ.get(ENV)
    if not root:
        return None
    path = Path(root) / relpath
    if not path.is_file():  # a bare git directory: read the file at HEAD
        try:
            text = subprocess.run(
                ["git", "--git-dir", root, "show", f"HEAD:{relpath}"], capture_output=True, check=True, text=True
            ).stdout
        except (OSError, subprocess.CalledProcessError):
            return None
        path = Path(tempfile.mkdtemp(prefix="singingvocoders_")) / Path(relpath).name
        path.write_text(text, encoding="utf-8")
    name = "singingvocoders_" + relpath.replace("/", "_").removesuffix(".py")
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


# --- their state-dict layout, random weights ---------------------------------------------------------------
def _seq(*layers: nn.Module | None) -> nn.Sequential:
    """nn.Sequential whose parameter-free slots (transposes, GLUs) are Identity: their ``net.J`` indices."""
    return nn.Sequential(*(layer if layer is not None else nn.Identity() for layer in layers))


def fast_mpd_layout(periods: list[int], init_channel: int = 8, strides=(4, 4, 4), kernel_size: int = 11) -> nn.Module:  # noqa: ANN001
    """FastMPD's tensors: discriminators.N.{pre, residual_layers.K.net.{1,3,5,7}, post}."""
    mpd = nn.Module()
    mpd.discriminators = nn.ModuleList()
    for _ in periods:
        d = nn.Module()
        d.pre = nn.Linear(strides[0], init_channel * strides[0])
        d.residual_layers = nn.ModuleList()
        for i in range(len(strides)):
            dim = init_channel * math.prod(strides[: i + 1])
            block = nn.Module()
            conv = nn.Conv1d(dim, dim, kernel_size, padding=kernel_size // 2, groups=dim if i > 0 else 1)
            lin = nn.Linear
            block.net = _seq(None, conv, None, lin(dim, 2 * dim), None, lin(dim, 2 * dim), None, lin(dim, dim))
            d.residual_layers.append(block)
        d.post = nn.Linear(init_channel * math.prod(strides), 1)
        mpd.discriminators.append(d)
    return mpd


def fast_mrd_layout(
    resolutions: list[tuple[int, int, int]],
    init_channel: int = 8,
    strides=(4, 2, 2),  # noqa: ANN001
) -> nn.Module:
    """FastMRD's tensors: discriminators.N.{window, freq_coords, pre, freq, layers.K.net.{1,4}, post}."""
    mrd = nn.Module()
    mrd.discriminators = nn.ModuleList()
    for n_fft, _hop, win in resolutions:
        d = nn.Module()
        d.register_buffer("window", torch.hann_window(win))
        d.register_buffer("freq_coords", torch.linspace(-1, 1, n_fft // 2 + 1).view(-1, 1, 1))
        d.pre = nn.Linear(strides[0], init_channel * strides[0])
        d.freq = nn.Linear(1, init_channel * strides[0])
        d.layers = nn.ModuleList()
        for i in range(len(strides)):
            dim = init_channel * math.prod(strides[: i + 1])
            block = nn.Module()
            block.net = _seq(None, nn.Conv2d(dim, 2 * dim, 3, padding=1), None, None, nn.Linear(dim, dim))
            d.layers.append(block)
        d.post = nn.Linear(init_channel * math.prod(strides), 1)
        mrd.discriminators.append(d)
    return mrd


def jitter(module: nn.Module, scale: float = 0.05, seed: int = 0) -> nn.Module:
    """Every parameter moved by seeded noise (fresh initialisations are too regular to catch a swapped tensor)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(scale * torch.randn(p.shape, generator=g))
    return module


# --- their forward, read from a state dict in their layout ---------------------------------------------------
def _glu(x: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, dim=-1)
    return (a / (1 + a.abs())) * (b / (1 + b.abs()))


def _rms(x: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + torch.finfo(x.dtype).eps)


def ref_fast_pd(sd: dict[str, torch.Tensor], x: torch.Tensor, period: int, strides, kernel: int):  # noqa: ANN001, ANN201
    """One FastPD (``sd``: its tensors, their names) on ``x`` (B, 1, T): (logits (B, N), fmaps)."""
    b, _, t = x.shape
    hop = period * math.prod(strides)
    h = x[..., : t // hop * hop].reshape(b, -1, period).permute(0, 2, 1).reshape(b * period, -1, strides[0])
    h = F.gelu(F.linear(h, sd["pre.weight"], sd["pre.bias"]))
    fmaps = []
    for i in range(len(strides)):
        if i > 0:
            h = h.reshape(b * period, -1, h.shape[-1] * strides[i])
        n = _rms(h)
        if i > 0:
            fmaps.append(n.reshape(b, -1))
        p = f"residual_layers.{i}.net."
        c = n.shape[-1]
        y = F.conv1d(
            n.permute(0, 2, 1), sd[p + "1.weight"], sd[p + "1.bias"], padding=kernel // 2, groups=c if i else 1
        )
        y = _glu(F.linear(y.permute(0, 2, 1), sd[p + "3.weight"], sd[p + "3.bias"]))
        y = _glu(F.linear(y, sd[p + "5.weight"], sd[p + "5.bias"]))
        h = h + F.linear(y, sd[p + "7.weight"], sd[p + "7.bias"])
    return F.linear(_rms(h), sd["post.weight"], sd["post.bias"]).reshape(b, -1), fmaps


def ref_fast_specd(sd: dict[str, torch.Tensor], x: torch.Tensor, n_fft: int, hop: int, win: int, strides):  # noqa: ANN001, ANN201
    """One FastSpecD (``sd``: its tensors, their names) on ``x`` (B, 1, T): (logits (B, N), fmaps)."""
    spec = torch.stft(x[:, 0], n_fft, hop, win, torch.hann_window(win), center=True, return_complex=True)
    mag = torch.log10(torch.clamp(spec.abs(), min=1e-5))  # (B, F, T)
    b, f, t = mag.shape
    e = math.prod(strides)
    h = mag[:, :, : t // e * e].reshape(b, f, -1, strides[0])
    coords = torch.linspace(-1, 1, f).view(-1, 1, 1)
    h = F.linear(h, sd["pre.weight"], sd["pre.bias"]) + F.linear(coords, sd["freq.weight"], sd["freq.bias"])
    fmaps = []
    for i in range(len(strides)):
        if i > 0:
            h = h.reshape(b, f, -1, h.shape[-1] * strides[i])
        n = _rms(h)
        if i > 0:
            fmaps.append(n)
        p = f"layers.{i}.net."
        y = F.conv2d(n.permute(0, 3, 1, 2), sd[p + "1.weight"], sd[p + "1.bias"], padding=1).permute(0, 2, 3, 1)
        h = h + F.linear(_glu(y), sd[p + "4.weight"], sd[p + "4.bias"])
    return F.linear(_rms(h), sd["post.weight"], sd["post.bias"]).reshape(b, -1), fmaps


def sub(sd: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    """The tensors of ``sd`` under ``prefix``, the prefix removed."""
    return {k[len(prefix) :]: v for k, v in sd.items() if k.startswith(prefix)}
