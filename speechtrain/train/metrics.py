"""metrics.jsonl and TensorBoard writing, and reading them back."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any


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
                print("note: TensorBoard events skipped (pip install tensorboard, or train.tensorboard=false)")

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
            import torch

            self.tb.add_audio(tag, torch.as_tensor(wav).float().clamp(-1, 1), step, sample_rate=sample_rate)

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()


def read_metrics(run_dir: str | os.PathLike[str], split: str | None = "train") -> list[dict[str, Any]]:
    """Rows of ``run_dir/metrics.jsonl`` (only ``split`` rows unless split is None)."""
    path = Path(run_dir) / "metrics.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
    return [r for r in rows if split is None or r.get("split", "train") == split]
