"""HiFi-GAN as a Task: two optimizer stages (``disc`` then ``gen``) on random crops of (mel, audio).

Per micro-batch the generator runs once: the ``disc`` stage generates ``y_hat`` and keeps it (with
its graph) in ``cache``, trains the discriminators on ``y_hat.detach()``; the ``gen`` stage reuses it
for the L1 log-mel, adversarial and feature-matching losses. With an empty cache (after an OOM
split) or ``model.cache_generator_graph=false`` the stage regenerates.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from speechtrain.config import ConfigError
from speechtrain.data.batch import Batch
from speechtrain.data.features import LogMel
from speechtrain.errors import UserError
from speechtrain.models.hifigan.fast import (
    DISC_LOSS_SCALE,
    FastMultiPeriodDiscriminator,
    FastMultiResolutionDiscriminator,
)
from speechtrain.models.hifigan.losses import (
    discriminator_loss,
    feature_matching_loss,
    generator_adversarial_loss,
    mel_l1_loss,
    multi_resolution_stft_loss,
)
from speechtrain.models.hifigan.model import (
    Generator,
    MultiPeriodDiscriminator,
    MultiResolutionSpectrogramDiscriminator,
    MultiScaleDiscriminator,
)
from speechtrain.train.gan import DISC, GANStages
from speechtrain.train.task import Needs, OptimizerSpec, Task

if TYPE_CHECKING:
    from speechtrain.config import DataConfig
    from speechtrain.models.hifigan.config import HiFiGANConfig


def build_generator(model_cfg: HiFiGANConfig, n_mels: int) -> Generator:
    """The generator described by a :class:`~speechtrain.models.hifigan.config.HiFiGANConfig`."""
    m = model_cfg
    return Generator(
        n_mels,
        m.upsample_initial_channel,
        list(m.upsample_rates),
        list(m.upsample_kernel_sizes),
        list(m.resblock_kernel_sizes),
        [list(d) for d in m.resblock_dilation_sizes],
        resblock=m.resblock,
    )


def build_discriminators(model_cfg: HiFiGANConfig) -> dict[str, nn.Module]:
    """Discriminators by module name (``mpd`` or ``fast_mpd``; ``msd``, ``mrsd`` or ``fast_mrd``) as the config
    asks (``melgan_msd`` is also called ``msd``: one scale discriminator or the other)."""
    m = model_cfg
    discs: dict[str, nn.Module] = {}
    periods = m.mpd_periods()
    if periods and m.period_discriminator == "fast":
        discs["fast_mpd"] = FastMultiPeriodDiscriminator(
            periods, m.fast_mpd_init_channel, list(m.fast_mpd_strides), m.fast_mpd_kernel_size
        )
    elif periods:
        discs["mpd"] = MultiPeriodDiscriminator(periods, m.use_spectral_norm, width=m.disc_width)
    if m.scale_discriminator == "fast_mrd":
        discs["fast_mrd"] = FastMultiResolutionDiscriminator(
            m.fast_mrd_resolutions(), m.fast_mrd_init_channel, list(m.fast_mrd_strides)
        )
    elif m.scale_discriminator in ("msd", "melgan_msd"):
        kind = "hifigan" if m.scale_discriminator == "msd" else "melgan"
        discs["msd"] = MultiScaleDiscriminator(m.msd_scales, width=m.disc_width, kind=kind)
    elif m.scale_discriminator == "mrsd":
        discs["mrsd"] = MultiResolutionSpectrogramDiscriminator(
            [(int(r[0]), int(r[1]), int(r[2])) for r in m.mrsd_resolutions], m.disc_width
        )
    return discs


def disc_loss_weights(model_cfg: HiFiGANConfig) -> dict[str, float]:
    """Factor on each discriminator's LSGAN loss in the disc stage (``model.disc_loss_weight``; None: 0.5 for the
    fast discriminators, as SingingVocoders' fast task weighs them, 1 for the others)."""
    names = model_cfg.discriminator_names()
    if model_cfg.disc_loss_weight is not None:
        return dict.fromkeys(names, float(model_cfg.disc_loss_weight))
    return {n: DISC_LOSS_SCALE if n.startswith("fast_") else 1.0 for n in names}


class HiFiGANTask(Task):
    """Mel -> waveform GAN vocoder. Headline: ``mel_l1`` (L1 between log-mels of real and generated audio)."""

    headline_metric = "mel_l1"
    headline_mode = "min"
    produces_audio = True
    quality_kind = "vocoder"

    def __init__(self, model_cfg: HiFiGANConfig, data_cfg: DataConfig) -> None:
        self.cfg = model_cfg
        self.n_mels = int(data_cfg.n_mels)
        self.hop_length = int(data_cfg.hop_length)
        self.sample_rate = int(data_cfg.sample_rate)
        self.generator = self._build_generator(model_cfg, data_cfg)
        self.discriminators = build_discriminators(model_cfg)
        self.disc_weights = disc_loss_weights(model_cfg)
        # frozen discriminators (model.freeze_discriminators) judge the generator but never learn: no gradient,
        # no optimizer, no disc-stage loss
        self.frozen = [n for n in self.discriminators if n in model_cfg.freeze_discriminators]
        for name in self.frozen:
            self.discriminators[name].requires_grad_(False)
        d = data_cfg
        # the loss mel: the data's mel settings up to model.fmax_for_loss (None: full band, as the reference)
        self.mel_fn = LogMel(
            d.sample_rate, d.n_fft, d.win_length, d.hop_length, d.n_mels, d.fmin, model_cfg.fmax_for_loss
        )  # no parameters; moved to the audio's device on use
        learning = [n for n in self.discriminators if n not in self.frozen]
        self.stages = GANStages(self.modules(), generators=["generator"], discriminators=learning)

    def _build_generator(self, model_cfg: Any, data_cfg: Any) -> nn.Module:
        return build_generator(model_cfg, int(data_cfg.n_mels))

    # --- Task protocol -------------------------------------------------------------------------
    def needs(self) -> Needs:
        return Needs(mel=True, audio=True)

    def modules(self) -> dict[str, nn.Module]:
        return {"generator": self.generator, **self.discriminators}

    def optimizer_specs(self) -> list[OptimizerSpec]:
        return self.stages.optimizer_specs()

    def batch_weight(self, batch: Batch) -> float:
        return float(batch.real_frames or batch.size)

    def training_step(self, batch: Batch, stage: str, cache: dict[str, Any]) -> dict[str, torch.Tensor]:
        self.stages.check(stage, "hifigan")
        # the generator runs once per micro-batch (kept for gen unless model.cache_generator_graph is off);
        # the other network is frozen in each stage: no discriminator gradients in gen
        keep = self.cfg.cache_generator_graph
        with self.stages.stage(stage, cache, lambda: self._generate(batch), keep_graph=keep, key="y_hat") as y_hat:
            return self._disc_step(batch, y_hat) if stage == DISC else self._gen_step(batch, y_hat)

    @torch.no_grad()
    def eval_step(self, batch: Batch) -> dict[str, torch.Tensor]:
        y_hat = self._generate(batch)  # (B, 1, T_frames * hop)
        y, y_hat = _align(batch["audio"], y_hat)
        mel_l1 = mel_l1_loss(self._mel(y), self._mel(y_hat), batch.get("mel_lengths"))
        return {"loss": mel_l1, "mel_l1": mel_l1}

    @torch.no_grad()
    def eval_audio(self, batch: Batch, max_items: int) -> list[Any]:
        n = min(max_items, batch.size)
        if n <= 0:
            return []
        sub = batch.select(range(n)) if n < batch.size else batch
        wavs = self._generate(sub).squeeze(1).float().cpu().numpy()  # (n, T_samples); host copy
        lengths = [f * self.hop_length for f in sub.frame_lengths]
        return [w[: lengths[i] or w.shape[-1]] for i, w in enumerate(wavs)]

    # --- inference -----------------------------------------------------------------------------
    def fold_for_inference(self) -> None:
        """Fold the generator's weight norm into its weights (speechtrain.capabilities.FoldsForInference): the
        same outputs without the per-call recompute; the generator cannot be trained afterwards."""
        generator: Any = self.generator  # HiFi-GAN's and NSF-HiFiGAN's generators both fold
        generator.remove_weight_norm()

    @torch.no_grad()
    def vocode(self, mel: torch.Tensor | np.ndarray) -> np.ndarray:
        """Waveform(s) for log-mel(s) ``(n_mels, T_frames)`` -> ``(T_frames * hop,)``, or ``(B, n_mels, T)`` ->
        ``(B, T * hop)``; float32 numpy in [-1, 1]."""
        x = torch.as_tensor(np.asarray(mel) if not isinstance(mel, torch.Tensor) else mel).float()
        single = x.dim() == 2
        if single:
            x = x.unsqueeze(0)
        if x.dim() != 3 or x.shape[1] != self.n_mels:
            raise UserError(
                f"vocode: expected a log-mel of shape (n_mels={self.n_mels}, T) or (B, {self.n_mels}, T), "
                f"got {tuple(x.shape)}; compute it with the run's data settings (speechtrain.data.features.LogMel)"
            )
        device = next(self.generator.parameters()).device
        was_training = self.generator.training
        self.generator.eval()
        try:
            y = self.generator(x.to(device)).squeeze(1).float().cpu().numpy()  # (B, T_samples); host copy
        finally:
            self.generator.train(was_training)
        return y[0] if single else y

    def inference_graph(self) -> nn.Module:
        """``vocode``'s maths as a traceable module: mel (B, n_mels, n_frames) -> audio (B, n_samples)
        (:class:`speechtrain.models.hifigan.graph.HiFiGANGraph`, weight norm folded in a copy)."""
        from speechtrain.models.hifigan.graph import HiFiGANGraph, folded_copy

        return HiFiGANGraph(folded_copy(self.generator, lambda: build_generator(self.cfg, self.n_mels)))

    # --- stages --------------------------------------------------------------------------------
    def _generate(self, batch: Batch) -> torch.Tensor:
        return self.generator(batch["mel"])  # (B, n_mels, T_frames) -> (B, 1, T_frames * hop)

    def _disc_step(self, batch: Batch, y_hat: torch.Tensor) -> dict[str, torch.Tensor]:
        y, y_hat = _align(batch["audio"], y_hat.detach())
        total = None
        for name, disc in self.discriminators.items():
            if name in self.frozen:
                continue
            real, fake, _, _ = disc(y, y_hat)
            part = self.disc_weights[name] * discriminator_loss(real, fake)
            total = part if total is None else total + part
        assert total is not None  # the config guarantees at least one discriminator that learns
        return {"loss": total, "disc": total.detach()}

    def _gen_step(self, batch: Batch, y_hat: torch.Tensor) -> dict[str, torch.Tensor]:
        y, y_hat = _align(batch["audio"], y_hat)
        with torch.no_grad():
            mel_real = self._mel(y)  # (B, n_mels, T_frames)
        mel_l1 = mel_l1_loss(mel_real, self._mel(y_hat), batch.get("mel_lengths"))
        adv: torch.Tensor | None = None
        fm: torch.Tensor | None = None
        for disc in self.discriminators.values():
            _, fake, real_maps, fake_maps = disc(y, y_hat)
            a, f = generator_adversarial_loss(fake), feature_matching_loss(real_maps, fake_maps)
            adv, fm = (a, f) if adv is None or fm is None else (adv + a, fm + f)
        assert adv is not None and fm is not None
        m = self.cfg
        loss = m.mel_weight * mel_l1 + m.adv_weight * adv + m.fm_weight * fm
        out = {"mel_l1": mel_l1.detach(), "adv": adv.detach(), "fm": fm.detach()}
        if m.stft_weight > 0:
            stft = multi_resolution_stft_loss(y, y_hat, [(int(r[0]), int(r[1]), int(r[2])) for r in m.stft_resolutions])
            loss = loss + m.stft_weight * stft
            out["stft"] = stft.detach()
        return {"loss": loss, **out}

    def _mel(self, audio: torch.Tensor) -> torch.Tensor:
        if self.mel_fn.fb.device != audio.device:
            self.mel_fn.to(audio.device)
        with torch.autocast(audio.device.type, enabled=False):
            return self.mel_fn(audio.float())  # (B, n_mels, T_frames), fp32


def _align(y: torch.Tensor, y_hat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Trim real and generated audio ``(B, 1, T_samples)`` to a common length (padding can differ by < hop)."""
    n = min(y.shape[-1], y_hat.shape[-1])
    return y[..., :n], y_hat[..., :n]


def build_task(model: HiFiGANConfig, data: DataConfig) -> HiFiGANTask:
    """Build the HiFi-GAN task; the generator's total upsampling must equal ``data.hop_length``."""
    up = math.prod(model.upsample_rates)
    if up != data.hop_length:
        raise ConfigError(
            f"model.upsample_rates {list(model.upsample_rates)} upsample by {up} but data.hop_length is "
            f"{data.hop_length}: make their product equal the hop length"
        )
    return HiFiGANTask(model, data)
