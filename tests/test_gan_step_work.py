"""Work a GAN vocoder step does beyond SingingVocoders' own step, counted in aten elements (issue 36: the NSF peer
row at 0.93x). Counted per call with a TorchDispatchMode, so no timing is asserted:

- the numerics guard's restoring copy (``_foreach_copy_`` of the parameters and the optimizer state, then
  ``torch.where`` over them) in every optimizer step of a non-fused optimizer on the CPU;
- a fresh activation per discriminator layer (an out-of-place leaky ReLU after each convolution);
- the disc stage's real and fake as one batch of 2B on the CPU (page faults, not FLOPs: counted as batch sizes).

Each test also checks that the maths did not move: a skipped step still changes nothing, the gradients of the
discriminators are the same to the bit.
"""

from __future__ import annotations

import copy
from collections import Counter
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from speechtrain.models.hifigan.losses import discriminator_loss
from speechtrain.models.hifigan.model import (
    MultiPeriodDiscriminator,
    MultiResolutionSpectrogramDiscriminator,
    MultiScaleDiscriminator,
)
from speechtrain.train.numerics import SkippableStep

pytestmark = pytest.mark.usefixtures("one_torch_thread")


class ElementCounter(TorchDispatchMode):
    """Elements written per aten operator (outputs, and the destinations of ``_foreach_copy_``)."""

    def __init__(self) -> None:
        super().__init__()
        self.elements: Counter[str] = Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        name = f"{func.overloadpacket.__name__}.{func._overloadname}"
        if name == "_foreach_copy_.default":
            self.elements[name] += sum(t.numel() for t in args[0])
        outs = out if isinstance(out, (list, tuple)) else [out]
        self.elements[name] += sum(o.numel() for o in outs if isinstance(o, torch.Tensor))
        return out


def _adamw_model() -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.Linear(32, 4))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=False)  # the bench's "for_loop" kernel
    return model, opt


def _backward(model: nn.Module) -> None:
    model.zero_grad(set_to_none=True)
    model(torch.randn(8, 16)).square().mean().backward()


def _snapshot(model: nn.Module, opt: torch.optim.Optimizer) -> list[torch.Tensor]:
    state = [t for s in opt.state.values() for t in s.values() if isinstance(t, torch.Tensor)]
    return [t.detach().clone() for t in [*model.parameters(), *state]]


@pytest.mark.parametrize("on_host", [None, False])
def test_a_skipped_step_changes_nothing_decided_on_the_host_or_on_the_device(on_host: bool | None) -> None:
    model, opt = _adamw_model()
    step = SkippableStep(opt, on_host=on_host)
    _backward(model)
    step(torch.tensor(False), 4)  # the first update makes the optimizer state
    _backward(model)
    before = _snapshot(model, opt)
    step(torch.tensor(True), 4)
    assert all(torch.equal(a, b) for a, b in zip(before, _snapshot(model, opt)))
    step(torch.tensor(False), 4)
    assert not all(torch.equal(a, b) for a, b in zip(before, _snapshot(model, opt)))


def test_the_optimizer_step_on_the_cpu_copies_no_parameters_or_state() -> None:
    """NSF peer row: the restoring copy was 138M elements copied and 138M written by torch.where per step
    (the full-width discriminators' 46M parameters and AdamW's two moments), work the peer never does."""
    model, opt = _adamw_model()
    step = SkippableStep(opt)  # as the Trainer builds it
    _backward(model)
    step(torch.tensor(False), 4)
    _backward(model)
    with ElementCounter() as counter:
        step(torch.tensor(False), 4)
    restoring = {k: v for k, v in counter.elements.items() if k.startswith(("_foreach_copy_", "where"))}
    assert restoring == {}, f"the CPU step copied and restored parameters and state: {restoring}"


def _discriminators() -> list[nn.Module]:
    torch.manual_seed(0)
    return [
        MultiScaleDiscriminator(3, width=0.125),
        MultiPeriodDiscriminator([2, 3], width=0.125),
        MultiResolutionSpectrogramDiscriminator(((128, 32, 128),), width=0.5),
    ]


def _disc_step(discs: list[nn.Module], y: torch.Tensor, y_hat: torch.Tensor) -> list[torch.Tensor]:
    for d in discs:
        d.zero_grad(set_to_none=True)
    loss = sum(discriminator_loss(*d(y, y_hat)[:2]) for d in discs)
    assert isinstance(loss, torch.Tensor)
    loss.backward()
    return [p.grad.clone() for d in discs for p in d.parameters() if p.grad is not None]


def test_the_discriminators_activate_in_place_with_the_same_gradients(monkeypatch: pytest.MonkeyPatch) -> None:
    """NSF peer row: an out-of-place leaky ReLU after every discriminator convolution allocated (and kept for the
    backward) 48M elements a step that SingingVocoders' in-place activation does not."""
    y, y_hat = torch.randn(2, 1, 2048) * 0.1, torch.randn(2, 1, 2048) * 0.1
    discs = _discriminators()
    fresh = copy.deepcopy(discs)  # spectral norm's power iteration moves on at every training-mode call
    with ElementCounter() as counter:
        grads = _disc_step(discs, y, y_hat)
    assert counter.elements["leaky_relu_.default"] > 0
    assert counter.elements["leaky_relu.default"] == 0, "a discriminator layer allocates its activation"

    leaky_relu = F.leaky_relu

    def out_of_place(x: torch.Tensor, slope: float = 0.01, inplace: bool = False) -> torch.Tensor:
        return leaky_relu(x, slope, inplace=False)

    monkeypatch.setattr(F, "leaky_relu", out_of_place)
    reference = _disc_step(fresh, y, y_hat)
    assert len(grads) == len(reference) > 0
    assert all(torch.equal(a, b) for a, b in zip(grads, reference))


class ConvBatches(TorchDispatchMode):
    """The batch size of every forward convolution."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: Counter[int] = Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func is torch.ops.aten.convolution.default:
            self.batches[int(args[0].shape[0])] += 1
        return func(*args, **(kwargs or {}))


def test_the_disc_stage_on_the_cpu_runs_real_and_fake_one_after_the_other() -> None:
    """NSF peer row: real and fake as one 2B batch doubled every activation of the disc stage, which put the
    full-width discriminators' first layers above glibc's mmap ceiling (about 3x the minor page faults per
    discriminator step, docs/benchmarks.md); SingingVocoders runs them one after the other."""
    y, y_hat = torch.randn(2, 1, 2048) * 0.1, torch.randn(2, 1, 2048) * 0.1
    for d in _discriminators():
        with ConvBatches() as convs:
            real, fake, _, _ = d(y, y_hat)  # the disc stage: the fake arrives detached
        assert set(convs.batches) == {2}, f"{type(d).__name__}: convolutions over batches {dict(convs.batches)}"
        assert len(real) == len(fake) == len(d.discriminators)
