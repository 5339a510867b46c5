"""From a log-mel back to audio: a trained vocoder run when one is given, else Griffin-Lim (torch only).

Griffin-Lim needs no training, so every TTS family can be listened to from its first checkpoint; a
HiFi-GAN run (``speechtrain train`` with ``model.name=hifigan``) sounds far better and is used through
its task's ``vocode(mel)`` (the inference recipe loads the run).
"""

from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from speechtrain.data.features import mel_filterbank
from speechtrain.errors import UserError

if TYPE_CHECKING:
    from speechtrain.config import DataConfig


@functools.lru_cache(maxsize=8)
def _inverse_filterbank(sample_rate: int, n_fft: int, n_mels: int, fmin: float, fmax: float | None) -> torch.Tensor:
    fb = torch.from_numpy(mel_filterbank(sample_rate, n_fft, n_mels, fmin, fmax)).double()  # (n_mels, F)
    return torch.linalg.pinv(fb).float()  # (F, n_mels)


def mel_to_linear(mel: torch.Tensor, data_cfg: DataConfig) -> torch.Tensor:
    """Linear magnitude (..., n_fft // 2 + 1, T_frames) from a natural-log mel (..., n_mels, T_frames)."""
    d = data_cfg
    inv = _inverse_filterbank(d.sample_rate, d.n_fft, d.n_mels, d.fmin, d.fmax).to(mel.device)
    return torch.clamp(inv @ torch.exp(mel.float()), min=1e-5)  # least squares, made non-negative


def griffin_lim(
    magnitude: torch.Tensor,
    n_fft: int,
    hop_length: int,
    win_length: int,
    iterations: int = 32,
    momentum: float = 0.99,
    seed: int = 0,
) -> torch.Tensor:
    """Fast Griffin-Lim (with momentum): magnitude (F, T_frames) -> audio (T_frames * hop_length,)."""
    window = torch.hann_window(win_length, device=magnitude.device)
    n_frames = magnitude.shape[-1]
    length = n_frames * hop_length
    gen = torch.Generator(device="cpu").manual_seed(seed)
    phase = torch.rand(magnitude.shape, generator=gen).to(magnitude.device) * 2 * torch.pi
    angles = torch.polar(torch.ones_like(magnitude), phase)  # (F, T_frames) complex
    previous = torch.zeros_like(angles)

    def stft(audio: torch.Tensor) -> torch.Tensor:
        spec = torch.stft(audio, n_fft, hop_length, win_length, window, center=True, return_complex=True)
        return spec[..., :n_frames]

    def istft(spec: torch.Tensor) -> torch.Tensor:
        return torch.istft(spec, n_fft, hop_length, win_length, window, center=True, length=length)

    for _ in range(iterations):
        rebuilt = stft(istft(magnitude * angles))
        update = rebuilt - (momentum / (1 + momentum)) * previous
        previous = rebuilt
        angles = update / update.abs().clamp_min(1e-8)
    return istft(magnitude * angles)  # (T_samples,)


def griffin_lim_from_mel(mel: torch.Tensor, data_cfg: DataConfig, iterations: int = 32) -> np.ndarray:
    """Audio (T_frames * hop_length,) float32 in [-1, 1] from one log-mel (n_mels, T_frames) by Griffin-Lim."""
    d = data_cfg
    with torch.no_grad():
        audio = griffin_lim(mel_to_linear(mel, d), d.n_fft, d.hop_length, d.win_length, iterations)
    host = audio.cpu().numpy().astype(np.float32)  # host copy: the result leaves the device
    peak = float(np.abs(host).max()) if host.size else 0.0
    return host / peak * 0.95 if peak > 0.95 else host


def _check_same_features(vocoder_data: DataConfig | None, data_cfg: DataConfig) -> None:
    if vocoder_data is None:
        return
    keys = ("sample_rate", "hop_length", "n_mels", "n_fft", "fmin", "fmax")
    diff = [k for k in keys if getattr(vocoder_data, k, None) != getattr(data_cfg, k)]
    if diff:
        pairs = ", ".join(
            f"data.{k}: vocoder {getattr(vocoder_data, k, None)} vs model {getattr(data_cfg, k)}" for k in diff
        )
        raise UserError(f"the vocoder was trained on different mel features ({pairs}); use a matching vocoder run")


def mel_to_audio(
    mel: torch.Tensor | np.ndarray,
    data_cfg: DataConfig,
    vocoder_run: Any = None,
    griffin_lim_iters: int = 32,
) -> np.ndarray:
    """Audio (1-D float32 numpy at data_cfg.sample_rate) of one log-mel (n_mels, T_frames).

    ``vocoder_run``: an object with ``vocode(mel)`` (a loaded vocoder run: its ``cfg.data``, when it
    has one, must match ``data_cfg``'s mel features; :class:`speechtrain.recipes.inference.InferenceRecipe`
    loads a run directory into one); None uses Griffin-Lim.
    """
    mel_t = torch.as_tensor(mel, dtype=torch.float32)
    if mel_t.dim() == 3:
        mel_t = mel_t[0]
    if vocoder_run is None:
        return griffin_lim_from_mel(mel_t, data_cfg, griffin_lim_iters)
    if isinstance(vocoder_run, (str, os.PathLike)):
        raise UserError(
            f"vocoder_run={vocoder_run!s}: a run directory is loaded by the inference recipe "
            "(speechtrain.recipes.inference.InferenceRecipe, or `speechtrain synthesize --vocoder RUN_DIR`)"
        )
    # a loaded run carries its config: its mel features are checked against ours
    vocoder, vocoder_data = vocoder_run, getattr(getattr(vocoder_run, "cfg", None), "data", None)
    _check_same_features(vocoder_data, data_cfg)
    audio = vocoder.vocode(mel_t)
    if isinstance(audio, torch.Tensor):
        audio = audio.detach().float().cpu().numpy()  # host copy: the result leaves the device
    return np.asarray(audio, dtype=np.float32).reshape(-1)
