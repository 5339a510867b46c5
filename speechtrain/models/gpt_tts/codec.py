"""A mel codec the project can both encode and decode: a k-means codebook over groups of mel frames.

XTTS tokenizes audio with a trained DVAE; here the codes come from a codebook fitted on the
training mels (``frames_per_code`` consecutive frames form one vector), so no separate model has
to be trained first and ``decode`` gives back a mel that a vocoder (or Griffin-Lim) turns into audio.
The codebook is a buffer, so checkpoints carry it.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch import nn

from speechtrain.errors import DataError


def _sq_distances(x: torch.Tensor, centroids: torch.Tensor) -> torch.Tensor:
    """Squared Euclidean distances (N, K) between rows of x (N, D) and centroids (K, D), in float32."""
    x, centroids = x.float(), centroids.float()
    return (x.pow(2).sum(1, keepdim=True) - 2.0 * x @ centroids.T + centroids.pow(2).sum(1)[None]).clamp_min(0.0)


def nearest(x: torch.Tensor, centroids: torch.Tensor, chunk: int = 16384) -> tuple[torch.Tensor, torch.Tensor]:
    """Index of the nearest centroid for each row of x (N, D), and the squared distance to it."""
    idx, dist = [], []
    for start in range(0, x.shape[0], chunk):
        d = _sq_distances(x[start : start + chunk], centroids)  # (n, K)
        best, arg = d.min(dim=1)
        idx.append(arg)
        dist.append(best)
    if not idx:
        return x.new_zeros(0, dtype=torch.long), x.new_zeros(0)
    return torch.cat(idx), torch.cat(dist)


def kmeans(x: torch.Tensor, k: int, iterations: int = 10, seed: int = 0) -> tuple[torch.Tensor, list[float]]:
    """Lloyd's k-means on rows of ``x`` (N, D): (centroids (K, D), mean squared error per iteration).

    Initialised from ``k`` distinct random rows (seeded); a cluster that empties is re-seeded with the
    row that is currently worst served, so every code stays in use.
    """
    n = x.shape[0]
    if n < k:
        raise DataError(f"k-means needs at least {k} vectors for {k} codes, got {n} (lower model.codebook_size)")
    x = x.float()
    gen = torch.Generator(device="cpu").manual_seed(seed)
    centroids = x[torch.randperm(n, generator=gen)[:k].to(x.device)].clone()  # (K, D)
    errors: list[float] = []
    for _ in range(iterations):
        assign, dist = nearest(x, centroids)
        errors.append(float(dist.mean()))  # host sync: once per iteration, fitting only
        sums = torch.zeros_like(centroids).index_add_(0, assign, x)
        counts = torch.bincount(assign, minlength=k).to(x.dtype)  # (K,)
        empty = counts == 0
        centroids = torch.where(empty[:, None], centroids, sums / counts.clamp_min(1)[:, None])
        n_empty = int(empty.sum())  # host sync, fitting only
        if n_empty:
            worst = dist.topk(min(n_empty, n)).indices
            centroids[empty.nonzero().squeeze(1)[: worst.numel()]] = x[worst]
    _, dist = nearest(x, centroids)
    errors.append(float(dist.mean()))
    return centroids, errors


class MelCodec(nn.Module):
    """Mel <-> discrete codes with a k-means codebook over groups of ``frames_per_code`` frames.

    ``encode(mel (B, n_mels, T_frames)) -> codes (B, T_frames // frames_per_code)``;
    ``decode(codes (B, T_codes)) -> mel (B, n_mels, T_codes * frames_per_code)``.
    """

    codebook: torch.Tensor
    fitted: torch.Tensor

    def __init__(self, n_mels: int, codebook_size: int, frames_per_code: int = 1) -> None:
        super().__init__()
        self.n_mels, self.codebook_size, self.frames_per_code = n_mels, codebook_size, frames_per_code
        dim = n_mels * frames_per_code
        self.register_buffer("codebook", torch.zeros(codebook_size, dim))  # (K, n_mels * frames_per_code)
        self.register_buffer("fitted", torch.zeros((), dtype=torch.bool))
        self._fitted = False  # host copy of `fitted`, so that checks never sync with the device
        self.fit_errors: list[float] = []

    @property
    def is_fitted(self) -> bool:
        return self._fitted

    def code_lengths(self, mel_lengths: torch.Tensor) -> torch.Tensor:
        """Codes per item for mel lengths in frames (whole groups only)."""
        return torch.div(mel_lengths, self.frames_per_code, rounding_mode="floor")

    def frames_to_vectors(self, mel: torch.Tensor) -> torch.Tensor:
        """(B, n_mels, T_frames) -> (B, T_codes, n_mels * frames_per_code); a partial last group is dropped."""
        b, m, t = mel.shape
        if m != self.n_mels:
            raise ValueError(f"mel has {m} bands, the codec was built for {self.n_mels} (data.n_mels)")
        t_codes = t // self.frames_per_code
        x = mel[..., : t_codes * self.frames_per_code].transpose(1, 2)  # (B, T_frames', n_mels)
        return x.reshape(b, t_codes, self.frames_per_code * m)

    @torch.no_grad()
    def fit(
        self, vectors: torch.Tensor, iterations: int = 10, seed: int = 0, device: str | torch.device | None = None
    ) -> list[float]:
        """Fit the codebook on vectors (N, n_mels * frames_per_code); returns the k-means error per iteration.

        ``device``: where k-means runs (default: the codebook's device); the codebook stays where it is.
        """
        where = torch.device(device) if device is not None else self.codebook.device
        centroids, errors = kmeans(vectors.to(where), self.codebook_size, iterations, seed)
        self.codebook.copy_(centroids.to(self.codebook.device))
        self.fitted.fill_(True)
        self._fitted = True
        self.fit_errors = errors
        return errors

    @torch.no_grad()
    def fit_mels(
        self,
        mels: list[Any],
        max_vectors: int = 50000,
        iterations: int = 10,
        seed: int = 0,
        device: str | torch.device | None = None,
    ) -> list[float]:
        """Fit on a list of mels (n_mels, T_frames) (numpy or torch), at most ``max_vectors`` groups sampled."""
        groups = []
        for mel in mels:
            m = torch.as_tensor(np.asarray(mel, dtype=np.float32))
            groups.append(self.frames_to_vectors(m[None])[0])
        vectors = torch.cat(groups) if groups else torch.zeros(0, self.codebook.shape[1])
        if vectors.shape[0] > max_vectors:
            gen = torch.Generator().manual_seed(seed)
            vectors = vectors[torch.randperm(vectors.shape[0], generator=gen)[:max_vectors]]
        return self.fit(vectors, iterations, seed, device)

    def _require_fitted(self) -> None:
        if not self._fitted:
            raise RuntimeError(
                "the mel codec has no codebook yet: call task.setup(train_dataset) (the Trainer does) "
                "or load a checkpoint that carries one"
            )

    @torch.no_grad()
    def encode(self, mel: torch.Tensor) -> torch.Tensor:
        """Codes of mel (B, n_mels, T_frames) -> (B, T_codes) int64, computed in float32 (autocast off)."""
        self._require_fitted()
        x = self.frames_to_vectors(mel)  # (B, T_codes, D)
        b, t, d = x.shape
        with torch.autocast(device_type=mel.device.type, enabled=False):
            idx, _ = nearest(x.reshape(b * t, d), self.codebook)
        return idx.reshape(b, t)

    @torch.no_grad()
    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """Mel of codes (B, T_codes) -> (B, n_mels, T_codes * frames_per_code)."""
        self._require_fitted()
        b, t = codes.shape
        x = self.codebook[codes.clamp(0, self.codebook_size - 1)]  # (B, T_codes, n_mels * frames_per_code)
        return x.reshape(b, t * self.frames_per_code, self.n_mels).transpose(1, 2)

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str, *args: Any, **kwargs: Any) -> None:
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        fitted = state_dict.get(prefix + "fitted")
        if fitted is not None:
            self._fitted = bool(fitted)  # host value at load time, not in a hot path

    def extra_repr(self) -> str:
        return (
            f"n_mels={self.n_mels}, codebook_size={self.codebook_size}, "
            f"frames_per_code={self.frames_per_code}, fitted={self._fitted}"
        )


def codes_per_second(sample_rate: int, hop_length: int, frames_per_code: int) -> float:
    """Audio codes per second of audio."""
    return sample_rate / hop_length / frames_per_code


def max_codes_for_seconds(seconds: float, sample_rate: int, hop_length: int, frames_per_code: int) -> int:
    """Codes that cover ``seconds`` of audio (rounded up)."""
    return int(math.ceil(seconds * codes_per_second(sample_rate, hop_length, frames_per_code)))
