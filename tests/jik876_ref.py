"""jik876/hifi-gan's generator layout, written here from its published description (``models.py``: ``ResBlock1``
indexes ``dilation[0..2]`` and has three plain convolutions beside them, ``ResBlock2`` indexes ``dilation[0..1]``;
``conv_pre`` reads 80 mel bands; torch's original weight norm everywhere) -- our own code, so that the default
test suite checks an export against the shape their loader builds. ``their_jik876_module`` imports their own
``models.py`` when ``SPEECHTRAIN_JIK876`` names a checkout or a bare git directory of jik876/hifi-gan (dev and
bench checks; CI has none)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import types
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

ENV = "SPEECHTRAIN_JIK876"
SLOPE = 0.1


def _wn(conv: nn.Module) -> nn.Module:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # their files use torch's original (deprecated) weight norm
        return nn.utils.weight_norm(conv)


def _conv(ch: int, k: int, d: int) -> nn.Module:
    return _wn(nn.Conv1d(ch, ch, k, 1, dilation=d, padding=(k * d - d) // 2))


class RefResBlock1(nn.Module):
    def __init__(self, ch: int, k: int, dilation: list[int]) -> None:
        super().__init__()
        self.convs1 = nn.ModuleList([_conv(ch, k, dilation[0]), _conv(ch, k, dilation[1]), _conv(ch, k, dilation[2])])
        self.convs2 = nn.ModuleList([_conv(ch, k, 1), _conv(ch, k, 1), _conv(ch, k, 1)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for c1, c2 in zip(self.convs1, self.convs2):
            x = c2(F.leaky_relu(c1(F.leaky_relu(x, SLOPE)), SLOPE)) + x
        return x


class RefResBlock2(nn.Module):
    def __init__(self, ch: int, k: int, dilation: list[int]) -> None:
        super().__init__()
        self.convs = nn.ModuleList([_conv(ch, k, dilation[0]), _conv(ch, k, dilation[1])])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for c in self.convs:
            x = c(F.leaky_relu(x, SLOPE)) + x
        return x


class RefGenerator(nn.Module):
    """Their ``Generator(h)`` for a config.json dict ``h``."""

    def __init__(self, h: dict[str, Any]) -> None:
        super().__init__()
        self.num_kernels, self.num_upsamples = len(h["resblock_kernel_sizes"]), len(h["upsample_rates"])
        ch0 = h["upsample_initial_channel"]
        self.conv_pre = _wn(nn.Conv1d(80, ch0, 7, 1, padding=3))
        block = RefResBlock1 if h["resblock"] == "1" else RefResBlock2
        self.ups = nn.ModuleList(
            _wn(nn.ConvTranspose1d(ch0 // 2**i, ch0 // 2 ** (i + 1), k, u, padding=(k - u) // 2))
            for i, (u, k) in enumerate(zip(h["upsample_rates"], h["upsample_kernel_sizes"]))
        )
        self.resblocks = nn.ModuleList()
        for i in range(len(self.ups)):
            ch = ch0 // 2 ** (i + 1)
            for k, d in zip(h["resblock_kernel_sizes"], h["resblock_dilation_sizes"]):
                self.resblocks.append(block(ch, k, d))
        self.conv_post = _wn(nn.Conv1d(ch, 1, 7, 1, padding=3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv_pre(x)
        for i in range(self.num_upsamples):
            x = self.ups[i](F.leaky_relu(x, SLOPE))
            xs = sum(self.resblocks[i * self.num_kernels + j](x) for j in range(self.num_kernels))
            x = xs / self.num_kernels
        return torch.tanh(self.conv_post(F.leaky_relu(x)))


def their_jik876_module() -> ModuleType | None:
    """Their ``models.py`` (with its ``utils``) from ``$SPEECHTRAIN_JIK876``, or None when that is unset."""
    root = os.environ.get(ENV)
    if not root:
        return None
    folder = Path(tempfile.mkdtemp(prefix="jik876_"))
    for name in ("models.py", "utils.py", "env.py"):
        path = Path(root) / name
        try:
            text = (
                path.read_text()
                if path.is_file()
                else subprocess.run(
                    ["git", "--git-dir", root, "show", f"HEAD:{name}"], capture_output=True, check=True, text=True
                ).stdout
            )
        except (OSError, subprocess.CalledProcessError):
            if name == "env.py":
                continue
            return None
        (folder / name).write_text(text)
    sys.path.insert(0, str(folder))
    for stale in ("models", "utils", "env"):
        sys.modules.pop(stale, None)
    if "matplotlib" not in sys.modules:  # their utils imports matplotlib for plotting only
        stub = types.ModuleType("matplotlib")
        stub.use = lambda *a, **k: None  # type: ignore[attr-defined]
        sys.modules.setdefault("matplotlib", stub)
        sys.modules.setdefault("matplotlib.pylab", types.ModuleType("matplotlib.pylab"))
    try:
        import models  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(folder))
    return models
