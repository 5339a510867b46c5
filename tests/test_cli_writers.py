"""Every file the CLI writes for the user (``--json`` of eval, plan, prepare, estimate, rtf, tune; bench's reports;
tune's ``--out``) is written atomically: onto a folder, under a file, onto a run's own file (its config.yaml, a
checkpoint) or onto a full disk it is one ``error:`` line naming the path, and nothing is written or changed."""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from speechtrain.cli.main import main
from speechtrain.errors import UserError
from speechtrain.paths import write_atomic
from tests.doors import RECIPES

ESTIMATE = ["estimate", "--config", str(RECIPES / "gpt_tts_tiny.yaml"), "--quiet"]


def _one_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_json_onto_a_folder_or_under_a_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "reports"
    folder.mkdir()
    assert main([*ESTIMATE, "--json", str(folder)]) != 0
    assert _one_error(capsys) == f"error: --json {folder}: is a folder; give a file name (e.g. {folder}/report.json)"
    assert not list(folder.iterdir())
    afile = tmp_path / "notes.txt"
    afile.write_text("mine\n")
    assert main([*ESTIMATE, "--json", str(afile / "est.json")]) != 0
    assert _one_error(capsys) == f"error: --json {afile}/est.json: {afile} is a file, not a folder; choose another path"
    assert afile.read_text() == "mine\n"
    out = tmp_path / "new" / "est.json"
    assert main([*ESTIMATE, "--json", str(out)]) == 0
    assert out.read_text().startswith("{") and oct(out.stat().st_mode & 0o777) == oct(0o666 & ~_umask())
    assert [p.name for p in out.parent.iterdir()] == ["est.json"]  # no temporary file left


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_json_onto_a_runs_own_file_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--json RUN/config.yaml`` overwrote the run's config (every later command on the run failed)."""
    from speechtrain.config import load_config, save_config

    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    save_config(load_config(str(RECIPES / "gpt_tts_tiny.yaml"), []), run / "config.yaml")
    before = (run / "config.yaml").read_bytes()
    for own in (run / "config.yaml", run / "checkpoints" / "step_00000004.pt", run / "metrics.jsonl"):
        assert main([*ESTIMATE, "--json", str(own)]) != 0
        line = _one_error(capsys)
        assert line.startswith(f"error: --json {own}: is a file of the run {run}"), line
    assert (run / "config.yaml").read_bytes() == before
    assert not (run / "metrics.jsonl").exists() and not list((run / "checkpoints").iterdir())
    assert main([*ESTIMATE, "--json", str(run / "estimate.json")]) == 0  # beside the run's files: the user's own


def test_a_full_disk_leaves_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ENOSPC while writing (fault injection): one UserError naming the path, the old file whole, no temp file."""
    out = tmp_path / "est.json"
    out.write_text('{"old": true}\n')
    real_fdopen = os.fdopen

    class Full:
        def __init__(self, fh: object) -> None:
            self.fh = fh

        def __enter__(self) -> Full:
            return self

        def __exit__(self, *exc: object) -> None:
            self.fh.close()  # type: ignore[attr-defined]

        def write(self, data: bytes) -> int:
            self.fh.write(data[:10])  # type: ignore[attr-defined]  # a part lands, then the disk is full
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fdopen", lambda fd, *a, **k: Full(real_fdopen(fd, *a, **k)))
    with pytest.raises(UserError, match=rf"--json {out}: not written \(the disk is full; .* free there\)"):
        write_atomic(out, "x" * 100_000, "--json")
    monkeypatch.undo()
    assert out.read_text() == '{"old": true}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["est.json"]


@pytest.fixture
def tiny_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 16 KiB tmpfs (needs root: skipped where mounting is not allowed)."""
    mount = tmp_path / "small"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(mount)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (not root)")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False)


def test_json_onto_a_full_tmpfs_is_one_line(tiny_tmpfs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tiny_tmpfs / "filler").write_bytes(b"\0" * 12 * 1024)  # what is left cannot hold the report
    target = tiny_tmpfs / "est.json"
    with pytest.raises(UserError, match=rf"{target}: not written \(the disk is full"):
        write_atomic(target, "x" * 8192, "--json")
    assert sorted(p.name for p in tiny_tmpfs.iterdir()) == ["filler"]
    assert main([*ESTIMATE, "--json", str(target)]) in (0, 2)  # the real report is small: fits, or one line
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert target.exists() != ("error:" in err)
    assert sorted(p.name for p in tiny_tmpfs.iterdir() if p.name.endswith(".tmp")) == []


def test_a_wav_is_written_whole_or_not_at_all(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """synthesize/vocode --out: the wav reads back; on a full disk the old file stays and no temp file is left."""
    import numpy as np
    import soundfile as sf

    from speechtrain.recipes.inference import Audio

    audio = Audio(np.sin(np.linspace(0, 100, 22050)).astype(np.float32) * 0.5, 22050, 0.1)
    out = audio.write(tmp_path / "a.wav")
    data, sr = sf.read(out)
    assert sr == 22050 and data.shape == (22050,)
    before = out.read_bytes()

    def full(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(UserError, match=rf"--out {out}: not written \(the disk is full"):
        Audio(np.zeros(100, dtype=np.float32), 22050, 0.1).write(out)
    monkeypatch.undo()
    assert out.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["a.wav"]


def test_each_json_writer_refuses_a_runs_config_before_its_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``eval RUN --json RUN/config.yaml`` (and plan, prepare, rtf): one line naming the path, before anything else
    is read (this run has no checkpoint: the eval itself would have failed on that instead)."""
    from speechtrain.config import load_config, save_config

    run = tmp_path / "run"
    run.mkdir()
    save_config(load_config(str(RECIPES / "gpt_tts_tiny.yaml"), []), run / "config.yaml")
    before = (run / "config.yaml").read_bytes()
    own = str(run / "config.yaml")
    for argv in (
        ["eval", str(run), "--json", own],
        ["rtf", str(run), "--json", own],
        ["prepare", str(tmp_path / "nowhere"), "--json", own],
        ["plan", str(tmp_path / "nowhere"), "--json", own],
    ):
        assert main(argv) != 0, argv
        assert _one_error(capsys).startswith(f"error: --json {own}: is a file of the run {run}"), argv
    assert (run / "config.yaml").read_bytes() == before
