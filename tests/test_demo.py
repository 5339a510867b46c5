"""`speechtrain demo` end to end on a reduced budget: every stage runs and the report folder is written."""

from __future__ import annotations

import json

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
    from speechtrain.cli.cmd_demo import passes_that_fit

    assert passes_that_fit(13, 208.0, 3) == 2
    assert passes_that_fit(13, 1000.0, 3) == 3
    assert passes_that_fit(13, 30.0, 3) == 1


def test_the_demo_estimates_its_length_from_what_it_measured() -> None:
    """Issue 40: `--help` said ~4 min and the demo took 12 on a loaded machine. The estimate adds the stages
    measured so far, the bounded training, and the ladder: its share of the budget, but no less than its rows
    times what one row costs here (a fresh process's start-up, measured from this process's own)."""
    from speechtrain.cli.cmd_demo import demo_estimate, process_age

    assert demo_estimate(so_far=100, train=48, ladder=60, rows=9, row_floor=20, reserve=14) == 100 + 48 + 180 + 14
    assert demo_estimate(so_far=30, train=48, ladder=150, rows=9, row_floor=8, reserve=14) == 30 + 48 + 150 + 14
    age = process_age()
    assert age is None or age > 0


def test_a_ladder_that_overruns_its_time_says_so_and_why() -> None:
    """The ladder announced 63 s left and ran 7 minutes without a word (issue 50): past its time (beyond a tenth and
    a few seconds) it says how far, and what the measurements cost beyond their timed windows."""
    from speechtrain.cli.cmd_demo import overrun_note

    assert overrun_note(took=66.0, announced=63.0, costs=[5.0], measurements=9) is None
    said = overrun_note(took=420.0, announced=63.0, costs=[30.0, 40.0], measurements=9)
    assert said is not None and "420s, 357s past the 63s it announced" in said and "35s each" in said
    assert "315s in all" in said and "--minutes" in said
    assert "not measured" in (overrun_note(took=420.0, announced=63.0, costs=[], measurements=9) or "")
