"""The batch plan: bucketed padding on an LJSpeech-like distribution, beside random batching."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from speechtrain.cli.main import main
from speechtrain.config import load_config
from speechtrain.data.plan import format_plan, plan_report
from speechtrain.testing.datasets import ljspeech_like_frames


def test_bucketed_padding_is_small_on_ljspeech_like_durations() -> None:
    frames = ljspeech_like_frames(13100, seed=0)
    assert 86 <= frames.min() and frames.max() <= 870
    cfg = load_config(None, ["data.num_buckets=10"])
    report = plan_report(frames, cfg.data, seed=cfg.train.seed)
    b, r = report["bucketed"], report["random"]
    assert b["utterances"] == r["utterances"] == 13100
    assert b["padding_fraction"] <= 0.03
    assert b["padding_fraction"] < r["padding_fraction"]
    assert r["batch_size"] == round(b["mean_batch_size"])
    assert b["batches_over_budget"] == 0
    assert len(b["buckets"]) == 10 and sum(e["utterances"] for e in b["buckets"]) == 13100
    text = format_plan(report)
    assert "bucketed" in text and "random" in text


def test_plan_reports_oversize_and_crop() -> None:
    frames = ljspeech_like_frames(500, seed=1)
    cfg = load_config(None, ["data.max_frames=800", "data.crop_frames=200", "data.crop_short=skip"])
    report = plan_report(frames, cfg.data, seed=cfg.train.seed, ids=[f"u{i}" for i in range(500)])
    over = int((frames > 800).sum())
    assert report["bucketed"]["oversize"] == over > 0
    assert report["crop"]["crop_short"] == int((frames < 200).sum())
    assert report["crop"]["utterances"] == 500 - report["crop"]["crop_short"]
    assert "over the budget" in format_plan(report)


def test_plan_command_synthetic_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "plan.json"
    rc = main(["plan", "--synthetic", "ljspeech", "--utterances", "2000", "--json", str(out), "data.num_buckets=5"])
    assert rc == 0
    report = json.loads(out.read_text())
    assert report["bucketed"]["padding_fraction"] < report["random"]["padding_fraction"]
    assert report["bucketed"]["utterances"] == 2000 and len(report["bucketed"]["boundaries"]) == 5
    assert "padding" in capsys.readouterr().out


def test_plan_command_without_data_is_a_user_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan"]) == 2
    assert "DATA" in capsys.readouterr().err


def test_auto_bucket_count_reaches_the_padding_target_with_fewer_buckets() -> None:
    """num_buckets=auto (the default): the fewest equal-duration buckets whose planned padding is
    within data.bucket_padding_target, on a 1000-utterance LJSpeech-like corpus."""
    frames = ljspeech_like_frames(1000, seed=0)
    auto = plan_report(frames, load_config(None).data, seed=0)
    ten = plan_report(frames, load_config(None, ["data.num_buckets=10"]).data, seed=0)
    b = auto["bucketed"]
    assert b["padding_fraction"] <= 0.03
    tried = b["auto_buckets"]
    chosen = len(b["buckets"])
    assert tried[-1][0] == chosen < len(ten["bucketed"]["buckets"])
    assert tried[-1][1] <= 0.02 and all(pad > 0.02 for _, pad in tried[:-1])  # the first count within target
    assert [k for k, _ in tried] == sorted(k for k, _ in tried)
    tight = plan_report(frames, load_config(None, ["data.bucket_padding_target=0.005"]).data, seed=0)
    assert len(tight["bucketed"]["buckets"]) > chosen  # a tighter target buys more buckets
    assert "num_buckets=auto" in format_plan(auto)


def test_auto_bucket_count_is_one_bucket_for_a_tiny_corpus() -> None:
    frames = ljspeech_like_frames(20, seed=0)
    b = plan_report(frames, load_config(None, ["data.batch_size=8"]).data, seed=0)["bucketed"]
    assert len(b["buckets"]) == 1 and b["utterances"] == 20
