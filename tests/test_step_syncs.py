"""No host sync in a steady-state training step, for every family's tiny recipe (issue 36).

A host sync (``.item()``, ``bool(tensor)``, ``float(tensor)``, ``nonzero``: whatever makes the host wait for
the device's answer) in the step stops the CPU from queueing the next step while the GPU drains its queue.
On the CPU there is no queue to drain, but the same calls reach the same aten operators, so a
:class:`~torch.utils._python_dispatch.TorchDispatchMode` that counts them finds every sync a GPU run would
make. What torch.optim does inside ``step()`` on its own CPU step counters is not a device sync (and not ours)
and is left out, as are the warm-up step (the optimizer state is made there) and the log-interval steps
(where the host reads the interval's sums on purpose).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from tests.doors import RECIPES

pytestmark = pytest.mark.usefixtures("one_torch_thread")

#: aten operators that read a device value on the host (or size an output by the data: nonzero & co.)
SYNC_OPS = {
    "aten::_local_scalar_dense",  # .item(), bool(t), float(t), int(t), t.tolist() of a scalar
    "aten::is_nonzero",
    "aten::nonzero",
    "aten::masked_select",
    "aten::unique_dim",
    "aten::_unique2",
    "aten::equal",
}


#: host reads the CPU test sees but a GPU run does not wait for: each a value of a tensor made on the host, by the
#: function named (the caller's file and function as :func:`_caller` gives them), with the reason
HOST_ONLY = {
    "models/xtts/task.py:_conditioning_clips": "XTTS draws each conditioning clip's length and start from torch's CPU "
    "generator (torch.randint on the host, as Coqui does): a host tensor, no device value is read",
    "train/numerics.py:_host_step": "on the CPU the optimizer step is decided on the host: the skip flag is a host "
    "tensor already computed (a CUDA one takes the device path, which restores a skipped step with torch.where)",
    "models/cnn_lstm/model.py:forward": "the CNN-LSTM classifier's pack_padded_sequence reads its lengths, a "
    "host tensor built from the batch's host lengths (torch requires them on the CPU): no device value is read",
}


class SyncCounter(TorchDispatchMode):
    """Counts the aten calls of :data:`SYNC_OPS` outside torch.optim (their Python callers are kept)."""

    def __init__(self) -> None:
        super().__init__()
        self.counting = False
        self.syncs: list[str] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = func._schema.name
        if self.counting and name in SYNC_OPS and not _inside_torch_optim():
            path, line, function = _caller()
            if f"{path}:{function}" not in HOST_ONLY:
                self.syncs.append(f"{name} at {path}:{line} ({function})")
        return func(*args, **(kwargs or {}))


def _frames() -> Iterator[Any]:
    frame = sys._getframe(2)
    while frame is not None:
        yield frame
        frame = frame.f_back


def _inside_torch_optim() -> bool:
    return any("/torch/optim/" in f.f_code.co_filename for f in _frames())


def _caller() -> tuple[str, int, str]:
    """The innermost frame of speechtrain that led to the call: (path under speechtrain/, line, function)."""
    for f in _frames():
        path = Path(f.f_code.co_filename).as_posix()
        if "/speechtrain/" in path and "_python_dispatch" not in path:
            return path.rsplit("/speechtrain/", 1)[1], f.f_lineno, f.f_code.co_name
    return "?", 0, "?"


@contextmanager
def counting_steady_steps(counter: SyncCounter, first: int, last: int) -> Iterator[None]:
    """Count the syncs of the Trainer's steps ``first`` .. ``last`` (1-based): ``train_step`` and the interval's
    accumulation of its outputs (what the loop does per step besides fetching the next batch)."""
    from speechtrain.train import metrics, trainer

    real_step, real_add = trainer.Trainer.train_step, metrics.Interval.add
    current = {"step": 0}

    def train_step(self: Any, micro: Any) -> Any:
        current["step"] = self.step + 1
        counter.counting = first <= current["step"] <= last
        try:
            return real_step(self, micro)
        finally:
            counter.counting = False

    def add(self: Any, *args: Any, **kw: Any) -> Any:
        counter.counting = first <= current["step"] <= last
        try:
            return real_add(self, *args, **kw)
        finally:
            counter.counting = False

    trainer.Trainer.train_step = train_step  # type: ignore[method-assign]
    metrics.Interval.add = add  # type: ignore[method-assign]
    try:
        with counter:
            yield
    finally:
        trainer.Trainer.train_step = real_step  # type: ignore[method-assign]
        metrics.Interval.add = real_add  # type: ignore[method-assign]


FAMILIES = {
    "gpt_tts": ("gpt_tts_tiny.yaml", "demo", ()),
    "xtts": ("xtts_finetune_tiny.yaml", "demo", ("model.language=en",)),
    "vits": ("vits_tiny.yaml", "demo", ()),
    "hifigan": ("vocoder_hifigan_tiny.yaml", "demo", ()),
    "nsf_hifigan": ("vocoder_nsf_hifigan_tiny.yaml", "singing", ()),
    "cnn_lstm": ("classifier_cnn_lstm_tiny.yaml", "classes", ()),
}
STEPS = 5  # step 1: warm-up; 2-4: steady state; 5: the last step, logged


def _overrides(family: str, corpus: list[str], tmp_path: Path) -> list[str]:
    extra = list(FAMILIES[family][2])
    if family == "xtts":
        extra.append(f"model.checkpoint_dir={tmp_path / 'xtts_base'}")
    return [
        *corpus,
        *extra,
        "train.device=cpu",
        "train.progress=false",
        "train.tensorboard=false",
        f"train.max_steps={STEPS}",
        "train.log_every=1000",
        "train.eval_every=1000",
        "train.save_every=1000",
        "train.eval_audio_samples=0",
        "data.num_workers=0",
        "data.persistent_workers=false",
        f"train.output_dir={tmp_path / 'run'}",
    ]


@pytest.mark.slow
@pytest.mark.parametrize("family", list(FAMILIES))
def test_a_steady_state_step_issues_no_host_sync(
    family: str, demo_corpus: Path, demo_data: list[str], singing_data: list[str], tmp_path: Path
) -> None:
    from speechtrain.config import load_config
    from speechtrain.recipes.common import build_task
    from speechtrain.recipes.train import train_from_config

    recipe, corpus_kind, _ = FAMILIES[family]
    corpus = {
        "demo": demo_data,
        "singing": singing_data,
        "classes": [f"data.manifest={demo_corpus / 'classes'}", f"data.cache_dir={tmp_path / 'cache'}"],
    }[corpus_kind]
    cfg = load_config(RECIPES / recipe, _overrides(family, corpus, tmp_path))
    if family == "xtts":
        build_task(cfg)  # writes the random tiny base checkpoint the recipe fine-tunes
        cfg = load_config(RECIPES / recipe, _overrides(family, corpus, tmp_path))
    counter = SyncCounter()
    with counting_steady_steps(counter, 2, STEPS - 1):
        _, summary = train_from_config(cfg)
    assert summary["steps"] == STEPS
    assert counter.syncs == [], f"{family}: host syncs in steps 2-{STEPS - 1}: {counter.syncs}"


def test_the_counter_sees_item_and_bool_of_a_tensor() -> None:
    """The counter itself: ``.item()`` and ``bool()`` of a tensor are counted, torch.optim's own calls are not."""
    counter = SyncCounter()
    p = torch.nn.Parameter(torch.ones(3))
    opt = torch.optim.Adam([p], foreach=False)  # its CPU step counter is read with .item() inside step()
    p.grad = torch.ones(3)
    with counter:
        counter.counting = True
        t = torch.ones(())
        t.item()
        bool(t > 0)
        opt.step()
    assert len(counter.syncs) == 2, counter.syncs


def _optimizer(kind: str, p: torch.nn.Parameter) -> torch.optim.Optimizer:
    return {
        "adamw_fused": lambda: torch.optim.AdamW([p], lr=0.1, fused=True),
        "adamw_foreach": lambda: torch.optim.AdamW([p], lr=0.1, foreach=True),
        "adam_for_loop": lambda: torch.optim.Adam([p], lr=0.1, foreach=False),
        "sgd_momentum": lambda: torch.optim.SGD([p], lr=0.1, momentum=0.9),
    }[kind]()


def _state(opt: torch.optim.Optimizer, p: torch.nn.Parameter) -> dict[str, torch.Tensor]:
    return {"param": p.detach().clone(), **{k: v.clone() for k, v in opt.state[p].items()}}


@pytest.mark.parametrize("kind", ["adamw_fused", "adamw_foreach", "adam_for_loop", "sgd_momentum"])
def test_a_skipped_step_changes_nothing_and_a_taken_one_is_the_plain_step(kind: str) -> None:
    """The optimizer step skipped on the device (found-inf for fused kernels, a restoring copy for the others)
    leaves the parameters and the optimizer state (step counters too) as they were, without a host sync; an
    unskipped step is the optimizer's own, bit for bit."""
    from speechtrain.train.numerics import SkippableStep

    torch.manual_seed(0)
    p, ref = torch.nn.Parameter(torch.randn(5)), torch.nn.Parameter(torch.randn(5))
    with torch.no_grad():
        ref.copy_(p)
    opt, ref_opt = _optimizer(kind, p), _optimizer(kind, ref)
    step = SkippableStep(opt)
    counter = SyncCounter()
    for i, grad in enumerate([torch.randn(5), torch.full((5,), float("nan")), torch.randn(5), torch.randn(5)]):
        p.grad, ref.grad = grad.clone(), grad.clone()
        skip = ~torch.isfinite(grad).all()
        before = _state(opt, p) if opt.state else None
        with counter:
            counter.counting = i > 0  # the first update makes the state: decided on the host
            step(skip, 1)
        if i == 1:
            assert before is not None
            after = _state(opt, p)
            assert before.keys() == after.keys()
            for k in before:
                assert torch.equal(before[k], after[k]), (kind, k)
        else:
            ref_opt.step()
            assert torch.equal(p.detach(), ref.detach()), kind
    assert counter.syncs == []


@pytest.mark.parametrize(
    "optim", [["optim.implementation=fused"], ["optim.implementation=foreach"], ["optim.name=sgd"], ["optim.name=muon"]]
)
def test_the_trainer_skips_a_nonfinite_step_on_the_device_with_every_optimizer_kernel(optim: list[str]) -> None:
    """The Trainer's numerics guard with the fused kernel (found-inf consumed by the kernel) and the others (the
    restoring copy): the non-finite steps leave the weights as they were and are counted once read."""
    from speechtrain.recipes import build_task
    from tests.test_train_engine import NaNAfter, assert_params_close, cfg_for, make_batch, make_trainer, params

    cfg = cfg_for("train.nan_fallback_after=5", "train.log_every=100", *optim)
    torch.manual_seed(0)
    tr = make_trainer(cfg, NaNAfter(build_task(cfg), start=3, stop=5))
    for i in range(6):
        before = params(tr)
        tr.train_step([make_batch(i, [10, 8])])
        if i in (2, 3):
            assert_params_close(before, params(tr), atol=0)
        else:
            assert any(not torch.equal(a, b) for a, b in zip(before.values(), params(tr).values()))
    assert tr.nonfinite_steps == 2


def test_ranks_agree_on_a_stop_every_few_steps_not_every_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under a process group the stop agreement (signals, max_minutes) is an all-reduce read on the host: it is
    made every STOP_AGREE_EVERY steps (or log interval), not in every step (it was, before issue 36). The
    collectives are faked: the Trainer believes it has 2 ranks."""
    import sys as _sys

    from speechtrain.recipes import build_task
    from speechtrain.train import trainer as trainer_module
    from tests.test_train_engine import ListLoader, cfg_for, make_batch, make_trainer

    cfg = cfg_for("train.max_steps=30", "train.log_every=100", "train.eval_every=1000", "train.save_every=1000")
    tr = make_trainer(cfg, build_task(cfg), ListLoader([make_batch(i, [10, 8]) for i in range(3)]))
    agreed_at: list[int] = []

    def any_rank(flag: bool, device: Any, world_size: int) -> bool:
        if _sys._getframe(1).f_code.co_name == "fit":
            agreed_at.append(tr.step)
        return flag

    from speechtrain.train import checkpointer, eval_schedule, metrics_log, step

    for module in (trainer_module, eval_schedule, checkpointer):
        monkeypatch.setattr(module, "any_rank", any_rank)
    monkeypatch.setattr(step, "all_sum", lambda values, device, world_size: [float(v) for v in values])
    monkeypatch.setattr(step, "any_ranks", lambda flags, device, world_size: [bool(f) for f in flags])
    monkeypatch.setattr(step, "mean_over_ranks", lambda terms, world_size: terms)
    for module in (step, metrics_log, checkpointer):
        monkeypatch.setattr(module, "gather", lambda obj, world_size: [obj])
    tr.world_size = 2  # every part of the loop sees it (they share the wrapping)
    assert tr.fit()["steps"] == 30
    every = min(cfg.train.log_every, getattr(trainer_module, "STOP_AGREE_EVERY", 10))
    assert agreed_at and all(step % every == 0 for step in agreed_at), agreed_at
    assert len(agreed_at) <= 30 // every + 1


@pytest.mark.gpu
def test_on_cuda_the_batches_come_over_on_a_side_stream_and_train() -> None:
    """CUDA only: the step copies its batches on the copy stream (pinned, non-blocking) and trains with them."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from speechtrain.recipes import build_task
    from tests.test_train_engine import cfg_for, make_batch, make_trainer

    cfg = cfg_for("train.device=cuda")
    tr = make_trainer(cfg, build_task(cfg))
    batch = make_batch(0, [10, 8]).pin_memory()
    moved = tr.runner.copy_ahead([batch])
    assert all(t.is_cuda for t in moved[0].tensors.values())
    out = tr.train_step([batch])
    assert torch.isfinite(out["loss"]).item() and tr.runner._copy_stream is not None


def test_the_fp16_fallback_is_decided_at_the_next_host_read(tmp_path: Path) -> None:
    """With a log interval of 5 the guard reads its device counts at steps 5 and 10 only: 3 non-finite steps in
        a row (3-5) are seen at step 5 and the run falls back there (reloading the start, its last good state, and
    training on to step 10), as with log_every=1."""
    from speechtrain.recipes import build_task
    from speechtrain.train.metrics import read_metrics
    from tests.test_train_engine import ListLoader, NaNAfter, cfg_for, make_batch, make_trainer

    cfg = cfg_for(
        "accel.precision=fp16",
        "train.nan_fallback_after=3",
        "train.max_steps=10",
        "train.save_every=100",
        "train.log_every=5",
    )
    torch.manual_seed(0)
    tr = make_trainer(
        cfg,
        NaNAfter(build_task(cfg), start=3, stop=6),
        ListLoader([make_batch(i, [10, 8]) for i in range(4)]),
        None,
        tmp_path,
    )
    summary = tr.fit()
    assert summary["steps"] == 10 and summary["precision"] in ("bf16", "fp32")
    assert len(summary["precision_fallbacks"]) == 1  # (the reload of the start also restores its count, 0)
    events = [e for r in read_metrics(tmp_path) for e in r.get("events", [])]
    assert [e["event"] for e in events] == ["precision_fallback"]  # (its step: the reloaded one, 0)
