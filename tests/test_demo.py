"""`speechtrain demo` end to end on a reduced budget: every stage runs and the report folder is written."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

TOY_RECIPE = """\
model:
  name: toy
  channels: 16
data:
  manifest: data/demo
  n_mels: 40
  batch_size: 4
  num_buckets: 2
  eval_utterances: 2
tune:
  max_batch_size: 4
train:
  eval_every: 1000
  save_every: 1000
  log_every: 2
"""


@pytest.mark.slow
def test_demo_runs_end_to_end(tmp_path, capsys) -> None:
    from speechtrain.cli.main import main

    recipe = tmp_path / "toy.yaml"
    recipe.write_text(TOY_RECIPE)
    out, data = tmp_path / "reports" / "demo", tmp_path / "data" / "demo"
    skips = ["loader", "precision", "activation_checkpointing", "channels_last", "fused_optimizer", "compile"]
    # baseline, engine and all are enough here
    skips += ["bucketing", "naive_attention", "tuned_batch", "lightning", "cpu_allocator"]
    skips += ["fair_baseline", "memory_saving", "all_eager", "all_compile", "all_graphs"]
    args = ["demo", "--minutes", "0.4", "--utterances", "12", "--recipe", str(recipe), "--out", str(out)]
    args += ["--data", str(data), *[a for s in skips for a in ("--skip", s)]]
    assert main(args) == 0
    text = capsys.readouterr().out
    for stage in ("demo corpus", "prepare", "probe", "tune", "train", "ablation ladder", "report"):
        assert stage in text
    assert "Bottleneck:" in text
    estimate = text.index("estimate for this machine: about")  # measured here, before training (issue 40)
    assert text.index("[4/7] tune") < estimate < text.index("[5/7] train")
    assert (data / "metadata.csv").is_file()
    rep = json.loads((out / "bench.json").read_text())
    keys = [r["key"] for r in rep["runs"]]
    assert keys == ["baseline", "engine", "all"]
    assert (out / "bench.md").read_text().startswith("# speechtrain demo")
    assert (out / "bench.png").stat().st_size > 0
    assert (out / "run" / "config.yaml").is_file()
    assert list((out / "run" / "checkpoints").glob("*.pt"))


def test_the_demo_on_a_cpu_leaves_every_compile_rung_out() -> None:
    """The ladder's "all + torch.compile" row (issue 36) ran in the CPU demo, whose default left out "compile" only:
    minutes of inductor's C++ build on a 2-core machine."""
    from speechtrain.bench.ablate import LEADING_RUNGS, TRAILING_RUNGS
    from speechtrain.cli.cmd_demo import CPU_SKIPS

    compiling = {r for r in (*LEADING_RUNGS, *TRAILING_RUNGS) if "compile" in r}
    assert compiling <= set(CPU_SKIPS)


def test_demo_rejects_a_bad_budget(tmp_path) -> None:
    from speechtrain.cli.main import main

    assert main(["demo", "--minutes", "0", "--out", str(tmp_path / "o"), "--data", str(tmp_path / "d")]) == 2
    assert (
        main(["demo", "--recipe", "no_such_recipe", "--out", str(tmp_path / "o"), "--data", str(tmp_path / "d")]) == 2
    )


def test_the_demo_runs_the_passes_its_time_holds() -> None:
    """13 measured rows in 208 s: 2 passes of ~8 s measurements, not bench.repeat's 3 (which took 300 s)."""
    from speechtrain.cli.demo_pace import passes_that_fit

    assert passes_that_fit(13, 208.0, 3) == 2
    assert passes_that_fit(13, 1000.0, 3) == 3
    assert passes_that_fit(13, 30.0, 3) == 1


def test_the_demo_estimates_its_length_from_what_it_measured() -> None:
    """Issue 40: `--help` said ~4 min and the demo took 12 on a loaded machine. The estimate adds the stages
    measured so far, the bounded training, and the ladder: its share of the budget, but no less than its rows
    times what one row costs here (a fresh process's start-up, measured from this process's own imports)."""
    from speechtrain.cli.demo_pace import demo_estimate

    assert demo_estimate(so_far=100, train=48, ladder=60, rows=9, row_floor=20, reserve=14) == 100 + 48 + 180 + 14
    assert demo_estimate(so_far=30, train=48, ladder=150, rows=9, row_floor=8, reserve=14) == 30 + 48 + 150 + 14


def test_a_ladder_that_overruns_its_time_says_so_and_why() -> None:
    """The ladder announced 63 s left and ran 7 minutes without a word (issue 50): past its time (beyond a tenth and
    a few seconds) it says how far, and what the measurements cost beyond their timed windows."""
    from speechtrain.cli.demo_pace import overrun_note

    assert overrun_note(took=66.0, announced=63.0, costs=[5.0], measurements=9) is None
    said = overrun_note(took=420.0, announced=63.0, costs=[30.0, 40.0], measurements=9)
    assert said is not None and "420s, 357s past the 63s it announced" in said and "35s each" in said
    assert "315s in all" in said and "--minutes" in said
    assert "not measured" in (overrun_note(took=420.0, announced=63.0, costs=[], measurements=9) or "")


class FakeClock:
    """A clock the test moves by hand (no real time is read)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _estimator(plan, clock):  # noqa: ANN001, ANN202
    from speechtrain.cli.demo_pace import Estimator, Revisions

    said: list[str] = []
    return Estimator(plan, Revisions(), clock, say=said.append), said


def test_the_estimate_does_not_take_the_demos_elapsed_time_for_a_process_start(monkeypatch) -> None:  # noqa: ANN001
    """Issue 50: "about 62 min in all", then 594 s. Each ladder row was priced at the process's age read after the
    tuner (the demo's own elapsed time, ~280 s on a loaded machine) instead of a fresh process's start-up; the start-up
    is what the imports a row pays took when the demo started, and the plan takes it as given."""
    from speechtrain.accel.hardware import probe_hardware
    from speechtrain.cli import cmd_demo
    from speechtrain.config import load_config
    from speechtrain.recipes.common import find_recipe

    args = SimpleNamespace(minutes=4.0, skip=None)
    info = probe_hardware(device="cpu")
    cfg = load_config(find_recipe("gpt_tts_tiny"), [])
    budget = cmd_demo._budget(args)
    assert cmd_demo.startup_seconds() is None  # torch was imported already: nothing to time
    plan = cmd_demo._plan(budget, cfg, info, None, args, 1.5)
    assert plan.rows >= 9
    assert plan.floor == cmd_demo.MEASUREMENT_SECONDS  # 1.5 s start-up + 3 s is under the 8 s floor
    total, why = cmd_demo._first_estimate(plan, 280.0, budget["train"], 1.5)
    assert total < 10 * 60  # 280 s measured + 48 s training + the ladder + the report; it said 62 minutes
    assert "a fresh process's imports take 2s here" in why


def test_the_estimate_is_revised_from_the_training_steps_measured(tmp_path, monkeypatch) -> None:  # noqa: ANN001
    """The first estimate takes training's whole time bound; once a few steps after the first are measured, it
    takes the rate times the steps left (here a short run that ends long before its bound, on a machine where the
    ladder's rows cost more than the budget leaves them), said in one line, and not again while it holds. The steps
    come from the run's progress.json, as the trainer writes it."""
    from speechtrain.cli.demo_pace import DemoPlan, TrainPace, TrainWatch
    from speechtrain.train import metrics

    clock = FakeClock()
    plan = DemoPlan(total_budget=240.0, reserve=14.0, rows=13, floor=8.0)
    estimator, said = _estimator(plan, clock)
    clock.now = 100.0
    first = estimator.revisions.offer(plan.total(100.0, 90.0), "first")
    assert first is not None and first.startswith("estimate for this machine: about 5 min (308s) in all")

    wall = FakeClock()
    monkeypatch.setattr(metrics.time, "time", wall)  # the records' times
    pace = TrainPace(bound=90.0, started=0.0)
    watch = TrainWatch(tmp_path, lambda record: estimator.training(pace, record))
    steps = metrics.StepFile(tmp_path, max_steps=10)
    for step, at in [(0, 1000.0), (1, 1010.0), (2, 1012.0), (3, 1014.0)]:  # step 1 pays the warm-up
        wall.now, clock.now = at, 100.0 + at - 1000.0
        steps.write(step)
        watch.poll()
        watch.poll()  # the same record twice: one observation
    assert said == []  # two steps after the first: not yet a rate
    wall.now, clock.now = 1016.0, 116.0
    steps.write(4)
    watch.poll()
    # 2 s per step, 6 steps left: 12 s of training instead of its 90 s bound; the ladder's 13 rows x 8 s
    assert said == [
        "revised estimate: about 4 min (246s) in all (training: 2.00s per step over 3 steps, 12s of it left)"
    ]
    wall.now, clock.now = 1018.0, 118.0
    steps.write(5)
    watch.poll()
    assert len(said) == 1  # it held: no new line
    steps.close()


def test_training_bounded_by_its_time_is_estimated_at_what_is_left_of_the_bound() -> None:
    from speechtrain.cli.demo_pace import TrainPace

    pace = TrainPace(bound=90.0, started=0.0)
    assert pace.observe(0, 10_000, 50.0) is None and pace.observe(1, 10_000, 60.0) is None
    assert pace.observe(3, 10_000, 62.0) is None
    # 1 s per step would take 9996 s: the bound stops it, after the step under way when it passes
    assert pace.observe(4, 10_000, 63.0) == 90.0 - 13.0 + 1.0


def test_the_ladder_revises_the_estimate_and_names_a_rung_that_overruns_its_share() -> None:
    """The ladder announced 63 s and ran 7 minutes (issue 50). After each measurement the estimate is revised from
    what the measurements cost here, and a rung that took more than its share says so in one line, with why: its
    start-up beyond the timed window, the machine's load (os.getloadavg) when it is past the cores, a compile."""
    from speechtrain.cli.demo_pace import DemoPlan, Pacer

    clock, load = FakeClock(), FakeClock()
    rows = [SimpleNamespace(skip_reason=None) for _ in range(4)]
    plan = DemoPlan(total_budget=240.0, reserve=14.0, rows=4, floor=8.0)
    estimator, said = _estimator(plan, clock)
    clock.now = 160.0
    estimator.revisions.offer(160.0 + 60.0 + 14.0, "first")
    pacer = Pacer(rows, 60.0, repeat=1, clock=clock, load=load, cores=2)

    assert pacer.row_started("baseline") is None
    assert pacer.limit(0) == 10.0  # 60 s for 4 measurements: 15 s each, 5 s of it the start-up
    clock.now, load.now = 172.0, 1.2
    assert pacer.row_started("speechtrain, all off") is None  # 12 s of its 15 s share
    estimator.ladder(pacer)
    assert said == []  # on time: the estimate holds
    window = pacer.limit(1)
    assert window == 48.0 / 3 - 2.0
    clock.now, load.now = 222.0, 9.3
    note = pacer.row_started("all + torch.compile")
    assert note == (
        "ladder: 'speechtrain, all off' took 50s, 34s past its 16s share: the machine is loaded (1-minute load "
        "average 9.3 on 2 cores); its process, the model and the data took 36s beyond its 14s timed window"
    )
    estimator.ladder(pacer)
    # 2 measurements to go at (2 + 36) / 2 = 19 s of start-up each, and at least 1 s of window
    assert said == [
        "revised estimate: about 5 min (276s) in all (ladder: 2 of 4 measurements done, each 19s "
        "beyond its timed window (a fresh process, the model and the data))"
    ]
    pacer.limit(2)
    clock.now, load.now = 300.0, 0.5
    compiled = pacer.row_started("all")
    assert compiled is not None and "'all + torch.compile' took 78s" in compiled
    assert "torch.compile builds its kernels before the timed window" in compiled and "loaded" not in compiled


def test_the_demo_prints_what_it_prepared_once(tmp_path, capsys, caplog) -> None:  # noqa: ANN001
    """The first-hour timing (issue 50) saw the prepare stage's summary twice: the data recipe logs it, and the
    demo printed it again."""
    import logging

    from speechtrain.cli import cmd_demo
    from speechtrain.data.demo import make_demo_corpus

    data = tmp_path / "demo"
    make_demo_corpus(data, utterances=8, seed=0, labelled=True)
    args = SimpleNamespace(recipe="gpt_tts_tiny", overrides=["data.eval_utterances=2"])
    cfg = cmd_demo._demo_config(args, data, tmp_path / "out")
    with caplog.at_level(logging.INFO):
        cmd_demo._prepare(cfg)
    said = capsys.readouterr().out + capsys.readouterr().err + caplog.text
    assert said.count("kept      8 of 8 listed utterances") == 1, said
    cmd_demo._prepare(cfg)
    assert "feature cache is up to date" in capsys.readouterr().out


def test_the_demo_times_a_fresh_process_imports_before_anything_imports_torch(tmp_path) -> None:  # noqa: ANN001
    """The fresh-clone timing (issue 50) printed "start-up not measured": the recipe look-up had imported torch
    before the demo timed it. In a fresh interpreter, the demo's timing comes before any import of torch."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    code = (
        "import sys\n"
        "from speechtrain.cli import cmd_demo\n"
        "def seen():\n"
        "    print('torch imported before:', 'torch' in sys.modules)\n"
        "    raise SystemExit(0)\n"
        "cmd_demo.startup_seconds = seen\n"
        "from speechtrain.cli.main import main\n"
        f"main(['demo', '--out', {str(tmp_path / 'o')!r}, '--data', {str(tmp_path / 'd')!r}])\n"
    )
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert "torch imported before: False" in done.stdout, done.stdout + done.stderr
