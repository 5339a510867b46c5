"""Import jaywalnut310/vits checkpoints: ``G_N.pth`` and ``D_N.pth`` (each ``{"model": state dict,
"iteration", "optimizer", "learning_rate"}``).

Our VITS keeps the reference's module names (``enc_p``, ``enc_q``, ``flow``, ``dp``, ``dec``, ``emb_g``; the
discriminator's ``discriminators.N``), so the mapping is small and every rule is listed here:

- the text encoder's layer lists are ``attn`` / ``ffn`` / ``norm_1`` / ``norm_2`` here (``attn_layers``,
  ``ffn_layers``, ``norm_layers_1``, ``norm_layers_2`` there);
- the WaveNet blocks' speaker conditioning (multi-speaker models) is ``enc.cond`` here (``enc.cond_layer``);
- the decoder's ``conv_pre`` and ``conv_post`` are plain convs there and weight-normed here: the plain weight
  becomes ``g = ||w||`` per output channel and ``v = w`` (the same weight); their ``conv_post`` has no bias,
  ours starts at zero (the same output);
- legacy ``weight_g`` / ``weight_v`` names become the parametrization names (:mod:`speechtrain.models.importing`);
- the symbol embedding ``enc_p.emb`` (and the speaker embedding ``emb_g``) keep our initialisation when the
  symbol table (speaker count) differs from ours, reported as made up: their LJSpeech model has 178 IPA
  symbols, our tokenizer 76 characters, so such a run fine-tunes everything but the text embedding.

The optimizer, iteration and learning rate are left behind (``train.init_from`` starts a fresh optimizer).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

import torch

from speechtrain.errors import CheckpointError
from speechtrain.models.importing import (
    ImportedCheckpoint,
    ImportReport,
    StateDict,
    TensorMapping,
    map_state_dict,
    read_checkpoint,
    tensors_only,
    weight_norm_from_plain,
)

LAYOUT = "jaywalnut310/vits"
Source = str | os.PathLike[str] | Mapping[str, Any]
_ENCODER_LISTS = {"attn_layers": "attn", "ffn_layers": "ffn", "norm_layers_1": "norm_1", "norm_layers_2": "norm_2"}
_PLAIN_DECODER = ("dec.conv_pre.weight", "dec.conv_post.weight")


def _strip_module(key: str) -> str:
    return key[len("module.") :] if key.startswith("module.") else key  # saved from DistributedDataParallel


def _generator_name(key: str) -> str:
    key = _strip_module(key)
    m = re.match(r"^enc_p\.encoder\.(attn_layers|ffn_layers|norm_layers_1|norm_layers_2)\.(.+)$", key)
    if m:
        return f"enc_p.encoder.{_ENCODER_LISTS[m.group(1)]}.{m.group(2)}"
    return key.replace(".enc.cond_layer.", ".enc.cond.")  # WaveNet blocks' speaker conditioning (multi-speaker)


def _model_state(obj: Any, name: str, what: str) -> StateDict:
    if not isinstance(obj, Mapping) or "model" not in obj:
        found = sorted(obj)[:8] if isinstance(obj, Mapping) else type(obj).__name__
        raise CheckpointError(
            f"{name}: not a {LAYOUT} {what} file: expected {{'model': state dict, ...}}, found {found}"
        )
    return tensors_only(obj["model"], f"the {what}'s state dict", name)


def import_jaywalnut310(
    generator: Source, discriminator: Source | None = None, trust_pickle: bool = False
) -> ImportedCheckpoint:
    """State dicts for our ``generator`` (and ``discriminator`` when the ``D_`` file is given) from a
    jaywalnut310/vits ``G_`` file (and ``D_`` file), with a report of every tensor."""
    g_obj, g_name = read_checkpoint(generator, trust_pickle)
    g_sd = {_strip_module(k): v for k, v in _model_state(g_obj, g_name, "generator (G_N.pth)").items()}
    if not any(k.startswith("enc_p.") for k in g_sd) or not any(k.startswith("dec.") for k in g_sd):
        raise CheckpointError(f"{g_name}: not a VITS generator (no enc_p / dec tensors): {sorted(g_sd)[:6]}")
    if any(k.startswith("discriminators.") for k in g_sd):
        raise CheckpointError(f"{g_name}: a discriminator file (D_N.pth): give the G_N.pth first")
    report = ImportReport(LAYOUT, g_name)
    plain = {k: g_sd.pop(k) for k in _PLAIN_DECODER if k in g_sd}
    gen = map_state_dict(g_sd, _generator_name, report, "", "generator.")
    for key, weight in plain.items():
        prefix = key[: -len(".weight")]
        g, v = weight_norm_from_plain(weight)
        for part, tensor in (("original0", g), ("original1", v)):
            target = f"{prefix}.parametrizations.weight.{part}"
            gen[target] = tensor
            report.mapped.append(TensorMapping(key, f"generator.{target}", tuple(tensor.shape), "plain -> weight norm"))
    if "dec.conv_post.bias" not in gen and "dec.conv_post.weight" in plain:
        gen["dec.conv_post.bias"] = torch.zeros(1, dtype=plain["dec.conv_post.weight"].dtype)
        report.filled.append(("generator.dec.conv_post.bias", "the reference's conv_post has no bias: zero"))
    for key in g_obj:
        if key != "model":
            report.skipped.append((key, "trainer state: init_from starts a fresh optimizer"))
    out = {"generator": gen}
    if discriminator is not None:
        d_obj, d_name = read_checkpoint(discriminator, trust_pickle)
        d_sd = _model_state(d_obj, d_name, "discriminator (D_N.pth)")
        if not any(k.startswith("discriminators.") for k in d_sd):
            raise CheckpointError(f"{d_name}: not a VITS discriminator (no discriminators.N tensors)")
        report.source = f"{g_name} + {d_name}"
        out["discriminator"] = map_state_dict(d_sd, _strip_module, report, "D.", "discriminator.")
        for key in d_obj:
            if key != "model":
                report.skipped.append((f"D.{key}", "trainer state: init_from starts a fresh optimizer"))
    may_differ = {
        "generator": {
            "enc_p.emb.weight": "another symbol table (ours: speechtrain's character tokenizer)",
            "emb_g.weight": "another speaker count (model.n_speakers)",
        }
    }
    return ImportedCheckpoint(out, report, may_differ)
