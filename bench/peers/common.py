"""What every peer definition shares: its record (:class:`PeerDefinition`) and the raw config of speechtrain's two
rows (:func:`recipe_raw`). Runs in speechtrain's environment (the orchestrator), not in the peers'."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


@dataclass
class PeerDefinition:
    """One peer: how to prepare its corpus and model, the settings of its own row and of ours."""

    key: str
    title: str
    peer_label: str
    runner: str  # the script in bench/peers/ that trains the peer's own code (run in the peers' environment)
    recipe: str  # speechtrain's recipe for the same model
    prepare: Callable[[Path], dict[str, Any]]  # work folder -> context (corpus, checkpoint ...)
    peer_raw: Callable[[dict[str, Any]], dict[str, Any]]
    ours_raw: Callable[[dict[str, Any], bool, dict[str, Any]], dict[str, Any]]
    loss_keys: dict[str, str]
    settings: str
    shims: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    needs: Callable[[], str | None] = lambda: None  # why the peer cannot run here (None: it can)


def recipe_raw(
    recipe: str, overrides: dict[str, Any], autopilot: bool, recommendation: dict[str, Any]
) -> dict[str, Any]:
    """speechtrain's raw config for a peer comparison: ``recipe`` with ``overrides``; at the peer's settings
    everything speechtrain would switch on is off (the ladder's all-off row: fp32, fixed-count batches, no
    workers, plain AdamW kernel); with ``autopilot`` the recipe's own batching plus the hardware recommendation
    (the ladder's "all" row without the tuner)."""
    import torch

    from speechtrain.bench.ablate import COMMON, all_off, set_dotted
    from speechtrain.config import load_config

    cfg = load_config(REPO / recipe)
    raw = cfg.to_dict()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if autopilot:
        base = {**COMMON, **{k: v for k, v in recommendation.items() if k.startswith(("accel.", "optim.", "data."))}}
        base["data.bucketing"] = True
    else:
        base = all_off(device)
    for key, value in {**base, **overrides}.items():
        set_dotted(raw, key, value)
    return raw
