"""VITS text-to-speech: conditional VAE + flow + monotonic alignment search + HiFi-GAN decoder."""

from speechtrain.models.vits.config import VITSConfig

__all__ = ["VITSConfig"]
