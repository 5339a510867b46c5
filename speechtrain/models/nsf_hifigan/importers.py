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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from speechtrain.errors import CheckpointError
from speechtrain.logs import get_logger
from speechtrain.models.importing import (
    CheckpointImporter,
    ImportedCheckpoint,
    ImportReport,
    StateDict,
    map_state_dict,
    modern_norm_names,
    read_checkpoint,
    tensors_only,
)

log = get_logger(__name__)

LAYOUT = "openvpi/SingingVocoders NSF-HiFiGAN"
Source = str | os.PathLike[str] | Mapping[str, Any]
_MRD = re.compile(r"^discriminators\.(\d+)\.(discriminators\.(\d+)|out)\.(.+)$")
_CONV_STACK = re.compile(r"^discriminators\.\d+\.(convs\.\d+|conv_post)\.")  # HiFi-GAN's MPD / MSD
_FAST_MPD = re.compile(r"^discriminators\.(\d+)\.(pre|post|residual_layers\.(\d+)\.net\.(\d+))\.(weight|bias)$")
_FAST_MRD = re.compile(r"^discriminators\.(\d+)\.(pre|freq|post|layers\.(\d+)\.net\.(\d+))\.(weight|bias)$")
_FAST_MPD_NET = {"1": "conv", "3": "fc1", "5": "fc2", "7": "proj"}  # LYNXNet2Block.net index -> our name
_FAST_MRD_NET = {"1": "conv", "4": "proj"}  # ResBlock.net index -> our name
_BUFFER_WHY = "an STFT window / frequency-bin position buffer: recomputed from the config"


def _mrd_name(key: str) -> str | None:
    m = _MRD.match(key)
    if not m:
        return None
    inner = f"convs.{m.group(3)}" if m.group(3) is not None else "conv_post"
    return f"discriminators.{m.group(1)}.{inner}.{m.group(4)}"


def _fast_name(key: str, pattern: re.Pattern[str], net: dict[str, str]) -> str | None:
    """Our name of a FastMPD / FastMRD tensor (their ``residual_layers`` / ``layers`` are our ``blocks``), None
    if not one of theirs."""
    m = pattern.match(key)
    if not m:
        return None
    if m.group(3) is None:
        return key
    ours = net.get(m.group(4))
    return None if ours is None else f"discriminators.{m.group(1)}.blocks.{m.group(3)}.{ours}.{m.group(5)}"


@dataclass(frozen=True)
class _Kind:
    """How one of their discriminators maps onto one of ours."""

    module: str  # our module
    rename: Callable[[str], str | None]  # their key (norm names modernised) -> ours; None: not of this layout
    buffers: tuple[str, ...] = ()  # key endings of buffers we recompute (skipped, with the reason)


_KINDS = {
    "mpd": _Kind("mpd", lambda k: k if _CONV_STACK.match(k) else None),
    "msd": _Kind("msd", lambda k: k if _CONV_STACK.match(k) else None),
    "mrd": _Kind("mrsd", _mrd_name, (".window",)),
    "fast_mpd": _Kind("fast_mpd", lambda k: _fast_name(k, _FAST_MPD, _FAST_MPD_NET)),
    "fast_mrd": _Kind("fast_mrd", lambda k: _fast_name(k, _FAST_MRD, _FAST_MRD_NET), (".window", ".freq_coords")),
}


def _kind(disc: str, sd: Mapping[str, torch.Tensor]) -> str:
    """Which of their discriminators ``discriminator.<disc>.*`` is, read from its tensor names: their fast task
    keeps the names mpd / mrd for FastMPD / FastMRD."""
    if disc == "mpd" and any(".residual_layers." in k or re.match(r"^discriminators\.\d+\.pre\.", k) for k in sd):
        return "fast_mpd"
    if disc == "mrd" and any(re.match(r"^discriminators\.\d+\.(pre|freq|layers)\.", k) for k in sd):
        return "fast_mrd"
    return disc


def _map_discriminator(
    disc: str, sd: Mapping[str, torch.Tensor], report: ImportReport, name: str
) -> tuple[str, StateDict, str]:
    """(our module, its state dict, config hint) for their ``discriminator.<disc>`` tensors; every tensor is
    mapped or skipped with the reason, or the import is refused naming the ones of no known layout."""
    kind = _kind(disc, sd)
    if kind not in _KINDS:
        raise CheckpointError(
            f"{name}: discriminator '{disc}' is not one we have (mpd, msd, mrd, or the fast task's FastMPD / FastMRD "
            f"under mpd / mrd); import the generator only from its exported file (export_ckpt.py)"
        )
    k = _KINDS[kind]
    modern = modern_norm_names(sd)
    weights = {key: t for key, t in sd.items() if not key.endswith(k.buffers) or k.rename(modern[key]) is not None}
    unknown = [f"discriminator.{disc}.{key}" for key in weights if k.rename(modern[key]) is None]
    if unknown:
        raise CheckpointError(
            f"{name}: {len(unknown)} tensor(s) of discriminator '{disc}' fit no layout we know ({kind}), e.g. "
            f"{unknown[:3]}: nothing was imported"
        )
    for key in sd:
        if key not in weights:
            report.skipped.append((f"discriminator.{disc}.{key}", _BUFFER_WHY))
    mapped = map_state_dict(weights, lambda key: k.rename(key), report, f"discriminator.{disc}.", f"{k.module}.")
    try:
        hint = _hint(kind, sd)
    except (KeyError, IndexError, ZeroDivisionError):  # a partial state dict: the load names what is missing
        hint = f"the config of a {kind} discriminator"
    return k.module, mapped, hint


def _hint(kind: str, sd: Mapping[str, torch.Tensor]) -> str:
    """The config keys that build our module as the checkpoint's tensors have it (what their shapes tell)."""
    n = len({key.split(".")[1] for key in sd if key.startswith("discriminators.")})
    if kind in ("mpd", "fast_mpd"):
        base = "model.period_discriminator=" + ("fast" if kind == "fast_mpd" else "hifigan")
        if kind == "fast_mpd":
            pre = sd["discriminators.0.pre.weight"]  # (init_channel x s0, s0)
            dims = [sd[f"discriminators.0.residual_layers.{i}.net.7.weight"].shape[0] for i in range(_count(sd))]
            strides = [pre.shape[1]] + [b // a for a, b in zip(dims, dims[1:])]
            kernel = sd["discriminators.0.residual_layers.0.net.1.weight"].shape[-1]
            base += (
                f" model.fast_mpd_init_channel={pre.shape[0] // pre.shape[1]} model.fast_mpd_strides="
                f"{_list(strides)} model.fast_mpd_kernel_size={kernel}"
            )
        return f"{base}, and {n} periods in model.periods (a state dict does not record which)"
    if kind == "fast_mrd":
        pre = sd["discriminators.0.pre.weight"]
        dims = [sd[f"discriminators.0.layers.{i}.net.4.weight"].shape[0] for i in range(_count(sd, "layers"))]
        strides = [pre.shape[1]] + [b // a for a, b in zip(dims, dims[1:])]
        ffts = [
            2 * (sd[f"discriminators.{i}.freq_coords"].shape[0] - 1) for i in range(n) if _has(sd, i, "freq_coords")
        ]
        wins = [sd[f"discriminators.{i}.window"].shape[0] for i in range(n) if _has(sd, i, "window")]
        return (
            f"model.scale_discriminator=fast_mrd model.fast_mrd_init_channel={pre.shape[0] // pre.shape[1]} "
            f"model.fast_mrd_strides={_list(strides)}"
            + (f" model.fast_mrd_fft_sizes={_list(ffts)}" if len(ffts) == n else "")
            + (f" model.fast_mrd_win_lengths={_list(wins)}" if len(wins) == n else "")
            + f" ({n} resolutions; their hop sizes are not recorded)"
        )
    if kind == "mrd":
        return f"model.scale_discriminator=mrsd with {n} entries in model.mrsd_resolutions"
    return f"model.scale_discriminator=msd with model.msd_scales={n}"


def _count(sd: Mapping[str, torch.Tensor], blocks: str = "residual_layers") -> int:
    return len({key.split(".")[3] for key in sd if key.startswith(f"discriminators.0.{blocks}.")})


def _has(sd: Mapping[str, torch.Tensor], i: int, buffer: str) -> bool:
    return f"discriminators.{i}.{buffer}" in sd


def _list(values: list[int]) -> str:
    return "[" + ",".join(str(int(v)) for v in values) + "]"


def import_singingvocoders(checkpoint: Source, trust_pickle: bool = False) -> ImportedCheckpoint:
    """State dicts for our ``generator`` (and the discriminators of a training checkpoint: ``mpd``, ``msd`` /
    ``mrsd``, or their fast task's ``fast_mpd`` and ``fast_mrd``) from a SingingVocoders NSF-HiFiGAN file, with a
    report of every tensor."""
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
    hints = {"generator": _generator_hint(gen)}
    for disc, sd in discs.items():
        module, mapped, hint = _map_discriminator(disc, sd, report, name)
        out[module], hints[module] = mapped, hint
    return ImportedCheckpoint(out, report, hints=hints)


def _generator_hint(gen: Mapping[str, torch.Tensor]) -> str:
    mini = any(k.startswith("source_conv.") for k in gen)
    pre = next((v for k, v in gen.items() if k.startswith("conv_pre.") and k.endswith(("weight_v", "original1"))), None)
    channels = f" model.upsample_initial_channel={pre.shape[0]}" if pre is not None else ""
    return f"model.mini_nsf={'true' if mini else 'false'}{channels} (rates and kernels as its config.json)"


# config.json feature keys -> ours (model keys keep their names)
_FEATURES = (
    ("sampling_rate", "data.sample_rate"),
    ("num_mels", "data.n_mels"),
    ("hop_size", "data.hop_length"),
    ("n_fft", "data.n_fft"),
    ("win_size", "data.win_length"),
    ("fmin", "data.fmin"),
    ("fmax", "data.fmax"),
)
_MODEL = (
    "mini_nsf",
    "noise_sigma",
    "upsample_rates",
    "upsample_kernel_sizes",
    "upsample_initial_channel",
    "resblock",
    "resblock_kernel_sizes",
    "resblock_dilation_sizes",
    "fast_mpd_periods",
    "fast_mpd_init_channel",
    "fast_mpd_strides",
    "fast_mpd_kernel_size",
    "fast_mrd_init_channel",
    "fast_mrd_strides",
    "fast_mrd_fft_sizes",
    "fast_mrd_hop_sizes",
    "fast_mrd_win_lengths",
)
_TRAINING = "not a model or feature setting (training of theirs)"


@dataclass
class ExportedConfig:
    """What an exported model's ``config.json`` says, in our terms: ``key=value`` overrides, and each key read
    but not carried over, with the reason."""

    overrides: list[str]
    not_carried: list[tuple[str, str]] = field(default_factory=list)


def read_exported_config(config_json: Mapping[str, Any]) -> ExportedConfig:
    """Overrides for our config from an exported model's ``config.json`` (their key names), and what has none.

    Their fast task reads the ``fast_mpd_*`` (and ``fast_mrd_*``) keys of ``model_args``, which the export copies
    into ``config.json``: when present, the discriminators of a fine-tune are FastMPD and FastMRD as theirs.
    ``pc_aug: true`` (their PC-NSF training) has no equivalent here: it is listed, and logged by
    :func:`config_overrides`."""
    c = config_json
    pairs: dict[str, Any] = {ours: c.get(theirs) for theirs, ours in _FEATURES}
    pairs |= {f"model.{key}": c.get(key) for key in _MODEL}
    if c.get("train_noise_sigma") is not None:  # our export: noise_sigma is what inference adds (0), this trained
        pairs["model.noise_sigma"] = c["train_noise_sigma"]
    pairs["model.periods"] = c.get("discriminator_periods")
    if any(key.startswith(("fast_mpd_", "fast_mrd_")) for key in c):
        pairs["model.period_discriminator"] = "fast"
        pairs["model.scale_discriminator"] = "fast_mrd"
    out = ExportedConfig([f"{k}={_yaml(v)}" for k, v in pairs.items() if v is not None])
    known = {t for t, _ in _FEATURES} | set(_MODEL) | {"discriminator_periods", "pc_aug", "train_noise_sigma"}
    for key, value in c.items():
        if key == "pc_aug" and value:
            out.not_carried.append(
                (
                    "pc_aug",
                    "trained with SingingVocoders' PC-NSF augmentation (pc_aug), which speechtrain does not "
                    "implement: the generator loads and vocodes the same; a fine-tune here trains it without it",
                )
            )
        elif key not in known:
            out.not_carried.append((key, _TRAINING))
    return out


def config_overrides(config_json: Mapping[str, Any]) -> list[str]:
    """``key=value`` overrides for our config from an exported model's ``config.json`` (their key names); keys
    with no equivalent that change what the model is (``pc_aug: true``) are logged as warnings
    (:func:`read_exported_config` lists every key not carried)."""
    read = read_exported_config(config_json)
    for key, why in read.not_carried:
        if why != _TRAINING:
            log.warning(f"config.json: {key}: {why}")
    return read.overrides


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
