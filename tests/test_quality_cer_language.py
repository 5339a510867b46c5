"""CER compares texts in their language (issue 49): case folded by the language (Turkish and Azerbaijani dotted and
dotless i), and one number normalisation on the reference and on the transcript."""

from __future__ import annotations

import functools
import importlib.util

import numpy as np
import pytest

from speechtrain.config import DataConfig
from speechtrain.data.features import log_mel_numpy
from speechtrain.quality import metrics as qm
from speechtrain.quality.catalog import METRICS
from speechtrain.quality.score import QualityItem, QualityScorer
from speechtrain.recipes.quality import spoken_text

RATE = 22050
needs_libraries = pytest.mark.skipif(
    not all(importlib.util.find_spec(m) for m in ("num2words", "unicode_rbnf", "babel")),
    reason="num2words, unicode-rbnf and babel (the phonemes extra) not installed",
)


@pytest.mark.parametrize(
    ("language", "upper", "lower"),
    [
        ("tr", "İSTANBUL'A GİTTİM", "istanbul'a gittim"),
        ("tr", "IŞIK", "ışık"),
        ("az", "İLHAM VƏ İŞIQ QIZ", "ilham və işıq qız"),
    ],
)
def test_turkish_and_azerbaijani_fold_their_own_i(language: str, upper: str, lower: str) -> None:
    assert qm.cer(upper, lower, language) == 0.0
    assert qm.cer("İstanbul", "istanbul") == 0.0  # elsewhere İ is i, not i + a combining dot
    assert qm.cer("IŞIK", "işik", "en") == 0.0  # ... and I is i
    assert qm.cer("IŞIK", "işik", "tr") > 0  # in Turkish ı and i are two letters


@needs_libraries
def test_the_same_number_normalisation_on_both_texts() -> None:
    numbers = functools.partial(spoken_text, language="fr-FR")
    assert qm.cer("Il y a 10 000 personnes.", "il y a dix mille personnes", "fr-FR", numbers) == 0.0
    assert qm.cer("Il y a dix mille personnes.", "il y a 10 000 personnes", "fr-FR", numbers) == 0.0
    assert qm.cer("Il y a 10 000 personnes.", "il y a dix mille personnes", "fr-FR") > 0.3  # without: far apart


@pytest.mark.skipif(not METRICS["cer"].available(), reason="cer's package not installed")
def test_the_scorer_compares_in_the_data_language() -> None:
    speech = np.zeros(RATE // 4, dtype=np.float32) + 0.01
    mel = functools.partial(log_mel_numpy, settings=DataConfig())
    heard = lambda audio, rate: "ışık"  # noqa: E731 - the ASR model's transcript
    tr = QualityScorer("tts", RATE, mel, transcribe=heard, language="tr")
    assert tr.score([QualityItem("a", speech, speech, None, "IŞIK")]).scores["cer"] == 0.0
    und = QualityScorer("tts", RATE, mel, transcribe=heard)
    assert und.score([QualityItem("a", speech, speech, None, "IŞIK")]).scores["cer"] > 0
