"""The quality metrics, one function each, on 1-D float signals (numpy) or log-mels (n_mels, T_frames).

Intrusive metrics compare a signal with its reference (the eval set's own recording); the non-intrusive
DNSMOS scores a signal alone. PESQ, STOI and DNSMOS come from the packages made for them (``pesq``,
``pystoi``, ``speechmos``: ``pip install 'speechtrain[quality]'``); the rest are written here with numpy:

- **MCD** (mel-cepstral distortion, dB), as papers report it: the mel-cepstrum of a frame is the cosine series of
  its natural-log mel amplitudes on the mel axis, ``c_d = (1/M) sum_m ln A_m cos(pi d (m + 1/2) / M)`` over the
  ``M`` mel bands (the Fourier-series coefficients of the log amplitude, as SPTK's mel-cepstra are: 1/M scale);
  c0 (the energy) is left out and ``c1..cD`` kept (``D`` = :data:`MCD_COEFFS`);
  ``MCD = (10 / ln 10) * sqrt(2 * sum_d (c_d - c'_d)^2)`` per frame (no 1/D), averaged over frames. Each log-mel
  is first floored :data:`MCD_RANGE_DB` below its own loudest bin, so that a gain change moves only c0 and reads
  0 dB. Checked against ``mel-cepstral-distance`` (Kubichek 1993) on the same frames (tests/test_quality_mcd.py).
- **MCD with DTW**: the same distance after aligning the two cepstral sequences by dynamic time warping (steps
  (1,0), (0,1), (1,1)), averaged over the path.
- **Multi-resolution STFT distance**: spectral convergence ``||S - S'||_F / ||S||_F`` plus the mean L1 of the log
  magnitudes, averaged over (n_fft, hop, win) = (512, 128, 512), (1024, 256, 1024), (2048, 512, 2048)
  (Parallel WaveGAN's resolutions; the same as the loss, measured here in float64 numpy).
- **F0**: RMSE in cents over frames voiced in both, gross pitch error (voiced in both, off by more than 20 %),
  voicing decision error (voiced in exactly one), with the f0 extractor the run uses.
- **Classification**: accuracy and macro F1 from the confusion matrix (rows true, columns predicted).
- **CER** (character error rate): the character edit distance (substitutions, deletions, insertions) from the
  reference text to an ASR model's transcript of the synthesis, divided by the reference's length in characters,
  after one normalisation of both (:func:`normalise_text`: the run's number normalisation, Unicode NFC, casefold
  by the language -- Turkish and Azerbaijani I/ı and İ/i --, punctuation removed, whitespace collapsed to one
  space). ``jiwer``'s ``cer`` counts when it is installed, :func:`levenshtein` here otherwise
  (the same figure). Over 1 when the transcript is longer than the reference and mostly wrong.
"""

from __future__ import annotations

import math
import threading
import unicodedata
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

#: mel-cepstral coefficients c1..cD that MCD compares
MCD_COEFFS = 24
#: PESQ wide-band, DNSMOS and speaker encoders work at 16 kHz
RATE_16K = 16000
STFT_RESOLUTIONS = ((512, 128, 512), (1024, 256, 1024), (2048, 512, 2048))
GROSS_PITCH_ERROR = 0.2
_DB = 10.0 / math.log(10.0)


def resample(audio: np.ndarray, rate: int, target: int) -> np.ndarray:
    """``audio`` at ``rate`` resampled to ``target`` with soxr (HQ)."""
    x = np.asarray(audio, dtype=np.float32).reshape(-1)
    if rate == target:
        return x
    import soxr

    return np.asarray(soxr.resample(x, rate, target, quality="HQ"), dtype=np.float32)


def _pair(ref: np.ndarray, deg: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n = min(len(ref), len(deg))
    return np.asarray(ref[:n], dtype=np.float64), np.asarray(deg[:n], dtype=np.float64)


# ------------------------------------------------------------------------------------ intrusive, on audio
def pesq_wb(ref: np.ndarray, deg: np.ndarray, rate: int) -> float:
    """PESQ wide-band (P.862.2, MOS-LQO, about 1.0 to 4.64) of ``deg`` against ``ref``, both at ``rate``,
    resampled to 16 kHz. NaN when PESQ finds no utterance in the reference (silence) or the clip is too short."""
    import pesq

    r, d = _pair(resample(ref, rate, RATE_16K), resample(deg, rate, RATE_16K))
    if not np.any(r) or not np.any(d):  # a silent signal: no utterance to score (pesq would divide by 0)
        return math.nan
    try:
        return float(pesq.pesq(RATE_16K, r.astype(np.float32), d.astype(np.float32), "wb"))
    except pesq.PesqError:
        return math.nan


def stoi(ref: np.ndarray, deg: np.ndarray, rate: int) -> float:
    """STOI (0 to 1) of ``deg`` against ``ref`` (pystoi resamples to 10 kHz itself)."""
    from pystoi import stoi as _stoi

    r, d = _pair(ref, deg)
    return float(_stoi(r, d, rate, extended=False))


def _magnitude(x: np.ndarray, n_fft: int, hop: int, win: int) -> np.ndarray:
    """|STFT| (frames, bins) with a Hann window, centred (reflect padding), float64."""
    pad = n_fft // 2
    x = np.pad(x, (pad, pad), mode="reflect") if len(x) > pad else np.pad(x, (pad, pad))
    frames = 1 + max(0, (len(x) - n_fft) // hop)
    idx = np.arange(n_fft)[None, :] + hop * np.arange(frames)[:, None]
    window = np.zeros(n_fft)
    start = (n_fft - win) // 2
    window[start : start + win] = np.hanning(win + 1)[:-1]
    return np.abs(np.fft.rfft(x[idx] * window, axis=-1))


def mrstft(ref: np.ndarray, deg: np.ndarray, resolutions: Sequence[tuple[int, int, int]] = STFT_RESOLUTIONS) -> float:
    """Multi-resolution STFT distance: mean over resolutions of spectral convergence + log-magnitude L1."""
    r, d = _pair(ref, deg)
    total = 0.0
    for n_fft, hop, win in resolutions:
        s, s_hat = _magnitude(r, n_fft, hop, win), _magnitude(d, n_fft, hop, win)
        sc = float(np.linalg.norm(s - s_hat)) / max(float(np.linalg.norm(s)), 1e-9)
        log_l1 = np.mean(np.abs(np.log(np.maximum(s, 1e-7)) - np.log(np.maximum(s_hat, 1e-7))))
        total += float(sc + log_l1)
    return total / len(resolutions)


# ------------------------------------------------------------------------------------ mel-cepstra
def _cosine_series(n_mels: int, coeffs: int) -> np.ndarray:
    """(coeffs, n_mels): row ``d`` (1..coeffs) is ``cos(pi d (m + 1/2) / M) / M``, the 1/M-scaled DCT-II that gives
    the cepstral coefficients of a log amplitude sampled at the M band centres of the mel axis."""
    d = np.arange(1, coeffs + 1)[:, None]
    return np.cos(np.pi * d * (np.arange(n_mels)[None, :] + 0.5) / n_mels) / n_mels


def mel_cepstra(log_mel: np.ndarray, coeffs: int = MCD_COEFFS) -> np.ndarray:
    """Mel-cepstra c1..c_coeffs (T_frames, coeffs) of a natural-log mel amplitude (n_mels, T_frames); c0 is left
    out (a gain only moves c0)."""
    x = np.asarray(log_mel, dtype=np.float64)
    return (_cosine_series(x.shape[0], min(coeffs, x.shape[0] - 1)) @ x).T


#: the dynamic range MCD sees: each log-mel is floored this many dB below its own loudest mel bin
MCD_RANGE_DB = 60.0


def floored(log_mel: np.ndarray) -> np.ndarray:
    """A natural-log mel floored :data:`MCD_RANGE_DB` below its own peak: digital silence against faint noise
    (-100 dB against -80 dB, inaudible) would otherwise outweigh the speech. Each signal's own peak, not the
    recording's, so that a copy at another gain reads 0 dB (the floor moves with the gain)."""
    x = np.asarray(log_mel, dtype=np.float64)
    if not x.size:
        return x
    return np.maximum(x, float(x.max()) - MCD_RANGE_DB * math.log(10.0) / 20.0)


def _frame_mcd(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """MCD (dB) of aligned cepstral frames (T, D) -> (T,)."""
    return _DB * np.sqrt(2.0 * np.sum((a - b) ** 2, axis=-1))


def mcd(ref_mel: np.ndarray, deg_mel: np.ndarray) -> float:
    """MCD (dB) frame by frame (the shorter length; a vocoder's output is frame-aligned with its input)."""
    a, b = mel_cepstra(floored(ref_mel)), mel_cepstra(floored(deg_mel))
    n = min(len(a), len(b))
    return float(np.mean(_frame_mcd(a[:n], b[:n]))) if n else math.nan


def dtw_path(cost: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The least-cost monotonic path through ``cost`` (N, M) from (0, 0) to (N-1, M-1), steps (1,0), (0,1),
    (1,1); filled one anti-diagonal at a time (vectorised), then traced back."""
    n, m = cost.shape
    acc = np.full((n + 1, m + 1), np.inf)
    acc[0, 0] = 0.0
    for s in range(2, n + m + 1):  # anti-diagonal i + j = s in the padded table (i, j >= 1)
        i = np.arange(max(1, s - m), min(n, s - 1) + 1)
        j = s - i
        best = np.minimum(np.minimum(acc[i - 1, j], acc[i, j - 1]), acc[i - 1, j - 1])
        acc[i, j] = cost[i - 1, j - 1] + best
    path_i, path_j = [n - 1], [m - 1]
    i, j = n, m
    while i > 1 or j > 1:
        moves = ((i - 1, j - 1), (i - 1, j), (i, j - 1))
        i, j = min((mv for mv in moves if mv[0] >= 1 and mv[1] >= 1), key=lambda mv: acc[mv])
        path_i.append(i - 1)
        path_j.append(j - 1)
    return np.array(path_i[::-1]), np.array(path_j[::-1])


def mcd_dtw(ref_mel: np.ndarray, deg_mel: np.ndarray) -> float:
    """MCD (dB) of two log-mels after dynamic-time-warping alignment of their mel-cepstra, averaged over the path."""
    a, b = mel_cepstra(floored(ref_mel)), mel_cepstra(floored(deg_mel))
    if not len(a) or not len(b):
        return math.nan
    cost = _DB * np.sqrt(2.0 * np.maximum(0.0, (a**2).sum(1)[:, None] + (b**2).sum(1)[None] - 2.0 * a @ b.T))
    pi, pj = dtw_path(cost)
    return float(np.mean(cost[pi, pj]))


# ------------------------------------------------------------------------------------ f0
def f0_errors(ref_f0: np.ndarray, deg_f0: np.ndarray) -> dict[str, float]:
    """F0 RMSE (cents) over frames voiced in both, gross pitch error and voicing decision error (shares); f0 in
    Hz per frame, 0 = unvoiced; the shorter length is compared."""
    n = min(len(ref_f0), len(deg_f0))
    r, d = np.asarray(ref_f0[:n], dtype=np.float64), np.asarray(deg_f0[:n], dtype=np.float64)
    rv, dv = r > 0, d > 0
    both = rv & dv
    out = {"vde": float(np.mean(rv != dv)) if n else math.nan}
    if both.any():
        cents = 1200.0 * np.log2(d[both] / r[both])
        out["f0_rmse_cents"] = float(np.sqrt(np.mean(cents**2)))
        out["gpe"] = float(np.mean(np.abs(d[both] / r[both] - 1.0) > GROSS_PITCH_ERROR))
    else:
        out["f0_rmse_cents"] = out["gpe"] = math.nan
    return out


# ------------------------------------------------------------------------------------ non-intrusive
_DNSMOS: dict[str, Any] = {}
_DNSMOS_LOCK = threading.Lock()
DNSMOS_SECONDS = 9.01  # the P.835 models' input window


def _dnsmos_model() -> Any:
    """speechmos's DNSMOS with its bundled P.835 and P.808 ONNX models, on one CPU thread (loaded once)."""
    with _DNSMOS_LOCK:
        if "model" not in _DNSMOS:
            import os

            import onnxruntime as ort
            from speechmos import dnsmos

            folder = os.path.join(os.path.dirname(os.path.abspath(dnsmos.__file__)), "dnsmos_models")
            options = ort.SessionOptions()
            options.intra_op_num_threads = options.inter_op_num_threads = 1
            model = dnsmos.DNSMOS.__new__(dnsmos.DNSMOS)  # its __init__ opens sessions on every core
            model.primary_model_path = os.path.join(folder, "sig_bak_ovr.onnx")
            cpu = ["CPUExecutionProvider"]
            model.onnx_sess = ort.InferenceSession(model.primary_model_path, options, providers=cpu)
            model.p808_onnx_sess = ort.InferenceSession(os.path.join(folder, "model_v8.onnx"), options, providers=cpu)
            _DNSMOS["model"] = model
        return _DNSMOS["model"]


def dnsmos(audio: np.ndarray, rate: int) -> dict[str, float]:
    """DNSMOS P.835 {dnsmos_sig, dnsmos_bak, dnsmos_ovrl} of one signal (resampled to 16 kHz). A clip shorter
    than the models' 9.01 s window is tiled to exactly one window (the reference script doubles it and
    averages the overlapping windows of the copy: the same audio, several times the cost)."""
    x = np.clip(resample(audio, rate, RATE_16K), -1.0, 1.0)
    if not x.size or not np.any(x):
        return {"dnsmos_sig": math.nan, "dnsmos_bak": math.nan, "dnsmos_ovrl": math.nan}
    window = int(DNSMOS_SECONDS * RATE_16K)
    if len(x) < window:
        x = np.tile(x, math.ceil(window / len(x)))[:window]
    scores = _dnsmos_model()(x.astype(np.float32), RATE_16K, False)
    return {
        "dnsmos_sig": float(scores["sig_mos"]),
        "dnsmos_bak": float(scores["bak_mos"]),
        "dnsmos_ovrl": float(scores["ovrl_mos"]),
    }


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine similarity of two embeddings."""
    x, y = np.asarray(a, dtype=np.float64).reshape(-1), np.asarray(b, dtype=np.float64).reshape(-1)
    return float(x @ y) / max(float(np.linalg.norm(x) * np.linalg.norm(y)), 1e-12)


# ------------------------------------------------------------------------------------ text (ASR)
#: languages whose dotted and dotless i are two letters: I -> ı and İ -> i (elsewhere İ is i, not i + U+0307)
DOTLESS_I_LANGUAGES = frozenset({"tr", "az", "crh", "gag", "kaa", "tt"})


def fold_language(language: str | None) -> str:
    """The language ``language`` (BCP-47) folds case as: its primary subtag where that folds otherwise than the
    default (Turkish ``I`` -> ``ı``), else ``und``."""
    code = (language or "und").replace("_", "-").split("-")[0].lower()
    return code if code in DOTLESS_I_LANGUAGES else "und"


def casefold(text: str, language: str = "und") -> str:
    """``text`` casefolded as ``language`` (BCP-47) folds it: Turkish/Azerbaijani ``I`` is ``ı`` and ``İ`` is ``i``;
    elsewhere ``İ`` is ``i`` too (Python's casefold would make it i + a combining dot)."""
    if fold_language(language) != "und":
        text = text.replace("I", "\u0131")
    return text.replace("\u0130", "i").casefold()


def normalise_text(text: str, language: str = "und", numbers: Callable[[str], str] | None = None) -> str:
    """``text`` as CER compares it: ``numbers`` first (the run's number normalisation, given by the recipe: ``50%``
    and "fifty percent" are the same words), Unicode NFC, casefolded by ``language`` (:func:`casefold`; NFC again:
    casefolding may decompose), every punctuation character (Unicode category P*) removed, runs of whitespace made
    one space, ends stripped."""
    if numbers is not None:
        text = numbers(text)
    folded = unicodedata.normalize("NFC", casefold(unicodedata.normalize("NFC", text), language))
    kept = "".join(ch for ch in folded if not unicodedata.category(ch).startswith("P"))
    return " ".join(kept.split())


def levenshtein(a: Sequence[Any], b: Sequence[Any]) -> int:
    """The edit distance (substitutions, deletions, insertions, each 1) from ``a`` to ``b``."""
    if len(a) < len(b):
        a, b = b, a
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, y in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (x != y))
    return row[-1]


def cer(reference: str, hypothesis: str, language: str = "und", numbers: Callable[[str], str] | None = None) -> float:
    """Character error rate of ``hypothesis`` (a transcript) against ``reference`` (the text spoken), both
    normalised alike (:func:`normalise_text` in ``language``, with the same ``numbers``): edit distance / reference
    characters. NaN when the reference holds no character after normalisation (nothing to compare with)."""
    ref, hyp = normalise_text(reference, language, numbers), normalise_text(hypothesis, language, numbers)
    if not ref:
        return math.nan
    try:
        import jiwer
    except ImportError:
        return levenshtein(ref, hyp) / len(ref)
    return float(jiwer.cer(ref, hyp))


# ------------------------------------------------------------------------------------ classification
def classification_scores(confusion: Sequence[Sequence[float]]) -> dict[str, float]:
    """Accuracy and macro F1 of a confusion matrix (rows: true class, columns: predicted). A class with no
    true and no predicted item is left out of the macro mean (its F1 is undefined)."""
    c = np.asarray(confusion, dtype=np.float64)
    total = c.sum()
    tp = np.diag(c)
    true, pred = c.sum(1), c.sum(0)
    present = (true + pred) > 0
    f1 = np.where(present, 2 * tp / np.maximum(true + pred, 1e-12), 0.0)
    return {
        "accuracy": float(tp.sum() / total) if total else math.nan,
        "macro_f1": float(f1[present].mean()) if present.any() else math.nan,
    }
