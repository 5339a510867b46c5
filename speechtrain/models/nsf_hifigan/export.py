"""Write an NSF-HiFiGAN generator in openvpi/SingingVocoders' export layout (``export_ckpt.py``).

The layout DiffSinger, DDSP-SVC, Diffusion-SVC and so-vits-svc read (and DiffSinger's ``scripts/export.py``
turns into OpenUtau's ONNX): a folder with

- ``model.ckpt``: ``{"generator": state dict}`` in their ``Generator``'s names, weight norm stored the legacy
  way (``weight_g`` / ``weight_v``, as ``torch.nn.utils.weight_norm`` saves it), float32;
- ``config.json``: their ``model_args`` (generator shape, ``mini_nsf``, ``noise_sigma``, discriminator periods
  and the fast discriminators' keys when used) plus the features (``sampling_rate``, ``num_mels``,
  ``hop_size``, ``n_fft``, ``win_size``, ``fmin``, ``fmax``) and ``pc_aug``.

Their generator hard-codes parts of the source that are settings here (8 overtones, sine amplitude 0.1, noise
0.003, voiced above 0 Hz) and builds jik876's residual blocks (three dilations per ResBlock1): a model with
other values cannot be written, and says which key differs. Their generator adds ``noise_sigma`` noise after
``conv_pre`` at inference too, ours only in training: ``config.json`` carries ``noise_sigma: 0.0``, what our
synthesis uses (the training value is kept as ``train_noise_sigma``). Their users feed f0 on their grid (f0
frame ``i`` at sample ``i x hop``): a run measured on another grid (``data.f0_frame_offset``) is written with
a warning, on every NSF export (:func:`f0_grid_warning`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from speechtrain.errors import UserError
from speechtrain.logs import get_logger
from speechtrain.models.importing import weight_norm_from_plain

if TYPE_CHECKING:
    from speechtrain.data.features import MelSettings
    from speechtrain.models.nsf_hifigan.config import NSFHiFiGANConfig

log = get_logger(__name__)

FORMAT = "singingvocoders"
#: speechtrain trains without SingingVocoders' PC-NSF augmentation (pitch-shifted mels with the shifted f0):
#: their config.json's ``pc_aug`` and OpenUtau's ``pitch_controllable`` (DiffSinger writes pc_aug there)
PC_AUG = False
#: the source settings their Generator fixes (SourceModuleHnNSF(sampling_rate, harmonic_num=8) and SineGen's
#: defaults); mini_nsf's sine has no overtones or noise, so only the harmonic source is bound by them
FIXED_SOURCE = {"harmonic_num": 8, "sine_amp": 0.1, "noise_std": 0.003, "voiced_threshold": 0.0}
_WEIGHT_NORMED = re.compile(r"^(conv_pre|conv_post|ups\.\d+|resblocks\.\d+\.convs[12]?\.\d+)$")  # in their layout
_PARAMETRIZED = re.compile(r"^(.*)\.parametrizations\.weight\.original([01])$")


def legacy_state_dict(generator: nn.Module) -> dict[str, torch.Tensor]:
    """The generator's tensors in their names: ``weight_g`` / ``weight_v`` for weight-normed layers (also
    when the norm was folded for inference), float32 on the CPU, contiguous."""
    out: dict[str, torch.Tensor] = {}
    for key, tensor in generator.state_dict().items():
        t = tensor.detach().to("cpu", torch.float32).contiguous()
        m = _PARAMETRIZED.match(key)
        if m:
            out[f"{m.group(1)}.weight_{'g' if m.group(2) == '0' else 'v'}"] = t
        elif key.endswith(".weight") and _WEIGHT_NORMED.match(key[: -len(".weight")]):
            g, v = weight_norm_from_plain(t)  # weight norm folded (remove_weight_norm): written back as g, v
            out[key[: -len(".weight")] + ".weight_g"], out[key[: -len(".weight")] + ".weight_v"] = g, v
        else:
            out[key] = t
    return out


def export_config(model: NSFHiFiGANConfig, mel: MelSettings) -> dict[str, Any]:
    """``config.json`` as their ``export_ckpt.py`` writes it, for ``model`` and the run's mel settings."""
    config: dict[str, Any] = {
        "mini_nsf": bool(model.mini_nsf),
        "noise_sigma": 0.0,  # their Generator adds it at inference; our synthesis adds none
        "train_noise_sigma": float(model.noise_sigma),
        "upsample_rates": [int(r) for r in model.upsample_rates],
        "upsample_kernel_sizes": [int(k) for k in model.upsample_kernel_sizes],
        "upsample_initial_channel": int(model.upsample_initial_channel),
        "resblock": str(model.resblock),
        "resblock_kernel_sizes": [int(k) for k in model.resblock_kernel_sizes],
        "resblock_dilation_sizes": [[int(d) for d in ds] for ds in model.resblock_dilation_sizes],
        "discriminator_periods": [int(p) for p in model.periods],
    }
    if model.period_discriminator == "fast":
        if model.fast_mpd_periods is not None:
            config["fast_mpd_periods"] = [int(p) for p in model.fast_mpd_periods]
        config["fast_mpd_init_channel"] = int(model.fast_mpd_init_channel)
        config["fast_mpd_strides"] = [int(s) for s in model.fast_mpd_strides]
        config["fast_mpd_kernel_size"] = int(model.fast_mpd_kernel_size)
    if model.scale_discriminator == "fast_mrd":
        config["fast_mrd_init_channel"] = int(model.fast_mrd_init_channel)
        config["fast_mrd_strides"] = [int(s) for s in model.fast_mrd_strides]
        config["fast_mrd_fft_sizes"] = [int(n) for n in model.fast_mrd_fft_sizes]
        config["fast_mrd_hop_sizes"] = [int(h) for h in model.fast_mrd_hop_sizes]
        config["fast_mrd_win_lengths"] = [int(w) for w in model.fast_mrd_win_lengths]
    config |= {
        "sampling_rate": int(mel.sample_rate),
        "num_mels": int(mel.n_mels),
        "hop_size": int(mel.hop_length),
        "n_fft": int(mel.n_fft),
        "win_size": int(mel.win_length),
        "fmin": float(mel.fmin),
        "fmax": None if mel.fmax is None else float(mel.fmax),
        "pc_aug": PC_AUG,
    }
    return config


def exportable_problems(model: NSFHiFiGANConfig) -> list[str]:
    """Why their Generator cannot hold this model (each with the recipe change; empty: it can)."""
    from speechtrain.models.hifigan.upstream import resblock_problems

    problems = resblock_problems(
        model.resblock,
        model.resblock_kernel_sizes,
        model.resblock_dilation_sizes,
        model.upsample_rates,
        model.upsample_kernel_sizes,
    )
    if model.mini_nsf:
        return problems
    for key, theirs in FIXED_SOURCE.items():
        ours = getattr(model, key)
        if float(ours) != float(theirs):
            problems.append(
                f"their Generator fixes {key}={theirs} in its harmonic source, this model was trained with "
                f"model.{key}={ours}: it cannot be written in their layout (train with {key}={theirs}, or use "
                "model.mini_nsf=true)"
            )
    return problems


def check_exportable(model: NSFHiFiGANConfig) -> None:
    """UserError naming the settings their Generator cannot hold."""
    problems = exportable_problems(model)
    if problems:
        raise UserError(f"--format {FORMAT}: " + "; ".join(problems))


def f0_grid_warning(f0_frame_offset: float) -> str | None:
    """What an NSF export says when the run measured f0 on another grid than DiffSinger and OpenUtau feed it."""
    if f0_frame_offset == 0.0:
        return None
    return (
        f"this run measured f0 frame i at (i + {f0_frame_offset}) x hop; DiffSinger and OpenUtau give f0 frame i at "
        f"sample i x hop (data.f0_frame_offset=0.0), so the f0 they feed is read {f0_frame_offset} hop early (a "
        "fine-tune with data.f0_frame_offset=0.0 removes the offset)"
    )


def export_singingvocoders(
    generator: nn.Module, model: NSFHiFiGANConfig, mel: MelSettings, out_dir: str | Path, f0_frame_offset: float = 0.0
) -> Path:
    """Write ``generator`` (trained with ``model`` on features ``mel``) as ``OUT/model.ckpt`` + ``OUT/config.json``;
    returns the folder. ``f0_frame_offset``: the run's f0 grid (their users give f0 on 0.0: warned otherwise)."""
    check_exportable(model)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    torch.save({"generator": legacy_state_dict(generator)}, out / "model.ckpt")
    (out / "config.json").write_text(json.dumps(export_config(model, mel), indent=1) + "\n", encoding="utf-8")
    warning = f0_grid_warning(f0_frame_offset)
    if warning:
        log.warning(f"export: {warning}")
    if model.noise_sigma > 0:
        log.info(
            f"export: trained with noise_sigma={model.noise_sigma}; config.json says noise_sigma 0.0, as speechtrain "
            "synthesizes (their generator would add that noise at inference too)"
        )
    return out
