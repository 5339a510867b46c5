"""bench/gpu_programme.py's lease plan: its table on disk after every step, its budget, its long-utterance corpus
(issue 36). The plan itself is rehearsed with ``--smoke`` (a CPU run of minutes, not a unit test)."""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def programme():
    spec = importlib.util.spec_from_file_location("gpu_programme", ROOT / "bench" / "gpu_programme.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_programme"] = module
    spec.loader.exec_module(module)
    return module


def test_the_lease_plan_fits_its_budget_and_reaches_every_measurement(programme) -> None:
    sections = [s.section for s in programme.LEASE_PLAN]
    assert sections[:4] == ["env", "data", "tune", "lease_ladder"]
    assert {"tune_long", "rtf:vits", "pytest"} <= set(sections)
    rows = set(programme.LEASE_ROWS)
    assert {"baseline", "fair_baseline", "precision", "memory_saving", "all", "all_eager", "all_graphs"} <= rows
    from speechtrain.bench.ablate import RUNGS

    assert rows <= set(RUNGS)  # every row the plan keeps is a rung the bench knows


def test_programme_md_is_rewritten_after_each_step_and_steps_past_the_budget_are_listed(programme, tmp_path) -> None:
    prog = programme.Programme(tmp_path / "out", tmp_path / "data", True, 2, 1, 1.0)
    prog.copy_to = tmp_path / "copy"
    calls: list[str] = []

    def quick() -> None:
        calls.append("quick")
        prog.table("Quick", ["| a |", "|---|", "| 1 |"])

    def boom() -> None:
        raise RuntimeError("broken step")

    prog.quick, prog.boom = quick, boom
    plan = [programme.Step("quick", 5, 5), programme.Step("boom", 5, 5), programme.Step("never", 5, 5)]
    prog.never = lambda: calls.append("never")
    t0 = time.perf_counter()
    prog.hard_end = t0 + 3600
    assert programme.run_plan(prog, plan[:2], t0, None, True) == 0
    prog.hard_end = time.perf_counter()  # no time left: the third step would start past the budget
    programme.run_plan(prog, plan[2:], t0, None, True)
    text = (tmp_path / "out" / "programme.md").read_text()
    assert "| quick | done |" in text and "| boom | failed |" in text
    assert "| never | not reached (budget spent) |" in text and calls == ["quick"]
    assert "### Quick" in text and "`RuntimeError: broken step`" in text
    assert (tmp_path / "copy" / "programme.md").read_text() == text  # the lease's $OUT gets it too


def test_join_corpus_makes_long_distinct_utterances(programme, tmp_path) -> None:
    import soundfile as sf

    src = tmp_path / "src"
    (src / "wavs").mkdir(parents=True)
    rate = 8000
    lines = []
    for i in range(5):
        sf.write(src / "wavs" / f"u{i}.wav", np.full(rate, 0.1 * (i + 1), dtype=np.float32), rate)  # 1 s each
        lines.append(f"u{i}|text {i}|text {i}\n")
    (src / "metadata.csv").write_text("".join(lines))
    programme.join_corpus(src, tmp_path / "long", 4, 2.5, 3.5)
    rows = (tmp_path / "long" / "metadata.csv").read_text().splitlines()
    assert len(rows) == 4
    for k, row in enumerate(rows):
        uid, text, _ = row.split("|")
        audio, sr = sf.read(tmp_path / "long" / "wavs" / f"{uid}.wav")
        assert sr == rate and 2.5 <= len(audio) / sr <= 3.5  # three 1 s pieces and two 0.2 s gaps: 3.4 s
        assert text.startswith(f"text {3 * k % 5}")  # the k-th starts at utterance 3k: they differ
    # a piece that would pass the limit (the recipe's max_duration) is passed over, never cut into the item
    (src / "metadata.csv").write_text("u0|a|a\nbig|b|b\nu1|c|c\nu2|d|d\n")
    sf.write(src / "wavs" / "big.wav", np.zeros(4 * rate, dtype=np.float32), rate)
    programme.join_corpus(src, tmp_path / "long2", 1, 2.5, 3.5)
    row = (tmp_path / "long2" / "metadata.csv").read_text().splitlines()[0]
    assert row.split("|")[1] == "a c d"


def test_the_time_to_rows_run_the_bench_command_bounded(programme, tmp_path) -> None:
    """``time_to:R`` (issue 47): ``speechtrain bench --time-to`` with the row's target, its minutes, one seed, the
    curves and JSON into the programme's folder; its timeout covers the minutes; in the full plan."""
    assert {f"time_to:{r}" for r in programme.TIME_TO} <= set(programme.FULL_SECTIONS)
    prog = programme.Programme(tmp_path / "out", tmp_path / "data", False, 2, 1, 1.0)
    (tmp_path / "espeak_en_1000").mkdir()
    (tmp_path / "espeak_en_1000" / "metadata.csv").write_text("a|b\n")
    calls = []

    def sh(name, cmd, timeout, env=None, on_tick=None):
        calls.append((name, cmd, timeout))
        return 0, "| seed |\n| --- |\n| 1234 |\nreached 0/1 within 8 minutes\n", 1.0

    prog.sh = sh
    prog.time_to("vocoder_hifigan_v3")
    name, cmd, timeout = calls[-1]
    target, minutes = programme.TIME_TO["vocoder_hifigan_v3"]
    assert cmd[cmd.index("--time-to") + 1] == target and cmd[cmd.index("--time-minutes") + 1] == f"{minutes:g}"
    assert "recipes/vocoder_hifigan_v3.yaml" in cmd and timeout >= minutes * 60
    assert "reached 0/1" in (tmp_path / "out" / "programme.md").read_text()
    prog.time_to("vits")  # scored by the judge's CER (mcd_dtw <= 8 held for noise on espeak-ng speech)
    name, cmd, timeout = calls[-1]
    assert cmd[cmd.index("--time-to") + 1].startswith("cer<=") and "train.quality_asr=judge" in cmd
