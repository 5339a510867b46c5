"""DistillMOS: a second non-intrusive MOS predictor beside DNSMOS (``pip install --no-deps distillmos xls-r-sqa``:
its wheel ships its 17 MB weights, so nothing is downloaded). A convolutional front end and a transformer
distilled from an XLS-R speech-quality model; it predicts a MOS from 1 to 5 for 16 kHz speech.

Its weights are read through :func:`speechtrain.ckptio.load` (tensors only), never by the package's own loader.
The package imports torchaudio at the top of its module for its command-line file reading only; where torchaudio is
absent or does not load (a wheel built for another torch, as pip picks for torch 2.13 on the CPU), the module is
imported with an empty stand-in for it, removed again at once: the model itself is torch alone, and the audio is
resampled here with soxr.
"""

from __future__ import annotations

import importlib.util
import math
import sys
import threading
import types
from typing import Any

import numpy as np

from speechtrain.quality.metrics import RATE_16K, resample

_MODEL: dict[str, Any] = {}
_LOCK = threading.Lock()


def available() -> bool:
    """Whether the distillmos package is installed (without importing it)."""
    return importlib.util.find_spec("distillmos") is not None


def _sqa_module() -> Any:
    """``distillmos.sqa``, imported with a stand-in torchaudio when the real one does not import."""
    try:
        import torchaudio  # noqa: F401
    except Exception:  # noqa: BLE001 - absent (ImportError) or built for another torch (OSError)
        sys.modules["torchaudio"] = types.ModuleType("torchaudio")
        try:
            from distillmos import sqa
        finally:
            del sys.modules["torchaudio"]
        return sqa
    from distillmos import sqa

    return sqa


def _model() -> Any:
    """The DistillMOS network with the wheel's weights (loaded once, on the CPU)."""
    with _LOCK:
        if "model" not in _MODEL:
            from speechtrain import ckptio

            sqa = _sqa_module()
            net = sqa.ConvTransformerSQAModel(load_weights=False)
            net.load_state_dict(ckptio.load(sqa.DEFAULT_WEIGHTS_CHKPT)["model"])
            _MODEL["model"] = net.eval()
        return _MODEL["model"]


def distillmos(audio: np.ndarray, rate: int) -> float:
    """DistillMOS (1 to 5) of one signal, resampled to 16 kHz; NaN for silence."""
    import torch

    x = np.clip(resample(audio, rate, RATE_16K), -1.0, 1.0)
    if not x.size or not np.any(x):
        return math.nan
    with torch.no_grad():
        return float(_model()(torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))[None]).reshape(-1)[0])
