"""Optimizers: kernel selection, and Muon + AdamW behaving as one torch optimizer."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torch.nn.utils.parametrizations import weight_norm

from speechtrain.accel import CombinedOptimizer, FlatMuon, build_optimizer, muon_partition
from speechtrain.config import ConfigError, OptimConfig


class TinyTTS(nn.Module):
    """Embedding, conv stack with weight norm, attention-like linears, norm, output head."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 8)
        self.conv = weight_norm(nn.Conv1d(8, 8, 3, padding=1))
        self.conv2 = nn.Conv1d(8, 8, 3, padding=1)
        self.proj = nn.Linear(8, 8)
        self.norm = nn.LayerNorm(8)
        self.mel_head = nn.Linear(8, 4)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:  # (B, L) -> (B, L, n_mels)
        h = self.embed(tokens).transpose(1, 2)  # (B, C, L)
        h = torch.relu(self.conv2(torch.relu(self.conv(h)))).transpose(1, 2)
        return self.mel_head(self.norm(self.proj(h)))


def _loss(model: nn.Module, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, 10, (2, 7), generator=g)
    target = torch.randn(2, 7, 4, generator=g)
    return (model(tokens) - target).square().mean()


def _train(model: nn.Module, opt: torch.optim.Optimizer, seeds: range) -> None:
    for s in seeds:
        opt.zero_grad(set_to_none=True)
        _loss(model, s).backward()
        opt.step()


def test_adamw_auto_is_foreach_on_cpu_and_explicit_kernels():
    model = TinyTTS()
    opt, rec = build_optimizer([model], OptimConfig(), "cpu")
    assert isinstance(opt, torch.optim.AdamW) and rec.info["kernel"] == "foreach" and rec.applied
    assert all(g["foreach"] for g in opt.param_groups) and "auto: cpu" in rec.detail
    opt, rec = build_optimizer([model], OptimConfig(implementation="for_loop"), "cpu")
    assert opt.param_groups[0]["foreach"] is False and not rec.applied
    opt, rec = build_optimizer([model], OptimConfig(implementation="fused", name="adam"), "cpu")
    assert isinstance(opt, torch.optim.Adam) and opt.param_groups[0]["fused"] and rec.info["kernel"] == "fused"
    opt, rec = build_optimizer([model], OptimConfig(name="sgd", lr=0.1, betas=(0.5, 0.9)), "cpu")
    assert isinstance(opt, torch.optim.SGD) and opt.param_groups[0]["momentum"] == 0.5


def test_lr_multiplier_and_shared_parameters_counted_once():
    a = TinyTTS()
    b = nn.Sequential(a.proj)  # the same Linear in two modules
    opt, rec = build_optimizer([a, b], OptimConfig(lr=1e-3), "cpu", lr_multiplier=2.0)
    params = [p for g in opt.param_groups for p in g["params"]]
    assert len(params) == len({id(p) for p in params}) == len(list(a.parameters()))
    assert opt.param_groups[0]["lr"] == pytest.approx(2e-3) and rec.info["tensors"] == len(params)


def test_muon_partition_rule_covers_every_parameter_once():
    model = TinyTTS()
    frozen = nn.Linear(3, 3).requires_grad_(False)
    muon, adamw, why = muon_partition([model, frozen])
    trainable = {id(p) for p in model.parameters()}
    assert {id(p) for p in muon}.isdisjoint({id(p) for p in adamw})
    assert {id(p) for p in muon} | {id(p) for p in adamw} == trainable
    assert why["0.embed.weight"] == "adamw: embedding"
    assert why["0.mel_head.weight"] == "adamw: output head"
    assert why["0.proj.weight"] == "muon" and why["0.conv2.weight"] == "muon"
    assert why["0.conv.parametrizations.weight.original0"] == "adamw: weight-norm magnitude"
    assert why["0.conv.parametrizations.weight.original1"] == "muon"
    assert why["0.norm.weight"].startswith("adamw: 1-D")


def test_muon_is_one_optimizer_with_tagged_shared_groups():
    model = TinyTTS()
    opt, rec = build_optimizer([model], OptimConfig(name="muon", lr=1e-3, muon_lr=0.02), "cpu")
    assert isinstance(opt, torch.optim.Optimizer) and isinstance(opt, CombinedOptimizer)
    kinds = [g["kind"] for g in opt.param_groups]
    assert set(kinds) == {"muon", "adamw"}
    inner = [g for part in opt.parts for g in part.param_groups]
    assert all(a is b for a, b in zip(opt.param_groups, inner)) and len(inner) == len(opt.param_groups)
    assert rec.info["muon_tensors"] == 3 and rec.info["torch_muon"]  # proj (2-D), conv2, weight-norm direction
    before = [p.detach().clone() for p in model.parameters()]
    _train(model, opt, range(2))
    assert all(not torch.equal(a, p) for a, p in zip(before, model.parameters()))
    opt.zero_grad(set_to_none=True)
    assert all(p.grad is None for p in model.parameters())


def test_scheduler_changes_lr_of_both_parts():
    model = TinyTTS()
    opt, _ = build_optimizer([model], OptimConfig(name="muon", lr=1e-3, muon_lr=0.02), "cpu")
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 0.5**step)
    _train(model, opt, range(1))
    sched.step()
    for part in opt.parts:
        for g in part.param_groups:
            assert g["lr"] == pytest.approx(g["initial_lr"] * 0.5)
    lrs = {g["kind"]: g["lr"] for g in opt.param_groups}
    assert lrs == {"muon": pytest.approx(0.01), "adamw": pytest.approx(5e-4)}
    sched2 = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.1)
    sched2.step()
    assert {g["kind"]: g["lr"] for g in opt.param_groups}["muon"] == pytest.approx(0.001)


def test_state_dict_round_trip_resumes_identically():
    torch.manual_seed(0)
    cfg = OptimConfig(name="muon", lr=1e-3, muon_lr=0.02)
    model = TinyTTS()
    opt, _ = build_optimizer([model], cfg, "cpu")
    sched = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.9)
    _train(model, opt, range(2))
    sched.step()
    saved = copy.deepcopy({"model": model.state_dict(), "opt": opt.state_dict(), "sched": sched.state_dict()})
    _train(model, opt, range(2, 4))

    other = TinyTTS()
    other.load_state_dict(saved["model"])
    opt2, _ = build_optimizer([other], cfg, "cpu")
    sched2 = torch.optim.lr_scheduler.ExponentialLR(opt2, gamma=0.9)
    opt2.load_state_dict(saved["opt"])
    sched2.load_state_dict(saved["sched"])
    assert all(a is b for a, b in zip(opt2.param_groups, [g for p in opt2.parts for g in p.param_groups]))
    assert all(p.state is opt2.state for p in opt2.parts)
    _train(other, opt2, range(2, 4))
    for (name, a), b in zip(model.named_parameters(), other.parameters()):
        torch.testing.assert_close(b, a, rtol=0, atol=0, msg=name)


def test_grad_scaler_unscale_clip_step_on_cpu():
    model = TinyTTS()
    opt, _ = build_optimizer([model], OptimConfig(name="muon"), "cpu")
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    opt.zero_grad(set_to_none=True)
    scaler.scale(_loss(model, 0)).backward()
    scaled = model.proj.weight.grad.clone()
    scaler.unscale_(opt)
    torch.testing.assert_close(model.proj.weight.grad * 1024.0, scaled)
    params = [p for g in opt.param_groups for p in g["params"]]
    torch.nn.utils.clip_grad_norm_(params, 1e-3)
    before = model.proj.weight.detach().clone()
    scaler.step(opt)
    scaler.update()
    assert not torch.equal(before, model.proj.weight)

    # a non-finite gradient skips the step of both parts and lowers the scale
    opt.zero_grad(set_to_none=True)
    scaler.scale(_loss(model, 1)).backward()
    model.embed.weight.grad[0, 0] = float("inf")
    snapshot = [p.detach().clone() for p in model.parameters()]
    scaler.step(opt)
    scaler.update()
    assert all(torch.equal(a, p) for a, p in zip(snapshot, model.parameters()))
    assert scaler.get_scale() < 1024.0


def test_flat_muon_matches_torch_muon_on_matrices():
    torch.manual_seed(0)
    w1 = nn.Parameter(torch.randn(6, 4))
    w2 = nn.Parameter(w1.detach().clone())
    ours = FlatMuon([w1], lr=0.02, momentum=0.95, weight_decay=0.01)
    ref = torch.optim.Muon([w2], lr=0.02, momentum=0.95, weight_decay=0.01)
    for _ in range(3):
        g = torch.randn(6, 4)
        w1.grad, w2.grad = g.clone(), g.clone()
        ours.step()
        ref.step()
    torch.testing.assert_close(w1, w2, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape", [(4, 3, 5), (16, 1, 3), (6, 2, 3, 3)])
def test_flat_muon_update_of_conv_weight_is_orthogonal_as_matrix(shape):
    w = nn.Parameter(torch.zeros(shape))  # (out, in, k...) -> an out x (in * k) matrix, wide or tall
    opt = FlatMuon([w], lr=1.0, momentum=0.0, nesterov=False)
    w.grad = torch.randn(shape)
    opt.step()
    m = -w.detach().reshape(shape[0], -1)
    sv = torch.linalg.svdvals(m)
    scale = max(1.0, m.shape[0] / m.shape[1]) ** 0.5  # Muon's lr scale for tall matrices
    assert sv.min() > 0.5 * scale and sv.max() < 1.5 * scale  # Newton-Schulz gives singular values near 1


def test_tied_output_layer_goes_to_adamw_whichever_comes_first():
    class Tied(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.out = nn.Linear(8, 10, bias=False)  # registered before the embedding
            self.embed = nn.Embedding(10, 8)
            self.out.weight = self.embed.weight
            self.mid = nn.Linear(8, 8)

    muon, adamw, why = muon_partition([Tied()])
    assert why["0.out.weight"] == "adamw: embedding" and len(muon) == 1


def test_explicit_fused_on_bad_device_is_a_config_error(monkeypatch):
    def boom(*a, **k):
        raise RuntimeError("fused=True requires all the params to be floating point Tensors of supported devices")

    monkeypatch.setattr(torch.optim, "AdamW", boom)
    with pytest.raises(ConfigError, match="optim.implementation"):
        build_optimizer([TinyTTS()], OptimConfig(implementation="fused"), "cpu")


@pytest.mark.gpu
def test_fused_adamw_on_cuda():
    model = TinyTTS().cuda()
    opt, rec = build_optimizer([model], OptimConfig(), "cuda")
    assert rec.info["kernel"] == "fused" and opt.param_groups[0]["fused"]
    before = model.proj.weight.detach().clone()
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    opt.step()
    assert not torch.equal(before, model.proj.weight)
