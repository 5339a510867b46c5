"""A run directory: :class:`RunDir` is the one place that knows its layout, :class:`RunLock` the lock its
writer holds while it trains.

::

    RUN_DIR/
      config.yaml          the resolved config (written once the run starts; what makes a folder a run)
      accel.json           what runs where (accelerations, optimizers, strategy)
      compile_error.log    the whole traceback of a torch.compile that failed (the run went on in eager)
      metrics.jsonl        one JSON row per log step and per evaluation
      checkpoints/         step_N.pt (a sharded run: + its shard folder step_N.dcp/), the newest K kept
      best.pt (best.dcp/)  the checkpoint of the best evaluation
      samples/step_N/      eval audio
      tensorboard/         TensorBoard events
      init_report.txt      train.init_from: every tensor imported
      ui/                  the web UI's job files of this run (its command, log, exit status)
      .lock                held by the process writing the run

Two rules live here and nowhere else: which checkpoint a resume continues (:meth:`RunDir.latest`: the newest
step checkpoint that loads) and which one inference, export and ``init_from`` read (:meth:`RunDir.load_weights`:
``best.pt`` when asked for and present, else the newest step checkpoint that loads). A RunDir resolves the
path it is given once (relative to the working directory at that moment), so every path it hands out is
absolute: a sharded checkpoint's folder, named beside its step file, is found whatever path named the run.

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

from speechtrain.errors import CheckpointError, UserError, free_space
from speechtrain.logs import get_logger
from speechtrain.train import checkpoint as ckpt

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


class RunDir:
    """The layout of one run directory (see the module doc); ``RunDir(path)`` resolves ``path`` once."""

    CONFIG = "config.yaml"
    ACCEL = "accel.json"
    COMPILE_LOG = "compile_error.log"
    METRICS = "metrics.jsonl"
    PROGRESS = "progress.json"
    CHECKPOINTS = "checkpoints"
    BEST = "best.pt"
    SAMPLES = "samples"
    TENSORBOARD = "tensorboard"
    INIT_REPORT = "init_report.txt"
    UI = "ui"
    #: the folders a run keeps inside itself (a listing of runs does not look for runs in them)
    OWN_FOLDERS = (CHECKPOINTS, SAMPLES, TENSORBOARD, UI)

    def __init__(self, path: str | os.PathLike[str] | RunDir) -> None:
        self.path = Path(os.path.abspath(os.path.expanduser(os.fspath(path))))

    def __fspath__(self) -> str:
        return str(self.path)

    def __str__(self) -> str:
        return str(self.path)

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RunDir) and other.path == self.path

    def __hash__(self) -> int:
        return hash(self.path)

    @property
    def name(self) -> str:
        return self.path.name

    # ------------------------------------------------------------------ files
    @property
    def config(self) -> Path:
        return self.path / self.CONFIG

    @property
    def accel(self) -> Path:
        return self.path / self.ACCEL

    @property
    def compile_log(self) -> Path:
        return self.path / self.COMPILE_LOG

    @property
    def metrics(self) -> Path:
        return self.path / self.METRICS

    @property
    def progress(self) -> Path:
        """The step the run has reached, rewritten after each step (:class:`speechtrain.train.metrics.StepFile`)."""
        return self.path / self.PROGRESS

    @property
    def checkpoints(self) -> Path:
        return self.path / self.CHECKPOINTS

    @property
    def best(self) -> Path:
        return self.path / self.BEST

    @property
    def tensorboard(self) -> Path:
        return self.path / self.TENSORBOARD

    @property
    def init_report(self) -> Path:
        return self.path / self.INIT_REPORT

    @property
    def ui(self) -> Path:
        return self.path / self.UI

    def samples(self, step: int | None = None) -> Path:
        """The eval audio folder (of ``step``)."""
        return self.path / self.SAMPLES if step is None else self.path / self.SAMPLES / f"step_{int(step):08d}"

    def eval_samples(self) -> list[Path]:
        """Eval audio written so far (``samples/step_N/ID.wav``), newest step last."""
        return sorted(self.samples().glob("step_*/*.wav"))

    #: the files a run keeps beside its config (its checkpoints' and own folders' files are its too)
    OWN_FILES = (CONFIG, ACCEL, COMPILE_LOG, METRICS, PROGRESS, BEST, INIT_REPORT, ".lock")

    def owns(self, path: str | os.PathLike[str]) -> bool:
        """Whether ``path`` (as the kernel resolves it) is one of this run's own files or inside its own folders
        (checkpoints, best.dcp, samples ...): a file written for the user must never land there."""
        real, root = Path(path).resolve(), self.path.resolve()
        if not real.is_relative_to(root) or real == root:
            return False
        first = real.relative_to(root).parts[0]
        return first in self.OWN_FILES or first in self.OWN_FOLDERS or first.startswith("best.")

    @classmethod
    def owning(cls, path: str | os.PathLike[str]) -> RunDir | None:
        """The run (a folder with its ``config.yaml``) whose own file ``path`` is (:meth:`owns`), or None."""
        real = Path(path).resolve()
        for folder in real.parents:
            run = cls(folder)
            if run.is_run() and run.owns(real):
                return run
        return None

    def is_run(self) -> bool:
        """A speechtrain run: its ``config.yaml`` is there."""
        return self.config.is_file()

    def mkdir(self) -> RunDir:
        self.path.mkdir(parents=True, exist_ok=True)
        return self

    def lock(self) -> RunLock:
        """The lock a writer of this run holds (``with run.lock():``)."""
        return RunLock(self.path)

    # ------------------------------------------------------------------ checkpoints
    def step_file(self, step: int) -> Path:
        return self.checkpoints / f"step_{int(step):08d}.pt"

    def shard_temp(self, step: int, pid: int) -> Path:
        """Where the ranks write the shards of step ``step`` before rank 0 renames the folder (``pid``: rank 0's,
        so that a leftover of a killed save is known as one)."""
        return self.checkpoints / f".step_{int(step):08d}{ckpt.SHARD_SUFFIX}.tmp-{pid}"

    def steps(self) -> list[tuple[int, Path]]:
        """(step, path) of the step checkpoints, oldest first."""
        return ckpt.list_checkpoints(self.checkpoints)

    def latest(self, quarantine: bool = False) -> tuple[Path, dict[str, Any]] | None:
        """What a resume continues: the newest step checkpoint that loads (None without one); ``quarantine`` (the
        run's writer resuming it) renames broken newer ones ``*.corrupt``."""
        return ckpt.latest_loadable(self.checkpoints, quarantine)

    def save(
        self, state: dict[str, Any], keep: int, best: bool = False, shards: str | os.PathLike[str] | None = None
    ) -> Path:
        """Write ``checkpoints/step_N.pt`` (N = ``state["step"]``) with its checksum and, when ``best``, ``best.pt``;
        keep the newest ``keep`` step checkpoints (never deleting the one just written).

        ``shards``: the finished temporary folder (:meth:`shard_temp`) the ranks wrote this step's shards to; it
        becomes ``step_N.dcp`` (``best.dcp`` a copy of hard links) before the step file that names it is written."""
        path = self.step_file(int(state["step"]))
        if shards is not None:
            folder = ckpt.shard_folder(path)
            ckpt.move_folder(Path(shards), folder)
            state = {
                **state,
                ckpt.SHARDS_KEY: folder.name,
                ckpt.SHARDS_DIGEST_KEY: ckpt.file_sha256(folder / ".metadata"),
            }
        state = ckpt.with_checksum(state)
        ckpt.clean_temporaries(path.parent)
        ckpt.clean_temporaries(self.path)
        ckpt.atomic_save(state, path)
        ckpt.prune(self.checkpoints, keep, protect=path)
        if best:
            if shards is not None:
                ckpt.copy_folder(ckpt.shard_folder(path), ckpt.shard_folder(self.best))
                state = ckpt.with_checksum({**state, ckpt.SHARDS_KEY: ckpt.shard_folder(self.best).name})
            ckpt.atomic_save(state, self.best)
        return path

    def weights_candidates(self, which: str = "best") -> list[Path]:
        """The checkpoints inference reads, in the order it tries them: ``best.pt`` (``which="best"`` and
        present), then the step checkpoints, newest first."""
        if which not in ("best", "latest", "last"):
            raise ValueError(f"which must be 'best' or 'latest', got {which!r}")
        first = [self.best] if which == "best" and self.best.is_file() else []
        return first + [p for _, p in reversed(self.steps())]

    def load_weights(self, which: str = "best") -> tuple[Path, dict[str, Any]]:
        """The checkpoint inference, export and ``init_from`` read (see :meth:`weights_candidates`), loaded: one
        that does not load (empty, truncated, damaged) is skipped with a warning for the next. A UserError when
        the run has none, a CheckpointError when none loads."""
        candidates = self.weights_candidates(which)
        if not candidates:
            raise UserError(f"{self.path} has no checkpoint yet (train it first: speechtrain train --config ...)")
        failures: list[str] = []
        for path in candidates:
            try:
                return path, ckpt.safe_load(path)
            except CheckpointError as exc:
                log.warning(f"warning: skipping {exc}")
                failures.append(str(exc))
        raise CheckpointError(
            f"{self.path}: none of its {len(candidates)} checkpoint(s) loads (the newest: {failures[0]})"
        )
