"""The tiny GPT-TTS on held-out corpora made here (issue 29): sentences no built-in list has, in languages
the built-in tests do not train on (Kazakh, with and without espeak-ng phonemes) and in Uzbek Cyrillic.

After 40 steps the recipe says different sentences identically: of the 15 pairs of six sentences, 2 to 15 came
out identical under greedy decoding for 15, 13 and 15 of 20 training seeds (uz-Cyrl, kk, kk with espeak). After
120 steps at most one pair did, for each of the 60 seeds: 0 pairs for 51, 1 pair for 9 (tiny greedy decoding
still collapses one pair now and then, so requiring none failed the suite when another test's seed order
shifted the run). Measured 2026-11-24 with this test's corpora, train.seed=1..20, 1 thread."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
import torch

from speechtrain.config import load_config

pytest.importorskip("espeakng_loader")
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]
ROOT = Path(__file__).resolve().parents[1]
STEPS = 120

HELD_OUT = {
    "kk": [
        "Қазақстан Орталық Азиядағы ең үлкен мемлекет.",
        "Астана қаласы өте әдемі және жас.",
        "Біз кеше таудан қайтып келдік.",
        "Балалар мектепке ерте барады.",
        "Ауа райы бүгін жылы болады.",
        "Менің әкем дәрігер болып істейді.",
        "Қыста мұнда қар көп жауады.",
        "Кітапханада жаңа кітаптар бар.",
        "Ол әнді жақсы айтады.",
        "Біздің ауылда үлкен өзен ағады.",
        "Сен ертең жұмысқа барасың ба?",
        "Нан мен сүт дүкеннен алдық.",
    ],
    "uz-Cyrl": [
        "Самарқанд қадимий шаҳарлардан биридир.",
        "Болалар боғда ўйнашяпти.",
        "Эртага ҳаво совуқ бўлади.",
        "Мен янги китоб сотиб олдим.",
        "Дарё бўйида катта дарахтлар ўсади.",
        "Онам ширин нон ёпди.",
        "Биз поездда Бухорога бордик.",
        "Ўқитувчи дарсни тушунтирди.",
        "Кечқурун осмонда юлдузлар кўп.",
        "Дўстим менга хат ёзди.",
        "Қишлоқда ҳамма эрта туради.",
        "Бугун бозорда олма арзон.",
    ],
}


@pytest.mark.parametrize(("language", "phonemizer"), [("kk", "none"), ("kk", "espeak"), ("uz-Cyrl", "none")])
def test_tiny_gpt_tts_says_held_out_sentences_differently(tmp_path: Path, language: str, phonemizer: str) -> None:
    from speechtrain.data.speak import make_language_corpus
    from speechtrain.recipes.inference import load_synthesizer
    from speechtrain.recipes.train import train_from_config

    sentences = HELD_OUT[language]
    root = make_language_corpus(tmp_path / "corpus", language, sentences, voices=("",))
    torch.manual_seed(0)
    cfg = load_config(
        ROOT / "recipes" / "gpt_tts_tiny.yaml",
        [
            f"data.manifest={root}",
            f"data.cache_dir={tmp_path / 'cache'}",
            f"data.language={language}",
            f"data.phonemizer={phonemizer}",
            "data.eval_utterances=2",
            f"train.output_dir={tmp_path / 'run'}",
            f"train.max_steps={STEPS}",
            "train.log_every=20",
            f"train.eval_every={STEPS}",
            f"train.save_every={STEPS}",
            "train.eval_audio_samples=0",
            "train.progress=false",
        ],
    )
    run_dir, _ = train_from_config(cfg)
    _, task = load_synthesizer(str(run_dir), "cpu")
    said = [np.asarray(task.synthesize(s, temperature=0.0, max_seconds=1.0)) for s in sentences[:6]]
    assert all(w.size for w in said)
    alike = [
        (sentences[i], sentences[j])
        for i, j in itertools.combinations(range(len(said)), 2)
        if said[i].shape == said[j].shape and np.array_equal(said[i], said[j])
    ]
    assert len(alike) <= 1, f"{len(alike)} of 15 sentence pairs said identically after {STEPS} steps: {alike}"
