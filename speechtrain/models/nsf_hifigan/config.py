"""NSF-HiFiGAN config (no torch import). Defaults are SingingVocoders' 44.1 kHz model (``configs/base_hifi.yaml``)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, model_validator

from speechtrain.models.hifigan.config import HiFiGANConfig


class NSFHiFiGANConfig(HiFiGANConfig):
    """NSF-HiFiGAN: mel (B, n_mels, T_frames) + f0 (B, T_frames) -> waveform (B, 1, T_frames * hop_length).

    f0 comes from the feature cache: set ``data.f0_method`` (and ``data.f0_min`` / ``data.f0_max``).

    Every HiFi-GAN key applies (generator, discriminators, losses). The source: ``mini_nsf: false`` is the
    harmonic-plus-noise source of NSF (a sine and ``harmonic_num`` overtones at the output rate, noise where
    unvoiced, merged by a linear layer) injected after every upsampling stage through a strided conv;
    ``mini_nsf: true`` is SingingVocoders' fast variant: one sine at the rate after the first two stages,
    with f0 ramped linearly inside each frame, injected once, after the second stage.
    """

    avoid_bf16: ClassVar[str | None] = (
        "SingingVocoders, whose NSF-HiFiGAN this is, says not to train it in bf16: it may cause sound quality "
        "problems (their README and configs)"
    )

    name: str = "nsf_hifigan"
    upsample_rates: list[int] = Field([8, 8, 2, 2, 2], min_length=1, description="Upsampling factor per stage.")
    upsample_kernel_sizes: list[int] = Field(
        [16, 16, 4, 4, 4], min_length=1, description="Transposed-conv kernel per stage (>= rate, even difference)."
    )
    periods: list[int] = Field(
        [3, 5, 7, 11, 17, 23, 37], description="Periods of the multi-period discriminator (SingingVocoders' 7)."
    )
    mini_nsf: bool = Field(
        False, description="Fast source: one sine after the second stage (SingingVocoders' mini_nsf)."
    )
    harmonic_num: int = Field(8, ge=0, description="Overtones above f0 in the harmonic source (mini_nsf: false).")
    sine_amp: float = Field(0.1, gt=0, description="Amplitude of the sine source.")
    noise_std: float = Field(0.003, ge=0, description="Std of the noise added to voiced source samples.")
    voiced_threshold: float = Field(0.0, ge=0, description="f0 (Hz) above which a source frame is voiced.")
    noise_sigma: float = Field(
        0.0,
        ge=0,
        description="Std of Gaussian noise added after the input conv, in training only (SingingVocoders adds it at "
        "inference too; 0 in their configs and ours).",
    )
    f0_interpolate: bool = Field(
        True, description="Fill unvoiced frames by log-linear interpolation before the source (as SingingVocoders)."
    )

    @model_validator(mode="after")
    def _check_nsf(self) -> NSFHiFiGANConfig:
        if self.mini_nsf and len(self.upsample_rates) < 2:
            raise ValueError("model.mini_nsf injects its source after the second upsampling stage: use >= 2 stages")
        return self
