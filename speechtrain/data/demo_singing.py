"""A synthetic singing-like corpus with ground-truth f0, for NSF vocoders and pitch tests.

``make_singing_corpus(out, utterances, seed)`` writes the LJSpeech layout (``out/metadata.csv`` +
``out/wavs/ID.wav``, 16-bit PCM) plus ``out/f0/ID.npy``: the true f0 in Hz of every mel frame
(``T_samples // hop_length`` values, measured at the centre of each hop as in
:mod:`speechtrain.data.pitch`; 0 in rests), and ``out/f0/info.json`` with the sample rate and hop.

Each utterance is a phrase of sung notes: a vowel per note (harmonics shaped by three formants that
glide between vowels), a pitch from a major scale between MIDI 45 and 76 (110-659 Hz), a portamento
glide of 40-120 ms from the previous note, vibrato of 4.5-6.5 Hz and 15-60 cents that fades in after
the onset, a soft attack and release, and sometimes a rest (silence with faint breath noise). The
instantaneous f0 is known sample by sample, so an f0 extractor can be scored against it. The same
seed gives byte-identical files.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

SAMPLE_RATE = 22050
HOP_LENGTH = 256
_SCALE = (0, 2, 4, 5, 7, 9, 11)  # major scale steps
_VOWELS = {  # (F1, F2, F3) in Hz, textbook averages
    "a": (800, 1200, 2600),
    "e": (500, 1900, 2600),
    "i": (300, 2300, 3000),
    "o": (500, 900, 2500),
    "u": (320, 800, 2400),
}
_SYLLABLES = ("la", "na", "ma", "lo", "no", "le", "ne", "li", "mi", "lu", "ru", "do", "re", "ti")


@dataclass(frozen=True)
class Note:
    """One sung note: MIDI pitch, vowel, length and expression."""

    midi: float
    vowel: str
    syllable: str
    seconds: float
    glide_s: float
    vibrato_hz: float
    vibrato_cents: float
    rest_after_s: float


@dataclass(frozen=True)
class SingingUtterance:
    """One planned phrase: id, its notes, the text (one syllable per note) and a lead-in of silence."""

    id: str
    notes: tuple[Note, ...]
    lead_s: float = 0.15
    tail_s: float = 0.15
    text: str = field(default="")


def midi_to_hz(midi: float | np.ndarray) -> np.ndarray:
    """Equal temperament, A4 (MIDI 69) = 440 Hz."""
    return 440.0 * 2.0 ** ((np.asarray(midi, dtype=np.float64) - 69.0) / 12.0)


def plan_singing_corpus(utterances: int = 40, seed: int = 0) -> list[SingingUtterance]:
    """The phrases ``make_singing_corpus`` writes (notes and texts), without synthesising audio."""
    rng = np.random.default_rng([seed, 17])
    plan = []
    for i in range(utterances):
        tonic = int(rng.integers(45, 60))  # A2 .. B3
        degree = int(rng.integers(0, 7))
        notes = []
        for _ in range(int(rng.integers(3, 9))):
            degree = int(np.clip(degree + rng.integers(-3, 4), 0, 13))
            midi = tonic + 12 * (degree // 7) + _SCALE[degree % 7]
            syllable = _SYLLABLES[int(rng.integers(len(_SYLLABLES)))]
            notes.append(
                Note(
                    midi=float(min(midi, 76)),
                    vowel=syllable[-1],
                    syllable=syllable,
                    seconds=float(rng.uniform(0.25, 0.8)),
                    glide_s=float(rng.uniform(0.04, 0.12)),
                    vibrato_hz=float(rng.uniform(4.5, 6.5)),
                    vibrato_cents=float(rng.uniform(15, 60)),
                    rest_after_s=float(rng.uniform(0.08, 0.3)) if rng.random() < 0.3 else 0.0,
                )
            )
        text = " ".join(n.syllable for n in notes)
        plan.append(SingingUtterance(f"SG{seed % 1000:03d}-{i + 1:04d}", tuple(notes), text=text))
    return plan


def _ramp(n: int, fade: int) -> np.ndarray:
    env = np.ones(n)
    fade = max(1, min(fade, n // 2))
    up = 0.5 - 0.5 * np.cos(np.pi * np.arange(fade) / fade)
    env[:fade] = up
    env[n - fade :] = up[::-1]
    return env


def synthesize_phrase(utt: SingingUtterance, sample_rate: int = SAMPLE_RATE, seed: int = 0) -> tuple[np.ndarray, ...]:
    """``(wave, f0, voiced_env)`` of a phrase, each (T_samples,): float64 wave with peak 0.7, the true
    instantaneous f0 in Hz (0 in rests) and the voiced amplitude envelope (0..1)."""
    sr = sample_rate
    rng = np.random.default_rng([seed, sum(ord(c) for c in utt.id)])
    pieces_f0, pieces_env, pieces_formants = [np.zeros(int(utt.lead_s * sr))], [np.zeros(int(utt.lead_s * sr))], []
    pieces_formants.append(np.tile(np.array(_VOWELS[utt.notes[0].vowel], float), (int(utt.lead_s * sr), 1)))
    prev_hz = None
    prev_formants = np.array(_VOWELS[utt.notes[0].vowel], float)
    for note in utt.notes:
        n = int(note.seconds * sr)
        t = np.arange(n) / sr
        target = float(midi_to_hz(note.midi))
        start = target if prev_hz is None else prev_hz
        glide = np.clip(t / note.glide_s, 0, 1)
        glide = 0.5 - 0.5 * np.cos(np.pi * glide)  # smooth portamento
        base = start * (target / start) ** glide
        depth = np.clip((t - 0.15) / 0.2, 0, 1) * note.vibrato_cents  # vibrato fades in after the onset
        f0 = base * 2.0 ** (depth * np.sin(2 * np.pi * note.vibrato_hz * t) / 1200.0)
        formants = np.array(_VOWELS[note.vowel], float)
        morph = np.clip(t / 0.08, 0, 1)[:, None]
        pieces_formants.append(prev_formants * (1 - morph) + formants * morph)
        pieces_f0.append(f0)
        pieces_env.append(_ramp(n, int(0.03 * sr)))
        prev_hz, prev_formants = target, formants
        if note.rest_after_s > 0:
            r = int(note.rest_after_s * sr)
            pieces_f0.append(np.zeros(r))
            pieces_env.append(np.zeros(r))
            pieces_formants.append(np.tile(formants, (r, 1)))
            prev_hz = None
    tail = int(utt.tail_s * sr)
    pieces_f0.append(np.zeros(tail))
    pieces_env.append(np.zeros(tail))
    pieces_formants.append(np.tile(prev_formants, (tail, 1)))
    f0 = np.concatenate(pieces_f0)
    env = np.concatenate(pieces_env)
    fmt = np.concatenate(pieces_formants)  # (T, 3)
    hz = np.where(f0 > 0, f0, 100.0)
    z1 = np.exp(1j * np.mod(2 * np.pi * np.cumsum(hz) / sr, 2 * np.pi))  # e^{i phase} of the fundamental
    wave = np.concatenate(
        [_harmonics(z1[a : a + 4096], hz[a : a + 4096], fmt[a : a + 4096], sr) for a in range(0, hz.shape[0], 4096)]
    )
    wave *= env
    wave += 0.002 * rng.standard_normal(wave.shape[0])  # faint breath noise, everywhere
    wave = 0.7 * wave / (np.abs(wave).max() + 1e-9)
    return wave, f0 * (env > 0), env


def _harmonics(z1: np.ndarray, hz: np.ndarray, fmt: np.ndarray, sr: int) -> np.ndarray:
    """Sum of the harmonics below 0.45 x sr of one chunk, shaped by three formants (F1-F3 in ``fmt``)."""
    nyq = 0.45 * sr
    # the amplitudes change slowly: computed every 32 samples and interpolated linearly
    n = hz.shape[0]
    grid = np.arange(0, n + 32, 32).clip(max=n - 1)
    k = np.arange(1, int(nyq / hz.min()) + 1)[:, None]
    fk = k * hz[grid][None, :]  # (K, G)
    resonances = ((1.0, 90), (0.6, 120), (0.3, 160))  # (gain, bandwidth in Hz) of F1, F2, F3
    amp = 0.08 / k + sum(g / (1 + ((fk - fmt[grid, i][None, :]) / bw) ** 2) for i, (g, bw) in enumerate(resonances))
    amp = amp * (fk < nyq)
    pos = np.arange(n) / 32
    lo = pos.astype(np.int64)
    w = pos - lo
    full = amp[:, lo] * (1 - w) + amp[:, lo + 1] * w  # (K, n)
    powers = np.cumprod(np.broadcast_to(z1, full.shape), axis=0)  # e^{i k phase}, k = 1 .. K
    return (full * powers.imag).sum(0)


def frame_f0(f0: np.ndarray, env: np.ndarray, hop_length: int, voiced_env: float = 0.25) -> np.ndarray:
    """The true f0 of each mel frame (the centre sample of its hop), 0 where the voiced envelope is
    below ``voiced_env`` (rests, and the quiet start and end of a note)."""
    n = f0.shape[0] // hop_length
    centre = np.arange(n) * hop_length + hop_length // 2
    return np.where(env[centre] >= voiced_env, f0[centre], 0.0).astype(np.float32)


def _write_wav(path: Path, samples: np.ndarray, sample_rate: int) -> None:
    import soundfile as sf

    tmp = path.with_name(path.name + ".tmp")
    sf.write(tmp, samples, sample_rate, subtype="PCM_16", format="WAV")
    os.replace(tmp, path)


def make_singing_corpus(
    out: str | os.PathLike[str],
    utterances: int = 40,
    seed: int = 0,
    sample_rate: int = SAMPLE_RATE,
    hop_length: int = HOP_LENGTH,
) -> Path:
    """Write the singing corpus to ``out``: ``metadata.csv``, ``wavs/ID.wav``, ``f0/ID.npy`` (true f0 per
    mel frame at ``hop_length``) and ``f0/info.json``. Returns ``out`` as a Path."""
    if utterances < 1:
        raise ValueError(f"utterances must be >= 1, got {utterances}")
    out = Path(out)
    (out / "wavs").mkdir(parents=True, exist_ok=True)
    (out / "f0").mkdir(parents=True, exist_ok=True)
    lines = []
    for utt in plan_singing_corpus(utterances, seed):
        wave, f0, env = synthesize_phrase(utt, sample_rate, seed)
        pcm = np.round(np.clip(wave, -1, 1) * 32767).astype(np.int16)
        _write_wav(out / "wavs" / f"{utt.id}.wav", pcm, sample_rate)
        np.save(out / "f0" / f"{utt.id}.npy", frame_f0(f0, env, hop_length))
        lines.append(f"{utt.id}|{utt.text}|{utt.text}\n")
    (out / "metadata.csv").write_text("".join(lines), encoding="utf-8")
    info = {
        "sample_rate": sample_rate,
        "hop_length": hop_length,
        "frames": "T_samples // hop_length",
        "measured_at": "centre of each hop (sample i * hop + hop / 2)",
        "unvoiced": 0.0,
    }
    (out / "f0" / "info.json").write_text(json.dumps(info, indent=1) + "\n", encoding="utf-8")
    return out


def bright_vowel(
    sample_rate: int = 44100, hop_length: int = 512, seconds: float = 3.0, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """A sung vowel whose first formant (650 Hz) sits on the 2nd harmonic of a 250-350 Hz glide with 1% vibrato
    at 5.5 Hz: its odd harmonics are weak, the case where YIN's first dip is half the period (an octave high).
    Returns the float32 signal and the true f0 at the centre of each hop (``T_samples // hop_length`` values)."""
    n = int(seconds * sample_rate) // hop_length * hop_length
    t = np.arange(n) / sample_rate
    f0 = 250.0 * 1.4 ** (t / seconds) * (1 + 0.01 * np.sin(2 * np.pi * 5.5 * t))
    phase = 2 * np.pi * np.cumsum(f0) / sample_rate
    x = np.zeros(n)
    for k in range(1, 40):
        fk = k * f0
        amp = np.exp(-(((fk - 650.0) / 120.0) ** 2)) + 0.3 * np.exp(-(((fk - 2700.0) / 300.0) ** 2)) + 0.05 / k
        x += np.where(fk < sample_rate / 2, amp, 0.0) * np.sin(k * phase)
    x = 0.5 * x / np.abs(x).max() + 0.002 * np.random.default_rng(seed).standard_normal(n)
    centres = (np.arange(n // hop_length) + 0.5) * hop_length
    return x.astype(np.float32), np.interp(centres, np.arange(n), f0)
