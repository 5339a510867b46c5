"""The synthetic singing corpus: LJSpeech layout, one true-f0 file per utterance, deterministic."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import soundfile as sf

from speechtrain.data.demo_singing import make_singing_corpus, midi_to_hz, plan_singing_corpus


def test_layout_f0_files_and_determinism(tmp_path: Path) -> None:
    a = make_singing_corpus(tmp_path / "a", utterances=3, seed=5)
    b = make_singing_corpus(tmp_path / "b", utterances=3, seed=5)
    lines = (a / "metadata.csv").read_text().splitlines()
    assert len(lines) == 3 and all(len(line.split("|")) == 3 for line in lines)
    info = json.loads((a / "f0" / "info.json").read_text())
    assert info["sample_rate"] == 22050 and info["hop_length"] == 256
    for line in lines:
        uid = line.split("|")[0]
        audio, sr = sf.read(a / "wavs" / f"{uid}.wav", dtype="float32")
        f0 = np.load(a / "f0" / f"{uid}.npy")
        assert sr == 22050 and f0.dtype == np.float32 and f0.shape == (audio.shape[0] // 256,)
        voiced = f0 > 0
        assert 0.3 < voiced.mean() < 1.0  # notes and rests (lead-in and tail are silent)
        assert f0[voiced].min() > midi_to_hz(45) * 0.9 and f0[voiced].max() < midi_to_hz(76) * 1.1
        assert (a / "wavs" / f"{uid}.wav").read_bytes() == (b / "wavs" / f"{uid}.wav").read_bytes()
    assert [u.text for u in plan_singing_corpus(3, 5)] == [line.split("|")[1] for line in lines]
