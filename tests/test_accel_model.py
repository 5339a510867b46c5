"""Model-level accelerations on the CPU: each record says what changed or why not, and the change is real."""

from __future__ import annotations

import copy
import json
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from speechtrain.accel import (
    apply_accelerations,
    apply_activation_checkpointing,
    apply_channels_last,
    apply_compile,
    apply_sdpa,
    compile_stats,
    find_repeated_blocks,
    recompile_count,
    sdpa_backends,
)
from speechtrain.config import AccelConfig, load_config


class Conv2dNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(1, 4, 3, padding=1)
        self.c2 = nn.Conv2d(4, 4, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, 1, n_mels, T_frames)
        return self.c2(torch.relu(self.c1(x)))


class Conv1dNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c = nn.Conv1d(8, 8, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, n_mels, T_frames)
        return self.c(x)


class Attention(nn.Module):
    """Follows the ``use_sdpa`` convention: fused SDPA or explicit softmax attention."""

    def __init__(self, dim: int = 8, heads: int = 2) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.use_sdpa = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, T, dim)
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        if self.use_sdpa:
            out = F.scaled_dot_product_attention(q, k, v)
        else:
            out = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d // self.heads), dim=-1) @ v
        return out.transpose(1, 2).reshape(b, t, d)


class Block(nn.Module):
    calls = 0

    def __init__(self, dim: int = 8) -> None:
        super().__init__()
        self.attn = Attention(dim)
        self.ff = nn.Sequential(nn.Linear(dim, 16), nn.GELU(), nn.Linear(16, dim))
        self.norm = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        Block.calls += 1
        x = x + self.attn(self.norm(x))
        return x + self.ff(x)


class Stack(nn.Module):
    def __init__(self, n: int = 3, dim: int = 8) -> None:
        super().__init__()
        self.inp = nn.Linear(4, dim)
        self.blocks = nn.ModuleList(Block(dim) for _ in range(n))
        self.out = nn.Linear(dim, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x)
        for b in self.blocks:
            h = b(h)
        return self.out(h)


# ---------------------------------------------------------------- channels-last


def test_channels_last_conv2d_model_is_converted_and_gives_same_output():
    torch.manual_seed(0)
    model = Conv2dNet()
    x = torch.randn(2, 1, 8, 12)
    ref = model(x)
    rec = apply_channels_last(model)
    assert rec.applied and rec.exact and rec.name == "channels_last"
    assert rec.info["conv2d_layers"] == 2 and rec.info["weights_channels_last"] == 2
    for p in model.parameters():
        if p.dim() == 4:
            assert p.is_contiguous(memory_format=torch.channels_last)
    assert not model.c2.weight.is_contiguous()  # really NHWC (with 1 input channel both layouts coincide)
    assert set(model.state_dict()) == {"c1.weight", "c1.bias", "c2.weight", "c2.bias"}
    torch.testing.assert_close(model(x), ref, rtol=1e-5, atol=1e-5)


def test_channels_last_not_applied_to_conv1d_model():
    model = Conv1dNet()
    rec = apply_channels_last(model)
    assert not rec.applied
    assert "Conv1d" in rec.detail and "no Conv2d" in rec.detail
    assert model.c.weight.is_contiguous()


# ---------------------------------------------------------------- SDPA


def test_sdpa_sets_flag_on_every_attention_module_and_keeps_outputs():
    torch.manual_seed(0)
    model = Stack(n=2).eval()
    x = torch.randn(2, 5, 4)
    with torch.no_grad():
        ref = model(x)
    rec = apply_sdpa(model, True, "cpu")
    assert rec.applied and rec.exact and rec.info["modules"] == 2
    assert all(b.attn.use_sdpa for b in model.blocks)
    assert "math" in rec.info["usable_backends"] and "flash" in rec.info["usable_backends"]
    with torch.no_grad():
        torch.testing.assert_close(model(x), ref, rtol=1e-5, atol=1e-5)
    off = apply_sdpa(model, False, "cpu")
    assert not off.applied and "disabled" in off.detail
    assert not any(b.attn.use_sdpa for b in model.blocks)


def test_sdpa_without_attention_modules_is_reported():
    rec = apply_sdpa(Conv1dNet(), True, "cpu")
    assert not rec.applied and "no attention module" in rec.detail and rec.info["modules"] == 0


def test_sdpa_backends_on_cpu_name_cuda_only_ones():
    b = sdpa_backends("cpu")
    assert set(b) == {"flash", "memory_efficient", "cudnn", "math"}
    assert b["math"]["usable"] and not b["cudnn"]["usable"] and "CUDA" in b["memory_efficient"]["why"]


# ---------------------------------------------------------------- activation checkpointing


def test_checkpointing_wraps_blocks_same_outputs_and_grads_and_recomputes():
    torch.manual_seed(0)
    plain = Stack(n=3)
    ckpt = copy.deepcopy(plain)
    keys = list(ckpt.state_dict())
    rec = apply_activation_checkpointing(ckpt, True)
    assert rec.applied and rec.exact and rec.info["blocks"] == 3
    assert rec.info["containers"] == {"blocks": "3 x Block"}
    assert list(ckpt.state_dict()) == keys

    x = torch.randn(2, 5, 4)
    Block.calls = 0
    plain(x).square().sum().backward()
    plain_calls = Block.calls
    Block.calls = 0
    ckpt(x).square().sum().backward()
    assert Block.calls == 2 * plain_calls  # each block's forward ran again in backward
    for (name, p), q in zip(plain.named_parameters(), ckpt.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-5, atol=1e-6, msg=name)

    # eval mode and no_grad run the plain forward (no recompute)
    ckpt.eval()
    Block.calls = 0
    with torch.no_grad():
        ckpt(x)
    assert Block.calls == 3


def test_checkpointed_blocks_frozen_for_a_forward_run_plain_and_give_the_same_input_gradient():
    """A GAN's generator stage freezes the discriminator for its forward and unfreezes it before the
    backward: a checkpointed block then recomputed with other tensors than it saved (torch's
    CheckpointError). Frozen blocks run unwrapped; the gradient reaching the input is unchanged."""
    torch.manual_seed(0)
    plain = Stack(n=3)
    ckpt = copy.deepcopy(plain)
    apply_activation_checkpointing(ckpt, True)
    grads = []
    for model in (plain, ckpt):
        x = torch.randn(2, 5, 4, generator=torch.Generator().manual_seed(1), requires_grad=True)
        for p in model.parameters():
            p.requires_grad_(False)
        y = model(x).square().sum()
        for p in model.parameters():
            p.requires_grad_(True)
        y.backward()
        grads.append(x.grad)
    torch.testing.assert_close(grads[1], grads[0])


def test_checkpointed_model_deepcopy_calls_its_own_blocks():
    model = Stack(n=2)
    apply_activation_checkpointing(model, True)
    twin = copy.deepcopy(model)
    with torch.no_grad():
        for p in twin.parameters():
            p.zero_()
    x = torch.randn(1, 3, 4)
    assert torch.count_nonzero(twin(x)) == 0
    assert torch.count_nonzero(model(x)) > 0


def test_checkpointing_reports_zero_blocks_and_can_be_removed():
    rec = apply_activation_checkpointing(Conv2dNet(), True)  # two convs, but not in a ModuleList
    assert not rec.applied and rec.info["blocks"] == 0 and "no repeated blocks" in rec.detail
    from torch.nn.utils.parametrizations import weight_norm

    convs = nn.ModuleList(weight_norm(nn.Conv1d(4, 4, 3)) for _ in range(3))  # single layers: nothing to save
    assert apply_activation_checkpointing(nn.ModuleDict({"ups": convs}), True).info["blocks"] == 0
    model = Stack(n=2)
    apply_activation_checkpointing(model, True)
    off = apply_activation_checkpointing(model, False)
    assert not off.applied and "unwrapped 2" in off.detail
    assert all("forward" not in vars(b) for b in model.blocks)


def test_find_repeated_blocks_skips_parameterless_single_layers_and_nested():
    def pair() -> nn.Sequential:
        return nn.Sequential(nn.Linear(4, 4), nn.ReLU())

    seq = nn.Sequential(pair(), nn.ReLU(), nn.ReLU(), pair(), nn.Linear(4, 4), nn.Linear(4, 4))
    found = find_repeated_blocks(nn.ModuleDict({"body": seq}))
    # the two composite pairs; not the parameterless ReLUs, not the lone Linears (nothing to save)
    assert [(name, len(blocks)) for name, blocks in found] == [("body", 2)]
    assert all(isinstance(b, nn.Sequential) for b in found[0][1])
    found = find_repeated_blocks(Stack(n=2))
    assert [name for name, _ in found] == ["blocks"]  # ff Sequential inside a block is covered by its block


# ---------------------------------------------------------------- apply_accelerations


def test_apply_accelerations_cpu_defaults_say_why():
    model = Stack(n=2)
    plan = apply_accelerations(load_config().accel, {"model": model}, "cpu")
    names = [r.name for r in plan.records]
    assert names == [
        "deterministic",
        "tf32",
        "cudnn_benchmark",
        "cpu_allocator",  # issue 12: the new process-wide acceleration
        "precision",
        "channels_last",
        "sdpa",
        "activation_checkpointing",
        "compile",
    ]
    assert plan.precision.name == "fp32" and plan.precision.amp_dtype is None
    assert "no GPU" in plan.resolved["precision"]["why"]
    assert "not applicable on cpu" in plan.record("tf32").detail
    assert plan.record("sdpa").applied  # auto -> on
    assert not plan.record("compile").applied
    assert not plan.record("activation_checkpointing").applied
    assert plan.compile_stats() is None
    text = plan.summary()
    assert "precision fp32" in text and "tf32" in text
    json.dumps(plan.records_dict())


def test_apply_accelerations_explicit_switches_and_several_modules():
    cfg = AccelConfig(activation_checkpointing=True, sdpa=False, channels_last=True, precision="bf16")
    mods = {"gen": Stack(n=2), "disc": Conv2dNet()}
    plan = apply_accelerations(cfg, mods, "cpu")
    ck = plan.record("activation_checkpointing")
    assert ck.applied and ck.info["modules"]["gen"]["blocks"] == 2 and ck.info["modules"]["disc"]["blocks"] == 0
    cl = plan.record("channels_last")
    assert cl.applied and cl.info["modules"]["disc"]["applied"] and not cl.info["modules"]["gen"]["applied"]
    assert not plan.record("sdpa").applied
    assert plan.precision.amp_dtype == torch.bfloat16 and not plan.record("precision").exact


# ---------------------------------------------------------------- compile (slow on the CPU)


@pytest.mark.slow
def test_compile_in_place_keeps_keys_and_outputs_and_counts_recompiles():
    torch.manual_seed(0)
    model = Conv1dNet()
    keys = list(model.state_dict())
    x1, x2 = torch.randn(1, 8, 6), torch.randn(1, 8, 9)
    ref1, ref2 = model(x1), model(x2)
    rec = apply_compile(model, True, "default", False)
    assert rec.applied and rec.info["mode"] == "default"
    assert list(model.state_dict()) == keys
    before = recompile_count()
    torch.testing.assert_close(model(x1), ref1, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(model(x2), ref2, rtol=1e-4, atol=1e-5)  # a new length: static shapes recompile
    assert recompile_count() > before
    assert compile_stats()["frames_compiled"] >= 2


def test_compile_disabled_record():
    rec = apply_compile(Conv1dNet(), False)
    assert not rec.applied and "disabled" in rec.detail
