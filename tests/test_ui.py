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


def _zip(path: Path, files: dict[str, str | bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return path


def test_a_rejected_upload_leaves_nothing_on_disk(tmp_path: Path) -> None:
    """An upload holding code is refused before anything is written; one whose layout is not found is removed
    once unpacked; a good one is kept, each in its own folder."""
    uploads = tmp_path / "uploads"
    dataset = {"mydata/metadata.csv": "a|hello|hello\n", "mydata/wavs/a.wav": b""}
    code = _zip(tmp_path / "mydata.zip", {**dataset, "mydata/evil.py": "import os\n"})
    with pytest.raises(DataError, match=r"1 file\(s\) of code \(mydata/evil.py\)"):
        backend.unpack_upload(code, uploads)
    assert not list(uploads.rglob("*"))
    with pytest.raises(UserError):
        backend.unpack_upload(_zip(tmp_path / "notes.zip", {"notes/readme.txt": "no dataset here"}), uploads)
    assert not list(uploads.rglob("*"))
    good = _zip(tmp_path / "good.zip", dataset)
    first, second = backend.unpack_upload(good, uploads), backend.unpack_upload(good, uploads)
    assert first == (uploads / "good" / "mydata", "ljspeech") and second[0] == uploads / "good-2" / "mydata"


def test_the_ui_builds_no_model_it_was_not_told_to(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``model.name=package.module:factory`` from the page (overrides, a recipe, a run's config) imports code in the
    server's process or its jobs: refused unless `speechtrain ui --allow-model` named it; the uploads folder is
    one no import name reaches; pickled checkpoints are never loaded from the page."""
    monkeypatch.chdir(tmp_path)  # the working directory is on the import path of `python -m speechtrain ui`
    evil = tmp_path / "data" / "uploads" / "x"  # where uploads were unpacked before
    evil.mkdir(parents=True)
    marker = tmp_path / "imported"
    (evil / "evil.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\ndef build_task(model, data): ...\n")
    from speechtrain.ui.page import Workspace

    ws = Workspace(tmp_path / "runs", tmp_path / "data")
    with pytest.raises(UserError, match=r"speechtrain ui --allow-model data.uploads.x.evil:build_task"):
        ws.load_config("gpt_tts_tiny", ["model.name=data.uploads.x.evil:build_task"])
    with pytest.raises(UserError, match="init_trust_pickle=true: loading pickled objects"):
        ws.load_config("gpt_tts_tiny", ["train.init_trust_pickle=true"])
    run = tmp_path / "runs" / "r"
    run.mkdir()
    (run / "config.yaml").write_text("model:\n  name: data.uploads.x.evil:build_task\n")
    with pytest.raises(UserError, match="--allow-model"):
        ws.load_run_config(run)
    assert not marker.exists() and "data.uploads.x.evil" not in sys.modules
    relative = ws.uploads.relative_to(tmp_path).parts
    assert not all(part.isidentifier() for part in relative), relative  # no dotted import name reaches it

    own = "examples.own_model:build_task"
    root = Path(__file__).resolve().parents[1]
    examples = [root / "examples"]  # the operator names the folder of that recipe (speechtrain ui --recipes)
    allowed = Workspace(tmp_path / "runs", tmp_path / "data", allow_models=[own], recipe_folders=examples)
    assert allowed.load_config(str(root / "examples" / "own_model.yaml"), []).model.name == own
    with pytest.raises(UserError, match="--allow-model"):
        Workspace(tmp_path / "runs", tmp_path / "data", recipe_folders=examples).load_config(
            str(root / "examples" / "own_model.yaml"), []
        )


def test_the_page_names_only_the_runs_it_lists(tmp_path: Path) -> None:
    """A run is picked by the name the page lists (under --runs, or under --also: the demo's reports/demo/run);
    a path elsewhere (``../``, absolute) is refused."""
    from speechtrain.ui.page import Workspace

    ws = Workspace(tmp_path / "runs", tmp_path / "data", also=[tmp_path / "reports"])
    mine = _fake_run(tmp_path / "runs", "a", 8, 8, [8])
    demo = _fake_run(tmp_path / "reports" / "demo", "run", 8, 8, [8])
    outside = _fake_run(tmp_path / "elsewhere", "b", 8, 8, [8])
    assert ws.resolve_run("a") == mine.resolve() and ws.resolve_run(str(demo)) == demo.resolve()
    assert {ws.run_name(p) for p in ws.run_paths()} == {"a", str(demo.resolve())}
    for bad in ("../elsewhere/b", str(outside), "../../etc"):
        with pytest.raises(UserError, match="no run of that name"):
            ws.resolve_run(bad)


def test_the_ui_needs_a_password_off_this_machine(tmp_path: Path) -> None:
    from speechtrain.ui.app import launch

    with pytest.raises(UserError, match="serving on 0.0.0.0 reaches other machines: it needs a password"):
        app, _ = launch(host="0.0.0.0", runs_root=tmp_path / "runs", data_root=tmp_path / "data", block=False)
        app.close()


def test_symbol_inventory_lists_what_the_front_end_cannot_map() -> None:
    # against the ascii set with accents stripped (symbols learned from the texts would know every one)
    rows, unknown = backend.symbol_inventory(["Ωmega café", "3 €"], "ascii", strip_accents=True)
    counts = {s: n for s, n, _ in rows}
    assert counts["e"] == 2 and counts[" "] == 2  # normalised as the tokenizer sees it (é -> e)
    assert "ω" in unknown and "€" in unknown and "e" not in unknown
    assert sum(counts.values()) == len("omega cafe") + len("3 €")  # every symbol counted once


def test_the_durations_histogram_has_numeric_bins_in_order_and_keeps_bins_of_one() -> None:
    """The page's histogram bins on a numeric axis: bins as numbers, ascending (10.5 s after 2.3 s, not before it
    as the labels '10.50' < '2.30' sorted), every value in one bin, bins of one utterance kept."""
    values = [0.6, 0.7, 0.7, 1.3, 2.2, 2.2, 2.3, 10.5, 11.0]
    width, bars = backend.histogram(values)
    centres = [c for c, _ in bars]
    assert all(isinstance(c, float) for c in centres) and centres == sorted(centres)
    assert sum(n for _, n in bars) == len(values) and 1 in [n for _, n in bars]
    for v in values:
        assert sum(c - width / 2 <= v < c + width / 2 for c in centres) == 1, v
    assert width in (0.5, 1.0) and backend.histogram([]) == (1.0, [])


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
    assert "missing_run does not exist" in state.error
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


@pytest.mark.slow
def test_the_ui_command_says_where_it_serves_and_a_busy_port_in_one_line(tmp_path: Path) -> None:
    """`speechtrain ui` prints its URL (it printed nothing of its own), makes and prints a password off this
    machine, lists the demo's run (reports/demo/run) by default; a port in use is one line, not a traceback."""
    import queue
    import re
    import socket
    import threading

    from gradio_client import Client

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    _fake_run(tmp_path / "reports" / "demo", "run", 4, 4, [4])
    env = {k: v for k, v in os.environ.items() if k != "SPEECHTRAIN_UI_PASSWORD"}
    ui = [sys.executable, "-m", "speechtrain", "ui"]
    proc = subprocess.Popen(
        [*ui, "--host", "0.0.0.0", "--port", str(port)], cwd=tmp_path, env=env, stdout=subprocess.PIPE, text=True
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout or []], daemon=True).start()
    try:
        said: list[str] = []
        while not any(line.startswith("login:") for line in said):
            said.append(lines.get(timeout=180).rstrip("\n"))
        assert said[0].startswith(f"speechtrain ui serving on http://localhost:{port}/ (from other machines: http://")
        made = r"login: user speechtrain, password (\S+) \(made for this session, printed once\)"
        found = re.fullmatch(made, said[-1])
        assert found, said
        url = f"http://127.0.0.1:{port}/"
        with pytest.raises(Exception):  # noqa: B017 - gradio_client's own error types vary by version
            Client(url, verbose=False)
        listed = Client(url, auth=("speechtrain", found.group(1)), verbose=False).predict(api_name="/runs")
        assert "reports/demo/run" in [row[0] for row in listed["data"]], listed

        busy = subprocess.run([*ui, "--port", str(port)], cwd=tmp_path, env=env, capture_output=True, text=True)
        errors = [line for line in busy.stderr.splitlines() if line.startswith("error:")]
        assert busy.returncode == 2 and "Traceback" not in busy.stderr, busy.stderr
        assert errors == [f"error: port {port} on 127.0.0.1 is in use: stop what listens there, or choose another "
                          "with --port N"], busy.stderr  # fmt: skip
    finally:
        proc.terminate()
        proc.wait(timeout=60)
