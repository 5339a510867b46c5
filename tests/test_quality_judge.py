"""The intelligibility judge (speechtrain.quality.judge): trained on a small espeak-ng corpus it reads its held-out
recordings under its bound and a noise-replaced copy far above; a judge above its bound is refused with the reason;
a second call on the same corpus loads the cached judge; every CER is read beside the recordings' own."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from speechtrain.data.manifest import read_manifest
from speechtrain.errors import UserError
from speechtrain.quality import judge as qj
from speechtrain.quality.score import QualityItem, QualityScorer
from speechtrain.recipes import judge as rj


def _corpus(root: Path, language: str, n: int) -> Path:
    """``n`` readings of the language's built-in sentences, each in another rate or pitch (the held-out texts heard
    in training: the judge trains in minutes; ``make-dataset -n N`` draws new sentences for English past the dozen)."""
    from speechtrain.data.speak import SENTENCES, make_language_corpus

    texts = [SENTENCES[language][i % len(SENTENCES[language])] for i in range(n)]
    return Path(make_language_corpus(root / language, language, texts, seed=0, eval_count=0))


def test_the_judge_folds_case_as_the_corpus_language_does() -> None:
    """A Turkish corpus's ``I`` is ``ı`` in the CER's reference (data.language=tr): the judge learns the same labels
    (it folded every language as English, so its capital I read as i against the reference's ı) and is cached under
    its own key; an English and an unset corpus share one judge."""
    rng = np.random.default_rng(0)
    recordings = [
        qj.Recording(f"r{i}", rng.normal(0, 0.1, 8000).astype(np.float32), 16000, "IRMAK KIRIK") for i in range(12)
    ]
    tiny = rj.judge_settings(max_epochs=1, channels=8, hidden=8, layers=1)
    assert qj.train_judge(recordings, tiny, language="tr").alphabet == " akmrı"
    assert qj.train_judge(recordings, tiny, language="en").alphabet == " aikmr"
    entries = [("r0", "IRMAK", b"x")]
    assert qj.corpus_key(tiny, entries, "tr") != qj.corpus_key(tiny, entries, "en") == qj.corpus_key(tiny, entries)


def test_the_recipe_file_holds_the_code_defaults_and_refuses_an_unknown_key(tmp_path: Path) -> None:
    assert rj.judge_settings() == qj.JudgeSettings()  # recipes/asr_ctc_tiny.yaml and the dataclass agree
    assert rj.judge_settings(max_seconds=5).max_seconds == 5.0
    bad = tmp_path / "judge.yaml"
    bad.write_text("judge:\n  hiden: 3\n")
    with pytest.raises(UserError, match="unknown judge key 'hiden'"):
        rj.judge_settings(bad)


def test_a_judge_above_its_bound_is_refused_with_the_reason_and_cached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    corpus = _corpus(tmp_path, "en", 24)
    settings = rj.judge_settings(max_epochs=1, channels=16, hidden=16, layers=1)
    store = qj.JudgeStore(tmp_path / "judges")
    with pytest.raises(UserError, match=r"reads its own held-out recordings at CER .* above its bound 0\.10"):
        rj.corpus_judge(corpus, settings=settings, store=store)

    def no_training(*args: object, **kwargs: object) -> None:
        raise AssertionError("the cached judge should have been loaded")

    monkeypatch.setattr(rj, "train_judge", no_training)
    with pytest.raises(UserError, match="above its bound"):  # the same corpus: loaded from the cache, refused again
        rj.corpus_judge(corpus, settings=settings, store=store)
    with pytest.raises(AssertionError, match="cached judge"):  # other settings: another key, trained anew
        rj.corpus_judge(corpus, settings=dataclasses.replace(settings, seed=1), store=store)


@pytest.mark.slow
def test_a_judge_reads_its_held_out_recordings_and_not_noise(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    corpus = _corpus(tmp_path, "en", 150)
    # batches of 8: twice the updates per second of the recipe's 16 on a small corpus; stop once clearly under bound
    settings = rj.judge_settings(batch_size=8, max_seconds=600, stop_cer=0.06, eval_every=3)
    store = qj.JudgeStore(tmp_path / "judges")
    judge = rj.corpus_judge(corpus, settings=settings, store=store)
    assert judge.report.accepted and judge.report.ceiling <= settings.bound and judge.report.held_out == 15
    assert 0.9e6 < judge.report.parameters < 1.3e6

    entries, _ = read_manifest(corpus)
    held = [e for e in entries if e.id in _held_out_ids(entries, settings)]
    rng = np.random.default_rng(0)
    noise_cer = []
    for e in held:
        audio, rate = _wav(e.audio_path)
        noise = rng.normal(0.0, float(np.std(audio)), audio.shape).astype(np.float32)  # the same loudness, no speech
        noise_cer.append(qj.cer(e.text, judge(noise, rate)))
    assert float(np.mean(noise_cer)) > 0.8 > 5 * judge.report.ceiling

    monkeypatch.setattr(rj, "train_judge", None)  # a second run reuses the cached judge
    again = rj.corpus_judge(corpus, settings=settings, store=store)
    assert again.report.cached and again.report.ceiling == judge.report.ceiling
    e = held[0]
    assert again(*_wav(e.audio_path)) == judge(*_wav(e.audio_path))


def _held_out_ids(entries: list, s: qj.JudgeSettings) -> set[str]:  # type: ignore[type-arg]
    """The ids :func:`train_judge` holds out (the same draw)."""
    usable = [e for e in entries if qj.normalise_text(e.text)]
    order = np.random.default_rng(s.seed).permutation(len(usable))
    return {usable[i].id for i in order[: max(1, min(s.held_out, len(usable) // 10))]}


def _wav(path: str) -> tuple[np.ndarray, int]:
    import soundfile as sf

    audio, rate = sf.read(path, dtype="float32")
    return audio, int(rate)


def test_cer_is_read_beside_the_recordings_cer_transcribed_once() -> None:
    calls: list[int] = []

    def transcribe(audio: np.ndarray, rate: int) -> str:
        calls.append(len(audio))
        return "a cat" if len(audio) == 100 else "the cat"  # the recordings (100 samples) read 3 edits off

    scorer = QualityScorer("tts", 16000, lambda x: np.zeros((80, 4)), transcribe=transcribe)
    scorer.names = ("cer", "cer_recordings")  # only the ASR's metrics (no DNSMOS, no MCD)
    item = QualityItem("a", np.ones(50, dtype=np.float32), reference=np.ones(100, dtype=np.float32), text="the cat")
    first, second = scorer.score([item]), scorer.score([item])
    assert first.scores == second.scores == {"cer": 0.0, "cer_recordings": pytest.approx(3 / 7)}
    assert calls.count(100) == 1 and calls.count(50) == 2  # the recording once a run, the synthesis every time


def test_train_quality_asr_judge_is_taken_for_tts_and_refused_for_a_vocoder() -> None:
    from speechtrain.config import ConfigError, load_config

    cfg = load_config(None, ["model.name=vits", "train.quality_asr=judge", "train.best_metric=cer"])
    assert cfg.train.quality_asr == "judge" and cfg.train.best_metric == "cer"
    with pytest.raises(ConfigError, match="hifigan is a vocoder model: unset train.quality_asr"):
        load_config(None, ["model.name=hifigan", "train.quality_asr=judge"])


def test_eval_prints_cer_as_model_beside_recordings() -> None:
    from speechtrain.recipes.eval import EvalResult

    result = EvalResult(
        "run", "best.pt", 2, "torch", "vits", 2, scores={"mcd_dtw": 7.0, "cer": 0.85, "cer_recordings": 0.013}
    )
    lines = result.table().splitlines()
    assert any(
        line.split() == ["cer", "model", "0.8500", "/", "recordings", "0.0130", "share", "lower"] for line in lines
    )
    assert not any(line.startswith("cer_recordings") for line in lines)  # read beside cer, not as a row of its own


def test_the_judge_never_trains_on_the_runs_evaluation_items(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The run scores syntheses of its held-out items (data.eval_utterances, the store's rule): the judge trained on
    every other recording of the corpus, those included, so it had heard the sentences it was asked to read. Now
    they are withheld from its training (and a judge for another held-out set is another cache key)."""
    from speechtrain.config import DataConfig
    from speechtrain.data.store import held_out_ids
    from speechtrain.recipes.quality import AsrSettings, corpus_asr_judge

    rng = np.random.default_rng(0)
    recordings = [qj.Recording(f"r{i}", rng.normal(0, 0.1, 8000).astype(np.float32), 16000, "abc") for i in range(20)]
    tiny = rj.judge_settings(max_epochs=1, channels=8, hidden=8, layers=1)
    judge = qj.train_judge(recordings, tiny, withhold={"r0", "r1", "r2", "r3"})
    held = qj.train_judge(recordings, tiny).report
    assert judge.report.train_items == held.train_items - judge.report.withheld and judge.report.withheld >= 3
    assert "withheld" in judge.report.line()
    entries = [("r0", "abc", b"x")]
    assert qj.corpus_key(tiny, entries, withhold={"r0"}) != qj.corpus_key(tiny, entries)

    corpus = _corpus(tmp_path, "en", 24)
    seen: dict[str, object] = {}

    def capture(recs: list, s: object, key: str, language: object, withhold: set) -> None:  # type: ignore[type-arg]
        seen.update(ids=[r.item_id for r in recs], withhold=withhold)
        raise UserError("captured")

    monkeypatch.setattr(rj, "train_judge", capture)
    monkeypatch.setattr(qj.JudgeStore, "load", lambda self, key: None)
    data = DataConfig(manifest=str(corpus), eval_utterances=4)
    with pytest.raises(UserError, match="captured"):
        corpus_asr_judge("tts", data, AsrSettings("judge", None, "cpu", key="train.quality_asr"))
    assert seen["withhold"] == held_out_ids(seen["ids"], 4) and len(seen["withhold"]) == 4  # type: ignore[arg-type]
