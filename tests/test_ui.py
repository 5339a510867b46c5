"""The web UI's pieces without a server: overrides, uploads, the symbol report, job and run status
read back from files (what a reloaded page sees), and the page's HTTP API names."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from speechtrain.errors import DataError, UserError
from speechtrain.ui import backend, jobs, runs


def test_overrides_from_the_page() -> None:
    from speechtrain.ui.app import switch_overrides

    assert backend.parse_overrides("train.max_steps=5  # short\n accel.sdpa=true data.n_mels=64") == [
        "train.max_steps=5",
        "accel.sdpa=true",
        "data.n_mels=64",
    ]
    with pytest.raises(UserError, match="'max_steps' is not key=value"):
        backend.parse_overrides("max_steps")
    table = {
        "headers": ["setting", "recommended", "recipe", "use", "why"],
        "data": [
            ["accel.precision", "bf16", "fp32", "bf16", "r"],  # recommendation differs: passed
            ["accel.sdpa", "true", "true", "true", "r"],  # same as the recipe: not passed
            ["accel.tf32", "true", "auto", "false", "r"],  # overridden by hand
            ["note.gpu", "x", "", "y", "advice, not a key"],
        ],
    }
    assert switch_overrides(table) == ["accel.precision=bf16", "accel.tf32=false"]


def test_data_overrides_follow_the_recipes_demo_layout(tmp_path: Path) -> None:
    (tmp_path / "classes").mkdir()
    assert backend.data_overrides("gpt_tts_tiny", str(tmp_path)) == [f"data.manifest={tmp_path}"]
    # classifier recipes name data/demo/classes: the same sub-folder of the chosen data is used
    assert backend.data_overrides("classifier_cnn_lstm_tiny", str(tmp_path), "folder") == [
        f"data.manifest={tmp_path / 'classes'}",
        "data.format=folder",
    ]
    with pytest.raises(UserError, match="recipe 'no_such_recipe' not found"):
        backend.data_overrides("no_such_recipe", str(tmp_path))


def test_zip_upload_is_unpacked_safely(tmp_path: Path) -> None:
    good = tmp_path / "mydata.zip"
    with zipfile.ZipFile(good, "w") as zf:
        zf.writestr("mydata/metadata.csv", "a|hello|hello\n")
        zf.writestr("mydata/wavs/a.wav", b"")
    folder = backend.extract_zip(good, tmp_path / "uploads")
    assert folder == tmp_path / "uploads" / "mydata" / "mydata"
    assert backend.detect_format(folder) == "ljspeech"

    evil = tmp_path / "evil.zip"
    with zipfile.ZipFile(evil, "w") as zf:
        zf.writestr("../../outside.txt", "x")
    with pytest.raises(DataError, match="outside"):
        backend.extract_zip(evil, tmp_path / "uploads")
    assert not (tmp_path / "outside.txt").exists()
    not_zip = tmp_path / "data.zip"
    not_zip.write_text("plain text")
    with pytest.raises(DataError, match="not a zip file"):
        backend.extract_zip(not_zip, tmp_path / "uploads")


def test_symbol_inventory_lists_what_the_front_end_cannot_map() -> None:
    # against the ascii set with accents stripped (symbols learned from the texts would know every one)
    rows, unknown = backend.symbol_inventory(["Ωmega café", "3 €"], "ascii", strip_accents=True)
    counts = {s: n for s, n, _ in rows}
    assert counts["e"] == 2 and counts[" "] == 2  # normalised as the tokenizer sees it (é -> e)
    assert "ω" in unknown and "€" in unknown and "e" not in unknown
    assert sum(counts.values()) == len("omega cafe") + len("3 €")  # every symbol counted once


def test_histogram_counts_every_value() -> None:
    values = [0.5, 1.0, 1.0, 2.0, 9.75]
    bars = backend.histogram(values, bins=4)
    assert len(bars) == 4 and sum(n for _, n in bars) == len(values)
    assert backend.histogram([]) == []


def _fake_run(root: Path, name: str, max_steps: int, steps_logged: int, ckpts: list[int]) -> Path:
    run = root / name
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text(f"model:\n  name: gpt_tts\ntrain:\n  max_steps: {max_steps}\n")
    rows = [{"split": "train", "step": s, "loss": 3.0 - 0.1 * s} for s in range(2, steps_logged + 1, 2)]
    rows.append(
        {"split": "train", "step": steps_logged, "loss": 1.0, "events": [{"event": "oom_recovered", "step": 3}]}
    )
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"split": "tr')  # torn line
    for s in ckpts:
        (run / "checkpoints" / f"step_{s:08d}.pt").write_bytes(b"")
    return run


def test_run_status_is_read_from_the_run_directory(tmp_path: Path) -> None:
    old = time.time() - 3600
    finished = _fake_run(tmp_path, "a", 8, 8, [4, 8])
    stopped = _fake_run(tmp_path, "b", 8, 4, [4])
    _fake_run(tmp_path, "c", 8, 2, [])  # written just now by a CLI run: taken as running
    for run in (finished, stopped):
        os.utime(run / "metrics.jsonl", (old, old))
        os.utime(run / "config.yaml", (old, old))
    failed = _fake_run(tmp_path / "nested", "d", 8, 2, [])
    os.utime(failed / "metrics.jsonl", (old, old))
    ui = runs.job_folder(failed)
    ui.mkdir()
    (ui / "process.json").write_text(json.dumps({"pid": 2**22 + 1, "command": "speechtrain train", "started": old}))
    (ui / "exit_code").write_text("2\n")
    (ui / "output.log").write_text("loading\nerror: data not found: /x (set data.manifest ...)\n")

    found = {r.name: r for r in runs.list_runs(tmp_path)}
    assert {k: v.status for k, v in found.items()} == {"a": "finished", "b": "stopped", "c": "running", "d": "failed"}
    assert found["b"].step == 4 and found["b"].max_steps == 8 and found["b"].last_loss == 1.0
    assert found["d"].error == "error: data not found: /x (set data.manifest ...)"
    rows = backend.read_metrics(finished)
    assert runs.events(rows) == [[3, "oom_recovered", ""]]
    assert runs.loss_series(rows)[-1] == (8, "loss", 1.0)


def test_a_failing_job_shows_the_clis_error_text(tmp_path: Path) -> None:
    missing = tmp_path / "missing_run"
    folder = tmp_path / "job"
    jobs.start(folder, ["train", "--resume", str(missing)])
    state = jobs.wait(folder, timeout=120)
    cli = subprocess.run(
        [sys.executable, "-m", "speechtrain", "train", "--resume", str(missing)], capture_output=True, text=True
    )
    assert state.status == "failed" and state.exit_code == cli.returncode == 2
    assert state.error == cli.stderr.strip().splitlines()[-1]
    assert "is not a speechtrain run directory" in state.error
    assert json.loads((folder / "process.json").read_text())["command"].startswith("speechtrain train --resume")


def test_the_page_builds_with_its_http_api(tmp_path: Path) -> None:
    from speechtrain.ui.app import Workspace, build_app, parse_trials

    app = build_app(Workspace(tmp_path / "runs", tmp_path / "data"))
    names = {f.api_name for f in app.fns.values()}
    wanted = {"make_demo", "upload_zip", "prepare", "probe", "estimate", "plan", "tune", "start_train"}
    wanted |= {"stop_train", "resume_train", "run_view", "bench", "synthesize", "vocode", "classify", "runs"}
    assert wanted <= names
    assert parse_trials(
        "x\n  bucket 3: 8 x 869 frames: fits, peak 0.3 GiB, 56.0 audio s/s\n  bucket 2: 16 x 5 frames: oom"
    ) == [
        [3, 8, 869, "fits", "peak 0.3 GiB, 56.0 audio s/s"],
        [2, 16, 5, "oom", ""],
    ]


def test_ui_command_without_gradio_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    from speechtrain.ui import require_gradio

    monkeypatch.setitem(sys.modules, "gradio", None)
    with pytest.raises(UserError, match=r"pip install 'speechtrain\[ui\]'"):
        require_gradio()
