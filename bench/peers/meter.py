"""What a peer runner measures inside the peer's own training loop, in the units of speechtrain's bench.

A runner calls :meth:`StepMeter.batch` when the peer's loop takes a batch (audio and frame counts),
:meth:`StepMeter.step_done` after each optimizer step (the step's losses), and :meth:`StepMeter.write` at the
end. The timed window is the ``steps`` steps after ``warmup`` untimed ones, as speechtrain's ``timed_loop``;
data wait is the time from one step's end to the next batch's arrival (the peer's loader). Peak memory is this
process's peak resident set (VmHWM) on the CPU, the CUDA allocator's peak on a GPU, as the bench measures its own
rows (in fresh processes). The
output is a JSON record that ``speechtrain.bench.measure.RunResult.from_raw`` reads.

With ``profile`` > 0 the timed steps run under ``torch.profiler`` and the result keeps that many top operators
(``speechtrain.bench.measure.profile_summary``, imported only then: the orchestrator puts this checkout on the
peer's PYTHONPATH). Nothing else of speechtrain is used here: the runner is the peer's process.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any


class StopPeer(Exception):
    """Raised from inside the peer's loop once the timed steps are done (caught by the runner)."""


def peak_rss_bytes() -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def peak_memory_bytes() -> int | None:
    """On a GPU the CUDA allocator's peak (what speechtrain's rows report there), else the process's peak RSS."""
    import torch

    if torch.cuda.is_available() and torch.cuda.max_memory_allocated() > 0:
        return int(torch.cuda.max_memory_allocated())
    return peak_rss_bytes()


def _load() -> float | None:
    try:
        return float(os.getloadavg()[0])
    except (AttributeError, OSError):
        return None


class StepMeter:
    """Counts and times the steps of a peer's loop; ``losses_last`` steps' losses are averaged at the end."""

    def __init__(self, name: str, steps: int, warmup: int, losses_last: int, hop_length: int, profile: int = 0) -> None:
        self.name, self.steps, self.warmup, self.last, self.hop = name, steps, warmup, losses_last, hop_length
        self.top = profile
        self.prof: Any = None
        self.profile: list[dict[str, Any]] | None = None
        self.done = 0  # optimizer steps finished (warm-up included)
        self.counts = {"samples": 0, "audio_seconds": 0.0, "padded_frames": 0, "real_frames": 0}
        self.wait = 0.0
        self.start: float | None = None
        self.cpu_start = 0.0
        self.seconds = 0.0
        self.cpu_seconds = 0.0
        self.step_end = time.perf_counter()
        self.losses: list[dict[str, float]] = []
        self.loads = [_load()]

    @property
    def timing(self) -> bool:
        return self.done >= self.warmup

    def batch(self, lengths_samples: list[int], sample_rate: int, padded_samples: int | None = None) -> None:
        """The loop took a batch of these utterance lengths (samples); padded to ``padded_samples`` each."""
        now = time.perf_counter()
        if not self.timing:
            return
        if self.start is None:  # the window opens when the first timed batch is asked for
            self.start, self.cpu_start = self.step_end, time.process_time()
            if self.top > 0:
                import torch

                self.prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
                self.prof.start()
        self.wait += now - self.step_end
        longest = padded_samples if padded_samples is not None else max(lengths_samples)
        self.counts["samples"] += len(lengths_samples)
        self.counts["audio_seconds"] += sum(lengths_samples) / sample_rate
        self.counts["padded_frames"] += len(lengths_samples) * (longest // self.hop)
        self.counts["real_frames"] += sum(n // self.hop for n in lengths_samples)

    def step_done(self, losses: dict[str, Any]) -> None:
        """An optimizer step finished with these losses (tensors or numbers); stops the loop when done."""
        self.done += 1
        timed = self.done - self.warmup
        if timed > 0:
            self.losses.append({k: float(v) for k, v in losses.items()})
            self.losses = self.losses[-max(1, self.last) :]
        self.step_end = time.perf_counter()
        if timed >= self.steps:
            assert self.start is not None
            self.seconds = self.step_end - self.start
            self.cpu_seconds = time.process_time() - self.cpu_start
            self.loads.append(_load())
            if self.prof is not None:
                from speechtrain.bench.measure import profile_summary

                self.prof.stop()
                self.profile = profile_summary(self.prof, self.top)
            raise StopPeer

    def result(self, **extra: Any) -> dict[str, Any]:
        """The JSON record (``RunResult`` fields); ``extra``: precision, applied, trained_parameters ..."""
        import torch

        keys = self.losses[-1].keys() if self.losses else []
        mean = {k: sum(r[k] for r in self.losses if k in r) / len(self.losses) for k in keys}
        loads = [x for x in self.loads if x is not None]
        return {
            "name": self.name,
            "steps": max(0, self.done - self.warmup),
            "seconds": self.seconds,
            **self.counts,
            "data_wait_seconds": self.wait,
            "peak_memory_bytes": peak_memory_bytes(),
            "cpu_seconds": self.cpu_seconds,
            "host_load": max(loads) if loads else None,
            "threads": torch.get_num_threads(),
            "losses": mean or None,
            "profile": self.profile,
            **extra,
        }

    def write(self, path: str | Path, **extra: Any) -> None:
        if self.done - self.warmup < self.steps:
            raise RuntimeError(f"{self.name}: the peer's loop ended after {self.done} steps, before the timed window")
        Path(path).write_text(json.dumps(self.result(**extra)))
