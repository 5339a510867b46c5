"""HiFi-GAN config (no torch import). Defaults are the paper's V1 generator (~13.9M parameters)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from speechtrain.config import ModelSection


class HiFiGANConfig(ModelSection):
    """HiFi-GAN vocoder: mel (B, n_mels, T_frames) -> waveform (B, 1, T_frames * hop_length).

    ``prod(upsample_rates)`` must equal ``data.hop_length`` (checked when the task is built).
    """

    name: str = "hifigan"
    upsample_initial_channel: int = Field(512, gt=1, description="Channels after the input conv (V1: 512, V2: 128).")
    upsample_rates: list[int] = Field([8, 8, 2, 2], min_length=1, description="Upsampling factor per stage.")
    upsample_kernel_sizes: list[int] = Field(
        [16, 16, 4, 4], min_length=1, description="Transposed-conv kernel per stage (>= rate, even difference)."
    )
    resblock: Literal["1", "2"] = Field("1", description="Residual block type: '1' (V1/V2) or '2' (V3, lighter).")
    resblock_kernel_sizes: list[int] = Field([3, 7, 11], min_length=1, description="Kernel of each MRF block.")
    resblock_dilation_sizes: list[list[int]] = Field(
        [[1, 3, 5], [1, 3, 5], [1, 3, 5]], min_length=1, description="Dilations of each MRF block."
    )
    periods: list[int] = Field([2, 3, 5, 7, 11], description="Periods of the multi-period discriminator ([] = none).")
    scale_discriminator: Literal["msd", "melgan_msd", "mrsd", "none"] = Field(
        "msd",
        description="Second discriminator: msd (HiFi-GAN's multi-scale, 128 channels, 29.6M), melgan_msd (MelGAN's "
        "and VITS's multi-scale, 16 channels, 16.9M), mrsd (multi-resolution spectrogram, UnivNet's MRD), none.",
    )
    msd_scales: int = Field(3, gt=0, description="Scales of the multi-scale discriminator.")
    mrsd_resolutions: list[tuple[int, int, int]] = Field(
        [(1024, 120, 600), (2048, 240, 1200), (512, 50, 240)],
        min_length=1,
        description="(n_fft, hop_length, win_length) of each spectrogram discriminator (mrsd).",
    )
    disc_width: float = Field(
        1.0, gt=0, le=4, description="Channel multiplier of every discriminator (1.0 = paper size; tiny recipes less)."
    )
    use_spectral_norm: bool = Field(False, description="Spectral instead of weight norm in the period discriminators.")
    mel_weight: float = Field(45.0, ge=0, description="Weight of the L1 log-mel loss.")
    fmax_for_loss: float | None = Field(
        None,
        gt=0,
        description="Highest frequency (Hz) of the mel in the L1 mel loss and the eval mel_l1; None: Nyquist, the full "
        "band, as HiFi-GAN's reference does (the generator's input mel keeps data.fmax).",
    )
    fm_weight: float = Field(2.0, ge=0, description="Weight of the feature-matching loss.")
    adv_weight: float = Field(1.0, ge=0, description="Weight of the generator's adversarial loss.")
    stft_weight: float = Field(0.0, ge=0, description="Weight of an extra multi-resolution STFT loss (0 = off).")
    stft_resolutions: list[tuple[int, int, int]] = Field(
        [(1024, 120, 600), (2048, 240, 1200), (512, 50, 240)],
        min_length=1,
        description="(n_fft, hop_length, win_length) of each resolution of the STFT loss (stft_weight > 0).",
    )
    cache_generator_graph: bool = Field(
        True,
        description="Generate once per micro-batch and keep the graph from the disc stage to the gen stage; "
        "False regenerates in the gen stage (one extra generator forward, less memory held during the disc stage).",
    )

    @field_validator("resblock", mode="before")
    @classmethod
    def _resblock_as_text(cls, value: object) -> object:
        return str(value) if isinstance(value, int) else value  # YAML `resblock: 1` means "1"

    @model_validator(mode="after")
    def _check(self) -> HiFiGANConfig:
        if len(self.upsample_rates) != len(self.upsample_kernel_sizes):
            raise ValueError("model.upsample_rates and model.upsample_kernel_sizes need the same length")
        for u, k in zip(self.upsample_rates, self.upsample_kernel_sizes):
            if u <= 0 or k < u or (k - u) % 2:
                raise ValueError(
                    f"model.upsample_kernel_sizes: kernel {k} for rate {u} must be >= the rate with an even "
                    "difference (e.g. kernel = 2 x rate)"
                )
        if len(self.resblock_kernel_sizes) != len(self.resblock_dilation_sizes):
            raise ValueError("model.resblock_kernel_sizes and model.resblock_dilation_sizes need the same length")
        if self.upsample_initial_channel // 2 ** len(self.upsample_rates) < 1:
            raise ValueError("model.upsample_initial_channel is halved per stage: raise it or use fewer stages")
        if any(p <= 0 for p in self.periods):
            raise ValueError("model.periods must be positive")
        if not self.periods and self.scale_discriminator == "none":
            raise ValueError("no discriminator: set model.periods or model.scale_discriminator")
        return self
