"""Fundamental frequency (f0) aligned with mel frames: one value per hop, unvoiced frames marked.

Frame convention (the one of :mod:`speechtrain.data.features`): ``T_frames = T_samples // hop_length``
and mel frame ``i`` covers the hop ``[i * hop, (i + 1) * hop)`` (its STFT window is centred on the middle of
that hop), so by default its f0 is measured there, at sample ``(i + 0.5) * hop``. ``frame_offset`` (in hops,
``data.f0_frame_offset``) moves the grid: 0.0 measures f0 frame ``i`` at sample ``i * hop``, SingingVocoders'
and DiffSinger's grid (Praat on the signal padded by 1.5 periods of f0_min), half a hop earlier than their own
mel frames' centres. A crop of frames ``[o, o + F)`` with its audio ``[o * hop, (o + F) * hop)`` gets the same
f0 from the crop as from the whole utterance (away from the crop's edges, where the analysis window runs into
padding).

Two extractors give the same layout, ``f0`` in Hz (0 where unvoiced) and a boolean ``voiced`` mask:

- ``yin``: the YIN difference function with cumulative-mean normalisation (de Cheveigne & Kawahara,
  2002) in torch, batched, on whatever device the audio is on; no extra package. YIN takes the first dip
  below its threshold, which on a voice whose odd harmonics are weak (a bright vowel with a strong 2nd
  harmonic) is half the period: an octave too high. The octave check then takes the dip at twice (or three
  times) the lag when the difference there is under 0.3 x the chosen one's (a true period's multiples are
  no deeper than the period itself).
- ``parselmouth``: Praat's autocorrelation pitch (``to_pitch_ac``, as SingingVocoders uses) through
  the ``praat-parselmouth`` wheel (``pip install 'speechtrain[pitch]'``); CPU, one utterance at a time.

:func:`interpolate_unvoiced` fills unvoiced gaps log-linearly (ends held), which is what an NSF
vocoder's sine source is fed (SingingVocoders does the same), and :func:`f0_error` scores an
estimate against a known f0 in cents.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F

from speechtrain.errors import UserError

F0_MIN = 65.0  # Hz, SingingVocoders' f0_min (C2)
F0_MAX = 1100.0  # Hz, SingingVocoders' f0_max (C#6)
PitchMethod = Literal["yin", "parselmouth"]


def num_f0_frames(n_samples: int, hop_length: int) -> int:
    """f0 frames of a signal: one per mel frame, ``n_samples // hop_length``."""
    return n_samples // hop_length


FRAME_OFFSET = 0.5  # hops: f0 frame i at the centre of hop i (SingingVocoders: 0.0, the hop's first sample)


def frame_centres(n_frames: int, hop_length: int, sample_rate: int, frame_offset: float = FRAME_OFFSET) -> np.ndarray:
    """Times in seconds at which f0 frame ``i`` is measured: ``(i + frame_offset) * hop``."""
    return (np.arange(n_frames) + frame_offset) * hop_length / sample_rate


@dataclass(frozen=True)
class F0Settings:
    """How f0 is extracted (a change of any of them changes the cached f0)."""

    method: PitchMethod = "yin"
    f0_min: float = F0_MIN
    f0_max: float = F0_MAX
    frame_offset: float = FRAME_OFFSET

    @classmethod
    def from_data(cls, data: Any) -> F0Settings | None:
        """The f0 settings of a :class:`speechtrain.config.DataConfig` (None without ``data.f0_method``)."""
        if data.f0_method is None:
            return None
        return cls(data.f0_method, float(data.f0_min), float(data.f0_max), float(data.f0_frame_offset))

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict (hashed into the f0 cache keys: keep the names; a key appears only where the setting
        differs from what the caches made before it existed, so that those stay valid)."""
        out: dict[str, Any] = {"f0_method": self.method, "f0_min": float(self.f0_min), "f0_max": float(self.f0_max)}
        if self.frame_offset != FRAME_OFFSET:
            out["f0_frame_offset"] = float(self.frame_offset)
        if self.method == "yin":
            out["f0_yin_octave_check"] = True  # yin f0 cached before the octave check is recomputed
        return out

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> F0Settings:
        """The settings :meth:`to_dict` wrote."""
        offset = float(raw.get("f0_frame_offset", FRAME_OFFSET))
        return cls(raw["f0_method"], float(raw["f0_min"]), float(raw["f0_max"]), offset)

    def extract(self, audio: np.ndarray | torch.Tensor, sample_rate: int, hop_length: int) -> np.ndarray:
        """f0 float32 (T_frames,) of one 1-D signal, 0 where unvoiced (the cached layout)."""
        f0, voiced = extract_f0(
            audio, sample_rate, hop_length, self.method, self.f0_min, self.f0_max, frame_offset=self.frame_offset
        )
        return np.where(voiced, f0, 0.0).astype(np.float32)


# --- YIN in torch ------------------------------------------------------------------------------------------


def yin_f0(
    audio: torch.Tensor,
    sample_rate: int,
    hop_length: int,
    f0_min: float = F0_MIN,
    f0_max: float = F0_MAX,
    threshold: float = 0.15,
    silence_threshold: float = 0.01,
    n_frames: int | None = None,
    frame_offset: float = FRAME_OFFSET,
    octave_check: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """f0 by YIN: ``audio`` (B, T_samples), (B, 1, T_samples) or (T_samples,) -> ``(f0, voiced)``,
    each (B, T_frames) (or (T_frames,)), f0 float32 in Hz with 0 where unvoiced.

    A frame is voiced when the normalised difference dips below ``threshold`` between the lags of
    ``f0_max`` and ``f0_min``, and its RMS is above ``silence_threshold`` x the loudest frame of the item.
    ``n_frames`` defaults to ``T_samples // hop_length``; frame ``i`` is centred on ``(i + frame_offset) * hop``.
    ``octave_check``: replace a lag by twice or three times it where the difference there is under 0.3 x the
    lag's (:func:`_octave_check`). Runs on the audio's device, in fp32.
    """
    if f0_min <= 0 or f0_max <= f0_min:
        raise ValueError(f"yin_f0: need 0 < f0_min < f0_max, got {f0_min}, {f0_max}")
    single = audio.dim() == 1
    x = audio.reshape(-1, audio.shape[-1]).float()  # (B, T_samples)
    n_frames = num_f0_frames(x.shape[-1], hop_length) if n_frames is None else n_frames
    if n_frames <= 0:
        empty = x.new_zeros(x.shape[0], 0)
        return (empty[0], empty[0].bool()) if single else (empty, empty.bool())
    tau_max = int(math.ceil(sample_rate / f0_min))
    tau_min = max(2, int(math.floor(sample_rate / f0_max)))
    width = tau_max  # integration window: one period of the lowest f0
    # d(tau) compares x[j] with x[j + tau], j < width: its centre is (width + tau) / 2 into the frame;
    # frames are placed so that this centre falls on the hop's centre for a typical lag (f0 of 200 Hz)
    lead = (width + min(tau_max, int(sample_rate / 200.0))) // 2
    centre = int(frame_offset * hop_length)
    frames = _frames(x, n_frames, hop_length, width + tau_max + 2, lead, centre)  # (B, N, L)
    dfn = _difference(frames, width, tau_max + 1)
    cmnd, diff = dfn.cmnd, dfn.diff  # (B, N, tau_max + 2) each
    lags = cmnd[..., tau_min : tau_max + 1]  # candidate lags tau_min .. tau_max
    nxt = cmnd[..., tau_min + 1 : tau_max + 2]
    below = lags < threshold
    dip = below & (lags <= nxt)  # first local minimum once below the threshold
    found = dip.any(-1)
    first = torch.argmax(dip.to(torch.int8), dim=-1)
    best = torch.argmin(lags, dim=-1)
    k = torch.where(found, first, best) + tau_min  # (B, N) integer lag
    if octave_check:
        k = _octave_check(dfn, k, tau_max)
    tau = k.float() + _parabolic(diff, k)  # the raw difference is the smoother curve to interpolate
    f0 = sample_rate / tau.clamp_min(1.0)
    rms = frames[..., :width].pow(2).mean(-1).sqrt()  # (B, N)
    loud = rms > silence_threshold * rms.amax(-1, keepdim=True).clamp_min(1e-8)
    voiced = found & loud & (f0 >= f0_min * 0.97) & (f0 <= f0_max * 1.03)
    f0 = torch.where(voiced, f0, torch.zeros_like(f0))
    return (f0[0], voiced[0]) if single else (f0, voiced)


def _frames(x: torch.Tensor, n_frames: int, hop_length: int, length: int, lead: int, centre: int) -> torch.Tensor:
    """(B, T) -> (B, n_frames, length): frame ``i`` starts ``lead`` samples before sample ``i * hop + centre``."""
    pad = length + hop_length
    mode = "reflect" if x.shape[-1] > pad else "constant"
    xp = F.pad(x.unsqueeze(1), (pad, pad), mode=mode).squeeze(1)
    offset = pad + centre - lead
    return xp[:, offset:].unfold(-1, length, hop_length)[:, :n_frames]


@dataclass
class _Difference:
    """YIN's difference function of frames (B, N, L) over their first ``width`` samples: ``diff`` d(tau) and
    ``cmnd`` d'(tau) at integer lags 0 .. max_lag, and d between integer lags (:meth:`between`)."""

    cmnd: torch.Tensor  # (B, N, max_lag + 1)
    diff: torch.Tensor  # (B, N, max_lag + 1)
    taps: int = 8  # Lanczos half-width of the interpolation between integer lags

    def between(self, rows: torch.Tensor, lags: torch.Tensor) -> torch.Tensor:
        """d at fractional ``lags`` (R, M) of the flattened frames ``rows`` (R,): Lanczos (windowed-sinc)
        interpolation of the integer-lag d (a band-limited signal's difference function is band-limited)."""
        diff = self.diff.reshape(-1, self.diff.shape[-1])[rows]  # (R, lags)
        base = lags.floor()
        n = torch.arange(1 - self.taps, self.taps + 1, device=lags.device, dtype=lags.dtype)  # (2 taps,)
        at = base.unsqueeze(-1) + n  # (R, M, 2 taps) integer lags around each point
        x = lags.unsqueeze(-1) - at
        kernel = torch.sinc(x) * torch.sinc(x / self.taps)
        idx = at.long().clamp(0, diff.shape[-1] - 1)
        values = torch.gather(diff.unsqueeze(1).expand(-1, lags.shape[1], -1), -1, idx)
        return (values * kernel).sum(-1).clamp_min(0)

    def depth(self, rows: torch.Tensor, lags: torch.Tensor) -> torch.Tensor:
        """The lowest d within half a lag of integer ``lags`` (R,), found to 1/64 of a lag (quarter-lag grid,
        then two finer steps around the best point): the depth of the dip there, whichever way the true
        (fractional) period falls between integer lags."""
        best = lags.float()
        value = self.between(rows, best.unsqueeze(-1)).squeeze(-1)
        for step, count in ((0.25, 2), (0.0625, 1), (0.015625, 1)):
            around = torch.arange(-count, count + 1, device=lags.device, dtype=torch.float32) * step
            points = (best.unsqueeze(-1) + around).clamp(
                lags.float().unsqueeze(-1) - 0.5, lags.float().unsqueeze(-1) + 0.5
            )
            d = self.between(rows, points)
            v, j = d.min(-1)
            best = torch.gather(points, -1, j.unsqueeze(-1)).squeeze(-1)
            value = torch.minimum(value, v)
        return value


def _octave_check(
    dfn: _Difference, k: torch.Tensor, tau_max: int, ratio: float = 0.3, min_dip: float = 0.02, rounds: int = 3
) -> torch.Tensor:
    """Lags ``k`` (B, N) moved to the dip near ``2k`` or ``3k`` (within 6%) whose depth is below ``ratio`` x the
    one at ``k``, repeated up to ``rounds`` times; only frames whose normalised dip at ``k`` (its depth between
    integer lags over YIN's normaliser) is at least ``min_dip`` are looked at (a clean dip is the period).

    A lag of half the period (YIN's first dip when the odd harmonics are weak) leaves the odd harmonics' energy
    in the difference (d' 0.04-0.1 on the bright vowel of the tests), which the true period removes; the true
    period's multiples are no deeper than it (noise, jitter and glides only add), but a voice whose alternate
    periods differ (espeak-ng's, some creaky voices) repeats better over two periods than over one: ``ratio``
    0.3 keeps most of those at the pitch heard (Praat's) while still catching the bright vowel in white noise
    at 17 dB SNR (``bench/f0_against_praat.py``). Depths are compared between integer lags
    (:meth:`_Difference.depth`): at integer lags alone a narrow dip looks shallower or deeper by how near each
    lag falls to the true period."""
    shape, last = k.shape, dfn.diff.shape[-1] - 1
    k = k.reshape(-1).clone()
    diff = dfn.diff.reshape(-1, dfn.diff.shape[-1])
    cmnd = dfn.cmnd.reshape(-1, dfn.cmnd.shape[-1])
    rows = torch.nonzero(torch.gather(cmnd, -1, k.unsqueeze(-1)).squeeze(-1) >= min_dip).squeeze(-1)
    for _ in range(rounds):
        if rows.numel() == 0:  # host sync: at most `rounds` per call, outside any training step
            break
        kr = k[rows]
        base = dfn.depth(rows, kr)
        mean = diff[rows, kr] / cmnd[rows, kr].clamp_min(1e-12)  # YIN's normaliser at k
        dirty = base >= min_dip * mean  # still a shallow dip between integer lags: half the period?
        rows, kr, base = rows[dirty], kr[dirty], base[dirty]
        new_k, new_v = kr, ratio * base
        for m in (2, 3):
            reach = int(0.06 * m * tau_max) + 2
            offsets = torch.arange(-reach, reach + 1, device=k.device)
            idx = m * kr.unsqueeze(-1) + offsets  # (R, 2 reach + 1)
            ok = (offsets.abs() <= (0.06 * m * kr).long().unsqueeze(-1) + 2) & (idx >= 1) & (idx <= tau_max)
            vals = torch.gather(diff[rows], -1, idx.clamp(0, last)).masked_fill(~ok, float("inf"))
            lowest, j = vals.min(-1)
            cand = torch.gather(idx, -1, j.unsqueeze(-1)).squeeze(-1).clamp(1, tau_max)
            v = dfn.depth(rows, cand)
            better = (v < new_v) & torch.isfinite(lowest)
            new_k = torch.where(better, cand, new_k)
            new_v = torch.where(better, v, new_v)
        moved = new_k != kr
        k[rows] = new_k
        rows = rows[moved]
    return k.reshape(shape)


def _difference(frames: torch.Tensor, width: int, max_lag: int) -> _Difference:
    """YIN's difference d(tau) and cumulative-mean-normalised difference d'(tau), tau = 0 .. max_lag, of each
    frame (B, N, L)."""
    length = frames.shape[-1]
    n_fft = 1 << (length + width - 1).bit_length()
    head = frames[..., :width]
    spec = torch.fft.rfft(frames, n_fft) * torch.conj(torch.fft.rfft(head, n_fft))
    acf = torch.fft.irfft(spec, n_fft)[..., : max_lag + 1]  # sum_j x[j] x[j + tau], j < width
    energy = F.pad(frames.pow(2).cumsum(-1), (1, 0))  # (B, N, L + 1)
    lags = torch.arange(max_lag + 1, device=frames.device)
    e_tau = energy[..., lags + width] - energy[..., lags]  # energy of x[tau : tau + width]
    diff = (e_tau[..., :1] + e_tau - 2 * acf).clamp_min(0)  # d(tau)
    mean = diff[..., 1:].cumsum(-1) / lags[1:]
    cmnd = torch.cat([torch.ones_like(diff[..., :1]), diff[..., 1:] / mean.clamp_min(1e-12)], dim=-1)
    return _Difference(cmnd, diff)


def _parabolic(curve: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Sub-sample offset of the minimum of ``curve`` near integer lag ``k`` (parabola through k-1, k, k+1)."""
    a = torch.gather(curve, -1, (k - 1).unsqueeze(-1)).squeeze(-1)
    b = torch.gather(curve, -1, k.unsqueeze(-1)).squeeze(-1)
    c = torch.gather(curve, -1, (k + 1).unsqueeze(-1)).squeeze(-1)
    denom = a - 2 * b + c
    shift = torch.where(denom.abs() > 1e-9, 0.5 * (a - c) / denom, torch.zeros_like(denom))
    return shift.clamp(-1.0, 1.0)


# --- Praat (parselmouth) -----------------------------------------------------------------------------------


def _parselmouth() -> Any:
    try:
        import parselmouth  # lazy: optional dependency
    except ImportError:
        raise UserError(
            "f0 method 'parselmouth' needs the praat-parselmouth package: pip install 'speechtrain[pitch]' "
            "(or pip install praat-parselmouth), or use the torch extractor (method 'yin')"
        ) from None
    return parselmouth


def parselmouth_f0(
    audio: np.ndarray,
    sample_rate: int,
    hop_length: int,
    f0_min: float = F0_MIN,
    f0_max: float = F0_MAX,
    voicing_threshold: float = 0.6,
    silence_threshold: float = 0.01,
    n_frames: int | None = None,
    frame_offset: float = FRAME_OFFSET,
) -> tuple[np.ndarray, np.ndarray]:
    """f0 of one 1-D signal by Praat's autocorrelation method (SingingVocoders' settings by default):
    ``(f0, voiced)``, each (T_frames,), f0 float32 in Hz with 0 where unvoiced.

    The signal is padded as SingingVocoders' preprocessing pads it (``ceil(1.5 / f0_min)`` s on the left, the
    right so that Praat centres its frames on the hop grid), with ``(1 - frame_offset) x hop`` more zeros in
    front when ``frame_offset`` > 0, so that Praat's frames fall on ours (half a sample after, Praat's sample
    times): with ``frame_offset=0.0`` the values are theirs exactly. Should a Praat version place its frames
    elsewhere, each of our frames takes the log-linear interpolation of its two neighbours when both are
    voiced, else the nearest one.
    """
    pm = _parselmouth()
    x = np.asarray(audio, dtype=np.float64).reshape(-1)
    n_frames = num_f0_frames(x.shape[0], hop_length) if n_frames is None else n_frames
    if n_frames <= 0:
        return np.zeros(0, np.float32), np.zeros(0, bool)
    into_hop = int(round(frame_offset * hop_length)) % hop_length
    lead = (hop_length - into_hop) % hop_length  # zeros in front: Praat's frame 1 then sits on our frame 0
    y = np.concatenate([np.zeros(lead), x])
    left = int(math.ceil(1.5 / f0_min * sample_rate))  # half of Praat's window (3 periods of f0_min)
    right = hop_length * ((len(y) - 1) // hop_length + 1) - len(y) + left + 1
    sound = pm.Sound(np.pad(y, (left, right)), sampling_frequency=sample_rate)
    pitch = sound.to_pitch_ac(
        time_step=hop_length / sample_rate,
        voicing_threshold=voicing_threshold,
        silence_threshold=silence_threshold,
        pitch_floor=f0_min,
        pitch_ceiling=f0_max,
    )
    values = np.asarray(pitch.selected_array["frequency"], dtype=np.float64)  # (N_praat,), 0 = unvoiced
    step = hop_length / sample_rate
    first = float(pitch.xs()[0]) - (left + lead) / sample_rate  # time of Praat's first frame in the signal
    pos = (frame_centres(n_frames, hop_length, sample_rate, frame_offset) - first) / step
    pos = np.where(np.abs(pos - np.round(pos)) < 0.01, np.round(pos), pos)  # on Praat's frame: its own value
    lo = np.clip(np.floor(pos).astype(np.int64), 0, len(values) - 1)
    hi = np.clip(lo + 1, 0, len(values) - 1)
    w = np.clip(pos - lo, 0.0, 1.0)
    nearest = np.where(w < 0.5, values[lo], values[hi])
    both = (values[lo] > 0) & (values[hi] > 0)
    with np.errstate(divide="ignore"):
        blended = np.exp2((1 - w) * np.log2(np.maximum(values[lo], 1e-9)) + w * np.log2(np.maximum(values[hi], 1e-9)))
    f0 = np.where(both, blended, nearest).astype(np.float32)
    return f0, f0 > 0


# --- one entry point ---------------------------------------------------------------------------------------


def extract_f0(
    audio: np.ndarray | torch.Tensor,
    sample_rate: int,
    hop_length: int,
    method: PitchMethod = "yin",
    f0_min: float = F0_MIN,
    f0_max: float = F0_MAX,
    n_frames: int | None = None,
    frame_offset: float = FRAME_OFFSET,
) -> tuple[np.ndarray, np.ndarray]:
    """f0 of one 1-D signal with ``method`` (yin or parselmouth): ``(f0, voiced)`` numpy arrays (T_frames,),
    frame ``i`` measured at ``(i + frame_offset) * hop``."""
    if method == "yin":
        f0, voiced = yin_f0(
            torch.as_tensor(np.asarray(audio, dtype=np.float32)).reshape(-1),
            sample_rate,
            hop_length,
            f0_min,
            f0_max,
            n_frames=n_frames,
            frame_offset=frame_offset,
        )
        return f0.numpy(), voiced.numpy()
    if method == "parselmouth":
        return parselmouth_f0(
            np.asarray(audio), sample_rate, hop_length, f0_min, f0_max, n_frames=n_frames, frame_offset=frame_offset
        )
    raise UserError(f"unknown f0 method {method!r}: use 'yin' (torch) or 'parselmouth' (Praat)")


def interpolate_unvoiced(f0: torch.Tensor | np.ndarray, voiced: torch.Tensor | np.ndarray | None = None) -> Any:
    """Fill unvoiced frames by log-linear interpolation between the voiced frames around them (ends held).

    ``f0`` (..., T_frames) in Hz; ``voiced`` defaults to ``f0 > 0``. A row with no voiced frame stays 0.
    Returns the same type as ``f0`` (torch on its device, or numpy).
    """
    as_numpy = isinstance(f0, np.ndarray)
    f = torch.as_tensor(f0).float()
    v = (f > 0) if voiced is None else torch.as_tensor(voiced, device=f.device).bool()
    t = f.shape[-1]
    if t == 0:
        return f0
    idx = torch.arange(t, device=f.device).expand_as(f)
    prev = torch.where(v, idx, torch.full_like(idx, -1)).cummax(-1).values
    nxt = torch.where(v, idx, torch.full_like(idx, t)).flip(-1).cummin(-1).values.flip(-1)
    logf = torch.log2(f.clamp_min(1e-5))
    lp = torch.gather(logf, -1, prev.clamp(0, t - 1))
    ln = torch.gather(logf, -1, nxt.clamp(0, t - 1))
    has_prev, has_next = prev >= 0, nxt < t
    w = (idx - prev).float() / (nxt - prev).clamp_min(1).float()
    filled = torch.where(has_prev & has_next, lp + (ln - lp) * w, torch.where(has_prev, lp, ln))
    out = torch.where(v, f, torch.exp2(filled))
    out = torch.where(has_prev | has_next, out, torch.zeros_like(out))
    return out.numpy() if as_numpy else out


def shift_f0(f0: torch.Tensor | np.ndarray, semitones: float) -> Any:
    """f0 moved by ``semitones`` (x 2^(n/12)); unvoiced zeros stay zero."""
    return f0 * (2.0 ** (semitones / 12.0))


@dataclass(frozen=True)
class PitchError:
    """An f0 estimate scored against a known f0."""

    frames: int  # frames compared (voiced in the reference)
    median_cents: float  # median |error| in cents over frames voiced in both
    mean_cents: float  # mean |error| in cents over frames voiced in both, gross errors excluded
    gross_error_rate: float  # share of reference-voiced frames off by more than 50 cents or called unvoiced
    voicing_error_rate: float  # share of all frames whose voiced/unvoiced decision differs

    def summary(self) -> str:
        return (
            f"median {self.median_cents:.1f} cents, mean {self.mean_cents:.1f} cents (fine), "
            f"gross errors {self.gross_error_rate:.1%}, voicing errors {self.voicing_error_rate:.1%} "
            f"over {self.frames} voiced frames"
        )


def f0_error(
    f0: np.ndarray | torch.Tensor,
    voiced: np.ndarray | torch.Tensor,
    ref_f0: np.ndarray | torch.Tensor,
    ref_voiced: np.ndarray | torch.Tensor | None = None,
) -> PitchError:
    """Score an estimate ``(f0, voiced)`` against ``ref_f0`` (0 = unvoiced unless ``ref_voiced`` given)."""
    est, est_v = np.asarray(f0, np.float64).reshape(-1), np.asarray(voiced, bool).reshape(-1)
    ref = np.asarray(ref_f0, np.float64).reshape(-1)
    ref_v = ref > 0 if ref_voiced is None else np.asarray(ref_voiced, bool).reshape(-1)
    n = min(len(est), len(ref))
    est, est_v, ref, ref_v = est[:n], est_v[:n], ref[:n], ref_v[:n]
    both = est_v & ref_v & (est > 0) & (ref > 0)
    cents = np.abs(1200.0 * np.log2(est[both] / ref[both])) if both.any() else np.zeros(0)
    gross = int((cents > 50).sum()) + int((ref_v & ~est_v).sum())
    fine = cents[cents <= 50]
    return PitchError(
        frames=int(ref_v.sum()),
        median_cents=float(np.median(cents)) if cents.size else float("nan"),
        mean_cents=float(fine.mean()) if fine.size else float("nan"),
        gross_error_rate=gross / max(1, int(ref_v.sum())),
        voicing_error_rate=float((est_v != ref_v).mean()) if n else 0.0,
    )
