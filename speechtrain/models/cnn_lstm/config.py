"""CNN-LSTM classifier config (no torch import)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from speechtrain.config import ModelSection


class CNNLSTMConfig(ModelSection):
    """Log-mel (B, n_mels, T_frames) -> class logits: conv blocks over (mel, time), a BiLSTM over the
    packed sequence, masked mean+max pooling over time, a linear head."""

    name: str = "cnn_lstm"
    labels: list[str] | None = Field(
        None,
        description="Class names in label-id order (sorted folder names). None: read from data.manifest when the "
        "task is built; the run's config.yaml then records them, so inference needs no data.",
    )
    conv_channels: list[int] = Field([32, 64, 64], min_length=1, description="Output channels of each conv block.")
    kernel_size: int = Field(3, gt=0, description="Conv kernel (odd), over both mel bands and frames.")
    pool_time: list[int] = Field(
        [2, 2, 1], min_length=1, description="Time pooling of each conv block (mel bands are always pooled by 2)."
    )
    lstm_hidden: int = Field(128, gt=0, description="LSTM hidden size per direction.")
    lstm_layers: int = Field(1, gt=0, description="Stacked LSTM layers.")
    bidirectional: bool = Field(True, description="Bidirectional LSTM.")
    pooling: Literal["mean_max", "mean", "max"] = Field(
        "mean_max", description="Pooling of LSTM outputs over real frames (mean_max concatenates both)."
    )
    dropout: float = Field(0.2, ge=0, lt=1, description="Dropout before the classifier (and between LSTM layers).")
    label_smoothing: float = Field(0.0, ge=0, lt=1, description="Cross-entropy label smoothing.")

    @model_validator(mode="after")
    def _check(self) -> CNNLSTMConfig:
        if len(self.pool_time) != len(self.conv_channels):
            raise ValueError("model.pool_time needs one entry per model.conv_channels block")
        if any(p <= 0 for p in self.pool_time) or any(c <= 0 for c in self.conv_channels):
            raise ValueError("model.pool_time and model.conv_channels must be positive")
        if self.kernel_size % 2 == 0:
            raise ValueError(f"model.kernel_size must be odd (got {self.kernel_size}) so frames stay aligned")
        if self.labels is not None and len(set(self.labels)) != len(self.labels):
            raise ValueError("model.labels has duplicates")
        if self.labels is not None and len(self.labels) < 2:
            raise ValueError("model.labels needs at least two classes")
        return self
