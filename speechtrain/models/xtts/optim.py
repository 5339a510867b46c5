"""Coqui's optimizer groups for XTTS: weight decay on the weights only (``optimizer_wd_only_on_weights``).

Coqui's GPT trainer (``GPTTrainer.get_optimizer``, on in its XTTS-v2 recipes) exempts from weight decay every
parameter that, seen from any module above or at it, is named ``*.bias``, or belongs to a normalisation layer
(batch, instance, group or layer norm) or an embedding (the text, mel and position embeddings). The
perceiver's RMSNorm gain (``gamma``, not a torch norm class) and its ``latents`` keep their decay, as there.
On XTTS-v2's GPT: 279 of 426 tensors without decay (tests/fixtures/xtts_v2_coqui_optimizer_groups.json,
recorded from Coqui's own ``get_optimizer``).
"""

from __future__ import annotations

from torch import nn

NORMS = (
    nn.BatchNorm1d,
    nn.BatchNorm2d,
    nn.BatchNorm3d,
    nn.InstanceNorm1d,
    nn.InstanceNorm2d,
    nn.InstanceNorm3d,
    nn.GroupNorm,
    nn.LayerNorm,
)
EMBEDDINGS = (nn.Embedding, nn.EmbeddingBag)


def no_weight_decay(module: nn.Module, prefix: str = "") -> frozenset[str]:
    """Names (``prefix`` + parameter name) of ``module``'s parameters that Coqui's rule exempts from decay."""
    exempt: set[str] = set()
    for owner_name, owner in module.named_modules():
        held = isinstance(owner, NORMS + EMBEDDINGS)
        for name, _ in owner.named_parameters():
            if held or name.endswith(".bias"):
                exempt.add(prefix + (f"{owner_name}.{name}" if owner_name else name))
    return frozenset(exempt)
