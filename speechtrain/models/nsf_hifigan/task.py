"""NSF-HiFiGAN as a Task: HiFi-GAN's two stages (``disc``, ``gen``) on crops of (mel, f0, audio).

f0 comes from the feature cache (``data.f0_method``: ``prepare`` measures it once per utterance, one value
per mel frame at the centre of the frame's hop, 0 where unvoiced, :mod:`speechtrain.data.pitch`); the
loader crops it with the mel and the audio, so the three stay aligned frame for frame (and a key-shifted
crop carries its f0 scaled with it, :mod:`speechtrain.data.augment`). Before the source, unvoiced gaps are
filled log-linearly (``model.f0_interpolate``, as SingingVocoders) and f0 is kept below the source's
Nyquist frequency.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from speechtrain.config import ConfigError
from speechtrain.data.batch import Batch
from speechtrain.data.features import MelSettings
from speechtrain.data.pitch import F0Settings, interpolate_unvoiced
from speechtrain.errors import DataError, UserError
from speechtrain.models.hifigan.task import HiFiGANTask
from speechtrain.models.nsf_hifigan.model import NSFGenerator
from speechtrain.train.task import Needs

if TYPE_CHECKING:
    from speechtrain.config import DataConfig
    from speechtrain.models.nsf_hifigan.config import NSFHiFiGANConfig


def build_nsf_generator(model_cfg: Any, n_mels: int, sample_rate: int) -> NSFGenerator:
    """The generator described by a :class:`~speechtrain.models.nsf_hifigan.config.NSFHiFiGANConfig`."""
    m = model_cfg
    return NSFGenerator(
        n_mels,
        sample_rate,
        m.upsample_initial_channel,
        list(m.upsample_rates),
        list(m.upsample_kernel_sizes),
        list(m.resblock_kernel_sizes),
        [list(d) for d in m.resblock_dilation_sizes],
        resblock=m.resblock,
        mini_nsf=m.mini_nsf,
        harmonic_num=m.harmonic_num,
        sine_amp=m.sine_amp,
        noise_std=m.noise_std,
        voiced_threshold=m.voiced_threshold,
        noise_sigma=m.noise_sigma,
    )


class NSFHiFiGANTask(HiFiGANTask):
    """Mel + f0 -> waveform GAN vocoder. Headline: ``mel_l1``, as HiFi-GAN."""

    cfg: NSFHiFiGANConfig
    generator: NSFGenerator
    #: ``speechtrain export RUN OUT --format singingvocoders`` (:meth:`export`)
    export_format = "singingvocoders"
    quality_kind = "pitch_vocoder"

    def _build_generator(self, model_cfg: Any, data_cfg: Any) -> nn.Module:
        self.mel_settings = MelSettings.from_data(data_cfg)
        self.f0_settings = F0Settings.from_data(data_cfg) or F0Settings("yin", data_cfg.f0_min, data_cfg.f0_max)
        return build_nsf_generator(model_cfg, int(data_cfg.n_mels), int(data_cfg.sample_rate))

    def needs(self) -> Needs:
        return Needs(mel=True, audio=True, f0=True)

    # --- f0 ------------------------------------------------------------------------------------
    def f0_from_audio(self, audio: np.ndarray | torch.Tensor) -> np.ndarray:
        """f0 (T_frames,) Hz, 0 = unvoiced, of one 1-D signal at the run's sample rate, measured as ``prepare``
        measures it (``data.f0_method``, ``data.f0_min``, ``data.f0_max``)."""
        return self.f0_settings.extract(audio, self.sample_rate, self.hop_length)

    def batch_f0(self, batch: Batch) -> torch.Tensor:
        """The source f0 (B, T_frames) of a batch: its cached ``f0``, gaps filled."""
        if "f0" not in batch:
            raise DataError(
                "the batch has no f0: an NSF vocoder reads it from the feature cache; build the loader with the "
                "task's needs (Needs.f0) and prepare with data.f0_method set"
            )
        f0 = batch["f0"].float()  # (B, T_frames), 0 = unvoiced
        n_frames = int(batch["mel"].shape[-1])
        if f0.shape[-1] != n_frames:
            raise DataError(f"batch f0 has {f0.shape[-1]} frames, its mel {n_frames}: one f0 per mel frame")
        return self.prepare_f0(f0)

    def prepare_f0(self, f0: torch.Tensor) -> torch.Tensor:
        """Unvoiced gaps (0) filled log-linearly (``model.f0_interpolate``), kept below the source's Nyquist."""
        if self.cfg.f0_interpolate:
            f0 = interpolate_unvoiced(f0)
        return f0.clamp(max=0.49 * self.generator.source_rate)

    def inference_graph(self) -> nn.Module:
        """``vocode``'s maths in DiffSinger's layout: mel (B, n_frames, n_mels) + f0 (B, n_frames) -> waveform
        (B, n_samples) (:class:`speechtrain.models.nsf_hifigan.graph.NSFHiFiGANGraph`; gaps in f0 filled by the
        caller)."""
        from speechtrain.models.hifigan.graph import folded_copy
        from speechtrain.models.nsf_hifigan.graph import NSFHiFiGANGraph

        def build() -> nn.Module:
            return build_nsf_generator(self.cfg, self.n_mels, self.sample_rate)

        return NSFHiFiGANGraph(folded_copy(self.generator, build))  # type: ignore[arg-type]

    # --- stages and inference ------------------------------------------------------------------
    def _generate(self, batch: Batch) -> torch.Tensor:
        return self.generator(batch["mel"], self.batch_f0(batch))  # (B, 1, T_frames * hop)

    @torch.no_grad()
    def vocode(self, mel: torch.Tensor | np.ndarray, f0: torch.Tensor | np.ndarray | None = None) -> np.ndarray:
        """Waveform(s) for log-mel(s) ``(n_mels, T_frames)`` with ``f0`` ``(T_frames,)`` in Hz (0 = unvoiced),
        or a batch ``(B, n_mels, T)`` with ``(B, T)``; float32 numpy in [-1, 1]. An f0 up to 2 frames longer or
        shorter than the mel is trimmed or edge-padded; shift f0 (x 2^(n/12)) to change the pitch."""
        if f0 is None:
            raise UserError(
                "vocode: an NSF vocoder needs f0 (Hz per mel frame, 0 = unvoiced): pass f0=..., e.g. "
                "task.f0_from_audio(wav), or on the command line --f0 F0.npy (or --audio IN.wav, whose f0 is measured)"
            )
        x = torch.as_tensor(np.asarray(mel) if not isinstance(mel, torch.Tensor) else mel).float()
        f = torch.as_tensor(np.asarray(f0) if not isinstance(f0, torch.Tensor) else f0).float()
        single = x.dim() == 2
        if single:
            x, f = x.unsqueeze(0), f.reshape(1, -1)
        if x.dim() != 3 or x.shape[1] != self.n_mels:
            raise UserError(
                f"vocode: expected a log-mel (n_mels={self.n_mels}, T) or (B, {self.n_mels}, T), got {tuple(x.shape)}"
            )
        if f.dim() != 2 or f.shape[0] != x.shape[0]:
            raise UserError(f"vocode: f0 of shape {tuple(f.shape)} does not match the mel batch {tuple(x.shape)}")
        f = _fit_frames(f, x.shape[-1])
        if not torch.isfinite(f).all() or (f < 0).any():
            raise UserError("vocode: f0 must be finite and >= 0 Hz (0 = unvoiced)")
        device = next(self.generator.parameters()).device
        was_training = self.generator.training
        self.generator.eval()
        try:
            f = self.prepare_f0(f.to(device))
            y = self.generator(x.to(device), f).squeeze(1).float().cpu().numpy()  # (B, T_samples); host copy
        finally:
            self.generator.train(was_training)
        return y[0] if single else y

    def export(self, out_dir: str | Path) -> Path:
        """Write the generator in SingingVocoders' export layout (``model.ckpt`` + ``config.json``), which their
        Generator, DiffSinger, DDSP-SVC and so-vits-svc load (:mod:`speechtrain.models.nsf_hifigan.export`)."""
        from speechtrain.models.nsf_hifigan.export import export_singingvocoders

        offset = self.f0_settings.frame_offset
        return export_singingvocoders(self.generator, self.cfg, self.mel_settings, out_dir, offset)


def _fit_frames(f0: torch.Tensor, n_frames: int) -> torch.Tensor:
    """f0 (B, T) trimmed or edge-padded to ``n_frames`` when it is off by at most 2 frames."""
    diff = n_frames - f0.shape[-1]
    if abs(diff) > 2:
        raise UserError(
            f"vocode: f0 has {f0.shape[-1]} frames but the mel has {n_frames}; give one f0 per mel frame "
            f"(T_samples // hop_length values, measured at the centre of each hop)"
        )
    if diff > 0:
        return torch.cat([f0, f0[:, -1:].expand(-1, diff)], dim=-1)
    return f0[:, :n_frames]


def build_task(model: NSFHiFiGANConfig, data: DataConfig) -> NSFHiFiGANTask:
    """Build the NSF-HiFiGAN task; the generator's total upsampling must equal ``data.hop_length``."""
    up = math.prod(model.upsample_rates)
    if up != data.hop_length:
        raise ConfigError(
            f"model.upsample_rates {list(model.upsample_rates)} upsample by {up} but data.hop_length is "
            f"{data.hop_length}: make their product equal the hop length"
        )
    if data.f0_method is None:
        raise ConfigError(
            "model.name=nsf_hifigan needs f0 per mel frame: set data.f0_method=yin (torch) or parselmouth (Praat, "
            "pip install 'speechtrain[pitch]'); prepare then computes and caches it"
        )
    return NSFHiFiGANTask(model, data)
