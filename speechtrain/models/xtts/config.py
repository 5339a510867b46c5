"""Config of the XTTS family (no torch import, so reading a config stays light).

Two parts: :class:`XttsConfig` (``model:`` in a recipe: where the Coqui checkpoint is, the language, the
losses, the conditioning clips) and :class:`XttsArch` (the network sizes). The sizes are read from the
checkpoint's ``config.json`` when the task is built and saved with the run (``model.arch``), so a run loads
without the Coqui folder. Fields named ``gpt_*``, ``input_sample_rate`` ... are Coqui's ``model_args``
names; the others are sizes Coqui hard-codes (XTTS-v2 values as defaults), needed for tiny rehearsal models.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from speechtrain.config import NAMES_CODE, NAMES_FILES, ModelSection, Section

#: ``model_args`` keys of Coqui's config.json that the architecture reads
COQUI_ARCH_KEYS = (
    "gpt_layers",
    "gpt_n_model_channels",
    "gpt_n_heads",
    "gpt_number_text_tokens",
    "gpt_start_text_token",
    "gpt_stop_text_token",
    "gpt_num_audio_tokens",
    "gpt_start_audio_token",
    "gpt_stop_audio_token",
    "gpt_max_audio_tokens",
    "gpt_max_text_tokens",
    "gpt_max_prompt_tokens",
    "gpt_code_stride_len",
    "gpt_use_perceiver_resampler",
    "input_sample_rate",
    "output_sample_rate",
    "output_hop_length",
    "decoder_input_dim",
    "d_vector_dim",
    "cond_d_vector_in_each_upsampling_layer",
)


class XttsArch(Section):
    """Network sizes of an XTTS model. Defaults: XTTS-v2 (Coqui's published config.json and source)."""

    # -- GPT (Coqui model_args) ---------------------------------------------------------------------
    gpt_layers: int = Field(30, gt=0, description="GPT-2 blocks.")
    gpt_n_model_channels: int = Field(1024, gt=0, description="Model width.")
    gpt_n_heads: int = Field(16, gt=0, description="Attention heads of the GPT and the conditioning encoder.")
    gpt_number_text_tokens: int = Field(6681, gt=3, description="Text vocabulary rows (vocab.json max id + 1).")
    gpt_start_text_token: int = Field(261, ge=0, description="Id of [START] in vocab.json.")
    gpt_stop_text_token: int = Field(0, ge=0, description="Id of [STOP] in vocab.json.")
    gpt_num_audio_tokens: int = Field(1026, gt=2, description="DVAE codes + start + stop.")
    gpt_start_audio_token: int = Field(1024, ge=0, description="Start-of-audio id.")
    gpt_stop_audio_token: int = Field(1025, ge=0, description="Stop-of-audio id.")
    gpt_max_audio_tokens: int = Field(605, gt=4, description="Audio codes (mel position table: this + 3).")
    gpt_max_text_tokens: int = Field(402, gt=1, description="Text tokens (text position table: this + 2).")
    gpt_max_prompt_tokens: int = Field(70, ge=0, description="Prompt tokens (only sizes Coqui's GPT-2 config).")
    gpt_code_stride_len: int = Field(1024, gt=0, description="Audio samples per code (DVAE hop x 4).")
    gpt_use_perceiver_resampler: bool = Field(True, description="XTTS-v2 conditioning (only True is supported).")
    # -- HiFi-GAN decoder (Coqui model_args) ----------------------------------------------------------
    input_sample_rate: int = Field(22050, gt=0, description="Sample rate of the GPT side (DVAE, conditioning).")
    output_sample_rate: int = Field(24000, gt=0, description="Sample rate of the decoder's audio.")
    output_hop_length: int = Field(256, gt=0, description="Decoder samples per latent frame after upsampling.")
    decoder_input_dim: int = Field(1024, gt=0, description="Latent width fed to the decoder (= GPT width).")
    d_vector_dim: int = Field(512, gt=0, description="Speaker embedding width.")
    cond_d_vector_in_each_upsampling_layer: bool = Field(True, description="Speaker embedding in every upsampling.")
    # -- sizes Coqui hard-codes ----------------------------------------------------------------------
    n_mels: int = Field(80, gt=0, description="Mel bands of the DVAE and conditioning mels.")
    cond_attn_blocks: int = Field(6, gt=0, description="Attention blocks of the conditioning encoder.")
    perceiver_depth: int = Field(2, gt=0, description="Perceiver resampler layers.")
    perceiver_latents: int = Field(32, gt=0, description="Perceiver latents (conditioning tokens of the GPT).")
    perceiver_dim_head: int = Field(64, gt=0, description="Perceiver attention head size.")
    perceiver_heads: int = Field(8, gt=0, description="Perceiver attention heads.")
    perceiver_ff_mult: int = Field(4, gt=0, description="Perceiver GEGLU feed-forward multiplier.")
    decoder_upsample_initial_channel: int = Field(512, gt=0, description="HiFi-GAN decoder channels.")
    decoder_upsample_rates: list[int] = Field([8, 8, 2, 2], description="Decoder upsampling factors.")
    decoder_upsample_kernel_sizes: list[int] = Field([16, 16, 4, 4], description="Decoder upsampling kernels.")
    decoder_resblock_kernel_sizes: list[int] = Field([3, 7, 11], description="Decoder MRF kernels.")
    decoder_resblock_dilation_sizes: list[list[int]] = Field(
        [[1, 3, 5], [1, 3, 5], [1, 3, 5]], description="Decoder MRF dilations."
    )
    speaker_layers: list[int] = Field([3, 4, 6, 3], description="SE-ResNet speaker encoder blocks per stage.")
    speaker_num_filters: list[int] = Field([32, 64, 128, 256], description="Speaker encoder channels per stage.")
    speaker_input_dim: int = Field(64, gt=7, description="Mel bands of the speaker encoder (16 kHz).")
    dvae_hidden_dim: int = Field(512, gt=0, description="DVAE first conv channels (doubled per layer).")
    dvae_codebook_dim: int = Field(512, gt=0, description="DVAE codebook vector size.")
    dvae_num_layers: int = Field(2, gt=0, description="DVAE stride-2 layers (codes per mel frame = 1 / 2^this).")
    dvae_num_resnet_blocks: int = Field(3, ge=0, description="DVAE residual blocks.")
    dvae_kernel_size: int = Field(3, gt=0, description="DVAE conv kernel.")

    @model_validator(mode="after")
    def _check(self) -> XttsArch:
        if not self.gpt_use_perceiver_resampler:
            raise ValueError("gpt_use_perceiver_resampler=false is XTTS-v1, which this family does not load")
        if self.gpt_n_model_channels % self.gpt_n_heads:
            raise ValueError(f"gpt_n_model_channels={self.gpt_n_model_channels} must divide by gpt_n_heads")
        if self.decoder_input_dim != self.gpt_n_model_channels:
            raise ValueError("decoder_input_dim must equal gpt_n_model_channels (the decoder reads GPT latents)")
        if len(self.decoder_upsample_rates) != len(self.decoder_upsample_kernel_sizes):
            raise ValueError("decoder_upsample_rates and decoder_upsample_kernel_sizes differ in length")
        if len(self.decoder_resblock_kernel_sizes) != len(self.decoder_resblock_dilation_sizes):
            raise ValueError("decoder_resblock_kernel_sizes and decoder_resblock_dilation_sizes differ in length")
        if len(self.speaker_layers) != 4 or len(self.speaker_num_filters) != 4:
            raise ValueError("the speaker encoder has 4 stages: speaker_layers/speaker_num_filters need 4 values")
        if self.speaker_input_dim % 8:
            raise ValueError("speaker_input_dim must divide by 8 (three stride-2 stages)")
        return self

    @property
    def num_codes(self) -> int:
        """DVAE codebook size (audio tokens without start/stop)."""
        return self.gpt_num_audio_tokens - 2

    def coqui_model_args(self) -> dict[str, Any]:
        """The ``model_args`` entries of Coqui's config.json that hold these sizes."""
        return {k: getattr(self, k) for k in COQUI_ARCH_KEYS}

    def speechtrain_extras(self) -> dict[str, Any]:
        """Sizes Coqui hard-codes that differ from XTTS-v2 (written to config.json as ``speechtrain_arch``)."""
        default = XttsArch()
        return {
            k: getattr(self, k)
            for k in type(self).model_fields
            if k not in COQUI_ARCH_KEYS and getattr(self, k) != getattr(default, k)
        }


#: XTTS-v2 as published; a CPU-sized model of the same shape for rehearsals and tests
ARCH_PRESETS: dict[str, dict[str, Any]] = {
    "xtts_v2": {},
    "tiny": {
        "gpt_layers": 2,
        "gpt_n_model_channels": 64,
        "gpt_n_heads": 4,
        "gpt_num_audio_tokens": 66,
        "gpt_start_audio_token": 64,
        "gpt_stop_audio_token": 65,
        "gpt_max_audio_tokens": 300,
        "gpt_max_text_tokens": 250,
        "gpt_max_prompt_tokens": 8,
        "decoder_input_dim": 64,
        "d_vector_dim": 16,
        "cond_attn_blocks": 1,
        "perceiver_depth": 1,
        "perceiver_latents": 8,
        "perceiver_dim_head": 16,
        "perceiver_heads": 4,
        "perceiver_ff_mult": 2,
        "decoder_upsample_initial_channel": 32,
        "decoder_resblock_kernel_sizes": [3],
        "decoder_resblock_dilation_sizes": [[1, 3]],
        "speaker_layers": [1, 1, 1, 1],
        "speaker_num_filters": [8, 8, 16, 16],
        "dvae_hidden_dim": 16,
        "dvae_codebook_dim": 16,
        "dvae_num_resnet_blocks": 1,
    },
    # the GPT sizes Coqui reads from config.json at tiny values, everything Coqui hard-codes (conditioning
    # encoder, perceiver, HiFi-GAN decoder, speaker encoder) at XTTS-v2's: a folder Coqui's own Xtts loads
    # (scripts/check_coqui_parity.py); the DVAE (not in Xtts, only in Coqui's trainer) stays tiny
    "tiny_coqui": {
        "gpt_layers": 2,
        "gpt_n_model_channels": 64,
        "gpt_n_heads": 4,
        "gpt_num_audio_tokens": 66,
        "gpt_start_audio_token": 64,
        "gpt_stop_audio_token": 65,
        "gpt_max_audio_tokens": 300,
        "gpt_max_text_tokens": 250,
        "gpt_max_prompt_tokens": 8,
        "decoder_input_dim": 64,
        "dvae_hidden_dim": 16,
        "dvae_codebook_dim": 16,
        "dvae_num_resnet_blocks": 1,
    },
}


def arch_preset(name: str) -> XttsArch:
    """The sizes of a preset (``xtts_v2``, ``tiny`` or ``tiny_coqui``)."""
    if name not in ARCH_PRESETS:
        raise ValueError(f"unknown XTTS size preset '{name}' (presets: {', '.join(ARCH_PRESETS)})")
    return XttsArch(**ARCH_PRESETS[name])


class XttsConfig(ModelSection):
    """Fine-tuning Coqui XTTS-v2: its GPT trained on text + DVAE codes, DVAE and HiFi-GAN decoder frozen.

    ``checkpoint_dir`` is a Coqui XTTS-v2 folder (``model.pth``, ``dvae.pth``, ``mel_stats.pth``,
    ``vocab.json``, ``config.json``). ``random_checkpoint`` writes a random-weights folder of that layout
    there when it has no ``model.pth`` (rehearsals and tests: no weights can be downloaded).
    """

    name: str = "xtts"
    checkpoint_dir: str | None = Field(
        None,
        description="Coqui XTTS-v2 checkpoint folder (model.pth, dvae.pth, mel_stats.pth, vocab.json, ...).",
        json_schema_extra=NAMES_FILES,  # read, and written by random_checkpoint: the web UI keeps it in its folders
    )
    random_checkpoint: Literal["off", "tiny", "tiny_coqui", "xtts_v2"] = Field(
        "off",
        description="Write a random-weights Coqui-layout checkpoint of this size into checkpoint_dir when it has "
        "no model.pth (rehearsals/tests only; a real fine-tune points at a downloaded XTTS-v2). tiny_coqui: a "
        "tiny GPT with the parts Coqui hard-codes at XTTS-v2 size, so that Coqui's own Xtts loads its export.",
    )
    random_seed: int = Field(0, description="Seed of the random checkpoint's weights.")
    strict_load: bool = Field(
        True,
        description="A checkpoint tensor that is missing, unexpected or of another shape is an error (else: "
        "reported, unexpected tensors kept as they are for export, missing ones left at their init).",
    )
    arch: XttsArch | None = Field(
        None, description="Network sizes; filled from checkpoint_dir/config.json when the task is built."
    )
    language: str = Field(
        "en",
        description="Language tag of the training transcripts (e.g. en, am): the vocabulary's [tag] and the text "
        "rules. Left unset, it follows data.language when that is set.",
    )
    text_front_end: str = Field(
        "multilingual",
        description="Text before BPE: multilingual (Coqui's cleaners for the language: numbers, currency, "
        "ordinals, abbreviations and symbols in words, after NFC; NFC and lower case for a language without "
        "rules), basic (NFC, lowercase, no double quotes, one space), none (NFC, one space), or "
        "package.module:function taking (text, language) or (text) -> text (e.g. a G2P: "
        "speechtrain.data.text.amharic:g2p, or the Amharic cleaners speechtrain.data.text.amharic:clean).",
        json_schema_extra=NAMES_CODE,  # the web UI refuses a package.module:function unless its operator allowed it
    )
    add_transcript_chars: bool = Field(
        True,
        description="Add every character of the transcripts that vocab.json cannot encode as a new token "
        "(a new language's script); off: such text is a data error.",
    )
    extra_tokens: list[str] = Field(
        default_factory=list,
        description="More tokens to add to the vocabulary: a token (e.g. a G2P's phoneme symbol) or a code-point "
        "range 'U+1200..U+137C' (every assigned character in it: a script the eval texts may need).",
    )
    new_token_init: Literal["mean", "normal"] = Field(
        "mean",
        description="New text-embedding/head rows: mean of the existing rows, or normal(0, 0.02) (head bias 0).",
    )
    max_text_tokens: int = Field(
        200, gt=0, description="Longest transcript in BPE tokens (Coqui's max_text_length); longer is a data error."
    )
    text_loss_weight: float = Field(0.01, ge=0, description="Weight of the text cross-entropy (Coqui: 0.01).")
    audio_loss_weight: float = Field(1.0, ge=0, description="Weight of the audio-code cross-entropy (Coqui: 1.0).")
    min_conditioning_length: int = Field(
        66150, gt=0, description="Shortest conditioning clip in samples (Coqui: 66150 = 3 s at 22050 Hz)."
    )
    max_conditioning_length: int = Field(
        132300, gt=0, description="Longest conditioning clip in samples (Coqui: 132300 = 6 s); clips are padded to it."
    )
    mask_conditioning_loss: bool = Field(
        False,
        description="Leave the codes of the conditioning clip out of the audio loss, for every item. Coqui's "
        "trainer means to (its indexing only reaches the batch's last item); off: all codes count.",
    )
    codes: Literal["utterance", "padded_batch"] = Field(
        "utterance",
        description="Which audio the DVAE codes are computed from. utterance: each utterance's own audio alone "
        "(unpadded), so its codes do not depend on what it is batched with and can be cached (cache_codes), the "
        "same rule in prepare and on the device; its last codes (about 3) differ from Coqui's. padded_batch: "
        "the padded batch, as Coqui's trainer does (exactly its training; the last codes of the shorter items "
        "see the padding); computed on the device every step, never cached. A config that sets "
        "cache_codes=false and no codes gets padded_batch (what cache_codes=false meant before).",
    )
    cache_codes: bool = Field(
        True,
        description="With codes=utterance: `prepare` stores every utterance's codes in the feature cache "
        "(recomputed only when the audio, the DVAE mel or dvae.pth/mel_stats.pth change) and the batches bring "
        "them; where a batch has none (--fake-data, no checkpoint folder, data.noise_snr_db or data.crop_frames: "
        "other audio than the stored one) they are computed per utterance on the device (kept for the run when "
        "the audio is the stored one). False: computed per utterance on the device, nothing stored. "
        "codes=padded_batch caches nothing (cache_codes reads false there).",
    )
    dropout: float = Field(0.1, ge=0, lt=1, description="GPT-2 dropout (embedding, attention, residual; Coqui 0.1).")

    @field_validator("language")
    @classmethod
    def _check_language(cls, value: str) -> str:
        value = value.strip()
        if not value or any(c in value for c in "[] "):
            raise ValueError(f"model.language must be a tag like 'en' or 'am', got {value!r}")
        return value

    @model_validator(mode="before")
    @classmethod
    def _codes_of_older_configs(cls, raw: Any) -> Any:
        if isinstance(raw, dict) and raw.get("cache_codes") is False and "codes" not in raw:
            return {**raw, "codes": "padded_batch"}  # cache_codes=false meant the padded batch's codes
        return raw

    @model_validator(mode="after")
    def _check_conditioning(self) -> XttsConfig:
        if self.min_conditioning_length > self.max_conditioning_length:
            raise ValueError("model.min_conditioning_length must be <= model.max_conditioning_length")
        if self.codes == "padded_batch" and self.cache_codes:  # a padded batch's codes cannot be cached
            object.__setattr__(self, "cache_codes", False)  # (no re-validation: this validator would run again)
        return self

    @property
    def stores_codes(self) -> bool:
        """Whether ``prepare`` caches the DVAE codes (codes=utterance with cache_codes)."""
        return self.codes == "utterance" and self.cache_codes


def primary_language(language: str) -> str:
    """``pt`` of ``pt-BR``, ``zh`` of ``zh-cn``."""
    return language.replace("_", "-").split("-")[0].lower()


def transcript_language(model: XttsConfig, data_language: str) -> str:
    """The transcripts' language: ``model.language``, or ``data.language`` when ``model.language`` was left
    unset and ``data.language`` is set (not ``und``); a ValueError when both are set and name different
    languages (the vocabulary tag and the text rules would disagree)."""
    data_lang = data_language.strip()
    if primary_language(data_lang) in ("und", ""):
        return model.language
    if "language" not in model.model_fields_set:
        return data_lang
    if primary_language(model.language) != primary_language(data_lang):
        raise ValueError(
            f"data.language={data_lang} but model.language={model.language}: both name the transcripts' language "
            "(text rules, vocabulary tag); set them alike, or leave model.language unset to follow data.language"
        )
    return model.language
