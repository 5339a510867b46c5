"""pocketsphinx as a built-in English ASR for ``cer`` (``train.quality_asr: pocketsphinx``, ``--asr pocketsphinx``).

Its wheel ships a US English acoustic model, dictionary and language model (``pip install pocketsphinx``, 38 MB
installed), so it needs no download. It is made for human recordings: on espeak-ng's synthetic English it reads the
recordings themselves at CER 0.6-0.7 (issue 47), which is why every ``cer`` is shown beside ``cer_recordings`` (the
same ASR on the recordings): there, its ceiling says it cannot judge that voice. For a synthetic or non-English
corpus use the judge (``judge``), trained on the corpus's own recordings.
"""

from __future__ import annotations

import importlib.util
import threading
from typing import Any

import numpy as np

from speechtrain.errors import UserError

#: the name that selects pocketsphinx in ``train.quality_asr`` and ``--asr``
POCKETSPHINX = "pocketsphinx"
#: the rate of its bundled acoustic model
RATE = 16000
INSTALL_HINT = "pip install pocketsphinx (or pip install 'speechtrain[quality]')"


def require(key: str = "train.quality_asr") -> None:
    """A one-line UserError with the install hint when pocketsphinx is not installed."""
    if importlib.util.find_spec("pocketsphinx") is None:
        raise UserError(f"{key}=pocketsphinx needs the pocketsphinx package, which is not installed: {INSTALL_HINT}")


class PocketsphinxTranscriber:
    """Transcribes 1-D audio (any rate, resampled to 16 kHz) with pocketsphinx's bundled US English model; the
    decoder is made on the first call (about 2 s) and reused, one utterance at a time."""

    def __init__(self, key: str = "train.quality_asr") -> None:
        require(key)
        self._decoder: Any = None
        self._lock = threading.Lock()

    def __call__(self, audio: np.ndarray, rate: int) -> str:
        from speechtrain.quality.metrics import resample

        x = resample(np.clip(np.asarray(audio, dtype=np.float32).reshape(-1), -1.0, 1.0), int(rate), RATE)
        pcm = (x * 32767.0).astype(np.int16).tobytes()
        with self._lock:
            if self._decoder is None:
                from pocketsphinx import Decoder

                self._decoder = Decoder(samprate=RATE, loglevel="FATAL")
            d = self._decoder
            d.start_utt()
            d.process_raw(pcm, full_utt=True)
            d.end_utt()
            hyp = d.hyp()
        return str(hyp.hypstr) if hyp is not None else ""
