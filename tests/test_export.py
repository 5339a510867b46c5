"""Exports to the runtimes users deploy with (issue 32): every export runs what it wrote in its runtime beside
the PyTorch model at two input lengths and fails above its tolerance; Piper speaks a tiny Uzbek VITS from
text as our own synthesis does; the optional packages stay out of the core import."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import wave
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml

from speechtrain.config import ConfigError, load_config
from speechtrain.errors import UserError
from speechtrain.registry import build_task

ROOT = Path(__file__).resolve().parents[1]


def _task(recipe: str, *overrides: str) -> tuple[Any, Any]:
    torch.manual_seed(0)
    cfg = load_config(ROOT / "recipes" / f"{recipe}.yaml", list(overrides))
    task = build_task(cfg.model, cfg.data)
    for module in task.modules().values():
        module.eval()
    return cfg, task


def _job(cfg: Any, task: Any, out: Path, **kw: Any) -> Any:
    from speechtrain.export.common import ExportFiles
    from speechtrain.export.job import ExportJob

    return ExportJob(task=task, model=cfg.model, data=cfg.data, run_dir=out, files=ExportFiles(out), name="m", **kw)


def _export(recipe: str, fmt: str, out: Path, *overrides: str, **kw: Any) -> Any:
    from speechtrain.export.formats import format_for

    cfg, task = _task(recipe, *overrides)
    result = format_for(str(cfg.model.name), fmt).export(_job(cfg, task, out, **kw))
    print("\n".join(result.lines()))
    return result


# --- the core stays light --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("argv", "allowed"),
    [
        (["--help"], ()),
        (["rtf", "--help"], ()),
        # its --format help lists the formats table (speechtrain.export), but no runtime package is loaded for it
        (["export", "--help"], ("speechtrain.export",)),
    ],
)
def test_core_import_and_cli_help_do_not_import_the_export_packages(argv: list[str], allowed: tuple[str, ...]) -> None:
    code = (
        "import sys\n"
        "import speechtrain, speechtrain.cli.main as m\n"
        "try:\n"
        f"    m.main({argv!r})\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(sorted(k for k in ('onnx', 'onnxruntime', 'piper', 'speechtrain.export') if k in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == str(sorted(allowed))


def test_a_missing_package_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from speechtrain.export.common import require

    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import fails as if not installed
    with pytest.raises(UserError, match=r"speechtrain\[export\]"):
        require("onnxruntime")


# --- which format serves which run ------------------------------------------------------------------------
def test_formats_are_refused_with_the_reason() -> None:
    from speechtrain.export.formats import format_for

    assert format_for("vits", None).key == "piper" and format_for("xtts", None).key == "coqui"
    assert format_for("hifigan", None).key == "onnx" and format_for("hifigan", "jik876").key == "jik876"
    with pytest.raises(UserError, match="autoregressive sampling loop"):
        format_for("gpt_tts", "onnx")
    with pytest.raises(UserError, match="autoregressive"):
        format_for("gpt_tts", None)
    with pytest.raises(UserError, match="exports vits runs, not 'hifigan'"):
        format_for("hifigan", "piper")
    with pytest.raises(UserError, match="unknown; formats: piper, onnx, jik876, coqui"):
        format_for("vits", "tflite")
    from speechtrain.recipes.export import check_onnx_rtf

    with pytest.raises(UserError, match="a 'gpt_tts' run has no ONNX runner"):
        check_onnx_rtf("gpt_tts")  # refused before any timing
    for family in ("vits", "hifigan", "nsf_hifigan"):  # every family whose ONNX export makes audio has a runner
        check_onnx_rtf(family)


# --- vocoders and the classifier in onnxruntime -------------------------------------------------------------
def _assert_checked(result: Any, n: int) -> None:
    assert len(result.checks) == n and result.ok, result.lines()
    frames = {c.name for c in result.checks}
    assert any("37 frames" in f for f in frames) and any("83 frames" in f for f in frames)  # two lengths


def test_hifigan_onnx_equals_pytorch_at_two_lengths(tmp_path: Path) -> None:
    result = _export("vocoder_hifigan_tiny", "onnx", tmp_path)
    _assert_checked(result, 2)
    assert all(c.max_diff < 1e-5 for c in result.checks)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["mel_base"] == "e" and config["hop_size"] == 256 and (tmp_path / "model.onnx").is_file()


@pytest.mark.parametrize("mini_nsf", [False, True])
def test_nsf_onnx_equals_pytorch_and_writes_openutau_vocoder_yaml(tmp_path: Path, mini_nsf: bool) -> None:
    result = _export("vocoder_nsf_hifigan_tiny", "onnx", tmp_path, "data.f0_method=yin", f"model.mini_nsf={mini_nsf}")
    _assert_checked(result, 2)
    if not mini_nsf:  # the harmonic source draws overtone phases and noise: random nodes zeroed for the check
        assert all("2 random nodes zeroed" in c.name for c in result.checks)
    vocoder = yaml.safe_load((tmp_path / "vocoder.yaml").read_text())
    from speechtrain.models.nsf_hifigan.export import PC_AUG

    # DiffSinger writes the run's pc_aug there: speechtrain trains without PC-NSF augmentation
    assert vocoder["model"] == "model.onnx" and vocoder["pitch_controllable"] is PC_AUG is False
    # OpenUtau's DependencyInstaller reads name from oudep.yaml and installs into Dependencies/NAME, where
    # DsVocoder(NAME) reads vocoder.yaml: the two names agree; the package manager reads id and version
    oudep = yaml.safe_load((tmp_path / "oudep.yaml").read_text())
    assert oudep["name"] == vocoder["name"] == oudep["id"] == "m" and oudep["version"]
    # the tiny recipe measures f0 at the centre of each hop: the f0-grid warning of every NSF export
    assert any("data.f0_frame_offset=0.0" in n for n in result.notes), result.notes
    assert {"sample_rate", "hop_size", "win_size", "fft_size", "num_mel_bins", "mel_fmin", "mel_fmax"} <= set(vocoder)
    assert vocoder["mel_base"] == "e" and vocoder["mel_scale"] == "slaney"
    from speechtrain.export.common import ort_session

    session = ort_session(tmp_path / "model.onnx")  # DiffSinger's layout: mel (1, frames, bins), f0 (1, frames)
    assert [i.name for i in session.get_inputs()] == ["mel", "f0"]
    assert [o.name for o in session.get_outputs()] == ["waveform"]
    bins = vocoder["num_mel_bins"]
    out = session.run(None, {"mel": np.zeros((1, 20, bins), np.float32) - 5, "f0": np.full((1, 20), 220, np.float32)})
    assert out[0].shape == (1, 20 * vocoder["hop_size"])


def test_nsf_source_phase_stays_exact_over_a_long_input() -> None:
    """The sine's phase at 6000 frames against a float64 reference: the running sum over frames in float32 was
    off by ~1e-4 cycles there (and onnxruntime's summation order by another amount: the 6000-frame drift)."""
    from speechtrain.models.nsf_hifigan.model import source_phase

    frames, upp, sr = 6000, 256, 22050
    f0 = f0_glide_np(frames)
    phase = source_phase(torch.from_numpy(f0[None]).float(), upp, sr)[0].double().numpy()
    # each frame's part in float32 as the model computes it; the running sum over frames exact (float64)
    step = f0.astype(np.float32)[:, None] / np.float32(sr)  # (frames, 1) cycles per sample
    within = step * np.arange(1, upp + 1, dtype=np.float32)
    per_frame = np.remainder(within[:, -1:] + np.float32(0.5), np.float32(1.0)) - np.float32(0.5)
    sums = np.remainder(np.cumsum(per_frame[:-1, 0].astype(np.float64)), 1.0)
    starts = np.concatenate([[0.0], sums])[:, None]
    want = (within.astype(np.float64) + starts).reshape(-1)
    err = np.abs(np.remainder(phase - want + 0.5, 1.0) - 0.5)  # in cycles, modulo whole cycles
    assert float(err.max()) < 2e-6, float(err.max())


def f0_glide_np(frames: int) -> np.ndarray:
    return (110.0 * 2.0 ** (2.0 * np.linspace(0, 1, frames))).astype(np.float64)


@pytest.mark.slow
def test_nsf_onnx_does_not_drift_from_pytorch_at_6000_frames(tmp_path: Path) -> None:
    from speechtrain.export.common import ExportFiles, ort_session, without_random_nodes
    from speechtrain.export.onnx import f0_glide, fixed_mel, write_nsf_graph
    from speechtrain.models.nsf_hifigan.graph import deterministic_source

    cfg, task = _task("vocoder_nsf_hifigan_tiny")
    session = ort_session(without_random_nodes(write_nsf_graph(ExportFiles(tmp_path), task, 80))[0])
    mel, f0 = fixed_mel(80, 6000, 1), f0_glide(6000)
    with deterministic_source(task.generator):
        ref = task.vocode(mel[0], f0[0])
    out = session.run(None, {"mel": mel.transpose(1, 2).numpy(), "f0": f0.numpy()})[0].reshape(-1)
    diff = float(np.max(np.abs(out - ref)))
    print(f"NSF ONNX vs PyTorch at 6000 frames: max |diff| {diff:.3g}")
    assert diff < 1e-5  # 5.5e-5 with the phase summed in float32 (bench/nsf_onnx_drift.py --fp32-phase)


def test_nsf_onnx_runner_vocodes_mel_and_f0_for_rtf(tmp_path: Path) -> None:
    """``rtf --runtime onnx``'s runner of an NSF run: the graph OpenUtau runs, fed (mel, f0) as the task is."""
    from speechtrain.export.onnx import f0_glide, fixed_mel
    from speechtrain.export.runtime import onnx_runner

    cfg, task = _task("vocoder_nsf_hifigan_tiny", "model.mini_nsf=true")  # no random nodes: comparable
    task.fold_for_inference()  # as rtf leaves it after timing PyTorch: the graph is traced from folded weights
    runner = onnx_runner(task, "nsf_hifigan", tmp_path)
    mel, f0 = fixed_mel(cfg.data.n_mels, 41, 3)[0], f0_glide(40)[0]  # f0 one frame short: edge-padded
    out, ref = runner.vocode(mel, f0), task.vocode(mel, f0)
    assert out.shape == ref.shape == (41 * cfg.data.hop_length,)
    assert float(np.max(np.abs(out - ref))) < 1e-4


def test_classifier_onnx_equals_pytorch(tmp_path: Path) -> None:
    result = _export("classifier_cnn_lstm_tiny", "onnx", tmp_path, "model.labels=[dog,bird,rain]")
    _assert_checked(result, 2)
    assert json.loads((tmp_path / "config.json").read_text())["labels"] == ["dog", "bird", "rain"]


def test_a_graph_that_differs_fails_the_export(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The tolerance bites: a PyTorch side off by 1e-3 makes the check fail and the export raise."""
    from speechtrain.export.common import ExportCheckFailed
    from speechtrain.models.hifigan.task import HiFiGANTask

    real = HiFiGANTask.vocode
    monkeypatch.setattr(HiFiGANTask, "vocode", lambda self, mel: real(self, mel) + 1e-3)
    result = _export("vocoder_hifigan_tiny", "onnx", tmp_path)
    assert not result.ok and "FAILED" in result.checks[0].line()
    with pytest.raises(ExportCheckFailed, match="differs from the PyTorch model"):
        result.raise_if_failed()


def test_jik876_files_load_under_their_names_and_back(tmp_path: Path) -> None:
    from speechtrain.models.hifigan.importers import import_jik876

    result = _export("vocoder_hifigan_tiny", "jik876", tmp_path, step=1234)
    _assert_checked(result, 2)
    g = torch.load(tmp_path / "g_00001234", map_location="cpu", weights_only=True)
    assert set(g) == {"generator"} and "conv_pre.weight_g" in g["generator"] and "ups.0.weight_v" in g["generator"]
    assert not any("parametrizations" in k for k in g["generator"])
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["hop_size"] == 256 and config["num_mels"] == 80 and config["resblock"] == "1"
    # our importer of jik876 files (tested on the reference's names) takes it back, every tensor accounted for
    cfg, fresh = _task("vocoder_hifigan_tiny")
    imported = import_jik876(tmp_path / "g_00001234")
    imported.load_into({"generator": fresh.generator})
    _, original = _task("vocoder_hifigan_tiny")  # same seed: the exported weights
    mel = torch.randn(cfg.data.n_mels, 30)
    assert np.array_equal(fresh.vocode(mel), original.vocode(mel))


# --- VITS: Piper's contract ------------------------------------------------------------------------------------
UZ_TEXTS = ["Men har kuni ertalab choy ichaman.", "Gʻalaba yaqin. Maʼno bor!", "Bolalar maktabga piyoda borishadi."]


def _piper_task(texts: list[str] = UZ_TEXTS, language: str = "uz") -> tuple[Any, Any]:
    """A tiny VITS on Piper's text path, its symbols those of ``texts`` (as prepare would learn them)."""
    from speechtrain.data.text.piper_text import piper_symbols

    cfg = load_config(
        ROOT / "recipes" / "vits_tiny.yaml",
        ["data.phonemizer=piper", "model.add_blank=false", f"data.language={language}"],
    )
    cfg.data.symbols = sorted({c for t in texts for c in piper_symbols(t, language)})
    torch.manual_seed(0)
    task = build_task(cfg.model, cfg.data)
    for module in task.modules().values():
        module.eval()
    return cfg, task


def test_piper_id_map_has_start_end_and_pad_ids_and_rebuilds_the_trained_ids() -> None:
    """Piper's own phonemizer and phonemes_to_ids, given the exported id map, give the ids the run reads; ^ $ _
    have one id each, so sherpa-onnx's add_meta_data.py (``i = i[0]`` for every entry) can read the map."""
    pytest.importorskip("piper")
    from piper.phoneme_ids import phonemes_to_ids

    from speechtrain.data.text.piper_text import piper_espeak
    from speechtrain.export.piper import phoneme_id_map

    _, task = _piper_task()
    id_map, _ = phoneme_id_map(task)
    assert all(len(id_map[m]) == 1 for m in "^$_") and len({id_map[m][0] for m in "^$_"}) == 3
    assert all(len(ids) == 1 for ids in id_map.values())
    tokens = {s: (i[0] if isinstance(i, list) else i) for s, i in id_map.items() if s != "\n"}  # sherpa-onnx's
    assert len(tokens) == len(id_map)
    for text in UZ_TEXTS:
        sentences = piper_espeak().phonemize("uz", text)
        assert [i for p in sentences for i in phonemes_to_ids(p, id_map)] == task.token_ids(text), text


def test_piper_refuses_a_run_not_trained_on_pipers_ids_before_writing(tmp_path: Path) -> None:
    for phonemizer in ("none", "espeak"):
        with pytest.raises(UserError, match=r"train it with data.phonemizer=piper model.add_blank=false"):
            _export("vits_tiny", "piper", tmp_path / phonemizer, f"data.phonemizer={phonemizer}")
        assert not any((tmp_path / phonemizer).iterdir())  # the job's folder: nothing written into it
    with pytest.raises(ConfigError, match="set model.add_blank=false"):
        _task("vits_tiny", "data.phonemizer=piper")


def test_piper_text_path_names_a_language_espeak_lacks() -> None:
    pytest.importorskip("piper")
    from speechtrain.data.text.piper_text import piper_symbols

    assert piper_symbols("Salom. Rahmat!", "uz").count("^") == 2  # two sentences, each ^ _ ... $
    with pytest.raises(UserError, match=r"data.phonemizer=piper: Piper's espeak-ng cannot read voice 'und'"):
        piper_symbols("hello", "und")


def test_piper_json_has_the_keys_piper_writes(tmp_path: Path) -> None:
    pytest.importorskip("piper")
    from piper.config import PhonemeType, PiperConfig

    from speechtrain.export.formats import FORMATS
    from speechtrain.export.piper import phoneme_id_map, piper_config

    cfg, task = _piper_task()
    config = piper_config(_job(cfg, task, tmp_path), phoneme_id_map(task)[0])
    theirs = PiperConfig(
        num_symbols=1, num_speakers=1, sample_rate=22050, espeak_voice="uz", phoneme_id_map={}, piper_version="1.5.0",
        phoneme_type=PhonemeType.ESPEAK,
    ).to_dict()  # fmt: skip
    assert set(theirs) <= set(config) and config["piper_version"] and config["phoneme_type"] == "espeak"
    assert PiperConfig.from_dict(config).phoneme_id_map["^"] == config["phoneme_id_map"]["^"]
    assert FORMATS["piper"].contract(cfg.model, cfg.data) == []


def test_piper_refuses_sentences_it_reads_to_other_ids(tmp_path: Path) -> None:
    """A check sentence with a phoneme the run never saw: Piper drops it, the run reads <unk>: refused, listed."""
    pytest.importorskip("piper")
    from speechtrain.export.formats import FORMATS

    cfg, task = _piper_task(UZ_TEXTS[:1])
    with pytest.raises(UserError, match=r"Piper reads 1 of 2 check sentences to other ids.*never saw"):
        FORMATS["piper"].export(_job(cfg, task, tmp_path, texts=[UZ_TEXTS[0], "Qiziq xabar."]))


def test_synthesize_speaks_as_piper_tts_and_sherpa_onnx_do(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A sentence with a phoneme the run never saw, and a text of two sentences: `synthesize` drops the phoneme (with
    a warning naming it) and speaks each sentence apart, as piper-tts and sherpa-onnx do (it read <unk> and spoke the
    joined text in one pass: other audio for the same ids). sherpa-onnx loads the exported .onnx as written (its
    metadata, tokens.txt beside it), from Piper's phonemes."""
    piper = pytest.importorskip("piper")
    sherpa_onnx = pytest.importorskip("sherpa_onnx")
    from speechtrain.export.piper import export_piper, sherpa_metadata

    cfg, task = _piper_task(UZ_TEXTS[:1])
    job = _job(cfg, task, tmp_path, texts=[UZ_TEXTS[0]])
    job.check = False
    export_piper(job)
    onnx = pytest.importorskip("onnx")
    written = {p.key: p.value for p in onnx.load(str(tmp_path / "m.onnx")).metadata_props}
    assert written == sherpa_metadata(json.loads((tmp_path / "m.onnx.json").read_text()))
    assert written["comment"] == "piper" and written["voice"] == "uz"
    voice = piper.PiperVoice.load(str(tmp_path / "m.onnx"))
    vits = sherpa_onnx.OfflineTtsVitsModelConfig(
        model=str(tmp_path / "m.onnx"), tokens=str(tmp_path / "tokens.txt"), noise_scale=0.0, noise_scale_w=0.0
    )
    tts = sherpa_onnx.OfflineTts(sherpa_onnx.OfflineTtsConfig(model=sherpa_onnx.OfflineTtsModelConfig(vits=vits)))
    unseen, two = "Qiziq xabar.", "Men har kuni choy ichaman. Men har kuni choy ichaman!"
    for text in (unseen, two):
        caplog.clear()
        ours = np.clip(task.synthesize(text, noise_scale=0.0, noise_scale_w=0.0), -1.0, 1.0)
        syn = piper.SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0, length_scale=1.0, normalize_audio=False)
        theirs = np.concatenate([chunk.audio_float_array for chunk in voice.synthesize(text, syn)])
        gen = sherpa_onnx.GenerationConfig()
        gen.phoneme_codepoints = [[ord(c) for c in "".join(p)] for p in voice.phonemize(text) if p]
        sherpa = np.asarray(tts.generate(text, gen).samples, dtype=np.float32)
        assert ours.size == theirs.size == sherpa.size > 0, text
        assert float(np.max(np.abs(ours - theirs))) < 1e-4 and float(np.max(np.abs(ours - sherpa))) < 1e-4, text
        assert "never saw, dropped" in caplog.text  # 'χ' in the one, '!' in the other: named
    assert task.last_inference_info["sentences"] == 2


def test_piper_export_notes_where_piper_reads_text_otherwise_than_our_front_end(tmp_path: Path) -> None:
    """Uzbek's tutuq typed as U+02BC: Piper's espeak-ng reads it as English letter names, where speechtrain's
    espeak front end gives it ' : the export says so with the sentence and Piper's reading."""
    pytest.importorskip("piper")
    from types import SimpleNamespace

    from speechtrain.data.text.piper_text import piper_espeak
    from speechtrain.export.piper import front_end_differences

    cfg, task = _piper_task()
    voice = SimpleNamespace(phonemize=lambda text: piper_espeak().phonemize("uz", text))
    job = _job(cfg, task, tmp_path, texts=["Maʼno va mazmun bir narsa emas.", UZ_TEXTS[0]])
    (note,) = front_end_differences(job, voice)
    assert note.startswith("1 of 2 check sentences") and "U+02BC" in note and "Maʼno" in note


def test_vits_graph_equals_synthesis_at_three_lengths(tmp_path: Path) -> None:
    from speechtrain.export.common import ExportFiles, ort_session

    _, task = _task("vits_tiny")
    example = torch.tensor([task.token_ids("a sentence of medium length")])
    args = (example, torch.tensor([example.shape[1]]), torch.tensor([0.0, 1.0, 0.0]))
    axes = {"input": {0: "b", 1: "t"}, "input_lengths": {0: "b"}, "output": {0: "b", 2: "n"}}
    path = ExportFiles(tmp_path).write_onnx(
        "v.onnx", task.inference_graph(), args, ["input", "input_lengths", "scales"], ["output"], axes
    )
    session = ort_session(path)
    for text in ("a", "hello", "a much longer sentence, with a comma, than the one the graph was traced on."):
        ids = task.token_ids(text)
        feed = {
            "input": np.array([ids]),
            "input_lengths": np.array([len(ids)]),
            "scales": np.array([0, 1, 0], np.float32),
        }
        out = session.run(None, feed)[0]
        ref = task.synthesize(text, noise_scale=0.0, noise_scale_w=0.0)
        assert out.size == ref.size and float(np.max(np.abs(out.reshape(-1) - ref))) < 1e-5, text


# --- end to end: a tiny Uzbek VITS spoken by piper-tts from text -------------------------------------------------
def _train_uz(tmp: Path, speakers: int) -> Path:
    from speechtrain.cli.main import main
    from speechtrain.recipes.train import train_from_config

    corpus = tmp / "corpus"
    layout = ["--layout", "xtts"] if speakers == 2 else []  # xtts: two named speakers
    assert main(["make-dataset", str(corpus), "--language", "uz", *layout]) == 0
    run = tmp / "run"
    torch.manual_seed(0)
    cfg = load_config(
        ROOT / "recipes" / "vits_tiny.yaml",
        [
            f"data.manifest={corpus}",
            f"data.cache_dir={tmp / 'cache'}",
            "data.language=uz",
            "data.phonemizer=piper",
            "model.add_blank=false",
            "data.eval_utterances=2",
            f"train.output_dir={run}",
            "train.max_steps=24",
            "train.eval_every=24",
            "train.save_every=24",
            "train.progress=false",
            "train.quality_items=0",  # the export is tested here, not the voice's quality (DNSMOS takes minutes)
            *(["model.n_speakers=2"] if speakers == 2 else []),
        ],
    )
    run_dir, _ = train_from_config(cfg)
    return Path(run_dir)


@pytest.mark.slow
@pytest.mark.parametrize("speakers", [1, 2])
def test_piper_speaks_a_tiny_uzbek_vits_from_text_as_we_do(
    tmp_path: Path, speakers: int, capsys: pytest.CaptureFixture[str]
) -> None:
    piper = pytest.importorskip("piper")
    from speechtrain.cli.main import main
    from speechtrain.recipes.inference import load_task

    run = _train_uz(tmp_path, speakers)
    out = tmp_path / "voice"
    assert main(["export", str(run), str(out), "--format", "piper", "--name", "uz_UZ-tiny"]) == 0
    printed = capsys.readouterr().out
    assert printed.count("check ok:") >= 4 and "FAILED" not in printed, printed
    if importlib.util.find_spec("sherpa_onnx") is not None:  # the voice loads in sherpa-onnx as written
        assert "check ok: sherpa-onnx" in printed, printed
    config = json.loads((out / "uz_UZ-tiny.onnx.json").read_text())
    assert config["phoneme_type"] == "espeak" and config["piper_version"]
    assert config["espeak"]["voice"] == "uz" and config["audio"]["sample_rate"] == 22050
    assert all(len(config["phoneme_id_map"][m]) == 1 for m in "^$_")
    if speakers == 2:
        assert config["num_speakers"] == 2 and len(config["speaker_id_map"]) == 2

    # every transcript of the corpus: the ids Piper computes from its text are the ids the run trained on
    from speechtrain.data.manifest import read_manifest

    _, task = load_task(run, device="cpu")
    voice = piper.PiperVoice.load(str(out / "uz_UZ-tiny.onnx"))
    entries, _ = read_manifest(tmp_path / "corpus", "auto")
    for entry in entries:
        theirs = [i for p in voice.phonemize(entry.text) for i in voice.phonemes_to_ids(p)]
        assert theirs == task.token_ids(entry.text), entry.text

    # piper-tts speaks from TEXT (its own phonemizer and our id map) to a WAV
    text = "Men har kuni ertalab choy ichaman."
    syn = piper.SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0, length_scale=1.0, speaker_id=None)
    with wave.open(str(tmp_path / "piper.wav"), "wb") as w:
        voice.synthesize_wav(text, w, syn_config=syn)
    with wave.open(str(tmp_path / "piper.wav"), "rb") as w:
        assert w.getframerate() == 22050
        spoken = np.frombuffer(w.readframes(w.getnframes()), np.int16).astype(np.float32) / 32767
    ours = task.synthesize(text, noise_scale=0.0, noise_scale_w=0.0)
    ours = ours / np.max(np.abs(ours))  # piper-tts peak-normalises before writing 16-bit samples
    assert spoken.size == ours.size > 0
    diff = float(np.max(np.abs(spoken - ours)))
    print(f"piper-tts ({speakers} speaker(s)) vs speechtrain synthesize, {text!r}: max |diff| {diff:.3g} of full scale")
    assert diff < 2e-4

    # the ONNX and the PyTorch RTF, same sentences, one run
    texts = tmp_path / "texts.txt"
    texts.write_text(f"{text}\nBolalar maktabga piyoda borishadi.\n", encoding="utf-8")
    rtf_json = tmp_path / "rtf.json"
    assert (
        main(["rtf", str(run), "--device", "cpu", "--runtime", "onnx", "--texts", str(texts), "--json", str(rtf_json)])
        == 0
    )
    rtf = json.loads(rtf_json.read_text())
    assert rtf["runtime"] == "torch" and rtf["onnx"]["runtime"] == "onnxruntime"
    assert [i["input"] for i in rtf["items"]] == [i["input"] for i in rtf["onnx"]["items"]]
    assert rtf["rtf"] > 0 and rtf["onnx"]["rtf"] > 0


@pytest.mark.slow
def test_a_trained_hifigan_run_exports_through_the_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from speechtrain.cli.main import main
    from speechtrain.recipes.train import train_from_config

    corpus = tmp_path / "corpus"
    assert main(["make-dataset", str(corpus), "-n", "8"]) == 0
    cfg = load_config(
        ROOT / "recipes" / "vocoder_hifigan_tiny.yaml",
        [
            f"data.manifest={corpus}",
            f"data.cache_dir={tmp_path / 'cache'}",
            f"train.output_dir={tmp_path / 'run'}",
            "train.max_steps=2",
            "train.eval_every=2",
            "train.save_every=2",
            "train.progress=false",
        ],
    )
    run_dir, _ = train_from_config(cfg)
    capsys.readouterr()
    assert main(["export", str(run_dir), str(tmp_path / "onnx")]) == 0
    assert main(["export", str(run_dir), str(tmp_path / "jik"), "--format", "jik876"]) == 0
    printed = capsys.readouterr().out
    assert printed.count("check ok:") == 4 and "FAILED" not in printed, printed  # a vocoder: no sherpa-onnx voice
    assert (tmp_path / "jik" / "g_00000002").is_file() and (tmp_path / "onnx" / "model.onnx").is_file()
    assert main(["export", str(run_dir), str(tmp_path / "x"), "--format", "piper"]) == 2
    assert "--format piper exports vits runs, not 'hifigan'" in capsys.readouterr().err
