"""Quality metrics (speechtrain.quality): the metrics on known pairs move the right way, the config checks
train.best_metric against the family's metrics, best.pt follows train.best_metric where the eval loss disagrees,
early stopping on it, and a missing package is named with its install hint."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from speechtrain.config import ConfigError, DataConfig, load_config
from speechtrain.data.demo import synthesize_text
from speechtrain.data.features import log_mel_numpy
from speechtrain.quality import catalog
from speechtrain.quality import metrics as qm
from speechtrain.quality.score import QualityItem, QualityScorer
from speechtrain.train import checkpoint as ckpt
from speechtrain.train.metrics import read_metrics
from tests.test_train_engine import ListLoader, cfg_for, make_batch, make_trainer

RATE = 22050


@pytest.fixture(scope="module")
def speech() -> tuple[np.ndarray, np.ndarray]:
    """A demo utterance and a copy with white noise at about 10 dB SNR."""
    clean = synthesize_text("the quick brown fox jumps over it").astype(np.float32)
    noise = np.random.default_rng(0).normal(0.0, 1.0, clean.shape)
    noisy = clean + noise * np.std(clean) / math.sqrt(10.0)
    return clean, noisy.astype(np.float32)


def _mel(x: np.ndarray) -> np.ndarray:
    return log_mel_numpy(x, DataConfig())


def test_intrusive_metrics_on_the_same_file_and_on_a_noisy_copy(speech: tuple[np.ndarray, np.ndarray]) -> None:
    clean, noisy = speech
    same = {
        "pesq": qm.pesq_wb(clean, clean, RATE),
        "stoi": qm.stoi(clean, clean, RATE),
        "mcd": qm.mcd(_mel(clean), _mel(clean)),
        "mrstft": qm.mrstft(clean, clean),
        "mcd_dtw": qm.mcd_dtw(_mel(clean), _mel(clean)),
    }
    assert same["pesq"] > 4.4 and same["stoi"] > 0.999
    assert same["mcd"] == pytest.approx(0.0, abs=1e-6) and same["mrstft"] == pytest.approx(0.0, abs=1e-9)
    assert same["mcd_dtw"] == pytest.approx(0.0, abs=1e-3)
    worse = {
        "pesq": qm.pesq_wb(clean, noisy, RATE),
        "stoi": qm.stoi(clean, noisy, RATE),
        "mcd": qm.mcd(_mel(clean), _mel(noisy)),
        "mrstft": qm.mrstft(clean, noisy),
        "mcd_dtw": qm.mcd_dtw(_mel(clean), _mel(noisy)),
    }
    for name, value in worse.items():
        better = catalog.METRICS[name].mode == "max"
        assert (value < same[name]) if better else (value > same[name]), (name, value, same[name])


def test_dtw_aligns_a_slower_copy(speech: tuple[np.ndarray, np.ndarray]) -> None:
    clean, _ = speech
    ref = _mel(clean)
    slow = np.repeat(ref, 2, axis=1)[:, : int(ref.shape[1] * 1.5)]  # the first 3/4 at half speed
    assert qm.mcd_dtw(ref, slow) < qm.mcd(ref, slow) / 2  # frame by frame the copy drifts; aligned nearly the same


def test_f0_errors_count_cents_gross_errors_and_voicing() -> None:
    ref = np.array([100.0, 100.0, 100.0, 100.0, 0.0, 0.0])
    deg = np.array([100.0, 200.0, 100.0 * 2 ** (50 / 1200), 0.0, 0.0, 150.0])
    out = qm.f0_errors(ref, deg)
    assert out["vde"] == pytest.approx(2 / 6)  # frame 3 unvoiced in deg, frame 5 voiced in deg only
    assert out["gpe"] == pytest.approx(1 / 3)  # of the 3 frames voiced in both, the octave is off by > 20 %
    assert out["f0_rmse_cents"] == pytest.approx(math.sqrt((1200**2 + 50**2) / 3))


def test_macro_f1_and_accuracy_of_a_confusion_matrix() -> None:
    from sklearn.metrics import f1_score

    true = [0] * 5 + [1] * 3 + [2] * 2
    pred = [0, 0, 0, 1, 2, 1, 1, 0, 2, 2]
    confusion = np.zeros((3, 3))
    for t, p in zip(true, pred):
        confusion[t, p] += 1
    out = qm.classification_scores(confusion)
    assert out["accuracy"] == pytest.approx(0.7)
    assert out["macro_f1"] == pytest.approx(f1_score(true, pred, average="macro"))


@pytest.mark.slow
def test_dnsmos_scores_a_noisy_copy_lower_and_runs_offline(speech: tuple[np.ndarray, np.ndarray]) -> None:
    clean, noisy = speech
    a, b = qm.dnsmos(clean, RATE), qm.dnsmos(noisy, RATE)
    assert set(a) == {"dnsmos_sig", "dnsmos_bak", "dnsmos_ovrl"} and all(1.0 <= v <= 5.0 for v in a.values())
    assert b["dnsmos_bak"] < a["dnsmos_bak"]


def test_the_scorer_names_a_missing_package_with_its_install_hint(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, speech: tuple[np.ndarray, np.ndarray]
) -> None:
    real = catalog.importlib.util.find_spec
    monkeypatch.setattr(catalog.importlib.util, "find_spec", lambda name: None if name == "pesq" else real(name))
    clean, noisy = speech
    scorer = QualityScorer("vocoder", RATE, _mel)
    report = scorer.score([QualityItem("a", noisy, clean)])
    assert "pesq" not in report.scores and {"stoi", "mcd", "mrstft"} <= set(report.scores)
    assert report.row()["quality_missing"] == ["pesq (pip install pesq, or pip install 'speechtrain[quality]')"]
    assert "pesq (pip install pesq" in caplog.text


def test_the_scorer_counts_items_without_a_value() -> None:
    scorer = QualityScorer("vocoder", RATE, _mel)
    silent = np.zeros(RATE, dtype=np.float32)
    report = scorer.score([QualityItem("a", silent, silent)])
    assert report.failed.get("pesq") == 1 and "pesq" not in report.scores  # PESQ finds no utterance in silence


# ------------------------------------------------------------------------------------------ the config
def test_best_metric_is_checked_against_the_family_when_the_config_is_read() -> None:
    assert load_config(None, ["model.name=hifigan", "train.best_metric=pesq"]).train.best_metric == "pesq"
    with pytest.raises(ConfigError, match=r"dnsmos_ovrl is not a metric of this model .*choose one of pesq, stoi"):
        load_config(None, ["model.name=hifigan", "train.best_metric=dnsmos_ovrl"])
    with pytest.raises(ConfigError, match="pesq is better when maximised"):
        load_config(None, ["model.name=hifigan", "train.best_metric=pesq:min"])
    with pytest.raises(ConfigError, match="train.quality_items items, which is 0"):
        load_config(None, ["model.name=vits", "train.best_metric=mcd_dtw", "train.quality_items=0"])
    assert load_config(None, ["model.name=cnn_lstm", "train.best_metric=macro_f1"]).train.best_metric == "macro_f1"


def test_the_default_best_metric_is_a_quality_metric_per_family() -> None:
    assert catalog.resolve_best("vocoder", None, 4) == catalog.BestMetric("mcd", "min")
    assert catalog.resolve_best("speaker_tts", None, 4) == catalog.BestMetric("mcd_dtw", "min")
    assert catalog.resolve_best("classifier", None, 0) == catalog.BestMetric("macro_f1", "max")
    assert catalog.resolve_best("tts", None, 0) == catalog.BestMetric("loss", "min")  # nothing scored
    assert catalog.resolve_best("", "score:max", 4) == catalog.BestMetric("score", "max")
    assert catalog.resolve_best("vocoder", "pesq", 4) == catalog.BestMetric("pesq", "max")


# ------------------------------------------------------------------------------------------ best.pt
class _Scripted:
    """Wraps a toy task's eval summary: the eval loss falls at every evaluation while ``score`` peaks at the
    second one (what a real model does when its loss keeps falling and its audio gets worse)."""

    LOSS = [3.0, 2.0, 1.0, 0.5, 0.25]
    SCORE = [0.5, 0.9, 0.1, 0.2, 0.3]

    def __init__(self, task: Any) -> None:
        self.task, self.calls = task, 0

    def __call__(self, outputs: list[tuple[float, dict[str, float]]]) -> dict[str, Any]:
        i, self.calls = self.calls, self.calls + 1
        return {"loss": self.LOSS[i], "score": self.SCORE[i]}


def _fit(tmp_path: Any, *overrides: str) -> tuple[Any, dict[str, Any]]:
    from speechtrain.recipes import build_task

    cfg = cfg_for("train.max_steps=10", "train.eval_every=2", "train.save_every=100", *overrides)
    task = build_task(cfg)
    task.eval_summary = _Scripted(task)  # type: ignore[method-assign]
    batches = [make_batch(i, [12, 9]) for i in range(2)]
    trainer = make_trainer(cfg, task, ListLoader(batches), [make_batch(9, [10])], tmp_path / "run")
    return trainer, trainer.fit()


def test_best_checkpoint_follows_the_best_metric_not_the_loss(tmp_path: Any) -> None:
    trainer, summary = _fit(tmp_path, "train.best_metric=score:max")
    best = ckpt.safe_load(trainer.run_dir.best)
    assert best["step"] == 4 and summary["best_eval"] == 0.9 and summary["best_metric"] == "score"
    _, by_loss = _fit(tmp_path / "loss", "train.best_metric=loss")
    assert by_loss["best_eval"] == 0.25  # the loss alone would have kept the last evaluation


def test_early_stopping_on_the_best_metric(tmp_path: Any) -> None:
    trainer, summary = _fit(tmp_path, "train.best_metric=score:max", "train.early_stop_patience=2")
    assert summary["stopped"] == "early_stop" and summary["steps"] == 8  # evals 3 and 4 did not beat eval 2
    assert [r["step"] for r in read_metrics(trainer.run_dir.path, split="eval")] == [2, 4, 6, 8]


def test_a_best_metric_the_eval_row_lacks_is_one_clear_error(tmp_path: Any) -> None:
    from speechtrain.errors import UserError

    with pytest.raises(UserError, match=r"train.best_metric=scor: the eval row has no 'scor' \(it has loss, score\)"):
        _fit(tmp_path, "train.best_metric=scor")


# ------------------------------------------------------------------------------------------ speechtrain eval
@pytest.fixture(scope="module")
def hifigan_run(demo_data: list[str], tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A HiFi-GAN tiny run of 2 steps, evaluated (and best.pt written) at step 2."""
    from speechtrain.cli.main import main
    from tests.doors import RECIPES, TINY, steps

    run = tmp_path_factory.mktemp("quality") / "hifigan"
    config = ["--config", str(RECIPES / "vocoder_hifigan_tiny.yaml"), *demo_data, *TINY, *steps(2)]
    assert main(["train", *config, f"train.output_dir={run}"]) == 0
    return run


#: how far two scorings of the same voice may differ and still be the same (float32 graph vs PyTorch: the
#: audio differs in the last bits; PESQ's and MR-STFT's own noise on 2 short clips is larger)
NOISE = {"pesq": 0.1, "stoi": 0.02, "mcd": 1.0, "mrstft": 0.25}


@pytest.mark.slow
def test_eval_scores_a_run_as_its_evaluation_did_and_its_onnx_export_alike(hifigan_run: Any, tmp_path: Any) -> None:
    import json

    from speechtrain.cli.main import main

    row = read_metrics(hifigan_run, split="eval")[-1]
    out = tmp_path / "eval.json"
    assert main(["eval", str(hifigan_run), "--json", str(out), "--device", "cpu"]) == 0
    torch_scores = json.loads(out.read_text())
    assert torch_scores["step"] == 2 and torch_scores["items"] == 2 and torch_scores["runtime"] == "torch"
    for name in NOISE:  # the same items, the same weights, the same code as the training's evaluation
        assert torch_scores["scores"][name] == pytest.approx(row[name], rel=1e-4), name
    assert main(["eval", str(hifigan_run), "--runtime", "onnx", "--json", str(out)]) == 0
    onnx_scores = json.loads(out.read_text())
    assert onnx_scores["runtime"] == "onnxruntime" and "loss" not in onnx_scores["scores"]
    for name, noise in NOISE.items():
        assert abs(onnx_scores["scores"][name] - torch_scores["scores"][name]) <= noise, name


@pytest.mark.slow
def test_eval_takes_a_checkpoint_file_and_refuses_a_missing_one(hifigan_run: Any, capsys: Any) -> None:
    from speechtrain.cli.main import main

    step = sorted((hifigan_run / "checkpoints").glob("step_*.pt"))[-1]
    assert main(["eval", str(hifigan_run), "--checkpoint", str(step), "--items", "1"]) == 0
    out = capsys.readouterr().out
    assert f"{step.name}, step 2, torch" in out and "(1 items scored)" in out and "pesq" in out
    assert main(["eval", str(hifigan_run), "--checkpoint", "nope.pt"]) != 0
    assert "--checkpoint nope.pt: file not found" in capsys.readouterr().err


def test_the_train_tab_plots_the_quality_metrics_beside_the_eval_loss() -> None:
    from speechtrain.ui.runs import eval_series

    rows = [
        {"split": "train", "step": 2, "loss": 4.0},
        {"split": "eval", "step": 2, "loss": 3.0, "pesq": 1.5, "mcd": 9.0, "quality_items": 2, "quality_seconds": 1.2},
        {"split": "eval", "step": 4, "loss": 2.0, "pesq": 2.5, "mcd": 7.0, "quality_items": 2, "quality_share": 0.1},
    ]
    series = {(step, name): value for step, name, value in eval_series(rows)}
    # each metric in its own units, named with its unit and direction (issue 50: divided by its first value, a
    # quality metric's change was a flat line beside a loss that moved more)
    assert series == pytest.approx(
        {
            (2, "loss"): 3.0,
            (2, "pesq (MOS-LQO, higher is better)"): 1.5,
            (2, "mcd (dB, lower is better)"): 9.0,
            (4, "loss"): 2.0,
            (4, "pesq (MOS-LQO, higher is better)"): 2.5,
            (4, "mcd (dB, lower is better)"): 7.0,
        }
    )


# ------------------------------------------------------------------------------------------ time-to-quality
def test_a_run_stops_after_equal_audio_with_an_evaluation_there(tmp_path: Any) -> None:
    trainer, summary = _fit(tmp_path, "train.max_audio_seconds=1.0", "train.eval_every=100")
    assert summary["stopped"] == "max_audio_seconds" and summary["steps"] == 5  # 21 frames = 0.244 s a step
    (row,) = read_metrics(trainer.run_dir.path, split="eval")
    assert row["step"] == 5 and row["audio_seconds_seen"] == pytest.approx(5 * 21 * 256 / 22050)
    assert row["train_seconds"] > 0
    assert ckpt.safe_load(trainer.run_dir.best)["step"] == 5


def test_time_to_quality_rows_spreads_and_the_mark_of_a_speed_up_that_costs_quality() -> None:
    from speechtrain.recipes.quality_bench import run_from_rows, summarise

    def rows(values: list[float]) -> list[dict[str, Any]]:
        return [
            {"step": 10 * (i + 1), "pesq": v, "audio_seconds_seen": 5.0 * (i + 1), "train_seconds": 2.0 * (i + 1)}
            for i, v in enumerate(values)
        ]

    runs = [
        run_from_rows("fp32", 1, rows([1.2, 1.6, 2.0]), "pesq", "max", 1.5),
        run_from_rows("fp32", 2, rows([1.1, 1.4, 1.8]), "pesq", "max", 1.5),
        run_from_rows("bf16", 1, rows([1.3, 1.9, 1.9]), "pesq", "max", 1.5),
        run_from_rows("bf16", 2, rows([1.2, 1.7, 2.1]), "pesq", "max", 1.5),
        run_from_rows("fast", 1, rows([1.0, 1.1, 1.2]), "pesq", "max", 1.5),
        run_from_rows("fast", 2, rows([1.0, 1.2, 1.6]), "pesq", "max", 1.5),
    ]
    assert runs[0].quality == 2.0 and runs[0].seconds_to_target == 4.0 and runs[1].audio_to_target == 15.0
    assert runs[4].seconds_to_target is None  # never reached 1.5
    fp32, bf16, fast = summarise(["fp32", "bf16", "fast"], runs, "max")
    assert fp32.verdict == "reference" and fp32.quality is not None and fp32.quality.low == 1.8
    assert bf16.verdict.startswith("keeps quality") and bf16.reached == 2
    assert fast.verdict.startswith("costs quality") and fast.reached == 1 and fast.seconds_to_target is None
    assert fp32.audio_per_second is not None and fp32.audio_per_second.median == pytest.approx(2.5)


@pytest.mark.slow
def test_bench_quality_trains_each_variant_for_equal_audio(demo_data: list[str], tmp_path: Any) -> None:
    import json

    from speechtrain.cli.main import main
    from tests.doors import RECIPES, TINY

    out, report = tmp_path / "runs", tmp_path / "quality.json"
    config = ["--config", str(RECIPES / "vocoder_hifigan_tiny.yaml"), *demo_data, *TINY, "train.quality_items=1"]
    variants = ["--quality-variant", "fp32:accel.precision=fp32", "--quality-variant", "bf16:accel.precision=bf16"]
    args = ["--quality", "1000", "--quality-audio", "0.7", "--repeat", "2", *variants]
    assert main(["bench", *config, *args, "--quality-out", str(out), "--json", str(report)]) == 0
    data = json.loads(report.read_text())
    assert data["metric"] == "mcd" and [r["variant"] for r in data["rows"]] == ["fp32", "bf16"]
    assert [(r["variant"], r["seed"]) for r in data["runs"]] == [
        ("fp32", 1234),
        ("bf16", 1234),
        ("fp32", 1235),
        ("bf16", 1235),
    ]
    for run in data["runs"]:  # equal audio: each stopped (and evaluated) at the first step past 0.7 s (0.74 s a step)
        assert 0.7 <= run["audio_seconds"] < 0.7 + 0.75 and run["seconds_to_target"] is not None
        accel = json.loads((out / run["variant"] / f"seed_{run['seed']}" / "accel.json").read_text())
        assert accel["accelerations"]["precision"]["name"] == run["variant"]
    assert main(["bench", *config, *args, "--quality-out", str(out)]) != 0  # the folder holds this report's runs


def test_train_seconds_continue_across_a_resume() -> None:
    """The eval rows' train_seconds (what bench --time-to counts) go on from the checkpoint's count after a resume;
    they restarted at 0 in each process, so a resumed run's curve went back in time (issue 47)."""
    import time

    import torch

    from speechtrain.config import TrainConfig
    from speechtrain.quality.catalog import BestMetric
    from speechtrain.train.eval_schedule import EvalSchedule
    from speechtrain.train.state import RunState

    def schedule() -> EvalSchedule:
        return EvalSchedule(
            None,
            BestMetric("loss", "min"),
            TrainConfig(),
            RunState(),
            None,
            torch.device("cpu"),
            None,  # type: ignore[arg-type]
        )

    first = schedule()
    first.fit_start = time.perf_counter() - 100.0  # 100 s of training in the first process
    saved = first.state_dict()
    assert saved["train_seconds"] >= 100.0
    resumed = schedule()
    resumed.load_state_dict(saved)
    resumed.fit_start = time.perf_counter()
    assert resumed.train_seconds() >= 100.0
    old = schedule()
    old.load_state_dict({"best_eval": None, "evals_since_best": 0})  # a checkpoint written before: counts from 0
    old.fit_start = time.perf_counter()
    assert old.train_seconds() < 100.0
