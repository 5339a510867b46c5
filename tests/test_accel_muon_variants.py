"""Muon variants: SingingVocoders' Muon_AdamW rule and update size beside torch's, pinned per layer shape."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from torch.nn.utils.parametrizations import weight_norm

from speechtrain.accel import CombinedOptimizer, SingingVocodersMuon, build_optimizer, muon_partition
from speechtrain.config import OptimConfig

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# (out, in) linears, (out, in, k) conv1d, (out, in, kh, kw) conv2d: the shapes of an NSF-HiFiGAN and its
# discriminators, shrunk; (1, 9) is the source's l_linear, (16, 1, 32) a noise_conv
SHAPES = [(64, 64), (256, 32), (32, 256), (32, 32, 7), (1, 9), (16, 1, 32), (8, 4, 5, 1)]


def _one_step(opt_cls: type[torch.optim.Optimizer], shape: tuple[int, ...], lr: float) -> torch.Tensor:
    torch.manual_seed(0)
    p = nn.Parameter(torch.randn(shape) * 0.02)
    before = p.detach().clone()
    opt = opt_cls([p], lr=lr, momentum=0.95, weight_decay=0.0)
    p.grad = torch.randn(shape)
    opt.step()
    return (p.detach() - before).reshape(shape[0], -1)  # (rows, cols)


@pytest.mark.parametrize("shape", SHAPES)
def test_singingvocoders_update_rms_is_lr_whatever_the_shape(shape: tuple[int, ...]) -> None:
    # lr x sqrt(max(rows, cols)) x an orthogonal-ish matrix (singular values 0.87-1.13, RMS 0.99-1.03):
    # the update's RMS per element is lr for every shape
    delta = _one_step(SingingVocodersMuon, shape, lr=2e-4)
    rms = float(delta.pow(2).mean().sqrt())
    assert rms / 2e-4 == pytest.approx(1.0, abs=0.06)


@pytest.mark.parametrize("shape", [s for s in SHAPES if len(s) > 2 or min(s) > 1])
def test_torch_variant_update_rms_follows_its_own_scale(shape: tuple[int, ...]) -> None:
    from speechtrain.accel import FlatMuon

    # torch's Muon: lr x sqrt(max(1, rows / cols)) x orthogonal-ish (RMS of singular values 0.86-0.95),
    # so the RMS per element is lr x sqrt(max(1, rows / cols)) x sqrt(min(rows, cols) / (rows x cols))
    delta = _one_step(FlatMuon, shape, lr=0.02)
    rows, cols = delta.shape
    expected = 0.02 * math.sqrt(max(1.0, rows / cols)) * math.sqrt(min(rows, cols) / (rows * cols))
    assert float(delta.pow(2).mean().sqrt()) / expected == pytest.approx(0.9, abs=0.08)


def test_the_two_variants_differ_by_the_documented_ratio() -> None:
    # a (128, 32 x 7) conv at the recipes' learning rates: torch Muon at 0.02 moves each weight by
    # 0.02 / sqrt(224) x 0.9 = 1.2e-3 (RMS), SingingVocoders' at 2e-4 by 2e-4: 6x smaller
    torch_rms = float(_one_step(_flat_muon(), (128, 32, 7), lr=0.02).pow(2).mean().sqrt())
    sv_rms = float(_one_step(SingingVocodersMuon, (128, 32, 7), lr=2e-4).pow(2).mean().sqrt())
    assert 5.0 < torch_rms / sv_rms < 7.0


def _flat_muon() -> type[torch.optim.Optimizer]:
    from speechtrain.accel import FlatMuon

    return FlatMuon


class Source(nn.Module):
    """The parameter kinds of an NSF generator: weight-normed convs, a plain conv, a 1-row linear, an embedding."""

    def __init__(self) -> None:
        super().__init__()
        self.conv_pre = weight_norm(nn.Conv1d(8, 16, 7, padding=3))
        self.noise_conv = nn.Conv1d(1, 16, 4, stride=2, padding=1)
        self.l_linear = nn.Linear(9, 1)
        self.embed = nn.Embedding(5, 8)
        self.head = nn.Linear(16, 4)


def test_singingvocoders_rule_and_the_optimizer_it_builds() -> None:
    model = Source()
    _, _, why = muon_partition([model], "singingvocoders")
    assert why["0.conv_pre.parametrizations.weight.original1"] == "muon"
    assert why["0.conv_pre.parametrizations.weight.original0"] == "adamw: weight-norm magnitude"
    assert why["0.l_linear.weight"] == "muon" and why["0.head.weight"] == "muon"  # no head/vector exceptions
    assert why["0.embed.weight"] == "adamw: embedding" and why["0.noise_conv.bias"].startswith("adamw")
    _, _, why_torch = muon_partition([model], "torch")
    assert why_torch["0.l_linear.weight"] == "adamw: a vector stored as a matrix"
    assert why_torch["0.head.weight"] == "adamw: output head"

    cfg = OptimConfig(
        name="muon", muon_variant="singingvocoders", lr=2e-4, muon_lr=2e-4, weight_decay=0.0, muon_weight_decay=0.01
    )
    opt, rec = build_optimizer([model], cfg, "cpu")
    assert isinstance(opt, CombinedOptimizer) and rec.info["variant"] == "singingvocoders"
    muon = [g for g in opt.param_groups if g["kind"] == "muon"]
    adamw = [g for g in opt.param_groups if g["kind"] == "adamw"]
    assert muon[0]["weight_decay"] == 0.01 and adamw[0]["weight_decay"] == 0.0
    assert isinstance(opt.parts[0], SingingVocodersMuon)
    x = torch.randn(2, 8, 12)
    loss = model.conv_pre(x).square().mean() + model.noise_conv(x[:, :1]).square().mean()
    loss = loss + model.l_linear(torch.randn(3, 9)).square().mean() + model.head(torch.randn(3, 16)).square().mean()
    loss.backward()
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    opt.step()
    changed = [k for k, v in model.state_dict().items() if not torch.equal(v, state[k])]
    assert "l_linear.weight" in changed and "conv_pre.parametrizations.weight.original1" in changed
