"""Background processes running the ordinary CLI, findable again after a page reload or a UI restart.

A job is a folder: ``process.json`` (pid, the command as one would type it, start time),
``output.log`` (stdout and stderr) and ``exit_code`` (written by :mod:`speechtrain.cli.jobrunner` when the
command ends). For a training run the folder is ``RUN_DIR/ui/``, so the run directory stays an
ordinary one that ``speechtrain train --resume`` continues. Each job is its own process group:
Stop sends SIGTERM to it, on which the trainer saves a checkpoint and exits cleanly.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

# Popen objects of the jobs this UI process started (reaped here so they do not linger as zombies)
_CHILDREN: dict[int, subprocess.Popen] = {}


@dataclass
class JobState:
    """``running``, ``done`` (exit 0), ``failed`` (exit != 0; ``error`` is the CLI's message),
    ``gone`` (the process ended without an exit code, e.g. killed) or ``none`` (never started)."""

    status: str
    pid: int | None = None
    exit_code: int | None = None
    command: str = ""
    started: float | None = None
    error: str = ""


def start(
    folder: str | Path, argv: list[str], cwd: str | Path | None = None, env: dict[str, str] | None = None
) -> JobState:
    """Start ``speechtrain ARGV...`` in the background, its files in ``folder``; ``env``: more environment."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    state = status(folder)
    if state.status == "running":
        from speechtrain.errors import UserError

        raise UserError(f"{folder} already has a running process (pid {state.pid}); stop it first")
    for name in ("exit_code",):
        (folder / name).unlink(missing_ok=True)
    log = open(folder / "output.log", "ab")  # noqa: SIM115 - handed to the child
    log.write(f"\n$ speechtrain {shlex.join(argv)}\n".encode())
    log.flush()
    env = dict(os.environ, **(env or {}), PYTHONUNBUFFERED="1")
    cmd = [sys.executable, "-m", "speechtrain.cli.jobrunner", str(folder / "exit_code"), *argv]
    proc = subprocess.Popen(
        cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=cwd, env=env, start_new_session=True
    )
    log.close()
    _CHILDREN[proc.pid] = proc
    info = {"pid": proc.pid, "command": "speechtrain " + shlex.join(argv), "argv": argv, "started": time.time()}
    (folder / PROCESS_FILE).write_text(json.dumps(info, indent=2) + "\n")
    return status(folder)


def _alive(pid: int) -> bool:
    proc = _CHILDREN.get(pid)
    if proc is not None:
        return proc.poll() is None
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        try:
            os.kill(pid, 0)  # no /proc (macOS): signal 0 only checks that it exists
        except (ProcessLookupError, PermissionError):
            return False
        return True
    # a reused pid is not ours; a zombie has finished
    return b"speechtrain.cli.jobrunner" in cmdline and stat.rsplit(")", 1)[-1].split()[0] != "Z"


PROCESS_FILE = "process.json"


def is_job(folder: str | Path) -> bool:
    """A job folder: a job was started there."""
    return (Path(folder) / PROCESS_FILE).is_file()


def status(folder: str | Path) -> JobState:
    folder = Path(folder)
    path = folder / PROCESS_FILE
    if not path.is_file():
        return JobState("none")
    try:
        info = json.loads(path.read_text())
    except ValueError:
        return JobState("none")
    pid = int(info["pid"])
    state = JobState("running", pid, None, info.get("command", ""), info.get("started"))
    if _alive(pid):
        return state
    code_file = folder / "exit_code"
    if code_file.is_file():
        try:
            state.exit_code = int(code_file.read_text().strip() or 1)
        except ValueError:
            state.exit_code = 1
        state.status = "done" if state.exit_code == 0 else "failed"
    else:
        state.status = "gone"
    if state.status != "done":
        state.error = error_line(log_tail(folder, 60))
    return state


def stop(folder: str | Path, sig: int = signal.SIGTERM) -> JobState:
    """Ask the job to stop (SIGTERM to its process group: the trainer checkpoints and exits)."""
    state = status(folder)
    if state.status == "running" and state.pid:
        try:
            os.killpg(state.pid, sig)
        except ProcessLookupError:
            pass
    return state


def wait(folder: str | Path, timeout: float) -> JobState:
    """Wait until the job is no longer running (or ``timeout`` seconds)."""
    end = time.monotonic() + timeout
    state = status(folder)
    while state.status == "running" and time.monotonic() < end:
        time.sleep(0.2)
        state = status(folder)
    return state


def log_tail(folder: str | Path, lines: int = 40) -> str:
    path = Path(folder) / "output.log"
    if not path.is_file():
        return ""
    with open(path, "rb") as fh:
        fh.seek(0, os.SEEK_END)
        fh.seek(max(0, fh.tell() - 200 * lines))
        text = fh.read().decode(errors="replace")
    return "\n".join(terminal_lines(text)[-lines:])


def terminal_lines(text: str) -> list[str]:
    """The lines of a job's output as a terminal shows them: of a line a progress bar redrew (``\\r``), its last
    drawing only (split at every ``\\r``, each training step showed twice: before and after its losses)."""
    return [line.rstrip("\r").rsplit("\r", 1)[-1] for line in text.replace("\r\n", "\n").split("\n")]


def warnings(folder: str | Path) -> list[str]:
    """Every warning the job logged (:mod:`speechtrain.cli.jobrunner` writes them, one per line), in order, each
    starting ``warning:``; the same warning said twice is listed once."""
    from speechtrain.logs import WARNINGS_FILE

    path = Path(folder) / WARNINGS_FILE
    if not path.is_file():
        return []
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    said = [line if line.lower().startswith("warning") else f"warning: {line}" for line in lines if line.strip()]
    return list(dict.fromkeys(said))


def warnings_text(folder: str | Path) -> str:
    """The job's warnings as Markdown lines for a status line ('' when none)."""
    return "".join(f"\n\n**{w}**" for w in warnings(folder))


def error_line(log: str) -> str:
    """The CLI's ``error: ...`` message in a log (the same text the terminal shows), else ''."""
    found = [line for line in log.splitlines() if line.startswith("error: ")]
    if found:
        return found[-1]
    if "Traceback (most recent call last)" in log:
        return log.strip().splitlines()[-1]
    return ""
