"""Config of the GPT-style TTS family (no torch import, so reading a config stays light)."""

from __future__ import annotations

from pydantic import Field, ValidationInfo, field_validator

from speechtrain.config import ModelSection


class GPTTTSConfig(ModelSection):
    """An XTTS-like decoder-only TTS: a causal transformer over text tokens, then discrete audio codes.

    The audio codes come from a mel codec (k-means codebook over groups of mel frames) that the task
    fits on the training mels before the first step and stores in the checkpoint.
    """

    name: str = "gpt_tts"
    layers: int = Field(30, gt=0, description="Transformer blocks (XTTS: 30).")
    width: int = Field(1024, gt=0, description="Model width d_model (XTTS: 1024).")
    heads: int = Field(16, gt=0, description="Attention heads; width must divide by heads (XTTS: 16).")
    ffn_mult: int = Field(4, gt=0, description="Feed-forward hidden size as a multiple of width.")
    dropout: float = Field(0.0, ge=0, lt=1, description="Dropout on attention weights and block outputs.")
    max_text_tokens: int = Field(402, gt=2, description="Longest text in tokens incl. bos/eos (XTTS: 402).")
    max_audio_codes: int = Field(
        605, gt=1, description="Longest audio in codes (XTTS: 605); an utterance longer than this is a data error."
    )
    codebook_size: int = Field(1024, gt=1, description="Audio codes in the mel codec's codebook.")
    pool_speakers: bool = Field(
        False,
        description="GPT-TTS has no speaker conditioning: a corpus of several speakers is refused at set-up unless "
        "pooled into one voice (true: their voices are mixed into one model).",
    )
    frames_per_code: int = Field(
        2, gt=0, description="Mel frames per audio code (codes per second = sample_rate / hop_length / this)."
    )
    codec_sample_frames: int = Field(
        50000, gt=0, description="Mel frames sampled from the training set to fit the codebook (k-means)."
    )
    codec_iterations: int = Field(10, gt=0, description="k-means (Lloyd) iterations when fitting the codebook.")
    codec_seed: int = Field(0, description="Seed of the frame sample and the k-means initialisation.")
    text_loss_weight: float = Field(0.01, ge=0, description="Weight of the text cross-entropy (XTTS: 0.01).")
    audio_loss_weight: float = Field(1.0, ge=0, description="Weight of the audio-code cross-entropy (XTTS: 1.0).")
    attention_mask: bool = Field(
        True,
        description="Mask padded positions out of attention (exact). False: causal only, which lets CUDA use "
        "flash kernels, but audio positions then also see the padding between text and audio.",
    )
    temperature: float = Field(0.75, ge=0, description="Default sampling temperature of synthesize (0: greedy).")
    top_k: int | None = Field(50, gt=0, description="Default top-k of synthesize (None: the whole codebook).")
    griffin_lim_iters: int = Field(32, gt=0, description="Griffin-Lim iterations when synthesizing without a vocoder.")

    @field_validator("heads")
    @classmethod
    def _check_heads(cls, heads: int, info: ValidationInfo) -> int:
        width = info.data.get("width")
        if width is not None and width % heads:
            raise ValueError(f"model.width={width} must be divisible by model.heads={heads}")
        return heads
