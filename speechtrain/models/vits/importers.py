"""Import jaywalnut310/vits checkpoints: ``G_N.pth`` and ``D_N.pth`` (each ``{"model": state dict,
"iteration", "optimizer", "learning_rate"}``).

Our VITS keeps the reference's module names (``enc_p``, ``enc_q``, ``flow``, ``dp``, ``dec``, ``emb_g``; the
discriminator's ``discriminators.N``), so the mapping is small and every rule is listed here:

- the text encoder's layer lists are ``attn`` / ``ffn`` / ``norm_1`` / ``norm_2`` here (``attn_layers``,
  ``ffn_layers``, ``norm_layers_1``, ``norm_layers_2`` there);
- the WaveNet blocks' speaker conditioning (multi-speaker models) is ``enc.cond`` here (``enc.cond_layer``);
- the decoder's ``conv_pre`` and ``conv_post`` are plain convs there and weight-normed here: the plain weight
  becomes ``g = ||w||`` per output channel and ``v = w`` (the same weight); ``conv_post`` has no bias on either
  side;
- legacy ``weight_g`` / ``weight_v`` names become the parametrization names (:mod:`speechtrain.models.importing`);
- the symbol embedding ``enc_p.emb`` (and the speaker embedding ``emb_g``) keep our initialisation when the
  symbol table (speaker count) differs from ours, reported as made up: their LJSpeech model has 178 IPA
  symbols, our tokenizer 76 characters, so such a run fine-tunes everything but the text embedding.

The optimizer, iteration and learning rate are left behind (``train.init_from`` starts a fresh optimizer).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from typing import Any

from speechtrain.errors import CheckpointError
from speechtrain.models.importing import (
    CheckpointImporter,
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
COQUI = "coqui-ai/TTS VITS"
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


def _coqui_name(key: str) -> str | None:
    """A Coqui TTS ``Vits`` key in jaywalnut310's names (then :func:`_generator_name` applies)."""
    key = _strip_module(key)
    for theirs, ref in _COQUI_PREFIXES.items():
        if key.startswith(theirs):
            key = ref + key[len(theirs) :]
            break
    m = re.match(r"^flow\.flows\.(\d+)\.(.+)$", key)
    if m:  # Coqui keeps only the coupling layers; the reference interleaves parameter-free Flip modules
        return f"flow.flows.{2 * int(m.group(1))}.{m.group(2)}"
    m = re.match(r"^dp\.(flows|post_flows)\.(\d+)\.(.+)$", key)
    if m:  # ElementwiseAffine at 0 (log_scale/translation = logs/m), then ConvFlows between Flips
        n, rest = int(m.group(2)), m.group(3)
        rest = {"log_scale": "logs", "translation": "m"}.get(rest, rest) if n == 0 else rest
        return f"dp.{m.group(1)}.{0 if n == 0 else 2 * n - 1}.{rest}"
    return key.replace("dec.cond_layer.", "dec.cond.")


_COQUI_PREFIXES = {
    "text_encoder.": "enc_p.",
    "posterior_encoder.": "enc_q.",
    "waveform_decoder.": "dec.",
    "duration_predictor.": "dp.",
}


def _convert_generator(sd: StateDict, to_reference: Callable[[str], str | None], report: ImportReport) -> StateDict:
    """Generator tensors in our names: ``to_reference`` (the layout's names -> jaywalnut310's), then ours."""
    named = {k: to_reference(k) for k in sd}
    plain = {k: named[k] for k in sd if named[k] in _PLAIN_DECODER}
    gen = map_state_dict(
        {k: v for k, v in sd.items() if k not in plain},
        lambda k: None if (r := to_reference(k)) is None else _generator_name(r),
        report,
        "",
        "generator.",
    )
    for key, ref in plain.items():
        prefix = str(ref)[: -len(".weight")]
        g, v = weight_norm_from_plain(sd[key])
        for part, tensor in (("original0", g), ("original1", v)):
            target = f"{prefix}.parametrizations.weight.{part}"
            gen[target] = tensor
            report.mapped.append(TensorMapping(key, f"generator.{target}", tuple(tensor.shape), "plain -> weight norm"))
    return gen


_MAY_DIFFER = {
    "generator": {
        "enc_p.emb.weight": "another symbol table (ours: speechtrain's character tokenizer)",
        "emb_g.weight": "another speaker count (model.n_speakers)",
    }
}


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
    gen = _convert_generator(g_sd, lambda k: k, report)
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
    return ImportedCheckpoint(out, report, {k: dict(v) for k, v in _MAY_DIFFER.items()})


def import_coqui(checkpoint: Source, trust_pickle: bool = False) -> ImportedCheckpoint:
    """State dicts for our ``generator`` and ``discriminator`` from a Coqui TTS VITS checkpoint (``model.pth``:
    ``{"model": state dict with text_encoder / posterior_encoder / flow / duration_predictor / waveform_decoder /
    disc, "config": ..., ...}``; Coqui saves its config as a plain dict, older files may need ``trust_pickle``)."""
    obj, name = read_checkpoint(checkpoint, trust_pickle)
    sd = {_strip_module(k): v for k, v in _model_state(obj, name, "Coqui VITS model").items()}
    if not any(k.startswith("text_encoder.") for k in sd) or not any(k.startswith("waveform_decoder.") for k in sd):
        raise CheckpointError(f"{name}: not a Coqui VITS model (no text_encoder / waveform_decoder): {sorted(sd)[:6]}")
    report = ImportReport(COQUI, name)
    g_sd = {k: v for k, v in sd.items() if not k.startswith("disc.")}
    d_sd = {k[len("disc.nets.") :]: v for k, v in sd.items() if k.startswith("disc.nets.")}
    for key in sd:
        if key.startswith("disc.") and not key.startswith("disc.nets."):
            raise CheckpointError(f"{name}: unexpected discriminator tensor {key}")
    out = {"generator": _convert_generator(g_sd, _coqui_name, report)}
    if d_sd:
        out["discriminator"] = map_state_dict(
            d_sd, lambda k: f"discriminators.{k}", report, "disc.nets.", "discriminator."
        )
    for key in obj:
        if key != "model":
            report.skipped.append((key, "config / trainer state: init_from starts a fresh optimizer"))
    return ImportedCheckpoint(out, report, {k: dict(v) for k, v in _MAY_DIFFER.items()})


def _vits_model(obj: Any) -> Mapping[str, Any] | None:
    model = obj.get("model") if isinstance(obj, Mapping) else None
    return model if isinstance(model, Mapping) else None


def _is_coqui(obj: Any) -> bool:
    model = _vits_model(obj)
    return model is not None and any(str(k).startswith(("text_encoder.", "module.text_encoder.")) for k in model)


def _is_jaywalnut310(obj: Any) -> bool:
    return _vits_model(obj) is not None and not _is_coqui(obj)


#: what ``train.init_from`` reads for this family (collected by ``speechtrain.registry.checkpoint_importers``)
IMPORTERS = [
    CheckpointImporter(
        "a Coqui TTS VITS model.pth (it holds its discriminator)",
        _is_coqui,
        lambda obj, second, trust: import_coqui(obj, trust),
    ),
    CheckpointImporter(
        "jaywalnut310/vits G_ files (and their D_ file)",
        _is_jaywalnut310,
        lambda obj, second, trust: import_jaywalnut310(obj, second, trust),
        pair="its D_ file (the discriminator)",
    ),
]
