"""The ASR character error rate (``cer``) of TTS quality: the CER function on known pairs, a real tiny ASR model
(wav2vec2-CTC, built here and saved as safetensors: no weights ship) loaded through ``train.quality_asr`` and
scoring a synthesis, the clear one-line errors of a bad folder (missing, not a model, pickled weights only), a
missing transformers named with its install hint, ``train.best_metric=cer`` refused without an ASR model, a VITS
tiny run whose eval rows carry ``cer``, ``speechtrain eval --asr``, and the web UI served beyond this machine
refusing a request that names an ASR model."""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from speechtrain.config import ConfigError, DataConfig, load_config
from speechtrain.data.features import log_mel_numpy
from speechtrain.errors import UserError
from speechtrain.quality import catalog
from speechtrain.quality import metrics as qm
from speechtrain.quality.score import QualityItem, QualityScorer

pytest.importorskip("transformers")
RATE = 22050
VOCAB = "abcdefghijklmnopqrstuvwxyz'"


# ------------------------------------------------------------------------------------------ the CER function
@pytest.mark.parametrize("backend", ["jiwer", "own"])
def test_cer_on_known_pairs(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if backend == "own":  # jiwer not installed: the Levenshtein here gives the same figures
        monkeypatch.setitem(__import__("sys").modules, "jiwer", None)
    else:
        pytest.importorskip("jiwer")
    assert qm.cer("the cat sat", "the cat sat") == 0.0
    assert qm.cer("abcd", "abxd") == pytest.approx(1 / 4)  # one substitution
    assert qm.cer("abcd", "abd") == pytest.approx(1 / 4)  # one deletion
    assert qm.cer("abcd", "abcde") == pytest.approx(1 / 4)  # one insertion
    assert qm.cer("Hello, World!", "hello world") == 0.0  # case and punctuation ignored
    assert qm.cer("a  b\tc", " a b c ") == 0.0  # whitespace collapsed
    assert qm.cer("«Ça va?»", "ça va") == 0.0  # Unicode punctuation and case
    assert qm.cer("Cafe\u0301", "café") == 0.0  # NFC: a combining accent equals the composed letter
    assert qm.cer("abc", "") == 1.0 and qm.cer("ab", "abcdef") == 2.0  # over 1: a long wrong transcript
    assert qm.cer("kitten", "sitting") == pytest.approx(3 / 6)
    assert math.isnan(qm.cer("?!", "anything"))  # nothing left to compare with


def test_levenshtein_and_normalisation() -> None:
    assert qm.levenshtein("kitten", "sitting") == 3 and qm.levenshtein("", "abc") == 3 and qm.levenshtein("a", "a") == 0
    assert qm.normalise_text("  Hello,  WORLD!  ¿Qué?  ") == "hello world qué"
    assert qm.normalise_text("Straße") == "strasse"


# ------------------------------------------------------------------------------------------ a real tiny ASR model
def make_tiny_asr(folder: Path) -> Path:
    """A wav2vec2-CTC model of a few thousand parameters over a letter vocabulary, saved as a Hugging Face folder
    (safetensors) with its tokenizer and feature extractor: random weights, a real model of the family."""
    import torch
    from transformers import Wav2Vec2Config, Wav2Vec2CTCTokenizer, Wav2Vec2FeatureExtractor, Wav2Vec2ForCTC

    folder.mkdir(parents=True, exist_ok=True)
    vocab = {"<pad>": 0, "<unk>": 1, "|": 2, **{c: i + 3 for i, c in enumerate(VOCAB)}}
    (folder / "vocab.json").write_text(json.dumps(vocab))
    tokenizer = Wav2Vec2CTCTokenizer(str(folder / "vocab.json"), unk_token="<unk>", pad_token="<pad>")
    features = Wav2Vec2FeatureExtractor(feature_size=1, sampling_rate=16000, padding_value=0.0, do_normalize=True)
    config = Wav2Vec2Config(
        vocab_size=len(vocab),
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        conv_dim=(16, 16),
        conv_stride=(5, 4),
        conv_kernel=(10, 8),
        num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=2,
        pad_token_id=0,
    )
    torch.manual_seed(0)
    Wav2Vec2ForCTC(config).save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    features.save_pretrained(folder)
    return folder


def make_tiny_whisper(folder: Path) -> Path:
    """A Whisper model of a few thousand parameters (one encoder and one decoder layer) with a letter vocabulary and
    the special tokens of two languages, its generation config and feature extractor, saved as safetensors."""
    import torch
    from transformers import (
        GenerationConfig,
        WhisperConfig,
        WhisperFeatureExtractor,
        WhisperForConditionalGeneration,
        WhisperTokenizer,
    )

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.json").write_text(json.dumps({c: i for i, c in enumerate([*VOCAB, "Ġ"])}))
    (folder / "merges.txt").write_text("#version: 0.2\n")
    end = "<|endoftext|>"
    tokenizer = WhisperTokenizer(
        str(folder / "vocab.json"), str(folder / "merges.txt"), unk_token=end, bos_token=end, eos_token=end
    )
    specials = ["<|startoftranscript|>", "<|en|>", "<|uz|>", "<|translate|>", "<|transcribe|>", "<|notimestamps|>"]
    tokenizer.add_special_tokens({"additional_special_tokens": specials})
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in [end, *specials]}
    config = WhisperConfig(
        vocab_size=len(tokenizer),
        num_mel_bins=80,
        d_model=16,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=32,
        decoder_ffn_dim=32,
        max_target_positions=32,
        pad_token_id=ids[end],
        bos_token_id=ids[end],
        eos_token_id=ids[end],
        decoder_start_token_id=ids["<|startoftranscript|>"],
    )
    torch.manual_seed(0)
    model = WhisperForConditionalGeneration(config)
    model.generation_config = GenerationConfig(
        decoder_start_token_id=ids["<|startoftranscript|>"],
        eos_token_id=ids[end],
        pad_token_id=ids[end],
        lang_to_id={"<|en|>": ids["<|en|>"], "<|uz|>": ids["<|uz|>"]},
        task_to_id={"transcribe": ids["<|transcribe|>"], "translate": ids["<|translate|>"]},
        no_timestamps_token_id=ids["<|notimestamps|>"],
        is_multilingual=True,
        max_length=12,
    )
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    WhisperFeatureExtractor(feature_size=80, sampling_rate=16000).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def tiny_asr(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_asr(tmp_path_factory.mktemp("asr") / "wav2vec2-tiny")


_mel = functools.partial(log_mel_numpy, settings=DataConfig())


def test_the_tiny_asr_model_scores_cer_of_a_synthesis(tiny_asr: Path) -> None:
    from speechtrain.data.demo import synthesize_text
    from speechtrain.recipes.quality import AsrSettings, asr_transcriber

    transcriber = asr_transcriber("tts", AsrSettings(str(tiny_asr)))
    assert transcriber.rate == 16000 and transcriber.kind == "ctc"  # loaded at once, its own rate
    speech = synthesize_text("the quick brown fox").astype(np.float32)
    heard = transcriber(speech, RATE)
    assert isinstance(heard, str)
    scorer = QualityScorer("tts", RATE, _mel, transcribe=transcriber)
    assert "cer" in scorer.names
    report = scorer.score([QualityItem("a", speech, speech, None, "the quick brown fox"), QualityItem("b", speech)])
    assert report.scores["cer"] == pytest.approx(qm.cer("the quick brown fox", heard))
    assert math.isfinite(report.scores["cer"]) and report.scores["cer"] >= 0
    assert report.failed == {"cer": 1}  # the item without its text: no value, counted
    assert "cer" not in QualityScorer("tts", RATE, _mel).names  # no ASR model named: no cer


def test_a_whisper_model_transcribes_in_the_language_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whisper (an encoder-decoder) is loaded as one, ``train.quality_asr_language`` reaches its generate() as the
    language to transcribe in, and a language the model does not know is one line naming the key."""
    from speechtrain.quality.asr import Transcriber

    folder = make_tiny_whisper(tmp_path / "whisper-tiny")
    transcriber = Transcriber(folder, "uz").load()
    assert transcriber.kind == "seq2seq" and transcriber.rate == 16000
    asked: list[Any] = []

    def spy(t: Transcriber) -> Transcriber:
        generate = t._pipe.model.generate
        monkeypatch.setattr(
            t._pipe.model, "generate", lambda *a, **k: asked.append(k.get("language")) or generate(*a, **k)
        )
        return t

    speech = (0.1 * np.sin(np.arange(RATE) / 7.0)).astype(np.float32)
    assert isinstance(spy(transcriber)(speech, RATE), str)
    spy(Transcriber(folder).load())(speech, RATE)
    assert asked == ["uz", None]  # asked: passed on; not asked: Whisper detects it
    refused = r"^train.quality_asr_language=fr: not a language of the Whisper model .*\(en, uz\)"
    with pytest.raises(UserError, match=refused):
        Transcriber(folder, "fr").load()
    assert Transcriber(folder, "English").load().language == "English"  # a name Whisper knows, for a code it has


def test_loading_the_asr_model_leaves_torchs_device_contexts_working(tiny_asr: Path) -> None:
    """transformers 5 loads with torch.linspace swapped for a wrapper under a device context: had torch listed its
    constructors then (its first device context in the process), a later ``with torch.device("meta")`` would make
    linspace on the CPU (XTTS's strict load then failed on mixed devices). In a fresh process, as it first happens."""
    import subprocess
    import sys

    code = (
        "import torch, numpy as np\n"
        "from speechtrain.quality.asr import Transcriber\n"
        f"Transcriber({str(tiny_asr)!r}).load()\n"
        "with torch.device('meta'):\n"
        "    print(torch.linspace(0, 1, 3).device, torch.zeros(1).device)\n"
    )
    env = {**__import__("os").environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["meta", "meta"]


def test_a_vocoder_gets_no_cer_and_says_so(tiny_asr: Path) -> None:
    from speechtrain.recipes.quality import AsrSettings, asr_transcriber

    with pytest.raises(UserError, match=r"train.quality_asr: .*speech synthesised from text.*vocoder") as refused:
        asr_transcriber("vocoder", AsrSettings(str(tiny_asr)))
    assert "\n" not in str(refused.value)


def _only(folder: Path, *files: str, config: dict[str, Any] | None = None) -> Path:
    folder.mkdir(parents=True)
    for name in files:
        (folder / name).write_bytes(b"\x80\x04not really")
    if config is not None:
        (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_a_bad_folder_is_one_clear_line_naming_the_key(tmp_path: Path) -> None:
    from speechtrain.quality.asr import Transcriber

    ctc = {"architectures": ["Wav2Vec2ForCTC"], "model_type": "wav2vec2"}
    cases = {
        tmp_path / "nope": "does not exist",
        _only(tmp_path / "empty", "model.safetensors"): "has no config.json",
        _only(tmp_path / "pickled", "pytorch_model.bin", config=ctc): r"holds pickled weights only \(pytorch_mo",
        _only(tmp_path / "noweights", config=ctc): r"has no \*.safetensors",
        _only(tmp_path / "bert", "model.safetensors", config={"architectures": ["BertModel"]}): "is not a speech recog",
    }
    (tmp_path / "afile").write_text("x")
    cases[tmp_path / "afile"] = "is a file"
    for folder, why in cases.items():
        with pytest.raises(UserError, match=rf"^train.quality_asr={folder}:? {why}") as refused:
            Transcriber(folder)
        assert "\n" not in str(refused.value), folder
    with pytest.raises(UserError, match=r"^--asr .*nope does not exist"):
        Transcriber(tmp_path / "nope", key="--asr")


def test_unreadable_weights_are_one_line_too(tiny_asr: Path, tmp_path: Path) -> None:
    """A folder that passes the listing checks but whose safetensors file is not one: transformers' error, in one
    line naming the key (no traceback)."""
    import shutil

    from speechtrain.quality.asr import Transcriber

    broken = tmp_path / "broken"
    shutil.copytree(tiny_asr, broken)
    (broken / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(UserError, match=rf"^train.quality_asr={broken}: transformers could not load it") as refused:
        Transcriber(broken).load()
    assert "\n" not in str(refused.value)


def test_without_transformers_cer_is_named_with_its_install_hint(
    tiny_asr: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from speechtrain.recipes.quality import AsrSettings, asr_transcriber

    real = catalog.importlib.util.find_spec
    monkeypatch.setattr(
        catalog.importlib.util, "find_spec", lambda name: None if name == "transformers" else real(name)
    )
    transcriber = asr_transcriber("tts", AsrSettings(str(tiny_asr)))
    assert transcriber.rate == 0  # not loaded: nothing to load it with
    scorer = QualityScorer("tts", RATE, _mel, transcribe=transcriber)
    assert "cer" not in scorer.names
    row = scorer.score([QualityItem("a", np.ones(RATE, np.float32) * 0.1, None, None, "text")]).row()
    assert (
        "cer (pip install 'transformers>=4.40' jiwer, or pip install 'speechtrain[quality]')" in row["quality_missing"]
    )
    assert "cer (pip install 'transformers>=4.40'" in caplog.text


# ------------------------------------------------------------------------------------------ the config
def test_cer_is_a_best_metric_of_tts_only_with_an_asr_model() -> None:
    with pytest.raises(ConfigError, match=r"train.best_metric=cer is scored only with a local ASR model: set "):
        load_config(None, ["model.name=vits", "train.best_metric=cer"])
    cfg = load_config(None, ["model.name=vits", "train.best_metric=cer", "train.quality_asr=/somewhere"])
    assert cfg.train.best_metric == "cer" and catalog.resolve_best("tts", "cer", 4) == catalog.BestMetric("cer", "min")
    assert load_config(None, ["model.name=xtts", "model.language=en", "train.quality_asr=/x"]).train.quality_asr
    with pytest.raises(ConfigError, match=r"train.quality_asr: .*hifigan is a vocoder model: unset"):
        load_config(None, ["model.name=hifigan", "train.quality_asr=/somewhere"])
    with pytest.raises(ConfigError, match="is not a metric of this model"):
        load_config(None, ["model.name=hifigan", "train.best_metric=cer"])
    with pytest.raises(ConfigError, match="train.quality_asr_language is the language of train.quality_asr"):
        load_config(None, ["model.name=vits", "train.quality_asr_language=en"])


# ------------------------------------------------------------------------------------------ a VITS run, eval
@pytest.fixture(scope="module")
def vits_run(demo_data: list[str], tiny_asr: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A VITS tiny run of 2 steps with train.quality_asr set, evaluated at step 2 (2 quality items)."""
    from speechtrain.cli.main import main
    from tests.doors import RECIPES, TINY, steps

    run = tmp_path_factory.mktemp("asr_run") / "vits"
    config = ["--config", str(RECIPES / "vits_tiny.yaml"), *demo_data, *TINY, *steps(2), "train.eval_batches=1"]
    assert main(["train", *config, f"train.output_dir={run}", f"train.quality_asr={tiny_asr}"]) == 0
    return run


@pytest.mark.slow
def test_a_vits_run_with_an_asr_model_writes_cer_in_its_eval_rows(vits_run: Path) -> None:
    from speechtrain.train.metrics import read_metrics

    row = read_metrics(vits_run, split="eval")[-1]
    assert row["step"] == 2 and row["quality_items"] == 2
    assert isinstance(row["cer"], float) and math.isfinite(row["cer"]) and row["cer"] >= 0, row
    assert "cer" not in row.get("quality_failed", {})  # every item had its text


@pytest.mark.slow
def test_speechtrain_eval_asr_prints_cer(vits_run: Path, tiny_asr: Path, tmp_path: Path, capsys: Any) -> None:
    from speechtrain.cli.main import main
    from speechtrain.train.metrics import read_metrics

    out = tmp_path / "eval.json"
    assert main(["eval", str(vits_run), "--asr", str(tiny_asr), "--device", "cpu", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert [line.split()[:1] for line in printed.splitlines() if line.startswith("cer ")] == [["cer"]]
    scores = json.loads(out.read_text())["scores"]
    row = read_metrics(vits_run, split="eval")[-1]
    assert scores["cer"] == pytest.approx(row["cer"], abs=1e-6)  # the same items, weights, ASR as the evaluation
    assert main(["eval", str(vits_run), "--runtime", "onnx", "--asr", str(tiny_asr)]) == 0  # the exported graph's
    assert [line.split()[0] for line in capsys.readouterr().out.splitlines() if line.startswith("cer ")] == ["cer"]
    assert main(["eval", str(vits_run), "--asr", str(tmp_path / "nope")]) != 0
    assert f"--asr {tmp_path / 'nope'} does not exist" in capsys.readouterr().err


@pytest.mark.slow
def test_eval_scores_with_the_runs_own_asr_model_or_none(vits_run: Path, tmp_path: Path, capsys: Any) -> None:
    """Without --asr, eval scores cer with the run's train.quality_asr; --asr none scores none; a run whose ASR
    folder is gone (scored on another machine) is one line saying both ways out."""
    import shutil

    from speechtrain.cli.main import main

    def cer_lines(args: list[str]) -> list[str]:
        assert main(["eval", *args, "--device", "cpu", "--items", "1"]) == 0
        return [line for line in capsys.readouterr().out.splitlines() if line.startswith("cer ")]

    assert len(cer_lines([str(vits_run)])) == 1
    assert cer_lines([str(vits_run), "--asr", "none"]) == []
    moved = tmp_path / "moved"
    shutil.copytree(vits_run, moved, ignore=shutil.ignore_patterns("samples", "*.lock"))
    config = moved / "config.yaml"
    config.write_text(config.read_text().replace("quality_asr: ", f"quality_asr: {tmp_path / 'gone'} # "))
    assert main(["eval", str(moved), "--device", "cpu"]) != 0
    err = capsys.readouterr().err
    assert f"train.quality_asr={tmp_path / 'gone'} does not exist" in err and "--asr none scores no cer" in err
    assert main(["eval", str(moved), "--asr", "none", "--asr-language", "en"]) != 0
    assert "--asr-language is the language of the --asr model" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------ the web UI
def test_the_ui_served_beyond_this_machine_refuses_a_requested_asr_model(tmp_path: Path) -> None:
    """Served on this machine the page takes train.quality_asr (under its folders, as every path); served beyond
    it, a request naming an ASR model is refused in one line, and the operator's own recipe may name one."""
    from speechtrain.ui.page import Workspace
    from tests.doors import RECIPES

    corpus = tmp_path / "data" / "corpus"
    corpus.mkdir(parents=True)
    asr = tmp_path / "data" / "asr"
    over = [f"data.manifest={corpus}", f"train.quality_asr={asr}"]
    recipe = str(RECIPES / "vits_tiny.yaml")
    local = Workspace(tmp_path / "runs", tmp_path / "data")
    assert local.load_config(recipe, over).train.quality_asr == str(asr)
    served = Workspace(tmp_path / "runs", tmp_path / "data", local=False)
    with pytest.raises(UserError, match=rf"^train.quality_asr={asr}: served beyond this machine") as refused:
        served.load_config(recipe, over)
    assert "\n" not in str(refused.value)
    with pytest.raises(UserError, match="served beyond this machine"):
        served.load_config(recipe, over, reads_data=False)
    own = tmp_path / "operator"
    own.mkdir()
    (own / "vits_asr.yaml").write_text(f"extends: {RECIPES / 'vits_tiny.yaml'}\ntrain:\n  quality_asr: {asr}\n")
    operators = Workspace(tmp_path / "runs", tmp_path / "data", recipe_folders=[own], local=False)
    assert operators.load_config("vits_asr", [f"data.manifest={corpus}"]).train.quality_asr == str(asr)


def test_the_ui_learns_where_it_is_served(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from speechtrain.ui import app

    made: list[Any] = []

    def stop(ws: Any) -> Any:
        made.append(ws)
        raise RuntimeError("built")

    monkeypatch.setattr(app, "build_app", stop)
    for host, local in (("127.0.0.1", True), ("0.0.0.0", False)):
        with pytest.raises(RuntimeError, match="built"):
            app.launch(host, runs_root=tmp_path / "runs", data_root=tmp_path / "data", password="pw", block=False)
        assert made[-1].local is local
