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
    period_discriminator: Literal["hifigan", "fast"] = Field(
        "hifigan",
        description="The period discriminator: hifigan (HiFi-GAN's MPD, module mpd, 8.2M per period) or fast "
        "(SingingVocoders' FastMPD, module fast_mpd: RMS-normed linear blocks, 1.4M per period; fast_mpd_* keys).",
    )
    fast_mpd_periods: list[int] | None = Field(
        None, description="FastMPD's periods (None: model.periods, as SingingVocoders' fast task falls back)."
    )
    fast_mpd_init_channel: int = Field(8, gt=0, description="FastMPD: channels per input sample of the first block.")
    fast_mpd_strides: list[int] = Field(
        [4, 4, 4], min_length=1, description="FastMPD: time steps merged into channels before each block."
    )
    fast_mpd_kernel_size: int = Field(11, gt=0, description="FastMPD: kernel of each block's conv along time (odd).")
    scale_discriminator: Literal["msd", "melgan_msd", "mrsd", "fast_mrd", "none"] = Field(
        "msd",
        description="Second discriminator: msd (HiFi-GAN's multi-scale, 128 channels, 29.6M), melgan_msd (MelGAN's "
        "and VITS's multi-scale, 16 channels, 16.9M), mrsd (multi-resolution spectrogram, UnivNet's MRD), fast_mrd "
        "(SingingVocoders' FastMRD over log spectrograms, 1.2M; fast_mrd_* keys), none.",
    )
    fast_mrd_init_channel: int = Field(8, gt=0, description="FastMRD: channels per input frame of the first block.")
    fast_mrd_strides: list[int] = Field(
        [4, 2, 2], min_length=1, description="FastMRD: frames merged into channels before each block."
    )
    fast_mrd_fft_sizes: list[int] = Field([512, 1024, 2048], min_length=1, description="FastMRD: n_fft per resolution.")
    fast_mrd_hop_sizes: list[int] = Field([64, 128, 256], min_length=1, description="FastMRD: hop per resolution.")
    fast_mrd_win_lengths: list[int] = Field(
        [512, 1024, 2048], min_length=1, description="FastMRD: window length per resolution."
    )
    disc_loss_weight: float | None = Field(
        None,
        ge=0,
        description="Factor on each discriminator's LSGAN loss in the disc stage; None: 0.5 for the fast "
        "discriminators (SingingVocoders' fast task averages over real and fake items together) and 1 for the others.",
    )
    freeze_discriminators: list[str] = Field(
        [],
        description="Discriminator modules kept as they are (no optimizer, no gradient; the generator still learns "
        "from them), e.g. [mpd] or [fast_mpd] for a short fine-tune on little data, as SingingVocoders advises.",
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
        if not self.discriminator_names():
            raise ValueError("no discriminator: set model.periods or model.scale_discriminator")
        if any(p <= 0 for p in self.fast_mpd_periods or []):
            raise ValueError("model.fast_mpd_periods must be positive")
        if self.fast_mpd_kernel_size % 2 == 0:
            raise ValueError(
                f"model.fast_mpd_kernel_size must be odd (keeps the length), got {self.fast_mpd_kernel_size}"
            )
        if any(s <= 0 for s in (*self.fast_mpd_strides, *self.fast_mrd_strides)):
            raise ValueError("model.fast_mpd_strides and model.fast_mrd_strides must be positive")
        fast_mrd = (self.fast_mrd_fft_sizes, self.fast_mrd_hop_sizes, self.fast_mrd_win_lengths)
        if len({len(v) for v in fast_mrd}) != 1:
            raise ValueError(
                "model.fast_mrd_fft_sizes, fast_mrd_hop_sizes and fast_mrd_win_lengths need the same length "
                f"(one per resolution), got {[len(v) for v in fast_mrd]}"
            )
        for n_fft, hop, win in zip(*fast_mrd):
            if hop <= 0 or not 0 < win <= n_fft:
                raise ValueError(
                    f"model.fast_mrd: resolution ({n_fft}, {hop}, {win}) needs hop > 0 and 0 < win <= n_fft"
                )
        names = self.discriminator_names()
        unknown = [n for n in self.freeze_discriminators if n not in names]
        if unknown:
            raise ValueError(f"model.freeze_discriminators: {unknown} are not discriminators of this config ({names})")
        if names and set(self.freeze_discriminators) >= set(names):
            raise ValueError(
                f"model.freeze_discriminators freezes every discriminator ({names}): the disc stage would have "
                "nothing to train; leave one to learn (SingingVocoders freezes the MPD only)"
            )
        return self

    def discriminator_names(self) -> list[str]:
        """The task's discriminator modules for this config, in order (mpd or fast_mpd; msd, mrsd or fast_mrd)."""
        names = []
        if self.mpd_periods():
            names.append("fast_mpd" if self.period_discriminator == "fast" else "mpd")
        if self.scale_discriminator != "none":
            names.append({"melgan_msd": "msd"}.get(self.scale_discriminator, self.scale_discriminator))
        return names

    def mpd_periods(self) -> list[int]:
        """The periods of the period discriminator (FastMPD: fast_mpd_periods, else periods)."""
        if self.period_discriminator == "fast" and self.fast_mpd_periods is not None:
            return list(self.fast_mpd_periods)
        return list(self.periods)

    def fast_mrd_resolutions(self) -> list[tuple[int, int, int]]:
        """FastMRD's ``(n_fft, hop_length, win_length)`` per resolution."""
        return list(zip(self.fast_mrd_fft_sizes, self.fast_mrd_hop_sizes, self.fast_mrd_win_lengths))
