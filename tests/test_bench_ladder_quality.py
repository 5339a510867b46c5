"""The ablation ladder's "quality after equal audio" column (issue 38): every Trainer rung trained for equal audio
with its seeds, the cell median [range], the mark of a rung whose speed-up costs quality beyond the reference
rung's spread, the column rewritten after every training run; and the ``autopilot`` quality variant, which is the
ladder's own "all" rung."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from speechtrain.bench.ablate import LadderRow, Variant, plan_ladder, row_overrides
from speechtrain.bench.measure import RunResult
from speechtrain.bench.report import build_report, markdown_table
from speechtrain.config import load_config
from speechtrain.errors import UserError

RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "vocoder_hifigan_tiny.yaml"


def _result(name: str, **kw: Any) -> RunResult:
    base = dict(steps=4, samples=16, padded_frames=1000, real_frames=700, data_wait_seconds=0.1)
    base.update(kw)
    return RunResult(name=name, seconds=2.0, audio_seconds=10.0, peak_memory_bytes=1000, **base)  # type: ignore[arg-type]


def _ladder() -> list[LadderRow]:
    not_applied = {"channels_last": {"applied": False, "detail": "no Conv2d"}}
    variants = [
        Variant("baseline", "baseline (plain PyTorch loop)", kind="baseline"),
        Variant("engine", "speechtrain, all off"),
        Variant("bucketing", "+ bucketing", {"data.bucketing": True}, records=("bucketing",)),
        Variant("precision", "+ bf16 autocast", {"accel.precision": "bf16"}),
        Variant("channels_last", "+ channels-last", {"accel.channels_last": True}, records=("channels_last",)),
    ]
    rows = [LadderRow(v, _result(v.label, applied=not_applied if v.key == "channels_last" else {})) for v in variants]
    return [*rows, LadderRow(Variant("tf32", "+ TF32", skip_reason="not applicable on cpu"), None)]


#: MCD (lower is better) after equal audio, per rung and seed: bucketing within the reference's range, bf16 beyond
MCD = {"engine": [60.0, 64.0, 62.0], "bucketing": [61.0, 63.5, 65.0], "precision": [70.0, 69.0, 75.0]}


def _eval_rows(value: float) -> list[dict[str, Any]]:
    return [
        {"step": 1, "mcd": value + 5.0, "audio_seconds_seen": 1.0, "train_seconds": 1.0},
        {"step": 2, "mcd": value, "audio_seconds_seen": 2.0, "train_seconds": 2.0},
    ]


def test_the_ladder_trains_each_trainer_rung_and_marks_the_one_that_costs_quality(monkeypatch, tmp_path) -> None:
    import speechtrain.recipes.quality_bench as qb

    cfg = load_config(RECIPE, ["train.device=cpu"])
    trained: list[tuple[str, int, dict[str, Any]]] = []

    def train_for_audio(cfg: Any, variant: Any, seed: int, folder: Path, audio: float, metric: str) -> list[dict]:
        assert audio == 6.0 and metric == "mcd" and folder == tmp_path / variant.name / f"seed_{seed}"
        trained.append((variant.name, seed, dict(variant.settings)))
        return _eval_rows(MCD[variant.name][seed - cfg.train.seed])

    monkeypatch.setattr(qb, "train_for_audio", train_for_audio)
    rows = _ladder()
    snapshots: list[dict[str, Any]] = []

    def on_run(state: Any) -> None:  # the column after every run: a report written here survives a kill
        snapshots.append(build_report(rows, {"type": "cpu", "name": "t", "cpu_count": 2}, quality=state.to_dict()))

    plan = qb.LadderQualityPlan(6.0, repeat=3, out_dir=tmp_path)
    column = qb.run_ladder_quality(cfg, rows, "cpu", plan, on_run)
    seed = cfg.train.seed
    # seeds interleaved over the rungs, the reference first; the plain loop and a change that did not take effect
    # are not trained
    assert [(n, s) for n, s, _ in trained] == [
        (k, seed + i) for i in range(3) for k in ("engine", "bucketing", "precision")
    ]
    engine = row_overrides(rows[1].variant, "cpu")
    assert trained[0][2] == engine and engine["accel.precision"] == "fp32" and engine["data.bucketing"] is False
    assert trained[2][2] == {**engine, "accel.precision": "bf16"}  # the rung's overrides, as the ladder sets them
    assert len(snapshots) == 1 + 9 and column.last == "precision"

    first = snapshots[0]["quality"]["rows"]
    assert first["engine"]["status"] == "not trained yet" and first["tf32"]["status"] == "not trained"
    partial = markdown_table(snapshots[2])  # after the reference's and bucketing's first seed
    assert "| 60 (1/3 seeds) reference |" in partial and "not trained yet" in partial

    report = snapshots[-1]
    json.dumps(report)
    cells = {r["key"]: r["quality"] for r in report["runs"]}
    assert cells["engine"]["median"] == 62.0 and cells["engine"]["verdict"] == "reference"
    assert cells["bucketing"]["verdict"].startswith("keeps quality") and not cells["bucketing"]["costs_quality"]
    assert cells["precision"]["costs_quality"] and cells["precision"]["values"] == [70.0, 69.0, 75.0]
    assert cells["baseline"]["status"] == cells["channels_last"]["status"] == "not trained"
    table = markdown_table(report).splitlines()
    assert table[0].endswith("| quality: mcd after 6 s audio (lower is better) | applied? |")
    by_name = {line.split("|")[1].strip(): line for line in table[2:]}
    assert "| 62 [60, 64] reference |" in by_name["speechtrain, all off"]
    assert "| 63.5 [61, 65] keeps quality |" in by_name["+ bucketing"]
    assert "| 70 [69, 75] **costs quality** (beyond the reference's spread) |" in by_name["+ bf16 autocast"]
    assert "not trained: a loop outside the Trainer" in by_name["baseline (plain PyTorch loop)"]
    assert "not trained: the change did not take effect" in by_name["+ channels-last"]
    assert by_name["+ TF32"].count(" - |") == 16  # a skipped row has a dash in the quality column too
    mark = "'+ bf16 autocast' costs quality: mcd 70 [69, 75] against 'speechtrain, all off' 62 [60, 64]"
    assert mark in report["notes"]
    assert len(report["quality"]["runs"]) == 9


def test_a_rung_whose_training_fails_is_marked_and_the_others_go_on(monkeypatch, tmp_path) -> None:
    import speechtrain.recipes.quality_bench as qb

    cfg = load_config(RECIPE, ["train.device=cpu"])
    calls: list[str] = []

    def train_for_audio(cfg: Any, variant: Any, seed: int, folder: Path, audio: float, metric: str) -> list[dict]:
        calls.append(variant.name)
        if variant.name == "bucketing":
            raise RuntimeError("boom\nmore")
        return _eval_rows(60.0)

    monkeypatch.setattr(qb, "train_for_audio", train_for_audio)
    column = qb.run_ladder_quality(cfg, _ladder(), "cpu", qb.LadderQualityPlan(6.0, repeat=2, out_dir=tmp_path))
    assert calls == ["engine", "bucketing", "precision", "engine", "precision"]  # not trained again after failing
    cell = column.cells()["bucketing"]
    assert cell["status"] == "failed" and cell["reason"] == "RuntimeError: boom"


def test_without_the_quality_column_the_ladder_report_is_unchanged() -> None:
    report = build_report(_ladder(), {"type": "cpu", "name": "t", "cpu_count": 2})
    assert "quality" not in report and all("quality" not in r for r in report["runs"])
    assert "quality" not in markdown_table(report)


def test_the_autopilot_variant_is_the_ladders_all_rung_against_its_fp32_plain_rung(monkeypatch, tmp_path) -> None:
    from speechtrain.bench.measure import probe
    from speechtrain.recipes.quality_bench import parse_variants

    cfg = load_config(RECIPE, ["train.device=cpu"])
    rungs = {v.key: v for v in plan_ladder(cfg.data, "cpu", probe())}
    fp32, autopilot = parse_variants(cfg, ["autopilot"])  # autopilot alone: fp32 comes first, as the reference
    assert (fp32.name, autopilot.name) == ("fp32", "autopilot")
    assert dict(autopilot.settings) == row_overrides(rungs["all"], "cpu")
    assert dict(fp32.settings) == row_overrides(rungs["engine"], "cpu")
    auto_cfg, plain_cfg = autopilot.config(cfg), fp32.config(cfg)
    assert auto_cfg.data.bucketing and auto_cfg.accel.cpu_allocator  # what the recommendation switches on here
    assert not plain_cfg.data.bucketing and not plain_cfg.accel.cpu_allocator
    assert plain_cfg.accel.precision == "fp32" and plain_cfg.data.num_workers == 0
    # named with others, the built-ins keep their places; the NAME:key=value form is unchanged
    names = [v.name for v in parse_variants(cfg, ["autopilot", "fp32", "bf16:accel.precision=bf16"])]
    assert names == ["autopilot", "fp32", "bf16"]
    with pytest.raises(UserError, match="fp32, autopilot alone"):
        parse_variants(cfg, ["turbo"])
    with pytest.raises(UserError, match="its own name"):
        parse_variants(cfg, ["fp32", "fp32:accel.precision=fp32"])

    import speechtrain.recipes.quality_bench as qb

    trained: list[tuple[str, bool]] = []

    def train_for_audio(cfg: Any, variant: Any, seed: int, folder: Path, audio: float, metric: str) -> list[dict]:
        trained.append((variant.name, variant.config(cfg).data.bucketing))
        return _eval_rows(60.0)

    monkeypatch.setattr(qb, "train_for_audio", train_for_audio)
    bench = qb.run_quality_bench(cfg, 40.0, audio_seconds=6.0, repeat=1, variants=["autopilot"], out_dir=tmp_path)
    assert trained == [("fp32", False), ("autopilot", True)] and [r.variant for r in bench.rows] == [
        "fp32",
        "autopilot",
    ]
    assert "data.bucketing=True" in bench.to_dict()["variants"]["autopilot"]


@pytest.mark.slow
def test_bench_ablate_with_quality_audio_on_the_cpu(demo_data: list[str], tmp_path: Path, capsys: Any) -> None:
    """``speechtrain bench --ablate --quality-audio S`` on hifigan tiny: two Trainer rungs (all off, bf16), two
    seeds each, one step of training each; the JSON and markdown carry the column, the runs are where it says."""
    from speechtrain.bench.ablate import RUNGS
    from speechtrain.cli.main import main
    from tests.doors import TINY

    keep = ("baseline", "engine", "precision")
    skips = [a for k in RUNGS if k not in keep for a in ("--skip", k)]
    out, runs = tmp_path / "ladder.json", tmp_path / "quality"
    config = ["--config", str(RECIPE), *demo_data, *TINY, "train.quality_items=1"]
    timing = ["--steps", "2", "--warmup", "1", "--min-seconds", "0", "--repeat", "2", *skips]
    args = ["--ablate", *timing, "--quality-audio", "0.7", "--quality-out", str(runs)]
    assert main(["bench", *config, *args, "--json", str(out), "--markdown", str(tmp_path / "ladder.md")]) == 0
    report = json.loads(out.read_text())
    cells = {r["key"]: r["quality"] for r in report["runs"]}
    assert report["quality"]["metric"] == "mcd" and len(report["quality"]["runs"]) == 4
    assert cells["baseline"]["status"] == "not trained"
    for key in ("engine", "precision"):
        assert cells[key]["status"] == "trained" and cells[key]["seeds"] == 2 and cells[key]["median"] > 0
        for seed in (1234, 1235):
            accel = json.loads((runs / key / f"seed_{seed}" / "accel.json").read_text())
            assert accel["accelerations"]["precision"]["name"] == ("bf16" if key == "precision" else "fp32")
    assert cells["engine"]["verdict"] == "reference" and cells["precision"]["verdict"] != "reference"
    assert "| quality: mcd after 0.7 s audio (lower is better) |" in (tmp_path / "ladder.md").read_text()
    printed = capsys.readouterr().out  # a line per training run as it ends (the files rewritten with it)
    assert "speechtrain, all off: mcd " in printed and "(1/2 seeds) reference" in printed


def test_the_quality_column_is_refused_before_the_passes_where_it_cannot_be_trained(tmp_path, capsys) -> None:
    from speechtrain.cli.main import main
    from speechtrain.recipes.bench import run_bench
    from speechtrain.recipes.quality_bench import LadderQualityPlan

    cfg = load_config(RECIPE, ["train.device=cpu"])
    plan = LadderQualityPlan(6.0, out_dir=tmp_path / "q")
    with pytest.raises(UserError, match="leave out --fake-data"):
        run_bench(cfg, ablate=True, fake_data=10, quality=plan)
    with pytest.raises(UserError, match="add --ablate"):
        run_bench(cfg, quality=plan)
    with pytest.raises(UserError, match="not a quality metric"):
        run_bench(cfg, ablate=True, quality=LadderQualityPlan(6.0, metric="loss", out_dir=tmp_path / "q"))
    (tmp_path / "q").mkdir()
    (tmp_path / "q" / "engine").mkdir()
    with pytest.raises(UserError, match="holds an earlier report's runs"):
        run_bench(cfg, ablate=True, quality=plan)
    assert main(["bench", "--config", str(RECIPE), "--quality-audio", "6"]) != 0  # the flag alone: add --ablate
    assert "add --ablate" in capsys.readouterr().err
