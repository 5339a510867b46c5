"""Config of the VITS text-to-speech family (no torch import, so reading a config stays light)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from speechtrain.config import ConfigError, ModelSection


class VITSConfig(ModelSection):
    """VITS (Kim et al. 2021): conditional VAE with a normalizing flow, monotonic alignment search,
    stochastic duration predictor and a HiFi-GAN decoder trained adversarially on random slices.

    Defaults are the paper's LJSpeech model (about 83M parameters with the discriminator)."""

    name: str = "vits"
    n_vocab: int | None = Field(None, gt=0, description="Token vocabulary size; None: the run's symbols + 4 specials.")
    add_blank: bool = Field(
        True, description="Put a blank token (the pad id) around every character, as the paper's LJSpeech model."
    )
    # text encoder (transformer with windowed relative-position attention)
    hidden_channels: int = Field(192, gt=0, description="Width of the text encoder and the flow's hidden layers.")
    filter_channels: int = Field(768, gt=0, description="Feed-forward width inside the text encoder.")
    n_heads: int = Field(2, gt=0, description="Attention heads in the text encoder.")
    n_layers: int = Field(6, gt=0, description="Transformer layers in the text encoder.")
    kernel_size: int = Field(3, gt=0, description="Kernel of the text encoder's convolutional feed-forward.")
    p_dropout: float = Field(0.1, ge=0, lt=1, description="Dropout in the text encoder (residual and feed-forward).")
    attn_dropout: float | None = Field(
        None,
        ge=0,
        lt=1,
        description="Dropout on attention weights (None: p_dropout, as in the paper). The SDPA path is taken "
        "when no attention-weight dropout is active (inference, eval, or attn_dropout: 0).",
    )
    window_size: int = Field(4, gt=0, description="Relative-position window of the encoder's attention.")
    inter_channels: int = Field(192, gt=0, description="Latent channels (z) of the VAE.")
    # posterior encoder (WaveNet over the linear spectrogram)
    posterior_layers: int = Field(16, gt=0, description="WaveNet layers of the posterior encoder.")
    posterior_kernel_size: int = Field(5, gt=0, description="Kernel of the posterior encoder's WaveNet.")
    posterior_dilation_rate: int = Field(1, gt=0, description="Dilation growth of the posterior encoder's WaveNet.")
    # flow
    flow_couplings: int = Field(4, gt=0, description="Residual coupling layers (mean-only) in the flow.")
    flow_wn_layers: int = Field(4, gt=0, description="WaveNet layers inside each coupling layer.")
    flow_kernel_size: int = Field(5, gt=0, description="Kernel of the couplings' WaveNet.")
    # duration
    use_sdp: bool = Field(True, description="Stochastic duration predictor (paper); false: deterministic one.")
    sdp_flows: int = Field(4, gt=0, description="Spline-coupling flows of the stochastic duration predictor.")
    sdp_bins: int = Field(10, gt=1, description="Rational-quadratic spline bins of the duration flows.")
    duration_filter_channels: int = Field(256, gt=0, description="Width of the deterministic duration predictor.")
    # decoder (HiFi-GAN generator)
    resblock: Literal["1", "2"] = Field("1", description="HiFi-GAN residual block type of the decoder.")
    resblock_kernel_sizes: list[int] = Field([3, 7, 11], description="Decoder residual block kernels.")
    resblock_dilation_sizes: list[list[int]] = Field(
        [[1, 3, 5], [1, 3, 5], [1, 3, 5]], description="Decoder residual block dilations."
    )
    upsample_rates: list[int] = Field([8, 8, 2, 2], description="Decoder upsampling; product = data.hop_length.")
    upsample_initial_channel: int = Field(512, gt=0, description="Decoder width before the first upsampling.")
    upsample_kernel_sizes: list[int] = Field([16, 16, 4, 4], description="Decoder transposed-conv kernels.")
    # discriminator
    mpd_periods: list[int] = Field([2, 3, 5, 7, 11], description="Periods of the multi-period discriminator.")
    use_spectral_norm: bool = Field(False, description="Spectral norm in the discriminator (else weight norm).")
    disc_width: float = Field(1.0, gt=0, le=1, description="Discriminator channel width factor (1: the paper's).")
    # speakers
    n_speakers: int = Field(0, ge=0, description="Speakers (>1: speaker embedding; must cover the manifest's).")
    speakers: list[str] | None = Field(
        None,
        description="The speakers' names in id order, written by training from the data (synthesize --speaker NAME "
        "takes them); None: single speaker, or a run from before names were kept (ids only).",
    )
    gin_channels: int = Field(256, gt=0, description="Speaker embedding width (multi-speaker only).")
    # training
    segment_size: int = Field(8192, gt=0, description="Decoder training slice in samples (multiple of hop_length).")
    c_mel: float = Field(45.0, ge=0, description="Weight of the L1 log-mel loss (computed in fp32).")
    c_kl: float = Field(1.0, ge=0, description="Weight of the KL loss.")
    c_dur: float = Field(1.0, ge=0, description="Weight of the duration loss.")
    c_adv: float = Field(1.0, ge=0, description="Weight of the generator's adversarial loss.")
    c_fm: float = Field(
        2.0, ge=0, description="Weight of the feature-matching loss (sum of per-layer mean L1; 2 as in VITS's code)."
    )
    # inference
    inference_precision: Literal["fp32", "bf16", "auto"] = Field(
        "fp32",
        description="Decoder precision in synthesize: bf16 autocast (CPU or GPU), fp32, or auto (bf16 on GPUs "
        "that support it, fp32 on the CPU).",
    )
    inference_compile: bool = Field(False, description="torch.compile the decoder for synthesize (CUDA only).")
    eval_texts: list[str] = Field(
        [], description="Texts synthesized at evaluation (empty: the eval batch's own transcripts)."
    )

    @model_validator(mode="after")
    def _check(self) -> VITSConfig:
        if self.hidden_channels % self.n_heads:
            raise ConfigError(
                f"model.hidden_channels={self.hidden_channels} must be divisible by model.n_heads={self.n_heads}"
            )
        if len(self.upsample_rates) != len(self.upsample_kernel_sizes):
            raise ConfigError("model.upsample_rates and model.upsample_kernel_sizes must have the same length")
        if len(self.resblock_kernel_sizes) != len(self.resblock_dilation_sizes):
            raise ConfigError("model.resblock_kernel_sizes and model.resblock_dilation_sizes must have the same length")
        return self

    @property
    def hop_product(self) -> int:
        """Samples per latent frame produced by the decoder (product of upsample_rates)."""
        out = 1
        for r in self.upsample_rates:
            out *= r
        return out
