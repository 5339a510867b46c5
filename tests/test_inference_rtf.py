"""Inference: measure_rtf, mel_to_audio (vocoder or Griffin-Lim), and the synthesize / rtf commands
end to end on a tiny GPT-TTS run trained on the demo corpus."""

from __future__ import annotations

import argparse
import json
import types
from pathlib import Path

import numpy as np
import pytest
import torch

from speechtrain.bench.rtf import DEFAULT_SENTENCES, measure_rtf
from speechtrain.cli.cmd_synthesize import synthesis_options
from speechtrain.config import DataConfig, load_config
from speechtrain.errors import UserError
from speechtrain.models.audio import mel_to_audio

RECIPES = Path(__file__).resolve().parents[1] / "recipes"


class FakeTTS:
    """synthesize(text) -> 0.01 s of audio per character; counts calls."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.cfg = types.SimpleNamespace(data=types.SimpleNamespace(sample_rate=1000))

    def synthesize(self, text: str, scale: int = 1) -> np.ndarray:
        self.calls.append(text)
        return np.zeros(10 * len(text) * scale, dtype=np.float32)


class FakeVocoder:
    def __init__(self, hop: int = 4) -> None:
        self.hop, self.calls = hop, 0

    def vocode(self, mel: torch.Tensor | np.ndarray) -> np.ndarray:
        self.calls += 1
        return np.full(np.asarray(mel).shape[-1] * self.hop, 0.5, dtype=np.float32)


def test_measure_rtf_times_each_input_after_warmup() -> None:
    task = FakeTTS()
    result = measure_rtf(lambda text: task.synthesize(text, scale=2), ["abc", "defgh"], "cpu", 3, 1000)
    assert task.calls == ["abc", "defgh", "abc", "abc", "defgh"]  # warm-up cycles the inputs, then each once
    assert result["mode"] == "synthesize" and result["device"] == "cpu" and result["warmup"] == 3
    assert [it["audio_seconds"] for it in result["items"]] == pytest.approx([0.06, 0.1])
    assert result["audio_seconds"] == pytest.approx(0.16)
    assert result["seconds"] == pytest.approx(sum(it["seconds"] for it in result["items"]))
    assert result["rtf"] == pytest.approx(result["seconds"] / result["audio_seconds"])
    voc = FakeVocoder()
    out = measure_rtf(voc.vocode, [np.zeros((8, 50)), np.zeros((8, 25))], "cpu", 0, 100, mode="vocode")
    assert out["mode"] == "vocode" and voc.calls == 2 and out["audio_seconds"] == pytest.approx(3.0)
    assert out["items"][0]["input"] == "mel (8, 50)"
    with pytest.raises(ValueError):
        measure_rtf(voc.vocode, [], "cpu", 0, 1)
    assert len(DEFAULT_SENTENCES) == 8


def test_synthesize_passes_only_the_options_given() -> None:
    keys = ["noise_scale", "noise_scale_w", "length_scale", "speaker", "temperature", "top_k", "max_seconds", "seed"]
    args = argparse.Namespace(**dict.fromkeys(keys), vocoder=None)
    assert synthesis_options(args) == {}
    args.noise_scale, args.speaker, args.seed, args.vocoder = 0.5, "3", 7, "runs/voc"
    assert synthesis_options(args) == {"noise_scale": 0.5, "speaker": 3, "seed": 7, "vocoder_run": "runs/voc"}
    args.speaker = "alice"
    assert synthesis_options(args)["speaker"] == "alice"


def test_mel_to_audio_griffin_lim_and_vocoder() -> None:
    from speechtrain.data.features import log_mel_numpy
    from speechtrain.models.audio import griffin_lim, mel_to_linear

    d = DataConfig(sample_rate=8000, n_fft=256, win_length=256, hop_length=64, n_mels=20, fmax=None)
    t = np.arange(8000) / 8000
    signal = 0.3 * np.sin(2 * np.pi * (300 + 400 * t) * t) + 0.2 * np.sin(2 * np.pi * 1200 * t)
    mel = log_mel_numpy(signal.astype(np.float32), d)  # (20, 125)
    audio = mel_to_audio(mel, d, griffin_lim_iters=8)
    assert audio.dtype == np.float32 and audio.shape == (125 * 64,)
    assert np.isfinite(audio).all() and 0 < np.abs(audio).max() <= 1.0

    def spectral_error(x: np.ndarray) -> float:  # relative distance of the mel magnitudes
        return float(np.linalg.norm(np.exp(log_mel_numpy(x, d)) - np.exp(mel)) / np.linalg.norm(np.exp(mel)))

    random_phase = griffin_lim(mel_to_linear(torch.as_tensor(mel), d), 256, 64, 256, iterations=0).numpy()
    assert spectral_error(audio) < 0.5 * spectral_error(random_phase)  # the iterations find a consistent phase
    voc = FakeVocoder(hop=64)
    assert np.array_equal(mel_to_audio(mel, d, voc), np.full(125 * 64, 0.5, dtype=np.float32))
    voc.cfg = types.SimpleNamespace(data=d.model_copy(update={"hop_length": 32}))
    with pytest.raises(UserError, match="hop_length"):
        mel_to_audio(mel, d, voc)


@pytest.mark.slow
def test_tiny_gpt_tts_trains_synthesizes_and_reports_rtf(
    demo_corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from speechtrain.cli.main import main
    from speechtrain.recipes.train import train_from_config

    run_dir = tmp_path / "run"
    cfg = load_config(
        RECIPES / "gpt_tts_tiny.yaml",
        [
            f"data.manifest={demo_corpus}",
            f"data.cache_dir={tmp_path / 'cache'}",
            f"train.output_dir={run_dir}",
            "train.max_steps=30",
            "train.log_every=5",
            "train.eval_every=30",
            "train.save_every=30",
            "train.eval_audio_samples=0",
        ],
    )
    train_from_config(cfg)
    logs = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    train_ce = [r["audio_ce"] for r in logs if r.get("split") == "train"]
    assert len(train_ce) == 6
    assert train_ce[-1] < train_ce[0] - 0.5  # nats; ln(66) = 4.19 at the start
    assert any(r.get("split") == "eval" and np.isfinite(r["audio_ce"]) for r in logs)

    import soundfile as sf

    wav = tmp_path / "out.wav"
    assert main(["synthesize", str(run_dir), "--text", "the old house", "--out", str(wav), "--seed", "0"]) == 0
    audio, sr = sf.read(wav)
    assert sr == 22050 and audio.ndim == 1
    assert 4 * 256 <= audio.size <= 256 * 4 * 256  # at least one code, at most model.max_audio_codes
    assert main(["synthesize", str(run_dir), "--text", "x", "--out", str(wav), "--noise-scale", "0.5"]) == 2
    assert "noise_scale" in capsys.readouterr().err

    texts = tmp_path / "texts.txt"
    texts.write_text("hello there\n\nthe quick brown fox\n")
    out_json = tmp_path / "rtf.json"
    capsys.readouterr()
    assert main(["rtf", str(run_dir), "--texts", str(texts), "--warmup", "1", "--json", str(out_json)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(out_json.read_text())
    assert {"rtf", "audio_seconds", "seconds", "device", "items"} <= set(printed)
    assert len(printed["items"]) == 2 and printed["rtf"] > 0 and printed["audio_seconds"] > 0

    from speechtrain.recipes.data import DataRecipe  # what rtf vocodes for a vocoder run

    items = DataRecipe(cfg).eval_items(2)
    assert len(items) == 2 and all(m.shape[0] == cfg.data.n_mels and m.shape[1] > 0 and f is None for m, f in items)
