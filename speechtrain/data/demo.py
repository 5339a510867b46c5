"""A synthetic speech corpus that needs no network and no extra packages, shared by tests and users.

``make_demo_corpus(out, utterances, seed)`` writes the LJSpeech layout (``out/metadata.csv`` +
``out/wavs/ID.wav``, 22050 Hz 16-bit PCM). The audio is learnable from the text: every symbol maps
deterministically to one sound (a letter is a 60-90 ms harmonic tone with its own pitch glide and
formants, some letters a shaped noise burst like a fricative; a space is a short pause, punctuation a
longer one; smooth envelopes). Texts are drawn from a fixed word list, and each utterance gets a
target duration from an LJSpeech-like distribution (most 1-10 s, median about 6 s, a short tail past
10 s); words are added until the target is reached. The same seed gives byte-identical files.

With ``labelled=True`` it also writes ``out/classes/<label>/*.wav``: four sound classes (hum,
whistle, hiss, clicks) with randomised but class-typical parameters, for audio classifiers.
"""

from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SAMPLE_RATE = 22050
CLASSES = ("clicks", "hiss", "hum", "whistle")

WORDS = (
    "the a of and to in is was that it for on with as his he by at from this had not are but be have which "
    "one all were her she there been they their has would when who will more no if out so said what up its "
    "about into than them can only other new some could time these two may then do first any my now such "
    "like our over man me even most made after also did many before must through back years where much your "
    "way well down should because each just those people how too little state good very make world still "
    "own see men work long get here between both life being under never day same another know while last "
    "might us great old year off come since against go came right used take three states himself few house "
    "use during without again place american around however home small found thought went say part once "
    "general high upon school every does got united left number course war until always away something "
    "fact though water less public put think almost hand enough far took head yet government system better "
    "set told nothing night end why called eyes find going look asked later knew point next city business "
    "give group toward young let room president side social given present several order national possible "
    "rather second face per among form important often things looked early white case john become large "
    "big need four within felt along children saw best church ever least power development light thing "
    "seemed family interest want members mind country area others done turned although open god service "
    "certain kind problem began different door thus help sense means whole matter perhaps itself york times"
).split()

# Pause lengths in seconds; letters get 60-90 ms each.
_SPACE_S = 0.045
_PAUSE_S = {",": 0.18, ";": 0.2, ":": 0.2, "-": 0.12, ".": 0.3, "!": 0.3, "?": 0.3}
_VOWELS = {"a": (730, 1090), "e": (530, 1840), "i": (390, 1990), "o": (570, 840), "u": (440, 1020), "y": (300, 2300)}
_FRICATIVES = {"s": (4500, 7000), "z": (4000, 6500), "f": (2500, 6000), "h": (1000, 3500), "x": (3000, 6000)}


@dataclass(frozen=True)
class DemoUtterance:
    """One planned utterance: id, text and exact length in samples."""

    id: str
    text: str
    n_samples: int

    @property
    def duration(self) -> float:
        return self.n_samples / SAMPLE_RATE


def _letter_seconds(c: str) -> float:
    k = ord(c) - ord("a")
    return 0.060 + ((k * 7) % 31) / 1000.0


def symbol_samples(c: str) -> int:
    """Length in samples of one symbol's sound (letters, space, punctuation; others are silent 0)."""
    c = c.lower()
    if c == " ":
        return int(_SPACE_S * SAMPLE_RATE)
    if c in _PAUSE_S:
        return int(_PAUSE_S[c] * SAMPLE_RATE)
    if "a" <= c <= "z":
        return int(_letter_seconds(c) * SAMPLE_RATE)
    return 0


def _envelope(n: int, fade: int) -> np.ndarray:
    env = np.ones(n)
    fade = min(fade, n // 2)
    ramp = 0.5 - 0.5 * np.cos(np.pi * np.arange(fade) / fade)
    env[:fade] = ramp
    env[n - fade :] = ramp[::-1]
    return env


@functools.lru_cache(maxsize=64)
def _symbol_sound(c: str) -> np.ndarray:
    """The fixed waveform (float64, peak about 0.5) of one symbol; silence for pauses."""
    n = symbol_samples(c)
    if not ("a" <= c <= "z"):
        return np.zeros(n)
    k = ord(c) - ord("a")
    t = np.arange(n) / SAMPLE_RATE
    env = _envelope(n, int(0.012 * SAMPLE_RATE))
    if c in _FRICATIVES:
        lo, hi = _FRICATIVES[c]
        noise = np.random.default_rng(1000 + k).standard_normal(n)  # fixed per letter, not per utterance
        spec = np.fft.rfft(noise)
        freqs = np.fft.rfftfreq(n, 1 / SAMPLE_RATE)
        spec[(freqs < lo) | (freqs > hi)] = 0
        wave = np.fft.irfft(spec, n)
        return 0.35 * wave / (np.abs(wave).max() + 1e-9) * env
    f1, f2 = _VOWELS.get(c, (250 + (k * 53) % 500, 900 + (k * 211) % 1600))
    f0_start = 105 + (k * 37) % 95  # 105-199 Hz, a per-letter pitch
    f0_end = f0_start * (1.0 + 0.12 * ((k % 5) - 2) / 2)  # rising, flat or falling glide
    f0 = np.linspace(f0_start, f0_end, n)
    phase = 2 * np.pi * np.cumsum(f0) / SAMPLE_RATE
    harmonics = np.arange(1, int(4000 // f0_start) + 1)
    centre = harmonics * (f0_start + f0_end) / 2
    amps = 1.0 / (1 + ((centre - f1) / 120.0) ** 2) + 0.6 / (1 + ((centre - f2) / 180.0) ** 2) + 0.15 / harmonics
    wave = (amps[:, None] * np.sin(harmonics[:, None] * phase[None, :])).sum(0)
    tremolo = 1.0 + 0.1 * np.sin(2 * np.pi * 6.0 * t)
    return 0.5 * wave / (np.abs(wave).max() + 1e-9) * env * tremolo


def synthesize_text(text: str) -> np.ndarray:
    """The demo voice saying ``text``: int16 samples at 22050 Hz (a pure function of the text)."""
    parts = [_symbol_sound(c) for c in text.lower()]
    lead = np.zeros(int(0.1 * SAMPLE_RATE))
    wave = np.concatenate([lead, *parts, lead])
    return np.round(np.clip(wave, -1, 1) * 32767).astype(np.int16)


def _text_samples(text: str) -> int:
    return 2 * int(0.1 * SAMPLE_RATE) + sum(symbol_samples(c) for c in text.lower())


def _target_seconds(rng: np.random.Generator) -> float:
    if rng.random() < 0.05:  # LJSpeech-like short tail just past 10 s
        return float(rng.uniform(10.0, 11.0))
    return float(np.clip(rng.normal(5.8, 2.2), 0.9, 9.6))


def _sentence(rng: np.random.Generator, target: float) -> str:
    words: list[str] = []
    budget = int(target * SAMPLE_RATE) - _text_samples(".")
    used = 0
    while True:
        word = WORDS[int(rng.integers(len(WORDS)))]
        add = sum(symbol_samples(c) for c in word) + (symbol_samples(" ") if words else 0)
        if words and used + add > budget:
            break
        if words and rng.random() < 0.08:
            words[-1] += ","
            add += symbol_samples(",")
        words.append(word)
        used += add
    end = "." if rng.random() < 0.8 else ("?" if rng.random() < 0.5 else "!")
    text = " ".join(words) + end
    return text[0].upper() + text[1:]


def plan_demo_corpus(utterances: int = 200, seed: int = 0) -> list[DemoUtterance]:
    """Ids, texts and exact lengths of the corpus ``make_demo_corpus`` writes, without synthesising audio."""
    rng = np.random.default_rng(seed)
    plan = []
    for i in range(utterances):
        text = _sentence(rng, _target_seconds(rng))
        plan.append(DemoUtterance(f"DM{seed % 1000:03d}-{i + 1:04d}", text, _text_samples(text)))
    return plan


def _class_sound(label: str, rng: np.random.Generator) -> np.ndarray:
    n = int(rng.uniform(0.8, 2.5) * SAMPLE_RATE)
    t = np.arange(n) / SAMPLE_RATE
    if label == "hum":
        f0 = rng.uniform(80, 140)
        wave = sum(np.sin(2 * np.pi * h * f0 * t + rng.uniform(0, 2 * np.pi)) / h**1.5 for h in range(1, 9))
    elif label == "whistle":
        f = rng.uniform(1200, 2400)
        vib = rng.uniform(3, 7)
        wave = np.sin(2 * np.pi * np.cumsum(f * (1 + 0.03 * np.sin(2 * np.pi * vib * t))) / SAMPLE_RATE)
    elif label == "hiss":
        spec = np.fft.rfft(rng.standard_normal(n))
        freqs = np.fft.rfftfreq(n, 1 / SAMPLE_RATE)
        spec[freqs < rng.uniform(2500, 4000)] = 0
        wave = np.fft.irfft(spec, n)
    else:  # clicks: short decaying impulses at 3-9 per second
        wave = np.zeros(n)
        click = np.exp(-np.arange(300) / 40.0) * np.sin(2 * np.pi * 900 * np.arange(300) / SAMPLE_RATE)
        step = int(SAMPLE_RATE / rng.uniform(3, 9))
        for start in range(int(rng.integers(0, step)), n - 300, step):
            wave[start : start + 300] += click
    wave = np.asarray(wave, dtype=np.float64)
    wave = wave / (np.abs(wave).max() + 1e-9) * rng.uniform(0.3, 0.6) * _envelope(n, int(0.02 * SAMPLE_RATE))
    wave += rng.standard_normal(n) * 1e-3
    return np.round(np.clip(wave, -1, 1) * 32767).astype(np.int16)


def _write_wav(path: Path, samples: np.ndarray) -> None:
    import soundfile as sf

    tmp = path.with_name(path.name + ".tmp")
    sf.write(tmp, samples, SAMPLE_RATE, subtype="PCM_16", format="WAV")
    os.replace(tmp, path)


def make_demo_corpus(out: str | os.PathLike[str], utterances: int = 200, seed: int = 0, labelled: bool = False) -> Path:
    """Write the demo corpus to ``out`` (LJSpeech layout; ``labelled`` adds ``out/classes/<label>/``).

    Returns ``out`` as a Path. ``labelled`` writes ceil(utterances / 4) files per class (at least 2).
    """
    if utterances < 1:
        raise ValueError(f"utterances must be >= 1, got {utterances}")
    out = Path(out)
    wavs = out / "wavs"
    wavs.mkdir(parents=True, exist_ok=True)
    lines = []
    written = set()
    for utt in plan_demo_corpus(utterances, seed):
        _write_wav(wavs / f"{utt.id}.wav", synthesize_text(utt.text))
        written.add(wavs / f"{utt.id}.wav")
        lines.append(f"{utt.id}|{utt.text}|{utt.text}\n")
    (out / "metadata.csv").write_text("".join(lines), encoding="utf-8")
    if labelled:
        rng = np.random.default_rng([seed, 1])
        per_class = max(2, math.ceil(utterances / len(CLASSES)))
        for label in CLASSES:
            folder = out / "classes" / label
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(per_class):
                _write_wav(folder / f"{label}_{i + 1:04d}.wav", _class_sound(label, rng))
                written.add(folder / f"{label}_{i + 1:04d}.wav")
    # a rerun into the same folder with fewer utterances must not leave older demo files behind
    # (the labelled layout lists every file it finds); only files with demo names are touched
    old = list(wavs.glob("DM[0-9][0-9][0-9]-[0-9][0-9][0-9][0-9].wav"))
    old += [f for label in CLASSES for f in (out / "classes" / label).glob(f"{label}_[0-9][0-9][0-9][0-9].wav")]
    for f in old:
        if f not in written:
            f.unlink()
    return out
