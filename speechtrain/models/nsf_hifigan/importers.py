"""Import openvpi/SingingVocoders (and OpenVPI's released) NSF-HiFiGAN checkpoints.

Two layouts: the exported generator (``export_ckpt.py``: ``{"generator": state dict}``, with a
``config.json`` beside it) and a training checkpoint (PyTorch Lightning: ``{"state_dict": {"generator.*",
"discriminator.msd.*", "discriminator.mpd.*" or "discriminator.mrd.*"}, ...}``; it holds pickled
hyperparameters, so it needs ``trust_pickle=True``). Our generator uses their module names, so the generator
and their MPD/MSD map by the weight-norm renaming alone; their MRD (UnivNet's ``MultiResSpecDiscriminator``:
``discriminators.N.discriminators.K``, ``discriminators.N.out``) maps to our ``mrsd`` (``convs.K``,
``conv_post``), its STFT window buffers are left (ours is recomputed). Their MRD frames its STFT with
``torch.stft(center=True)`` and ours as HiFi-GAN's mel (``center=False``, ``(n_fft - hop) / 2`` reflect
padding), so imported MRD weights see the same spectrogram shifted by about half a window: same shapes and
weights, not the same outputs to the bit (the generator, MPD and MSD are). Periods and STFT resolutions are not
recorded in a state dict: keep ``model.periods`` and ``model.mrsd_resolutions`` at the checkpoint's config.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

from speechtrain.errors import CheckpointError
from speechtrain.models.importing import (
    CheckpointImporter,
    ImportedCheckpoint,
    ImportReport,
    StateDict,
    map_state_dict,
    read_checkpoint,
    tensors_only,
)

LAYOUT = "openvpi/SingingVocoders NSF-HiFiGAN"
Source = str | os.PathLike[str] | Mapping[str, Any]
_MRD = re.compile(r"^discriminators\.(\d+)\.(discriminators\.(\d+)|out)\.(.+)$")


def _mrd_name(key: str) -> str | None:
    if re.match(r"^discriminators\.\d+\.window$", key):
        return None  # an STFT window buffer; ours is recomputed
    m = _MRD.match(key)
    if not m:
        return key
    inner = f"convs.{m.group(3)}" if m.group(3) is not None else "conv_post"
    return f"discriminators.{m.group(1)}.{inner}.{m.group(4)}"


def import_singingvocoders(checkpoint: Source, trust_pickle: bool = False) -> ImportedCheckpoint:
    """State dicts for our ``generator`` (and ``mpd``, ``msd`` / ``mrsd`` from a training checkpoint) from a
    SingingVocoders NSF-HiFiGAN file, with a report of every tensor."""
    obj, name = read_checkpoint(checkpoint, trust_pickle)
    if not isinstance(obj, Mapping) or ("generator" not in obj and "state_dict" not in obj):
        found = sorted(obj)[:8] if isinstance(obj, Mapping) else type(obj).__name__
        raise CheckpointError(
            f"{name}: not a {LAYOUT} checkpoint: expected {{'generator': state dict}} (exported) or a training "
            f"checkpoint with 'state_dict', found {found}"
        )
    report = ImportReport(LAYOUT, name)
    discs: dict[str, StateDict] = {}
    if "generator" in obj:
        gen = tensors_only(obj["generator"], "the generator's state dict", name)
        for key in obj:
            if key != "generator":
                report.skipped.append((key, "not weights"))
    else:
        full = tensors_only(obj["state_dict"], "a state dict", name)
        gen = {k[len("generator.") :]: v for k, v in full.items() if k.startswith("generator.")}
        for key, tensor in full.items():
            m = re.match(r"^discriminator\.(\w+)\.(.+)$", key)
            if m:
                discs.setdefault(m.group(1), {})[m.group(2)] = tensor
            elif not key.startswith("generator."):
                report.skipped.append((key, "not part of our model (loss buffers, EMA, ...)"))
        for key in obj:
            if key != "state_dict":
                report.skipped.append((key, "trainer state: fine-tuning starts a fresh optimizer"))
    if not any(k.startswith(("m_source.", "source_conv.")) for k in gen):
        raise CheckpointError(
            f"{name}: the generator has no harmonic source (m_source / source_conv): a plain HiFi-GAN? import it "
            f"with speechtrain.models.hifigan.importers.import_jik876"
        )
    out = {"generator": map_state_dict(gen, lambda k: k, report, "generator.", "generator.")}
    targets = {"mpd": ("mpd", lambda k: k), "msd": ("msd", lambda k: k), "mrd": ("mrsd", _mrd_name)}
    for disc, sd in discs.items():
        if disc not in targets:
            raise CheckpointError(
                f"{name}: discriminator '{disc}' is not one we have (mpd, msd, mrd); import the generator only "
                f"from its exported file (export_ckpt.py)"
            )
        ours, rename = targets[disc]
        out[ours] = map_state_dict(sd, rename, report, f"discriminator.{disc}.", f"{ours}.")
    return ImportedCheckpoint(out, report)


def config_overrides(config_json: Mapping[str, Any]) -> list[str]:
    """``key=value`` overrides for our config from an exported model's ``config.json`` (their key names)."""
    c = config_json
    pairs = {
        "data.sample_rate": c.get("sampling_rate"),
        "data.n_mels": c.get("num_mels"),
        "data.hop_length": c.get("hop_size"),
        "data.n_fft": c.get("n_fft"),
        "data.win_length": c.get("win_size"),
        "data.fmin": c.get("fmin"),
        "data.fmax": c.get("fmax"),
        "model.mini_nsf": c.get("mini_nsf"),
        "model.noise_sigma": c.get("noise_sigma"),
        "model.upsample_rates": c.get("upsample_rates"),
        "model.upsample_kernel_sizes": c.get("upsample_kernel_sizes"),
        "model.upsample_initial_channel": c.get("upsample_initial_channel"),
        "model.resblock": c.get("resblock"),
        "model.resblock_kernel_sizes": c.get("resblock_kernel_sizes"),
        "model.resblock_dilation_sizes": c.get("resblock_dilation_sizes"),
        "model.periods": c.get("discriminator_periods"),
    }
    return [f"{k}={_yaml(v)}" for k, v in pairs.items() if v is not None]


def _yaml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    return str(value).replace(" ", "")


def _is_singingvocoders(obj: Any) -> bool:
    if not isinstance(obj, Mapping):
        return False
    gen = obj.get("generator")
    source = isinstance(gen, Mapping) and any(str(k).startswith(("m_source.", "source_conv.")) for k in gen)
    return "state_dict" in obj or source


#: what ``train.init_from`` reads for this family (collected by ``speechtrain.registry.checkpoint_importers``)
IMPORTERS = [
    CheckpointImporter(
        "a SingingVocoders NSF-HiFiGAN checkpoint (exported generator or Lightning training checkpoint)",
        _is_singingvocoders,
        lambda obj, second, trust: import_singingvocoders(obj, trust),
    )
]
