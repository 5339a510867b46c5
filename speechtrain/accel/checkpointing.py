"""Activation checkpointing of repeated blocks: keep only block inputs, recompute the inside in backward."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from speechtrain.accel.catalog import Acceleration, Card, Rung
from speechtrain.accel.record import AccelRecord

if TYPE_CHECKING:
    from speechtrain.accel.hardware import HardwareInfo

_MARK = "_speechtrain_checkpointed"


def _checkpointed_forward(block: nn.Module, *args: Any, **kwargs: Any) -> Any:
    # a module-level function bound with functools.partial (not a closure), so that deepcopy
    # (EMA copies) and pickling give a copy that calls its own block, not the original
    forward = type(block).forward
    # a block whose parameters are frozen for this forward (a GAN's discriminator in the generator's stage)
    # runs as it is: the recompute happens in backward, after they are unfrozen again, and would record
    # other tensors than the forward did (torch's CheckpointError "different metadata")
    if block.training and torch.is_grad_enabled() and any(p.requires_grad for p in block.parameters()):
        return checkpoint(forward, block, *args, use_reentrant=False, **kwargs)
    return forward(block, *args, **kwargs)


def _composite(module: nn.Module) -> bool:
    # a single layer (conv, linear; weight norm included) saves its input for backward anyway,
    # so checkpointing it would recompute without saving memory
    return any(name != "parametrizations" for name, _ in module.named_children())


def find_repeated_blocks(model: nn.Module) -> list[tuple[str, list[nn.Module]]]:
    """Containers (``nn.ModuleList`` / ``nn.Sequential``) holding >= 2 children of one class with
    parameters, outermost first: ``[(container name, [blocks])]``. Only composite blocks count
    (a lone Conv1d/Linear would be recomputed without saving memory). Blocks inside a found block
    are not searched (checkpointing the outer block already covers them)."""
    found: list[tuple[str, list[nn.Module]]] = []

    def visit(module: nn.Module, prefix: str) -> None:
        if isinstance(module, (nn.ModuleList, nn.Sequential)):
            by_class: dict[type, list[nn.Module]] = {}
            for child in module.children():
                if _composite(child) and any(True for _ in child.parameters()):
                    by_class.setdefault(type(child), []).append(child)
            blocks = [b for group in by_class.values() if len(group) >= 2 for b in group]
            if blocks:
                found.append((prefix or "<root>", blocks))
                covered = {id(b) for b in blocks}
                for name, child in module.named_children():
                    if id(child) not in covered:
                        visit(child, f"{prefix}.{name}" if prefix else name)
                return
        for name, child in module.named_children():
            visit(child, f"{prefix}.{name}" if prefix else name)

    visit(model, "")
    return found


def apply_activation_checkpointing(model: nn.Module, enabled: bool = True) -> AccelRecord:
    """Wrap the forward of each repeated block (see :func:`find_repeated_blocks`) in
    ``torch.utils.checkpoint.checkpoint(use_reentrant=False)``, in place.

    Active only in training mode with gradients on (eval and inference run the plain forward).
    Exact maths (the RNG state is restored for dropout in the recompute); costs roughly one extra
    forward of the blocks per step; saves their inner activations. state_dict keys are unchanged.
    ``enabled=False`` removes the wrapping added earlier.
    """
    if not enabled:
        removed = remove_activation_checkpointing(model)
        detail = f"disabled (unwrapped {removed} blocks)" if removed else "disabled"
        return AccelRecord("activation_checkpointing", False, True, detail, {"blocks": 0})
    containers = find_repeated_blocks(model)
    wrapped, skipped, where = 0, 0, {}
    for name, blocks in containers:
        for block in blocks:
            if getattr(block, _MARK, False):
                wrapped += 1
                continue
            if "forward" in vars(block):  # someone else patched this instance's forward
                skipped += 1
                continue
            block.forward = functools.partial(_checkpointed_forward, block)
            setattr(block, _MARK, True)
            wrapped += 1
        classes = sorted({type(b).__name__ for b in blocks})
        where[name] = f"{len(blocks)} x {'/'.join(classes)}"
    info = {"blocks": wrapped, "containers": where, "skipped_patched_forward": skipped}
    if not wrapped:
        return AccelRecord(
            "activation_checkpointing",
            False,
            True,
            "not applied: no repeated blocks (ModuleList/Sequential of >= 2 same-class composite children)",
            info,
        )
    places = ", ".join(f"{k} ({v})" for k, v in where.items())
    return AccelRecord(
        "activation_checkpointing", True, True, f"{wrapped} blocks recomputed in backward: {places}", info
    )


def remove_activation_checkpointing(model: nn.Module) -> int:
    """Undo :func:`apply_activation_checkpointing`; returns how many blocks were unwrapped."""
    n = 0
    for m in model.modules():
        if getattr(m, _MARK, False):
            del m.forward
            delattr(m, _MARK)
            n += 1
    return n


def _rule(info: HardwareInfo) -> tuple[Any, str]:
    if not info.has_gpu:
        return False, "CPU RAM is rarely the limit; recompute costs time"
    mem = info.gpu_memory_gib or 0.0
    if mem < 8:
        return True, f"{mem:.1f} GiB GPU: recompute repeated blocks in backward to fit longer utterances"
    if mem <= 16:
        return True, f"{mem:.1f} GiB GPU: checkpointing repeated blocks trades ~1/3 more compute for larger batches"
    return False, f"{mem:.1f} GiB GPU: memory is rarely the limit; recompute would cost ~1/3 more compute"


ACCELERATION = Acceleration(
    key="accel.activation_checkpointing",
    record="activation_checkpointing",
    exact=True,
    order=60,
    apply=lambda on, ctx: ctx.per_module(
        "activation_checkpointing", lambda m: apply_activation_checkpointing(m, bool(on))
    ),
    probe=_rule,
    rung=Rung(
        "activation_checkpointing",
        "+ activation checkpointing",
        {"accel.activation_checkpointing": True},
        ("activation_checkpointing",),
    ),
    card=Card(
        title="Activation checkpointing",
        what="finds repeated blocks (an `nn.ModuleList`/`nn.Sequential` holding >= 2 children of the same class "
        "that have parameters and submodules, outermost first; a lone conv/linear layer is skipped, as it saves "
        "its input for backward anyway) and wraps each block's forward in "
        "`torch.utils.checkpoint.checkpoint(use_reentrant=False)`, in place. Only the block inputs are kept; the "
        "inside is recomputed in backward. Active only in training mode with gradients on.",
        helps="longer utterances / larger batches when memory is the limit.",
        costs='about one extra forward of the blocks per step (the record\'s `info["blocks"]` and `containers` say '
        "which).",
        exact_note="(the RNG state is restored for dropout). state_dict keys are unchanged; `enabled=False` (or "
        "`remove_activation_checkpointing`) unwraps; deep copies (EMA) call their own blocks.",
        auto="on for GPUs with 16 GiB or less, off on bigger GPUs and on the CPU.",
        own_loop="`apply_activation_checkpointing(model, True)`.",
    ),
)
