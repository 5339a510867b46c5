"""f0 extractors against Praat, and our f0 grid against SingingVocoders' (docs/data.md, "f0").

    python bench/f0_against_praat.py [--singing 40] [--speech 12] [--workdir /tmp/f0bench]

Three signal sets:
- **singing**: ``make_singing_corpus(utterances=N, seed=0)`` (22.05 kHz, hop 256; its true f0 is known);
- **speech**: N English sentences spoken by espeak-ng (``make_language_corpus``), resampled to 44.1 kHz, hop 512
  (SingingVocoders' features);
- **bright vowel**: :func:`speechtrain.data.demo_singing.bright_vowel` (44.1 kHz, hop 512; true f0 known), also
  with white noise of std 0.03 added (17 dB below the vowel).

Table 1: YIN without and with the octave check, scored against Praat (``parselmouth``, our frame grid) as the
reference (and against the true f0 where known). Table 2: our Praat f0 on the hop-centre grid (0.5) and on
SingingVocoders' grid (0.0) against their preprocessing (``utils/wav2F0.py``'s ``get_pitch_parselmouth``, written
here from its description), frame for frame over frames both call voiced: mean and 95th-percentile absolute cents.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np


def their_parselmouth(wav: np.ndarray, sr: int, hop: int, length: int, f0_min: float = 65.0, f0_max: float = 1100.0):  # noqa: ANN201
    """SingingVocoders' get_pitch_parselmouth: padded by ceil(1.5 / f0_min) s left so Praat's first frame is at 0."""
    import parselmouth

    left = int(np.ceil(1.5 / f0_min * sr))
    right = hop * ((len(wav) - 1) // hop + 1) - len(wav) + left + 1
    sound = parselmouth.Sound(np.pad(np.asarray(wav, np.float64), (left, right)), sampling_frequency=sr)
    pitch = sound.to_pitch_ac(
        time_step=hop / sr, voicing_threshold=0.6, silence_threshold=0.01, pitch_floor=f0_min, pitch_ceiling=f0_max
    )
    f0 = pitch.selected_array["frequency"].astype(np.float32)
    return np.pad(f0, (0, max(0, length - len(f0))))[:length]


def signals(args: argparse.Namespace) -> dict[str, tuple[list[np.ndarray], list[np.ndarray | None], int, int]]:
    import soxr

    from speechtrain.data.audio import load_audio
    from speechtrain.data.demo_singing import bright_vowel, make_singing_corpus
    from speechtrain.data.speak import make_language_corpus

    work = Path(args.workdir)
    sing = work / "singing"
    if not (sing / "metadata.csv").is_file():
        make_singing_corpus(sing, utterances=args.singing, seed=0)
    wavs = sorted((sing / "wavs").glob("*.wav"))
    singing = [load_audio(str(w), 22050)[0] for w in wavs]
    truth: list[np.ndarray | None] = [np.load(sing / "f0" / f"{w.stem}.npy") for w in wavs]
    speech_dir = work / "speech"
    if not (speech_dir / "metadata.csv").is_file():
        make_language_corpus(speech_dir, "en", utterances=args.speech, seed=0, voices=("", "+f3"))
    speech = [
        np.asarray(soxr.resample(load_audio(str(w), 22050)[0], 22050, 44100), np.float32)
        for w in sorted((speech_dir / "wavs").glob("*.wav"))
    ]
    vowel, vowel_f0 = bright_vowel()
    noisy = (vowel + 0.03 * np.random.default_rng(1).standard_normal(len(vowel))).astype(np.float32)
    return {
        "singing (22.05 kHz, hop 256)": (singing, truth, 22050, 256),
        "speech, espeak-ng (44.1 kHz, hop 512)": (speech, [None] * len(speech), 44100, 512),
        "bright vowel (44.1 kHz, hop 512)": ([vowel], [vowel_f0], 44100, 512),
        "bright vowel + white noise, 17 dB SNR": ([noisy], [vowel_f0], 44100, 512),
    }


def main() -> None:
    import torch

    from speechtrain.data.pitch import f0_error, parselmouth_f0, yin_f0

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--singing", type=int, default=40)
    ap.add_argument("--speech", type=int, default=12, help="sentences (English has 12 built in)")
    ap.add_argument("--workdir", default="/tmp/f0bench")
    args = ap.parse_args()
    torch.set_num_threads(1)
    sets = signals(args)

    print(
        "| signals | extractor | against | median cents | mean cents (fine) | gross errors | voicing errors | frames |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name, (audio, truth, sr, hop) in sets.items():
        praat = [parselmouth_f0(x, sr, hop) for x in audio]
        rows = {
            "yin, no octave check": [yin_f0(torch.from_numpy(x), sr, hop, octave_check=False) for x in audio],
            "yin (octave check)": [yin_f0(torch.from_numpy(x), sr, hop) for x in audio],
        }
        est = {k: [(f.numpy(), v.numpy()) for f, v in val] for k, val in rows.items()}
        est["parselmouth"] = praat
        refs = {"Praat": [p[0] for p in praat]}
        if all(t is not None for t in truth):
            refs["true f0"] = [np.asarray(t) for t in truth]
        for ref_name, ref in refs.items():
            for ext, values in est.items():
                if ext == "parselmouth" and ref_name == "Praat":
                    continue
                n = [min(len(f), len(r)) for (f, _), r in zip(values, ref)]
                err = f0_error(
                    np.concatenate([f[:k] for (f, _), k in zip(values, n)]),
                    np.concatenate([v[:k] for (_, v), k in zip(values, n)]),
                    np.concatenate([r[:k] for r, k in zip(ref, n)]),
                )
                print(
                    f"| {name} | {ext} | {ref_name} | {err.median_cents:.1f} | {err.mean_cents:.1f} | "
                    f"{err.gross_error_rate:.1%} | {err.voicing_error_rate:.1%} | {err.frames} |"
                )

    print()
    print("| signals | our Praat f0 grid | mean abs. cents against SingingVocoders' f0 | 95th percentile | frames |")
    print("|---|---|---|---|---|")
    for name, (audio, _, sr, hop) in sets.items():
        theirs = [their_parselmouth(x, sr, hop, len(x) // hop) for x in audio]
        for offset, label in ((0.5, "0.5: centre of hop i (default)"), (0.0, "0.0: sample i x hop (theirs)")):
            cents = []
            for x, t in zip(audio, theirs):
                ours, _ = parselmouth_f0(x, sr, hop, frame_offset=offset)
                both = (ours > 0) & (t > 0)
                cents.append(np.abs(1200 * np.log2(ours[both] / t[both])))
            c = np.concatenate(cents)
            print(f"| {name} | {label} | {c.mean():.2f} | {np.percentile(c, 95):.2f} | {c.size} |")


if __name__ == "__main__":
    main()
