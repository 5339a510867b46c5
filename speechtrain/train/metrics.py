"""What a run reports: ``metrics.jsonl`` rows (and TensorBoard), the rows' memory and compile fields,
the interval means between rows, the progress bar, and reading rows back."""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from speechtrain.data.batch import Batch
from speechtrain.logs import get_logger
from speechtrain.memory.stats import RetryStormDetector, memory_stats
from speechtrain.train.checkpoint import write_failed
from speechtrain.train.rundir import RunDir

log = get_logger(__name__)


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # JSON has no NaN/inf
    return value


class MetricsWriter:
    """Appends one JSON object per line to ``run_dir/metrics.jsonl``; mirrors scalars to TensorBoard.

    Each row is one ``write`` call of one whole line; a line torn by a failed write (full disk, kill) is
    ended before the next row, and :func:`read_metrics` skips it. :meth:`rewind` drops the rows after a
    resumed step, so that a resumed run's rows appear once. ``run_dir`` None (or a rank other than 0):
    nothing is written.
    """

    def __init__(self, run_dir: str | os.PathLike[str] | None, tensorboard: bool = True) -> None:
        self.path = RunDir(run_dir).metrics if run_dir else None
        self.tb = None
        self._line_open: bool | None = None  # whether the file ends inside a torn line (checked on first write)
        if run_dir and tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self.tb = SummaryWriter(str(RunDir(run_dir).tensorboard))
            except ImportError:
                log.info("note: TensorBoard events skipped (pip install tensorboard, or train.tensorboard=false)")

    def write(self, row: dict[str, Any]) -> None:
        if self.path is None:
            return
        line = json.dumps({k: _clean(v) for k, v in row.items()}) + "\n"
        if self._line_open is None:
            self._line_open = _ends_inside_a_line(self.path)
        try:
            with open(self.path, "ab") as fh:  # one write of one whole line
                fh.write((("\n" if self._line_open else "") + line).encode())
        except OSError as exc:
            self._line_open = True  # part of the line may be on disk
            raise write_failed(self.path, exc) from None
        self._line_open = False
        if self.tb is not None:
            split = row.get("split", "train")
            for k, v in row.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "step":
                    self.tb.add_scalar(f"{split}/{k}", v, row.get("step", 0))

    def rewind(self, step: int) -> int:
        """Drop the rows after ``step`` (and torn lines): a resume from a checkpoint at ``step`` writes them
        again. The file is replaced atomically. Returns how many lines were dropped."""
        if self.path is None or not self.path.is_file():
            return 0
        keep, dropped = [], 0
        for line in self.path.read_text(errors="replace").splitlines():
            row = _parse(line)
            if row is None or (isinstance(row.get("step"), int) and row["step"] > step):
                dropped += bool(line.strip())
                continue
            keep.append(line + "\n")
        if dropped:
            tmp = self.path.with_name(f".{self.path.name}.tmp-{os.getpid()}")
            try:
                tmp.write_text("".join(keep))
                os.replace(tmp, self.path)
            except OSError as exc:
                tmp.unlink(missing_ok=True)
                raise write_failed(self.path, exc) from None
            if step:
                log.info(f"metrics.jsonl: dropped {dropped} rows written after step {step} (resuming from step {step})")
            else:
                log.info(f"metrics.jsonl: dropped {dropped} rows of an earlier start that saved no checkpoint")
        self._line_open = False
        return dropped

    def audio(self, tag: str, wav: Any, step: int, sample_rate: int) -> None:
        if self.tb is not None:
            self.tb.add_audio(tag, torch.as_tensor(wav).float().clamp(-1, 1), step, sample_rate=sample_rate)

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()


def _parse(line: str) -> dict[str, Any] | None:
    """One row of metrics.jsonl; None for an empty or torn line."""
    try:
        row = json.loads(line)
    except ValueError:
        return None
    return row if isinstance(row, dict) else None


def _ends_inside_a_line(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            if fh.tell() == 0:
                return False
            fh.seek(-1, os.SEEK_END)
            return fh.read(1) != b"\n"
    except OSError:
        return False


def read_metrics(run_dir: str | os.PathLike[str], split: str | None = "train") -> list[dict[str, Any]]:
    """Rows of ``run_dir/metrics.jsonl`` (only ``split`` rows unless split is None); torn lines (a write
    cut short by a full disk or a kill) are skipped with a warning."""
    path = RunDir(run_dir).metrics
    lines = path.read_text(errors="replace").splitlines() if path.exists() else []
    rows = [_parse(line) for line in lines if line.strip()]
    torn = sum(r is None for r in rows)
    if torn:
        log.warning(f"warning: {path}: skipped {torn} torn line(s) (a write cut short by a full disk or a kill)")
    return [r for r in rows if r is not None and (split is None or r.get("split", "train") == split)]


class Interval:
    """Accumulates step outputs between log rows (tensors stay on the device until :meth:`means`)."""

    def __init__(self) -> None:
        self.sums: dict[str, torch.Tensor] = {}
        self.steps = 0
        self.seconds = 0.0
        self.wait = 0.0
        self.audio_seconds = 0.0
        self.padded = 0
        self.real = 0
        self.samples = 0

    def add(self, micro: Sequence[Batch], out: dict[str, Any], wait: float, seconds: float, timed: bool = True) -> None:
        """One step's outputs; ``timed`` False (a step that compiled): its losses count, its time and audio
        stay out of the rates (the compile warm-up is reported on its own)."""
        for k, v in out.items():
            if isinstance(v, torch.Tensor) and k != "finite":  # (the step's flag: counted by the numerics guard)
                v = v.detach().float()
                prev = self.sums.get(k)
                if prev is None:  # a new sum starts from the step's own tensor (no copy from the host)
                    self.sums[k] = v.clone()
                    continue
                if prev.device != v.device:  # sums restored from a checkpoint: on the host
                    prev = prev.to(v.device, non_blocking=True)
                self.sums[k] = prev + v  # on the device: read at the log row
        self.steps += 1
        if not timed:
            return
        self.seconds += seconds
        self.wait += wait
        for mb in micro:
            self.audio_seconds += mb.audio_seconds
            self.padded += mb.padded_frames
            self.real += mb.real_frames
            self.samples += mb.size

    def state_dict(self) -> dict[str, Any]:
        """What the interval holds so far (saved in checkpoints: a resumed run's next row averages the same
        steps as the run that was never interrupted)."""
        return {
            "sums": {k: v.detach().to("cpu", copy=True) for k, v in self.sums.items()},
            "steps": self.steps,
            "seconds": self.seconds,
            "wait": self.wait,
            "audio_seconds": self.audio_seconds,
            "padded": self.padded,
            "real": self.real,
            "samples": self.samples,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.sums.clear()
        self.sums.update({str(k): v.clone() for k, v in state["sums"].items()})
        self.steps, self.padded, self.real, self.samples = (
            int(state[k]) for k in ("steps", "padded", "real", "samples")
        )
        self.seconds, self.wait, self.audio_seconds = (float(state[k]) for k in ("seconds", "wait", "audio_seconds"))

    def means(self) -> dict[str, Any]:
        """Mean outputs per step and the interval's rates (host sync: ``.item()`` of the sums)."""
        n = max(self.steps, 1)
        row = {k: float(v) / n for k, v in self.sums.items()}
        row["audio_seconds_per_second"] = self.audio_seconds / self.seconds if self.seconds else 0.0
        row["samples_per_second"] = self.samples / self.seconds if self.seconds else 0.0
        row["steps_per_second"] = self.steps / self.seconds if self.seconds else 0.0
        row["data_wait_fraction"] = self.wait / self.seconds if self.seconds else 0.0
        row["padding_fraction"] = 1 - self.real / self.padded if self.padded else 0.0
        return row


class ResourceFields:
    """The memory and compile fields of a train row, with their warnings (each said once or per storm)."""

    def __init__(self, device: torch.device, recompile_limit: int) -> None:
        self.device = device
        self.recompile_limit = recompile_limit
        self.retry_storm = RetryStormDetector()
        self._recompiles_warned = False

    def add_to(self, row: dict[str, Any], compile_stats: dict[str, Any] | None) -> None:
        mem = memory_stats(self.device)
        row.update({f"mem_{k}": v for k, v in mem.items() if v is not None and k != "device"})
        peak = mem.get("peak") or mem.get("peak_rss") or 0
        row["mem"] = f"{peak / 2**30:.2f}G"
        storm = self.retry_storm.update(mem)
        if storm:
            log.warning(f"warning: {storm}")
            row["warning"] = storm
        if compile_stats is None:
            return
        row["recompiles"] = compile_stats["recompiles"]
        row["graph_breaks"] = compile_stats["graph_breaks"]
        if compile_stats.get("cudagraph_skips"):
            row["cudagraph_skips"] = compile_stats["cudagraph_skips"]
        limit = self.recompile_limit
        if compile_stats["recompiles"] > limit and not self._recompiles_warned:
            self._recompiles_warned = True
            log.warning(
                f"warning: torch.compile recompiled {compile_stats['recompiles']} times (more than {limit}): batch "
                f"shapes vary too much; set data.pad_multiple (e.g. 64) or accel.compile_dynamic=true"
            )


class StepFile:
    """``progress.json`` of a run: the step it has reached, rewritten after every step, for whoever watches the run
    (the web UI's Train tab) between the rows of metrics.jsonl, which come every ``train.log_every`` steps only.

    One ``pwrite`` of a fixed-width record at the start of a file kept open, then the file cut to that record
    (``ftruncate``: a longer file, left by a resume or another writer, would keep its tail and be unreadable): the
    file holds exactly one record after every write. No host sync (the step is a Python int), no rename, a few
    microseconds. A failed write (a full disk) turns the file off; the metrics rows report
    such failures. ``run_dir`` None (another rank, no run directory): nothing is written."""

    WIDTH = 96

    def __init__(self, run_dir: str | os.PathLike[str] | RunDir | None, max_steps: int) -> None:
        self.max_steps = max_steps
        self.fd: int | None = None
        if run_dir is not None:
            try:
                self.fd = os.open(RunDir(run_dir).progress, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            except OSError as exc:
                log.info(f"note: {RunDir(run_dir).progress} not written ({exc})")

    def write(self, step: int) -> None:
        if self.fd is None:
            return
        record = json.dumps({"step": step, "max_steps": self.max_steps, "time": round(time.time(), 3)})
        data = (record.ljust(self.WIDTH - 1) + "\n").encode()
        try:
            os.pwrite(self.fd, data, 0)
            os.ftruncate(self.fd, len(data))
        except OSError:
            self.close()

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


@dataclass(frozen=True)
class ProgressRecord:
    """What ``progress.json`` holds: the step reached, the run's ``max_steps`` and the wall time (``time.time()``)
    it was written at."""

    step: int
    max_steps: int | None
    time: float | None


def read_progress_record(run_dir: str | os.PathLike[str] | RunDir) -> ProgressRecord | None:
    """``progress.json``'s record (None: no such file, or one that cannot be read, such as one caught mid-write)."""
    try:
        with open(RunDir(run_dir).progress, encoding="utf-8") as fh:
            record = json.loads(fh.readline())  # the one record (an older writer's file: its first line)
        step, max_steps, at = record.get("step"), record.get("max_steps"), record.get("time")
    except (OSError, ValueError, AttributeError):
        return None
    if not isinstance(step, int) or isinstance(step, bool):
        return None
    return ProgressRecord(
        step,
        max_steps if isinstance(max_steps, int) and not isinstance(max_steps, bool) else None,
        float(at) if isinstance(at, (int, float)) and not isinstance(at, bool) else None,
    )


def read_progress(run_dir: str | os.PathLike[str] | RunDir) -> int | None:
    """The step ``progress.json`` says the run has reached (None: no such file, or one that cannot be read)."""
    record = read_progress_record(run_dir)
    return None if record is None else record.step


class _NoBar:
    def update(self, n: int) -> None: ...
    def set_postfix(self, **kw: Any) -> None: ...
    def close(self) -> None: ...


def progress_bar(total: int, initial: int, enabled: bool) -> Any:
    """A tqdm bar on standard error (a do-nothing bar when not ``enabled``)."""
    if not enabled:
        return _NoBar()
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, desc="train", unit="step", file=sys.stderr, dynamic_ncols=True)
