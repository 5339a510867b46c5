"""A run directory owned by one run: the ``.lock`` file its writer holds while it trains.

The lock is an exclusive ``flock`` on ``RUN_DIR/.lock``, which also names the holder (pid, host, start
time) for the error a second writer gets. The kernel drops the lock when the holder exits, however it
exits (kill -9 included), so a lock file left behind is stale by construction and is simply taken
over. Where the file system has no ``flock``, the holder's pid is checked instead (on the same host).
:func:`lock_holder` tells others (the UI) whether a live process trains into a run directory.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import time
from contextlib import suppress
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
#: how long a writer retries a lock held at that instant (the brief probe of :func:`lock_holder`, say)
_RETRY_SECONDS = 0.5


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


def _write_fd(fd: int, data: bytes) -> int:
    return os.write(fd, data)


def _not_written(path: Path, exc: OSError) -> UserError:
    """The one-line error for a lock file that could not be written (a full disk, a read-only folder)."""
    from speechtrain.train.checkpoint import free_space

    full = exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
    why = f"the disk is full ({os.strerror(exc.errno or 0)})" if full else (exc.strerror or str(exc))
    return UserError(
        f"could not write {path}: {why}; {free_space(path.parent)} free there. Free some space (or point "
        f"train.output_dir at another disk) and run the same command again"
    )


def lock_holder(run_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    """Who holds ``run_dir``'s lock (pid, host, started), or None when no live process does. A lock taken by
    another process on a file system without ``flock`` counts while its pid is alive (same host)."""
    path = Path(run_dir) / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # shared: never in a writer's way for long
            except BlockingIOError:
                return _holder(path) or {"pid": None}
            except OSError as exc:
                if exc.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
                    raise
            else:
                return None
        info = _holder(path)
        pid = info.get("pid")
        alive = isinstance(pid, int) and info.get("host") == socket.gethostname() and _pid_alive(pid)
        return info if alive else None
    finally:
        os.close(fd)


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
        if self.run_dir.exists() and not self.run_dir.is_dir():
            raise UserError(
                f"train.output_dir {self.run_dir} is a file, not a folder: choose another train.output_dir (or move "
                "the file away)"
            )
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            fd = self._take()
        except OSError as exc:
            raise _not_written(self.path, exc) from None
        me = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time()}
        try:
            os.ftruncate(fd, 0)
            _write_fd(fd, (json.dumps(me) + "\n").encode())
        except OSError as exc:
            with suppress(OSError):
                self.path.unlink()  # while still locked: nobody else holds this inode
            os.close(fd)
            raise _not_written(self.path, exc) from None
        self._fd = fd
        return self

    def _take(self) -> int:
        """An open, locked file descriptor of the lock file (RunDirInUse when a live process holds it)."""
        deadline = time.monotonic() + _RETRY_SECONDS
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                if not self._flock(fd):
                    if time.monotonic() < deadline:  # held this instant (a probe): try again shortly
                        os.close(fd)
                        time.sleep(0.05)
                        continue
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
            return fd

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
