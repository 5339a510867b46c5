"""Memory estimate before any run: weights, gradients, optimizer state and activations.

Static memory is counted from the parameters: fp32 master weights and fp32 gradients (mixed
precision keeps both in fp32 and only computes in bf16/fp16) plus the optimizer's state (AdamW /
Adam: two fp32 moments; SGD: one momentum buffer; Muon: one momentum buffer for the matrices that
the Muon rule of :mod:`speechtrain.accel.optim` gives it, two AdamW moments for the rest).

Activations are *measured*: one small forward + backward of the task at two short lengths, with
``torch.autograd.graph.saved_tensors_hooks`` counting the bytes of the tensors autograd keeps for
backward (live at the same time, each storage once, parameters excluded). That works on any
device and in the run's precision (:class:`speechtrain.accel.precision.PrecisionPlan`, the one
autocast decision the Trainer uses too). The two points are fitted per item as ``a0 + a1*T`` (or
``a1*T + a2*T^2`` for attention models, where the score matrix grows with the square of the length)
and scaled to the configured frame budget (``data.max_frames``) and to the longest utterance.

What it leaves out: temporary buffers inside backward (gradients of activations, kernel
workspaces) and allocator fragmentation, so a measured peak is usually somewhat above it; the
tuner (`speechtrain tune`) prints both side by side.

The recipe (:class:`speechtrain.recipes.estimate.EstimateRecipe`) builds and sets up the task, applies
the accelerations and finds the longest utterance; :func:`estimate` measures what it is given.
"""

from __future__ import annotations

import contextlib
import math
import os
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from speechtrain.accel.optim import muon_partition
from speechtrain.accel.precision import PrecisionPlan
from speechtrain.capabilities import TextVocabulary
from speechtrain.config import DataConfig
from speechtrain.data.batch import round_up
from speechtrain.data.collate import collate
from speechtrain.data.sampler import item_cost
from speechtrain.data.text import VOCAB_SIZE
from speechtrain.memory.stats import format_bytes

FP32 = 4
#: default text rate when no data is prepared: about 15 characters per second of speech
CHARS_PER_SECOND = 15.0


# ---------------------------------------------------------------------------------------------- static


def _unique_params(modules: dict[str, nn.Module], names: list[str] | None = None) -> list[nn.Parameter]:
    seen: set[int] = set()
    out = []
    for name, module in modules.items():
        if names is not None and name not in names:
            continue
        for p in module.parameters():
            if id(p) not in seen:
                seen.add(id(p))
                out.append(p)
    return out


def optimizer_state_bytes(
    params: list[nn.Parameter], optimizer: str, muon_params: list[nn.Parameter] | None = None
) -> int:
    """Bytes of optimizer state for ``params`` (fp32 states): AdamW/Adam two moments, SGD one
    momentum buffer, Muon one momentum buffer for ``muon_params`` and two AdamW moments for the rest.

    ``muon_params`` come from :func:`speechtrain.accel.optim.muon_partition` over the stage's modules
    (the rule that also builds the optimizer); without them the same rule is applied to ``params``
    alone (no module names: the shape part of the rule)."""
    n = sum(p.numel() for p in params)
    if optimizer in ("adamw", "adam"):
        return 2 * FP32 * n
    if optimizer == "sgd":
        return FP32 * n
    if optimizer == "muon":
        muon = muon_partition([_Holder(params)])[0] if muon_params is None else muon_params
        ids = {id(p) for p in params}
        n_muon = sum(p.numel() for p in muon if id(p) in ids)
        return FP32 * n_muon + 2 * FP32 * (n - n_muon)
    raise ValueError(f"unknown optimizer {optimizer!r}")


class _Holder(nn.Module):
    """Parameters without their modules, for the Muon rule."""

    def __init__(self, params: list[nn.Parameter]) -> None:
        super().__init__()
        for i, p in enumerate(params):
            self.register_parameter(f"p{i}", p)


@dataclass(frozen=True)
class StaticMemory:
    """Bytes of one full replica that do not depend on the batch: weights, gradients, optimizer state."""

    weights: int
    gradients: int
    optimizer: int

    @property
    def static_bytes(self) -> int:
        return self.weights + self.gradients + self.optimizer


def static_memory(modules: dict[str, nn.Module], specs: Any, optimizer: str) -> StaticMemory:
    """Weights (as stored), fp32 gradients of the trainable parameters and the optimizer state of each
    optimizer stage (``specs``: the task's ``optimizer_specs()``) over its own modules; counted, not run."""
    params = _unique_params(modules)
    opt_bytes = 0
    seen: set[int] = set()
    for spec in specs:
        stage_modules = [modules[name] for name in spec.modules]
        stage = [p for p in _unique_params(modules, spec.modules) if p.requires_grad and id(p) not in seen]
        seen.update(id(p) for p in stage)
        muon = muon_partition(stage_modules)[0] if optimizer == "muon" else None
        opt_bytes += optimizer_state_bytes(stage, optimizer, muon)
    weights = sum(p.numel() * p.element_size() for p in params)
    grads = FP32 * sum(p.numel() for p in params if p.requires_grad)
    return StaticMemory(int(weights), int(grads), int(opt_bytes))


def device_memory(device: torch.device) -> dict[str, Any]:
    """Total memory of ``device`` in bytes and its name: the GPU's memory, or the system RAM."""
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return {"name": props.name, "total_bytes": int(props.total_memory), "kind": "gpu"}
    try:
        total = int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        total = None
    return {"name": "system RAM", "total_bytes": total, "kind": "cpu"}


# ---------------------------------------------------------------------------------------------- activations


class SavedTensorMeter:
    """Counts bytes of tensors saved for backward that are alive at the same time (peak), each
    storage once, leaving out parameters (already counted as weights)."""

    def __init__(self, exclude: set[int] | None = None) -> None:
        self.exclude = exclude or set()
        self.live = 0
        self.peak = 0
        self._refs: dict[int, list[int]] = {}  # storage ptr -> [nbytes, saved tensors alive]

    def _release(self, key: int) -> None:
        entry = self._refs.get(key)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] <= 0:
            self.live -= entry[0]
            del self._refs[key]

    def pack(self, t: torch.Tensor) -> torch.Tensor:
        try:
            storage = t.untyped_storage()
            key, nbytes = storage.data_ptr(), storage.nbytes()
        except (RuntimeError, NotImplementedError):  # sparse or wrapper tensors: count their own size
            key, nbytes = id(t), t.numel() * t.element_size()
        if key in self.exclude or nbytes == 0:
            return t
        entry = self._refs.get(key)
        if entry is None:
            self._refs[key] = [nbytes, 1]
            self.live += nbytes
            self.peak = max(self.peak, self.live)
        else:
            entry[1] += 1
        weakref.finalize(t, self._release, key)
        return t

    @staticmethod
    def unpack(t: torch.Tensor) -> torch.Tensor:
        return t

    @contextmanager
    def hooks(self) -> Iterator[SavedTensorMeter]:
        with torch.autograd.graph.saved_tensors_hooks(self.pack, self.unpack):
            yield self


def synthetic_items(
    n: int,
    frames: int,
    data_cfg: DataConfig,
    needs: Any,
    tokens_per_frame: float,
    max_tokens: int | None = None,
    seed: int = 0,
    vocab_size: int = VOCAB_SIZE,
) -> list[dict[str, Any]]:
    """``n`` dataset-like items of ``frames`` mel frames (random log-mel, noise audio, random text with
    ids below ``vocab_size``, the task's text vocabulary; a steady f0 for a task that reads one)."""

    rng = np.random.default_rng(seed)
    n_tokens = max(2, int(round(frames * tokens_per_frame)))
    if max_tokens is not None:
        n_tokens = min(n_tokens, max_tokens)
    items = []
    for i in range(n):
        item: dict[str, Any] = {"id": f"synthetic{i}", "speaker": 0, "label": 0, "text": "x" * n_tokens}
        if needs.mel or not needs.audio:
            item["mel"] = rng.standard_normal((data_cfg.n_mels, frames), dtype=np.float32) - 4.0  # (n_mels, T_frames)
        if needs.audio or data_cfg.features_on_device:
            item["audio"] = 0.1 * rng.standard_normal(frames * data_cfg.hop_length, dtype=np.float32)  # (T_samples,)
        if needs.text:
            item["tokens"] = rng.integers(4, max(5, vocab_size), n_tokens).astype(np.int64)  # (L_tokens,)
        if needs.f0:  # an NSF vocoder's pitch, one value per frame: a sung A3, voiced throughout
            item["f0"] = np.full(frames, 220.0, dtype=np.float32)  # (T_frames,) Hz
        items.append(item)
    return items


def measure_activation_bytes(
    task: Any, batch: Any, device: torch.device, precision: PrecisionPlan | None = None
) -> int:
    """Peak bytes saved for backward during one training step of every optimizer stage of ``task``
    on ``batch`` (forward + backward under ``precision``'s autocast, fp32 without one; no optimizer
    step, gradients cleared afterwards)."""
    modules = task.modules()
    params = _unique_params(modules)
    exclude = set()
    for p in params:
        exclude.add(p.untyped_storage().data_ptr())
    meter = SavedTensorMeter(exclude)
    batch = batch.to(device)
    cache: dict[str, Any] = {}
    try:
        with meter.hooks():
            for spec in task.optimizer_specs():
                with precision.autocast() if precision is not None else contextlib.nullcontext():
                    out = task.training_step(batch, spec.name, cache)
                out["loss"].float().backward()
                del out
    finally:
        cache.clear()
        for p in params:
            p.grad = None
    return int(meter.peak)


def _has_attention(modules: dict[str, nn.Module]) -> bool:
    for mod in modules.values():
        for m in mod.modules():
            name = type(m).__name__.lower()
            if isinstance(m, nn.MultiheadAttention) or "attention" in name or name.endswith("attn"):
                return True
    return False


def fit_activations(points: list[tuple[int, int, int]], quadratic: bool) -> dict[str, Any]:
    """Per-item model of activation bytes from ``(batch_size, frames, bytes)`` at two lengths:
    ``a0 + a1*T`` (linear) or ``a1*T + a2*T^2`` (quadratic, falling back to linear when the
    fitted square term is negative)."""
    (b1, t1, y1), (b2, t2, y2) = points
    p1, p2 = y1 / b1, y2 / b2
    if quadratic:
        det = t1 * t2 * t2 - t2 * t1 * t1
        a1 = (p1 * t2 * t2 - p2 * t1 * t1) / det
        a2 = (t1 * p2 - t2 * p1) / det
        if a2 >= 0 and a1 >= 0:
            return {"model": "quadratic", "per_item": 0.0, "per_frame": a1, "per_frame2": a2}
    a1 = max(0.0, (p2 - p1) / (t2 - t1))
    a0 = max(0.0, p1 - a1 * t1)
    return {"model": "linear", "per_item": a0, "per_frame": a1, "per_frame2": 0.0}


def activation_bytes(fit: dict[str, Any], batch_size: int, frames: int) -> int:
    """Activation bytes of a batch of ``batch_size`` items of ``frames`` frames from a fit."""
    per_item = fit["per_item"] + fit["per_frame"] * frames + fit["per_frame2"] * frames * frames
    return int(math.ceil(batch_size * per_item))


def predict_bytes(est: dict[str, Any], batch_size: int, frames: int) -> int:
    """Estimated peak of a training step: static bytes + activations of ``batch_size x frames``."""
    return int(est["static_bytes"]) + activation_bytes(est["activations"], batch_size, frames)


# ---------------------------------------------------------------------------------------------- estimate


def estimate(
    task: Any,
    *,
    data: DataConfig,
    optimizer: str,
    device: torch.device,
    precision: PrecisionPlan,
    longest_frames: int,
    longest_source: str = "training set",
    max_text_tokens: int | None = None,
    accelerations: list[str] | None = None,
    lengths: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """Memory a training run needs, before running it (bytes; see the module doc).

    ``task``: set up, its modules on ``device`` with the run's accelerations applied (``accelerations``:
    the names of those that took effect, or None for a task measured as it is). ``data``: the batch
    settings (crop, frame budget, padding, features). ``optimizer``: ``optim.name``. ``longest_frames``
    (and where it comes from): the longest utterance, scaled to. ``max_text_tokens``: a cap on
    the synthetic texts. ``lengths``: the two measured lengths in frames (default 64, 128; crop
    mode: half the crop and the crop).
    """
    d = data
    modules = task.modules()
    params = _unique_params(modules)
    trainable = [p for p in params if p.requires_grad]
    counted = static_memory(modules, task.optimizer_specs(), optimizer)
    weights, grads, opt_bytes, static = counted.weights, counted.gradients, counted.optimizer, counted.static_bytes

    # activations: two small measured steps
    crop = d.crop_frames
    if lengths is None:
        lengths = (max(1, crop // 2), crop) if crop else (64, 128)
    lengths = (round_up(int(lengths[0]), d.pad_multiple), round_up(int(lengths[1]), d.pad_multiple))
    if lengths[0] == lengths[1]:
        lengths = (lengths[0], lengths[0] * 2)
    needs = task.needs()
    vocab_size = task.text_vocab_size if isinstance(task, TextVocabulary) else VOCAB_SIZE  # the task's own text ids
    tokens_per_frame = CHARS_PER_SECOND * d.hop_length / d.sample_rate
    max_tokens = max_text_tokens - 2 if max_text_tokens else None  # room for bos/eos
    b0 = 2
    points = []
    was_training = {k: m.training for k, m in modules.items()}
    for m in modules.values():
        m.train()
    try:
        for t in lengths:
            items = synthetic_items(b0, t, d, needs, tokens_per_frame, max_tokens, vocab_size=vocab_size)
            batch = collate(items, d.pad_multiple, d.hop_length, d.sample_rate)
            points.append((b0, int(t), measure_activation_bytes(task, batch, device, precision)))
    finally:
        for k, m in modules.items():
            m.train(was_training[k])
    quadratic = bool(d.quadratic_frames) or _has_attention(modules)
    fit = fit_activations(points, quadratic)
    fit["measured"] = [{"batch_size": b, "frames": t, "bytes": y} for b, t, y in points]
    fit["precision"] = precision.name
    fit["accelerations"] = accelerations

    # scale to the longest utterance and the frame budget
    longest = round_up(int(crop or longest_frames), d.pad_multiple)
    budget_source = "data.batch_size x longest item"
    if crop:
        budget_batch, budget_frames = d.batch_size, d.batch_size * longest
        budget_source = "data.batch_size x data.crop_frames"
    elif d.max_frames is not None:
        budget_source = "data.max_frames"
        # the sampler's budget is in item costs (L, or L + L^2/quadratic_frames for attention)
        budget_batch = max(1, int(d.max_frames // float(item_cost(longest, d.quadratic_frames))))
        budget_frames = d.max_frames
    else:
        budget_batch, budget_frames = d.batch_size, d.batch_size * longest
    act_longest = activation_bytes(fit, 1, longest)
    act_budget = activation_bytes(fit, budget_batch, longest)
    mem = device_memory(device)
    total = static + act_budget
    return {
        "device": str(device),
        "device_name": mem["name"],
        "device_memory_bytes": mem["total_bytes"],
        "precision": precision.name,
        "optimizer": optimizer,
        "parameters": int(sum(p.numel() for p in params)),
        "trainable_parameters": int(sum(p.numel() for p in trainable)),
        "weights_bytes": int(weights),
        "gradients_bytes": int(grads),
        "optimizer_bytes": int(opt_bytes),
        "static_bytes": int(static),
        "activations": fit,
        "longest_frames": int(longest),
        "longest_source": "data.crop_frames" if crop else longest_source,
        "budget_batch_size": int(budget_batch),
        "budget_frames": int(budget_frames),
        "budget_source": budget_source,
        "activations_longest_bytes": act_longest,
        "activations_budget_bytes": act_budget,
        "total_longest_bytes": static + act_longest,
        "total_budget_bytes": total,
        "fits": None if mem["total_bytes"] is None else bool(total <= mem["total_bytes"]),
    }


def format_estimate(est: dict[str, Any]) -> str:
    """A short human-readable table of an estimate."""
    fit = est["activations"]
    pts = ", ".join(f"{p['batch_size']}x{p['frames']} frames: {format_bytes(p['bytes'])}" for p in fit["measured"])
    lines = [
        f"device           {est['device']} ({est['device_name']}): {format_bytes(est['device_memory_bytes'])}",
        f"parameters       {est['parameters']:,} ({est['trainable_parameters']:,} trainable)",
        f"weights          {format_bytes(est['weights_bytes'])} (fp32 master)",
        f"gradients        {format_bytes(est['gradients_bytes'])} (fp32)",
        f"optimizer        {format_bytes(est['optimizer_bytes'])} ({est['optimizer']})",
        f"activations      measured in {fit['precision']}"
        + (f" with {', '.join(fit['accelerations'])}" if fit.get("accelerations") else "")
        + f": {pts}; {fit['model']} fit: "
        f"{fit['per_item'] / 1024:.1f} KiB/item + {fit['per_frame'] / 1024:.2f} KiB/frame"
        + (f" + {fit['per_frame2']:.1f} B/frame^2" if fit["model"] == "quadratic" else ""),
        f"longest item     {est['longest_frames']} frames ({est['longest_source']}): "
        f"activations {format_bytes(est['activations_longest_bytes'])}, "
        f"total {format_bytes(est['total_longest_bytes'])}",
        f"frame budget     {est['budget_frames']} frames ({est['budget_source']}): {est['budget_batch_size']} x "
        f"{est['longest_frames']}-frame items: "
        f"activations {format_bytes(est['activations_budget_bytes'])}, total {format_bytes(est['total_budget_bytes'])}"
        + ("" if est["fits"] is None else ("  (fits)" if est["fits"] else "  (DOES NOT FIT: lower data.max_frames)")),
        "not counted      backward temporaries, kernel workspaces, allocator fragmentation (measure with tune)",
    ]
    return "\n".join(lines)
