"""``progress.json`` of a run holds exactly one record after every write: a longer file left before (a resume of an
older writer, another writer) and a tail added while the run writes are both cut, and the step is readable."""

from __future__ import annotations

import json
from pathlib import Path

from speechtrain.train.metrics import StepFile, read_progress
from speechtrain.train.rundir import RunDir


def _records(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_longer_file_before_is_readable_after_the_next_step(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "run").mkdir()
    run.progress.write_text(json.dumps({"step": 123456789, "max_steps": 999999999, "note": "x" * 200}) + "\n" * 3)
    steps = StepFile(run, max_steps=10)
    steps.write(3)
    assert read_progress(run) == 3
    assert [r["step"] for r in _records(run.progress)] == [3]
    with open(run.progress, "a") as other:  # another writer appends while the run goes on
        other.write("garbage that is not json\n" * 10)
    steps.write(4)
    steps.close()
    assert [r["step"] for r in _records(run.progress)] == [4]
    assert read_progress(run) == 4


def test_a_file_with_a_tail_from_an_older_writer_is_read_by_its_first_line(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "run").mkdir()
    run.progress.write_text('{"step": 7, "max_steps": 10, "time": 1.0}' + " " * 54 + "\n" + '0, "time": 2.0}\n')
    assert read_progress(run) == 7
