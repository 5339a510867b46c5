"""DistillMOS, the second non-intrusive MOS predictor: its weights read through the safe reader, a recording above
white noise of the same loudness, and an absent package named in one line with its install hint."""

from __future__ import annotations

import numpy as np
import pytest

from speechtrain.quality import catalog
from speechtrain.quality.score import QualityScorer


def test_distillmos_absent_is_one_line_with_the_install_hint(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    real = catalog.importlib.util.find_spec
    monkeypatch.setattr(
        catalog.importlib.util, "find_spec", lambda name, *a: None if name == "distillmos" else real(name, *a)
    )
    scorer = QualityScorer("tts", 16000, lambda x: np.zeros((80, 4)))
    assert "distillmos" not in scorer.names
    hints = [h for h in scorer.missing if h.startswith("distillmos")]
    assert hints == ["distillmos (pip install --no-deps distillmos xls-r-sqa)"]
    lines = [r.getMessage() for r in caplog.records if "left out" in r.getMessage()]
    assert len(lines) == 1 and "distillmos (pip install --no-deps distillmos" in lines[0]


@pytest.mark.slow
def test_distillmos_scores_speech_above_noise_through_the_safe_reader(monkeypatch: pytest.MonkeyPatch) -> None:
    from speechtrain import ckptio
    from speechtrain.data.speak import say
    from speechtrain.quality import distillmos_mos

    if not distillmos_mos.available():
        pytest.skip("distillmos is not installed (pip install --no-deps distillmos xls-r-sqa)")

    read: list[str] = []
    real_load = ckptio.load
    monkeypatch.setattr(ckptio, "load", lambda path, **kw: read.append(str(path)) or real_load(path, **kw))
    monkeypatch.setattr(distillmos_mos, "_MODEL", {})
    speech = say("The birch canoe slid on the smooth planks.", "en").astype(np.float32) / 32768.0
    rate = 22050
    noise = np.random.default_rng(0).normal(0.0, float(np.std(speech)), speech.shape).astype(np.float32)
    clean, noisy = distillmos_mos.distillmos(speech, rate), distillmos_mos.distillmos(noise, rate)
    assert 1.0 <= noisy < clean <= 5.0
    assert len(read) == 1 and read[0].endswith("distill_mos_v7.pt")
