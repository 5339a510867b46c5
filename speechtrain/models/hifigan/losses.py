"""GAN vocoder losses: LSGAN adversarial, feature matching, log-mel L1, multi-resolution STFT.

The spectral losses run in fp32 with autocast off: a log of a small fp16 magnitude is where mixed
precision turns a vocoder's loss into inf/NaN.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from speechtrain.models.hifigan.model import DEFAULT_RESOLUTIONS


def discriminator_loss(real_logits: Sequence[torch.Tensor], fake_logits: Sequence[torch.Tensor]) -> torch.Tensor:
    """LSGAN discriminator loss: sum over sub-discriminators of mean((1 - D(y))^2) + mean(D(y_hat)^2)."""
    total = real_logits[0].new_zeros((), dtype=torch.float32)
    for r, f in zip(real_logits, fake_logits):
        total = total + torch.mean((1 - r.float()) ** 2) + torch.mean(f.float() ** 2)
    return total


def generator_adversarial_loss(fake_logits: Sequence[torch.Tensor]) -> torch.Tensor:
    """LSGAN generator loss: sum over sub-discriminators of mean((1 - D(y_hat))^2)."""
    total = fake_logits[0].new_zeros((), dtype=torch.float32)
    for f in fake_logits:
        total = total + torch.mean((1 - f.float()) ** 2)
    return total


def feature_matching_loss(
    real_fmaps: Sequence[Sequence[torch.Tensor]], fake_fmaps: Sequence[Sequence[torch.Tensor]]
) -> torch.Tensor:
    """Sum over sub-discriminators and layers of mean |D_l(y) - D_l(y_hat)| (real maps are targets: detached)."""
    total = fake_fmaps[0][0].new_zeros((), dtype=torch.float32)
    for rs, fs in zip(real_fmaps, fake_fmaps):
        for r, f in zip(rs, fs):
            total = total + torch.mean(torch.abs(r.detach().float() - f.float()))
    return total


def _stft_magnitude(x: torch.Tensor, n_fft: int, hop_length: int, win_length: int) -> torch.Tensor:
    window = torch.hann_window(win_length, device=x.device, dtype=torch.float32)
    spec = torch.stft(x, n_fft, hop_length, win_length, window, center=True, return_complex=True)
    return torch.sqrt(torch.clamp(spec.real.pow(2) + spec.imag.pow(2), min=1e-7))  # (B, n_fft // 2 + 1, frames)


def multi_resolution_stft_loss(
    y: torch.Tensor,
    y_hat: torch.Tensor,
    resolutions: Sequence[tuple[int, int, int]] = DEFAULT_RESOLUTIONS,
) -> torch.Tensor:
    """Mean over ``(n_fft, hop_length, win_length)`` resolutions of spectral convergence + log-magnitude L1.

    ``y``, ``y_hat``: ``(B, 1, T_samples)`` or ``(B, T_samples)``; computed in fp32 with autocast off.
    """
    with torch.autocast(y_hat.device.type, enabled=False):
        a = y.float().reshape(-1, y.shape[-1])
        b = y_hat.float().reshape(-1, y_hat.shape[-1])
        total = a.new_zeros(())
        for n_fft, hop, win in resolutions:
            mag_a, mag_b = _stft_magnitude(a, n_fft, hop, win), _stft_magnitude(b, n_fft, hop, win)
            sc = torch.linalg.norm(mag_a - mag_b) / torch.clamp(torch.linalg.norm(mag_a), min=1e-7)
            total = total + sc + F.l1_loss(torch.log(mag_b), torch.log(mag_a))
        return total / len(resolutions)


def mel_l1_loss(target_mel: torch.Tensor, pred_mel: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
    """L1 between log-mels ``(B, n_mels, T_frames)``, fp32; with ``lengths`` only real frames count."""
    with torch.autocast(pred_mel.device.type, enabled=False):
        diff = torch.abs(target_mel.float() - pred_mel.float())  # (B, n_mels, T_frames)
        if lengths is None:
            return diff.mean()
        t = diff.shape[-1]
        mask = (torch.arange(t, device=diff.device)[None, :] < lengths[:, None]).to(diff.dtype)  # (B, T_frames)
        denom = torch.clamp(mask.sum() * diff.shape[1], min=1.0)
        return (diff * mask[:, None, :]).sum() / denom
