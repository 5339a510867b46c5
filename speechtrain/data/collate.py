"""Pad a list of items into a :class:`~speechtrain.data.batch.Batch`, and cut vocoder crops.

Padding values: mel with the log floor ``log(1e-5)`` (silence in log-mel), audio, f0 (unvoiced) and
tokens with 0 (``Tokenizer.pad_id``), a model family's derived features (XTTS's DVAE ``codes``) with 0.
Padded lengths may be rounded up to ``pad_multiple`` (8 helps tensor cores); the audio's padded length
is always the mel's padded length x ``hop_length``, so that the two stay aligned frame for frame.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from speechtrain.data.batch import Batch, round_up
from speechtrain.data.derived import RESERVED

MEL_PAD = math.log(1e-5)  # the log-mel floor of LogMel: padding reads as silence


def crop_item(item: dict[str, Any], offset: int, crop_frames: int, hop_length: int) -> dict[str, Any]:
    """The segment of ``crop_frames`` mel frames from ``offset`` with its aligned audio
    (``crop_frames * hop_length`` samples from ``offset * hop_length``). Shorter items are returned
    whole; collate pads them (their lengths stay the real ones)."""
    out = dict(item)
    if "mel" in item:
        out["mel"] = np.ascontiguousarray(item["mel"][:, offset : offset + crop_frames])  # (n_mels, crop_frames)
    if "f0" in item:
        out["f0"] = np.ascontiguousarray(item["f0"][offset : offset + crop_frames])  # (crop_frames,)
    if "audio" in item:
        start = offset * hop_length
        out["audio"] = np.ascontiguousarray(item["audio"][start : start + crop_frames * hop_length])
    return out


def _pad_stack(arrays: Sequence[np.ndarray], length: int, value: float, dtype: type[np.generic]) -> np.ndarray:
    """Stack arrays padded along their last axis to ``length``."""
    first = arrays[0]
    out = np.full((len(arrays), *first.shape[:-1], length), value, dtype=dtype)
    for i, a in enumerate(arrays):
        n = min(a.shape[-1], length)
        out[i, ..., :n] = a[..., :n]
    return out


def collate(
    items: Sequence[dict[str, Any]],
    pad_multiple: int = 1,
    hop_length: int = 256,
    sample_rate: int = 22050,
    bucket: int | None = None,
    min_frames: int | None = None,
) -> Batch:
    """Pad items (dicts from ``SpeechDataset[i]``) to the longest in the batch.

    Keys used when present: ``mel`` (n_mels, T_frames), ``audio`` (T_samples,), ``tokens`` (L,),
    ``f0`` (T_frames,), ``speaker``, ``label``, ``text`` (kept as ``Batch.texts``); any other array is a derived
    feature (XTTS: ``codes`` (T_codes,)), padded with 0 along its last axis (integers as int64, else float32)
    to the longest rounded up to ``pad_multiple``, with ``<name>_lengths``. ``min_frames`` pads every item
    to at least that many frames (crop mode, so that crop batches have one fixed shape). Returns ``mel``
    (B, n_mels, T), ``audio`` (B, 1, T * hop), ``tokens`` (B, L), ``f0`` (B, T) with ``*_lengths``, ``speakers``,
    ``labels``.
    """
    if not items:
        raise ValueError("collate needs at least one item")
    tensors: dict[str, torch.Tensor] = {}
    host: dict[str, list[int]] = {}
    first = items[0]
    mel_frames: int | None = None
    if "mel" in first:
        mels = [np.asarray(it["mel"], dtype=np.float32) for it in items]
        lengths = [m.shape[-1] for m in mels]
        mel_frames = round_up(max(max(lengths), min_frames or 0), pad_multiple)
        tensors["mel"] = torch.from_numpy(_pad_stack(mels, mel_frames, MEL_PAD, np.float32))  # (B, n_mels, T_frames)
        host["mel_lengths"] = lengths
    if "audio" in first:
        audio = [np.asarray(it["audio"], dtype=np.float32).reshape(-1) for it in items]
        lengths = [a.shape[-1] for a in audio]
        if mel_frames is None:
            frames = max(-(-max(lengths) // hop_length), min_frames or 0)
            mel_frames_a = round_up(frames, pad_multiple)
        else:
            mel_frames_a = mel_frames
        samples = mel_frames_a * hop_length
        tensors["audio"] = torch.from_numpy(_pad_stack(audio, samples, 0.0, np.float32)).unsqueeze(1)  # (B, 1, T_s)
        host["audio_lengths"] = lengths
    if "f0" in first:
        f0s = [np.asarray(it["f0"], dtype=np.float32).reshape(-1) for it in items]
        lengths = [f.shape[-1] for f in f0s]
        frames_f0 = mel_frames if mel_frames is not None else round_up(max(max(lengths), min_frames or 0), pad_multiple)
        if "audio" in tensors:
            frames_f0 = tensors["audio"].shape[-1] // hop_length
        tensors["f0"] = torch.from_numpy(_pad_stack(f0s, frames_f0, 0.0, np.float32))  # (B, T_frames), 0 = unvoiced
        host["f0_lengths"] = lengths
    if "tokens" in first:
        toks = [np.asarray(it["tokens"], dtype=np.int64).reshape(-1) for it in items]
        lengths = [t.shape[-1] for t in toks]
        length = round_up(max(max(lengths), 1), pad_multiple)
        tensors["tokens"] = torch.from_numpy(_pad_stack(toks, length, 0, np.int64))  # (B, L_tokens)
        host["token_lengths"] = lengths
    for key in first:
        if key in RESERVED or not isinstance(first[key], np.ndarray):
            continue
        arrays = [np.asarray(it[key]) for it in items]
        dtype = np.int64 if np.issubdtype(arrays[0].dtype, np.integer) else np.float32
        lengths = [a.shape[-1] for a in arrays]
        length = round_up(max(max(lengths), 1), pad_multiple)
        tensors[key] = torch.from_numpy(_pad_stack(arrays, length, 0, dtype))  # (B, ..., T)
        host[f"{key}_lengths"] = lengths
    for key, name in (("speaker", "speakers"), ("label", "labels")):
        if key in first and first[key] is not None:
            tensors[name] = torch.tensor([int(it[key]) for it in items], dtype=torch.long)  # (B,)
    for key, values in host.items():
        tensors[key] = torch.tensor(values, dtype=torch.long)  # (B,)
    ids = [str(it.get("id", i)) for i, it in enumerate(items)]
    texts = [str(it.get("text") or "") for it in items] if "text" in first else []
    return Batch(tensors, ids, hop_length, sample_rate, pad_multiple, bucket, host, texts)
