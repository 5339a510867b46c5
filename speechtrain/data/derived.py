"""Derived features: per-utterance arrays a model family computes from the stored audio, cached by ``prepare``.

A family declares them (``derived_features(model, data)`` next to its ``build_task``; XTTS's DVAE codes are
one); the data layer stores and serves them without importing any model code:

- ``prepare`` computes each one once per utterance, in the main process after the mel/audio pass, from the
  stored audio exactly as :class:`~speechtrain.data.dataset.SpeechDataset` yields it (float32
  ``pcm / 32767``, (T_samples,)), and writes ``<root>/features/<kk>/<key>.<name>.npy``;
- the key hashes the audio key (the file's path, size, mtime, sample_rate, hop_length) and the feature's
  ``settings`` (whatever else its values depend on: the model's weights digest, its own mel settings ...),
  so a new audio file or new weights recompute it, and nothing else does;
- the feature's name and settings digest join the index settings (a variant of its own, so switching
  weights back and forth keeps both), and the dataset yields it as the field ``name`` (collated with 0
  padding along the last axis and ``<name>_lengths``).

Families that read them must also work without them: the loader ships a derived feature only where the
audio the task sees is the stored audio (no ``data.noise_snr_db``, no ``data.crop_frames``; see
:meth:`speechtrain.recipes.data.DataRecipe.derived`).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: ``compute(audio)``: float32 (T_samples,) at data.sample_rate -> the feature, time on the last axis
Compute = Callable[[np.ndarray], np.ndarray]

_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
RESERVED = ("mel", "audio", "tokens", "f0", "id", "text", "speaker", "label")


@dataclass(frozen=True)
class DerivedFeature:
    """A per-utterance feature computed once by ``prepare`` from the stored audio.

    ``load`` is called once, and only when some utterance needs computing (loading weights is the costly
    part); it returns the ``compute`` function. It may raise :class:`speechtrain.errors.UserError` (a weights
    file that does not load, say): prepare stops with that message.
    """

    name: str  # the dataset field and file suffix: "codes" -> item["codes"], <key>.codes.npy
    settings: dict[str, Any]  # JSON-safe: everything besides the audio the values depend on
    load: Callable[[], Compute] = field(compare=False, repr=False)
    description: str = ""  # for the prepare report ("DVAE codes")

    def __post_init__(self) -> None:
        if not _NAME.match(self.name) or self.name in RESERVED:
            raise ValueError(f"derived feature name {self.name!r}: lower-case letters/digits/_ and none of {RESERVED}")

    def digest(self) -> str:
        """16 hex digits of the name and settings (in the index settings and in every key)."""
        blob = json.dumps([self.name, self.settings], sort_keys=True)
        return hashlib.sha1(blob.encode()).hexdigest()[:16]


def file_digest(path: str, chunk: int = 1 << 22) -> str:
    """sha1 of a file's content (for a feature's ``settings``: the weights it is computed with), memoised
    per path, size and mtime so that asking again (every ``ensure_prepared``) does not read it again."""
    import os

    st = os.stat(path)
    memo_key = (os.path.abspath(path), st.st_size, st.st_mtime_ns)
    if memo_key not in _DIGESTS:
        h = hashlib.sha1()
        with open(path, "rb") as f:
            while block := f.read(chunk):
                h.update(block)
        _DIGESTS[memo_key] = h.hexdigest()
    return _DIGESTS[memo_key]


_DIGESTS: dict[tuple[str, int, int], str] = {}
