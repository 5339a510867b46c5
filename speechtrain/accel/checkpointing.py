"""Activation checkpointing of repeated blocks: keep only block inputs, recompute the inside in backward."""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from speechtrain.accel.record import AccelRecord

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
