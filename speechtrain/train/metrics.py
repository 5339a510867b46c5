"""What a run reports: ``metrics.jsonl`` rows (and TensorBoard), the rows' memory and compile fields,
the interval means between rows, the progress bar, and reading rows back."""

from __future__ import annotations

import json
import math
import os
import sys
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from speechtrain.data.batch import Batch
from speechtrain.logs import get_logger
from speechtrain.memory.stats import RetryStormDetector, memory_stats

log = get_logger(__name__)


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # JSON has no NaN/inf
    return value


class MetricsWriter:
    """Appends one JSON object per line to ``run_dir/metrics.jsonl``; mirrors scalars to TensorBoard."""

    def __init__(self, run_dir: str | os.PathLike[str] | None, tensorboard: bool = True) -> None:
        self.path = Path(run_dir) / "metrics.jsonl" if run_dir else None
        self.tb = None
        if run_dir and tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self.tb = SummaryWriter(str(Path(run_dir) / "tensorboard"))
            except ImportError:
                log.info("note: TensorBoard events skipped (pip install tensorboard, or train.tensorboard=false)")

    def write(self, row: dict[str, Any]) -> None:
        if self.path is None:
            return
        with open(self.path, "a") as fh:
            fh.write(json.dumps({k: _clean(v) for k, v in row.items()}) + "\n")
        if self.tb is not None:
            split = row.get("split", "train")
            for k, v in row.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "step":
                    self.tb.add_scalar(f"{split}/{k}", v, row.get("step", 0))

    def audio(self, tag: str, wav: Any, step: int, sample_rate: int) -> None:
        if self.tb is not None:
            self.tb.add_audio(tag, torch.as_tensor(wav).float().clamp(-1, 1), step, sample_rate=sample_rate)

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()


def read_metrics(run_dir: str | os.PathLike[str], split: str | None = "train") -> list[dict[str, Any]]:
    """Rows of ``run_dir/metrics.jsonl`` (only ``split`` rows unless split is None)."""
    path = Path(run_dir) / "metrics.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
    return [r for r in rows if split is None or r.get("split", "train") == split]


class Interval:
    """Accumulates step outputs between log rows (tensors stay on the device until :meth:`means`)."""

    def __init__(self) -> None:
        self.sums: dict[str, torch.Tensor] = defaultdict(lambda: torch.zeros(()))
        self.steps = 0
        self.seconds = 0.0
        self.wait = 0.0
        self.audio_seconds = 0.0
        self.padded = 0
        self.real = 0
        self.samples = 0

    def add(self, micro: Sequence[Batch], out: dict[str, Any], wait: float, seconds: float) -> None:
        for k, v in out.items():
            if isinstance(v, torch.Tensor):
                self.sums[k] = self.sums[k].to(v.device) + v.float()
        self.steps += 1
        self.seconds += seconds
        self.wait += wait
        for mb in micro:
            self.audio_seconds += mb.audio_seconds
            self.padded += mb.padded_frames
            self.real += mb.real_frames
            self.samples += mb.size

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
        limit = self.recompile_limit
        if compile_stats["recompiles"] > limit and not self._recompiles_warned:
            self._recompiles_warned = True
            log.warning(
                f"warning: torch.compile recompiled {compile_stats['recompiles']} times (more than {limit}): batch "
                f"shapes vary too much; set data.pad_multiple (e.g. 64) or accel.compile_dynamic=true"
            )


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
