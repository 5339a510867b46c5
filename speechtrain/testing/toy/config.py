"""Configs of the toy tasks (no torch import)."""

from __future__ import annotations

from pydantic import Field

from speechtrain.config import ModelSection


class ToyConfig(ModelSection):
    """A tiny mel-to-mel model (next-frame predictor with conv and attention blocks) for engine tests."""

    name: str = "toy"
    channels: int = Field(32, gt=0, description="Hidden channels.")
    blocks: int = Field(2, gt=0, description="Repeated residual blocks (activation checkpointing wraps them).")
    heads: int = Field(2, gt=0, description="Attention heads in each block.")
    conv2d_front: bool = Field(False, description="A 2-D conv front end (exercises channels-last).")


class ToyGANConfig(ModelSection):
    """A tiny GAN on mels (generator + discriminator, two optimizer stages) for engine tests."""

    name: str = "toy_gan"
    channels: int = Field(16, gt=0, description="Hidden channels.")
    blocks: int = Field(2, gt=0, description="Generator residual blocks.")
    feature_match_weight: float = Field(2.0, ge=0, description="Feature-matching loss weight.")
