"""A run directory owned by one run: the ``.lock`` file its writer holds while it trains.

The lock is an exclusive ``flock`` on ``RUN_DIR/.lock``, which also names the holder (pid, host, start
time) for the error a second writer gets. The kernel drops the lock when the holder exits, however it
exits (kill -9 included), so a lock file left behind is stale by construction and is simply taken
over. Where the file system has no ``flock``, the holder's pid is checked instead (on the same host).
"""

from __future__ import annotations

import errno
import json
import os
import socket
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from speechtrain.errors import UserError
from speechtrain.logs import get_logger

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None  # type: ignore[assignment]

log = get_logger(__name__)

LOCK_NAME = ".lock"


class RunDirInUse(UserError):
    """Another live process is writing this run directory."""


def _holder(path: Path) -> dict[str, Any]:
    try:
        info = json.loads(path.read_text())
        return info if isinstance(info, dict) else {}
    except (OSError, ValueError):
        return {}


def _describe(info: dict[str, Any]) -> str:
    if not info:
        return "another process"
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(info.get("started", 0)))
    return f"pid {info.get('pid', '?')} on host {info.get('host', '?')} (since {since})"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class RunLock:
    """``with RunLock(run_dir):`` hold ``run_dir/.lock`` (creating the folder); :class:`RunDirInUse`
    when a live process holds it."""

    def __init__(self, run_dir: str | os.PathLike[str]) -> None:
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_NAME
        self._fd: int | None = None

    def _in_use(self, info: dict[str, Any]) -> RunDirInUse:
        return RunDirInUse(
            f"{self.run_dir} is in use by {_describe(info)}, which is training into it. Two runs writing one "
            f"directory mix their checkpoints and metrics: wait for it to finish (or stop it: SIGTERM saves a "
            f"checkpoint), then `speechtrain train --resume {self.run_dir}`; or choose another train.output_dir"
        )

    def acquire(self) -> RunLock:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        me = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time()}
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                if not self._flock(fd):
                    raise self._in_use(_holder(self.path))
                if os.fstat(fd).st_ino != os.stat(self.path).st_ino:
                    os.close(fd)  # the holder removed the file between our open and our lock: try again
                    continue
            except FileNotFoundError:
                os.close(fd)
                continue
            except BaseException:
                os.close(fd)
                raise
            break
        os.ftruncate(fd, 0)
        os.write(fd, (json.dumps(me) + "\n").encode())
        self._fd = fd
        return self

    def _flock(self, fd: int) -> bool:
        """True if this process now holds the lock."""
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                return False
            except OSError as exc:
                if exc.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
                    raise
        # no flock on this file system: trust the recorded holder while it is alive on this host
        info = _holder(self.path)
        pid = info.get("pid")
        if isinstance(pid, int) and pid != os.getpid() and info.get("host") == socket.gethostname():
            return not _pid_alive(pid)
        return True

    def release(self) -> None:
        if self._fd is None:
            return
        try:
            self.path.unlink(missing_ok=True)  # while still locked: nobody else can hold this inode now
        finally:
            os.close(self._fd)  # drops the flock
            self._fd = None

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()
