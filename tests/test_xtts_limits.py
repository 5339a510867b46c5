"""Scraped data never crashes an XTTS run: an utterance beyond the model's limits (BPE tokens, audio codes) is
skipped and named by ``prepare`` (``--strict`` refuses it), in the training and the eval set alike; evaluation
leaves out what slipped through; synthesis splits a long paragraph into sentences and writes one file."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

pytest.importorskip("tokenizers")
pytest.importorskip("num2words")

from speechtrain.config import load_config  # noqa: E402
from speechtrain.data.batch import Batch  # noqa: E402
from speechtrain.data.demo import make_demo_corpus  # noqa: E402
from speechtrain.recipes.data import DataRecipe  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")

RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "xtts_finetune_tiny.yaml"
LONG = "the quick brown fox jumps over the lazy dog and runs far away " * 7  # ~430 characters, > 250 tokens
PARAGRAPH = (
    "The old lighthouse stood at the edge of the cliff, its white paint peeling in the salt wind. Every night "
    "the keeper climbed the narrow stairs and lit the great lamp, and every morning he wrote the weather in a "
    "worn blue book. Ships passed far out at sea, their lights small and steady. One winter a storm came from "
    "the north and lasted three days; the waves broke over the rocks and the glass rattled in its frame. When "
    "it was over, the keeper walked down to the beach and found a wooden box, sealed with wax. Inside were "
    "letters, dry and yellow, written by a sailor to his sister many years before. He read them by the lamp."
)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """8 training lines (one transcript too long for the model, one 14 s recording: more audio codes than the
    tiny checkpoint's positions) and a 3-line eval manifest (one transcript too long)."""
    root = make_demo_corpus(tmp_path_factory.mktemp("xtts_limits") / "demo", utterances=11, seed=4)
    lines = (root / "metadata.csv").read_text(encoding="utf-8").splitlines()
    ids = [line.split("|")[0] for line in lines]
    wav, sr = sf.read(root / "wavs" / f"{ids[2]}.wav", dtype="int16")
    sf.write(root / "wavs" / f"{ids[2]}.wav", np.tile(wav, int(14 * sr / len(wav)) + 1)[: 14 * sr], sr)
    lines[1] = f"{ids[1]}|{LONG}|{LONG}"
    lines[9] = f"{ids[9]}|{LONG}|{LONG}"
    (root / "metadata.csv").write_text("\n".join(lines[:8]) + "\n", encoding="utf-8")
    (root / "eval.txt").write_text("\n".join(lines[8:]) + "\n", encoding="utf-8")
    return root


def _args(corpus: Path, tmp: Path) -> list[str]:
    return [
        f"data.manifest={corpus / 'metadata.csv'}",
        f"data.eval_manifest={corpus / 'eval.txt'}",
        "data.format=ljspeech",
        "data.max_duration=20",
        f"data.cache_dir={tmp / 'cache'}",
        f"model.checkpoint_dir={tmp / 'base'}",
    ]


def _ids(corpus: Path, name: str) -> list[str]:
    return [line.split("|")[0] for line in (corpus / name).read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def run(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, object]:
    """Prepare (the report), then train the tiny recipe through the CLI with an evaluation at its last step."""
    from speechtrain.cli.main import main

    tmp = tmp_path_factory.mktemp("xtts_limits_run")
    cfg = load_config(str(RECIPE), _args(corpus, tmp))
    report = DataRecipe(cfg).prepare(workers=1, progress=False)
    out = tmp / "run"
    train = [
        "train",
        "--config",
        str(RECIPE),
        *_args(corpus, tmp),
        f"train.output_dir={out}",
        "train.max_steps=2",
        "train.log_every=1",
        "train.eval_every=2",
        "train.save_every=2",
        "train.eval_batches=1",
        "train.eval_audio_samples=1",
        "train.device=cpu",
    ]
    assert main(train) == 0
    return tmp, out, report


def test_prepare_skips_and_names_what_breaks_the_models_limits(corpus: Path, run: tuple[Path, Path, object]) -> None:
    _, _, report = run
    train_ids, eval_ids = _ids(corpus, "metadata.csv"), _ids(corpus, "eval.txt")
    skipped = report.skipped["model_limit"]  # type: ignore[attr-defined]
    assert sorted(skipped) == sorted([train_ids[1], train_ids[2], eval_ids[1]])
    problems = {p.id: p.detail for p in report.problems}  # type: ignore[attr-defined]
    assert "BPE tokens, more than 200 (model.max_text_tokens=200" in problems[train_ids[1]]
    assert "BPE tokens" in problems[eval_ids[1]]
    assert "audio codes (14.0 s), more than the checkpoint's gpt_max_audio_tokens - 3 = 297" in problems[train_ids[2]]
    assert (report.train, report.eval) == (6, 2)  # type: ignore[attr-defined]
    summary = report.summary()  # type: ignore[attr-defined]
    assert f"model_limit: {eval_ids[1]}" in summary and "model_limit 3" in summary
    assert "note      xtts text: 'am' has no Coqui rules" in summary  # the tiny recipe's language


def test_a_run_with_overlong_transcripts_trains_and_evaluates_to_the_end(run: tuple[Path, Path, object]) -> None:
    from speechtrain.train.metrics import read_metrics

    _, out, _ = run
    assert [r["step"] for r in read_metrics(out)][-1] == 2
    evals = read_metrics(out, split="eval")
    assert [r["step"] for r in evals] == [2] and np.isfinite(evals[0]["audio_ce"])
    assert list((out / "samples" / "step_00000002").glob("*.wav"))  # eval audio of the kept eval items
    assert (out / "checkpoints").is_dir() and list((out / "checkpoints").glob("step_*"))


def test_strict_prepare_refuses_them(corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from speechtrain.cli.main import main

    args = ["prepare", str(corpus / "metadata.csv"), "--config", str(RECIPE), "--strict", "--no-progress"]
    assert main([*args, *_args(corpus, tmp_path)[1:]]) == 2
    err = capsys.readouterr().err
    for uid in (_ids(corpus, "metadata.csv")[1], _ids(corpus, "eval.txt")[1]):
        assert f"model_limit: {uid}" in err
    assert "Traceback" not in err


def test_a_larger_limit_checks_the_corpus_again(corpus: Path, run: tuple[Path, Path, object]) -> None:
    tmp, _, _ = run
    cfg = load_config(str(RECIPE), [*_args(corpus, tmp), "model.max_text_tokens=1000"])
    report = DataRecipe(cfg).ensure_prepared()
    assert report is not None and report.reused == 8  # the kept items' features are reused, the limits checked again
    problems = {p.id: p.detail for p in report.problems}
    long_one = _ids(corpus, "metadata.csv")[1]
    assert "more than 250 (model.max_text_tokens=1000, the checkpoint's gpt_max_text_tokens=250)" in problems[long_one]


def test_evaluation_leaves_out_what_slipped_through(
    run: tuple[Path, Path, object], caplog: pytest.LogCaptureFixture
) -> None:
    """An eval batch with a transcript beyond the text positions (data prepared without the model's limits):
    the other items are evaluated, the long one is named once; before, the GPT raised IndexError."""
    from speechtrain.recipes.inference import load_task

    _, out, _ = run
    _, task = load_task(out, device="cpu")
    sr = task.arch.input_sample_rate
    audio = torch.randn(2, 1, 2 * sr) * 0.1
    batch = Batch(
        {"audio": audio, "audio_lengths": torch.tensor([2 * sr, 2 * sr])},
        ["long_one", "short_one"],
        256,
        sr,
        texts=[LONG + LONG, "a short sentence"],
    )
    with caplog.at_level(logging.WARNING):
        metrics = task.eval_step(batch)
    assert all(torch.isfinite(v) for v in metrics.values()) and float(metrics["audio_ce"]) > 0
    assert "eval utterance 'long_one' left out" in caplog.text and "short_one" not in caplog.text
    alone = batch.select([1])
    assert task.batch_weight(batch) == task.batch_weight(alone)
    torch.manual_seed(0)
    expected = task.eval_step(alone)["audio_ce"]
    torch.manual_seed(0)
    assert torch.equal(task.eval_step(batch)["audio_ce"], expected)
    only_long = batch.select([0])
    assert task.batch_weight(only_long) == 0
    zero = {k: float(v) for k, v in task.eval_step(only_long).items()}
    summary = task.eval_summary([(0.0, zero), (task.batch_weight(alone), {k: float(v) for k, v in metrics.items()})])
    assert summary["audio_ce"] == pytest.approx(float(metrics["audio_ce"]))  # the empty batch does not count
    assert "loss" not in task.eval_summary([(0.0, zero)])  # nothing evaluated: never the best checkpoint


def test_synthesize_speaks_a_600_character_paragraph_into_one_file(
    corpus: Path, run: tuple[Path, Path, object], tmp_path: Path
) -> None:
    from speechtrain.cli.main import main
    from speechtrain.models.xtts.task import PAUSE_SECONDS
    from speechtrain.models.xtts.text_split import split_text
    from speechtrain.recipes.inference import load_task

    _, out, _ = run
    assert len(PARAGRAPH) >= 600
    _, task = load_task(out, device="cpu")
    limit = task.limits.max_text_tokens
    assert len(task.text_ids(PARAGRAPH, "en")) > limit  # before: "more than the model's ...; split it"
    pieces = split_text(PARAGRAPH, lambda p: len(task.text_ids(p, "en")) <= limit)
    assert len(pieces) >= 3 and all(p.endswith((".", ";", ",")) for p in pieces[:-1])
    ref = sorted((corpus / "wavs").glob("*.wav"))[0]
    wav = tmp_path / "paragraph.wav"
    cli = ["synthesize", str(out), "--text", PARAGRAPH, "--speaker-wav", str(ref), "--language", "en"]
    assert main([*cli, "--out", str(wav), "--max-seconds", "0.5", "--seed", "0", "--device", "cpu"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["paragraph.wav"]
    audio, rate = sf.read(wav)
    assert rate == 24000 and audio.size >= (len(pieces) - 1) * PAUSE_SECONDS * rate


def test_set_up_refuses_a_training_item_beyond_the_limits_before_the_first_step(run: tuple[Path, Path, object]) -> None:
    """Data prepared without the model's limits (no checkpoint folder at prepare): the task's own check at set-up
    names the item and the fix, before any step."""
    from types import SimpleNamespace

    from speechtrain.errors import DataError
    from speechtrain.recipes.inference import load_task

    _, out, _ = run
    _, task = load_task(out, device="cpu")
    ok = SimpleNamespace(texts=["a short one"], ids=["fine"], frames=[200], hop_length=256)
    task._check_dataset(ok, ok.texts)
    for texts, frames, what in (([LONG], [200], "BPE tokens"), (["short"], [1400], "audio codes"), ([], [1400], "")):
        bad = SimpleNamespace(texts=texts, ids=["bad"], frames=frames, hop_length=256)
        with pytest.raises(DataError, match=f"training utterance 'bad': .*{what}.*speechtrain prepare"):
            task._check_dataset(bad, texts)


# ---------------------------------------------------------------- XTTS data as Coqui reads it
HINDI = ["नमस्ते आप कैसे हैं", "मैं ठीक हूँ धन्यवाद", "", "   ", "😀😀😀🎉🎉 ठीक", "मेरे पास 25 किताबें हैं", "वह घर गया 🎉"]


def test_what_xtts_cannot_learn_from_is_told_apart() -> None:
    from speechtrain.models.xtts.limits import speech_problem

    assert speech_problem("") is not None and speech_problem(" \t ").reason == "empty_text"  # type: ignore[union-attr]
    for text in ("😀😀😀🎉🎉 ठीक", "👍🏽👍🏽👍🏽 ok", "...", "🎉", "♪♪♪ la ♪♪♪"):
        assert speech_problem(text).reason == "non_speech_text", text  # type: ignore[union-attr]
    for text in ("वह घर गया 🎉", "ok 👍", "it costs 25", "Ὅμηρος", "ጤና ይስጥልኝ"):
        assert speech_problem(text) is None, text


@pytest.fixture(scope="module")
def hindi_xtts(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """An XTTS-layout train.csv in Hindi: 2 good rows, an empty and a blank transcript, an emoji row with a little
    text, a row with digits (no Hindi number words) and one with a single emoji beside its words."""
    root = make_demo_corpus(tmp_path_factory.mktemp("xtts_hindi") / "demo", utterances=len(HINDI), seed=5)
    ids = [line.split("|")[0] for line in (root / "metadata.csv").read_text(encoding="utf-8").splitlines()]
    rows = ["audio_file|text|speaker_name"] + [f"wavs/{i}.wav|{t}|s0" for i, t in zip(ids, HINDI)]
    (root / "train.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    (root / "metadata.csv").unlink()
    return root, ids


def _hindi_args(root: Path, tmp: Path) -> list[str]:
    return [
        f"data.cache_dir={tmp / 'cache'}",
        f"model.checkpoint_dir={tmp / 'base'}",
        "data.language=hi",
        "model.language=hi",
        "data.eval_utterances=1",
    ]


def test_prepare_drops_empty_and_mostly_non_speech_xtts_rows_and_reports_unspoken_digits(
    hindi_xtts: tuple[Path, list[str]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Empty XTTS transcripts were kept ("note 2 kept items have empty text (fine for vocoders/classifiers)") and
    passed --strict; an emoji row was kept with its emoji stripped (Coqui drops it); "25" in Hindi stayed digits
    without a word (Coqui's cleaner crashes on it)."""
    from speechtrain.cli.main import main

    root, ids = hindi_xtts
    args = ["prepare", str(root / "train.csv"), "--config", str(RECIPE), "--no-progress", *_hindi_args(root, tmp_path)]
    assert main([*args, "--strict"]) == 2
    err = capsys.readouterr().err
    for uid, reason in ((ids[2], "empty_text"), (ids[3], "empty_text"), (ids[4], "non_speech_text")):
        assert f"{reason}: {uid}" in err
    assert "Traceback" not in err and "empty_text 2, non_speech_text 1" in err
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "kept      4 of 7" in out and "skipped   3: empty_text 2, non_speech_text 1" in out
    assert "empty text (fine for vocoders" not in out
    assert f"unspoken_digits: {ids[5]}: digits '25' stay digits" in out
    assert ids[6] not in out.split("skipped")[1]  # one emoji beside its words: kept (the emoji removed, as before)


def test_strict_refuses_what_a_check_kept_and_reported() -> None:
    from speechtrain.data.limits import ItemLimits, LimitItem, Verdict
    from speechtrain.data.prepare import _LimitChecks, _strict_reported
    from speechtrain.errors import DataError

    digits = Verdict("unspoken_digits", "digits '25' stay digits", keep=True)
    checks = _LimitChecks(
        [ItemLimits("toy", {}, lambda: lambda items: [digits if "2" in i.text else None for i in items])]
    )
    problems: list = []
    kept = checks._keep(["a", "b"], [LimitItem("a", "x 25", 0), LimitItem("b", "y", 0)], problems, {})
    assert kept == ["a", "b"] and problems == [] and checks.notes() == ["unspoken_digits: a: digits '25' stay digits"]
    _strict_reported(checks, strict=False)
    with pytest.raises(DataError, match="--strict: unspoken_digits: a: digits '25' stay digits"):
        _strict_reported(checks, strict=True)
