"""Measure one training configuration: throughput in speech units, padding, data wait, memory, MFU.

A configuration is a resolved config plus a path: ``baseline`` (the plain PyTorch loop of
:mod:`speechtrain.bench.baseline`) or ``engine`` (speechtrain's Trainer and loader, with the
accelerations the config switches on). Warm-up steps are excluded; the device is synchronized
before and after the timed region (not inside it, so that data loading may overlap compute as it
does in training). Data wait is the wall time spent in ``next(loader)``.

Peak memory: on CUDA ``torch.cuda.max_memory_allocated`` over the whole run of the configuration;
on the CPU the peak resident set size (VmHWM) of a fresh process that runs only this configuration
(``isolate=True``, the default), so peaks are per configuration. Loader worker processes are not
counted on the CPU. ``isolate=False`` runs in this process and resets VmHWM first; memory an earlier
configuration left cached is then included.

The configuration is built by :mod:`speechtrain.recipes.bench` (in a fresh process:
``python -m speechtrain.recipes.bench SPEC.json OUT.json``, what ``isolate=True`` does).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class RunSpec:
    """What to measure: a config (as a raw dict), the path, and how long."""

    name: str
    raw: dict[str, Any]
    kind: str = "engine"  # "baseline" (plain loop) or "engine" (speechtrain Trainer)
    steps: int = 20  # timed steps at least
    warmup: int = 3
    count_flops: bool = False
    fake_data: int | None = None  # synthetic LJSpeech-like utterances instead of the manifest
    time_limit: float | None = None  # stop timing after this many seconds (at least 2 timed steps)
    min_seconds: float = 0.0  # and time at least this long (the window is both: >= steps and >= min_seconds)
    setup_state: str | None = None  # file with the task's modules after Task.setup, shared by the rows
    threads: int | None = None  # torch intra-op threads in the measuring process (None: torch's default)
    families: dict[str, Any] | None = None  # registry.registered_families(): registered again in a child process
    source_dir: str | None = None  # the config file's folder: a user's 'module:factory' is looked for there too
    processes: int = 1  # > 1: measured under torchrun, one process per device (DDP; see speechtrain.bench.scaling)
    gradient_sync: bool = True  # False: the gradient all-reduce is left out (the scaling bench's twin row)
    record_losses: int = 0  # > 0: the mean of each loss over the last this many timed steps goes in the result
    profile: int = 0  # > 0: torch.profiler over the measurement (warm-up included); keep this many top operators
    quality_dir: str | None = None  # after the timed steps: the held-out items' audio there (<id>.wav; the peers)


@dataclass
class RunResult:
    """Raw measurements of one configuration; the rates are derived so they stay consistent."""

    name: str
    steps: int
    seconds: float
    samples: int
    audio_seconds: float
    padded_frames: int
    real_frames: int
    data_wait_seconds: float
    peak_memory_bytes: int | None
    gpu_busy_fraction: float | None = None
    flops_per_padded_frame: float | None = None
    precision: str = "fp32"
    applied: dict[str, Any] = field(default_factory=dict)
    mfu: float | None = None
    speedup_vs_baseline: float | None = None
    speedup_vs_fair: float | None = None  # against the fair baseline (bf16 autocast, SDPA, fused AdamW)
    tuned_batch_size: float | None = None
    cpu_seconds: float | None = None  # this process's CPU time (all threads) over the timed steps
    host_load: float | None = None  # 1-minute load average around the timed steps (other processes count)
    items_per_batch_limit: float | None = None  # items a batch can hold at most from this data (per bucket)
    threads: int | None = None  # torch intra-op threads the row ran with
    page_faults: int | None = None  # minor page faults of this process over the timed steps (CPU allocator)
    processes: int = 1  # processes the row ran in (several: counts summed over ranks, seconds the slowest rank's)
    losses: dict[str, float] | None = None  # mean of each loss over the last RunSpec.record_losses timed steps
    trained_parameters: int | None = None  # parameters the optimizers update
    profile: list[dict[str, Any]] | None = None  # top operators by self time (RunSpec.profile), see profile_summary
    profile_view: dict[str, Any] | None = None  # host/device operators, device idle share, launches (profile_view)
    warmup_seconds: float | None = None  # wall time of the untimed warm-up steps (a compiled row's compilation)

    @property
    def steps_per_second(self) -> float:
        return self.steps / self.seconds if self.seconds > 0 else 0.0

    @property
    def samples_per_second(self) -> float:
        return self.samples / self.seconds if self.seconds > 0 else 0.0

    @property
    def audio_seconds_per_second(self) -> float:
        return self.audio_seconds / self.seconds if self.seconds > 0 else 0.0

    @property
    def padding_fraction(self) -> float:
        return 1.0 - self.real_frames / self.padded_frames if self.padded_frames > 0 else 0.0

    @property
    def data_wait_fraction(self) -> float:
        return min(1.0, self.data_wait_seconds / self.seconds) if self.seconds > 0 else 0.0

    @property
    def audio_seconds_per_cpu_second(self) -> float | None:
        """Audio seconds per CPU second of this process: on a shared CPU it moves less with other
        processes' load than the wall-clock rate (it still counts contention for caches and threads
        that spin while waiting)."""
        return self.audio_seconds / self.cpu_seconds if self.cpu_seconds else None

    @property
    def page_faults_per_step(self) -> float | None:
        """Minor page faults per timed step: what ``accel.cpu_allocator`` lowers on a CPU."""
        return self.page_faults / self.steps if self.page_faults is not None and self.steps else None

    @property
    def mean_batch_size(self) -> float:
        return self.samples / self.steps if self.steps else 0.0

    def to_dict(self) -> dict[str, Any]:
        """The JSON record of a run (rates derived from the raw counts)."""
        return {
            "name": self.name,
            "steps": self.steps,
            "steps_per_second": self.steps_per_second,
            "samples_per_second": self.samples_per_second,
            "audio_seconds_per_second": self.audio_seconds_per_second,
            "audio_seconds": self.audio_seconds,
            "seconds": self.seconds,
            "samples": self.samples,
            "cpu_seconds": self.cpu_seconds,
            "audio_seconds_per_cpu_second": self.audio_seconds_per_cpu_second,
            "host_load": self.host_load,
            "threads": self.threads,
            "page_faults": self.page_faults,
            "page_faults_per_step": self.page_faults_per_step,
            "mean_batch_size": self.mean_batch_size,
            "tuned_batch_size": self.tuned_batch_size,
            "items_per_batch_limit": self.items_per_batch_limit,
            "peak_memory_bytes": self.peak_memory_bytes,
            "padding_fraction": self.padding_fraction,
            "padded_frames": self.padded_frames,
            "real_frames": self.real_frames,
            "data_wait_fraction": self.data_wait_fraction,
            "gpu_busy_fraction": self.gpu_busy_fraction,
            "mfu": self.mfu,
            "flops_per_padded_frame": self.flops_per_padded_frame,
            "precision": self.precision,
            "speedup_vs_baseline": self.speedup_vs_baseline,
            "speedup_vs_fair": self.speedup_vs_fair,
            "applied": self.applied,
            "processes": self.processes,
            "losses": self.losses,
            "trained_parameters": self.trained_parameters,
            "profile": self.profile,
            "profile_view": self.profile_view,
            "warmup_seconds": self.warmup_seconds,
        }

    @classmethod
    def from_raw(cls, raw: dict[str, Any]) -> RunResult:
        names = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in raw.items() if k in names})


# ---------------------------------------------------------------------------------------------
# device description


def probe(measure: bool = False) -> Any | None:
    """The hardware probe's result (``speechtrain.accel.probe_hardware``), or None without it.
    ``measure`` also times a matmul, whose rate becomes the peak for MFU where no table has one."""
    try:
        from speechtrain.accel.probe import probe_hardware
    except ImportError:
        return None
    return probe_hardware(measure=measure)


def device_info(probe_result: Any | None = None, device: str = "auto") -> dict[str, Any]:
    """JSON description of the device the figures were taken on (with the probe's fields)."""
    import torch

    from speechtrain.device import resolve_device

    dev = resolve_device(device)
    info: dict[str, Any] = {
        "type": dev.type,
        "name": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "peak_memory_kind": "cuda max_memory_allocated per configuration"
        if dev.type == "cuda"
        else "peak resident set size (VmHWM) of a fresh process per configuration",
    }
    if dev.type == "cuda":
        props = torch.cuda.get_device_properties(dev)
        info.update(
            name=props.name, total_memory_bytes=int(props.total_memory), capability=f"{props.major}.{props.minor}"
        )
    else:
        from speechtrain.accel.probe import cpu_name

        info["name"] = cpu_name() or info["name"]
    if probe_result is not None:
        as_dict = probe_result.to_dict() if hasattr(probe_result, "to_dict") else _plain(probe_result)
        info["probe"] = as_dict
    return info


def _plain(obj: Any) -> Any:
    try:
        return asdict(obj)
    except TypeError:
        return str(obj)


# ---------------------------------------------------------------------------------------------
# the timed loop


def synchronize(device: Any) -> None:
    """Wait for the device's queued work (a host-device sync; only around timed regions)."""
    import torch

    if getattr(device, "type", str(device)) == "cuda":
        torch.cuda.synchronize(device)


def timed_loop(
    step: Callable[[Any], Any],
    batches: Iterator[Any],
    steps: int,
    warmup: int,
    device: Any,
    time_limit: float | None = None,
    progress: Callable[[int], None] | None = None,
    min_seconds: float = 0.0,
    outputs: list[Any] | None = None,
) -> dict[str, Any]:
    """Run ``warmup`` untimed steps, then time a window of at least ``steps`` steps AND at least
    ``min_seconds`` seconds (a fixed step count is too short to be stable for fast rows, a fixed
    time too few steps for slow ones); returns raw counts and seconds.

    Host-side counts only (``Batch`` keeps lengths on the host), so the loop adds no device syncs.
    ``time_limit`` stops after that many timed seconds once 2 steps are done (bounded demo runs).
    ``outputs``: each timed step's return value is appended to it (left as the step gave it: no sync here).
    """
    from speechtrain.bench.nvml import GpuBusySampler

    warm_start = time.perf_counter()
    for _ in range(warmup):
        step(next(batches))
    synchronize(device)
    warmup_seconds = time.perf_counter() - warm_start
    counts = {"steps": 0, "samples": 0, "audio_seconds": 0.0, "padded_frames": 0, "real_frames": 0}
    wait = 0.0
    index = getattr(device, "index", None)
    cuda_index = (index or 0) if getattr(device, "type", "") == "cuda" else None
    load_before = _load_average()
    faults_before = minor_faults()
    with GpuBusySampler(cuda_index) as busy:
        cpu_start = time.process_time()
        start = time.perf_counter()
        i = 0
        while True:
            t0 = time.perf_counter()
            batch = next(batches)
            wait += time.perf_counter() - t0
            counts["steps"] += 1
            counts["samples"] += batch.size
            counts["audio_seconds"] += batch.audio_seconds
            counts["padded_frames"] += batch.padded_frames
            counts["real_frames"] += batch.real_frames
            out = step(batch)
            if outputs is not None:
                outputs.append(out)
            i += 1
            if progress is not None:
                progress(i)
            elapsed = time.perf_counter() - start
            if time_limit is not None and i >= 2 and elapsed > time_limit:
                break
            if i >= steps and elapsed >= min_seconds:
                break
        synchronize(device)
        seconds = time.perf_counter() - start
        cpu_seconds = time.process_time() - cpu_start
    faults_after = minor_faults()
    loads = [x for x in (load_before, _load_average()) if x is not None]
    return {
        **counts,
        "seconds": seconds,
        "warmup_seconds": warmup_seconds,
        "data_wait_seconds": wait,
        "gpu_busy_fraction": busy.fraction,
        "cpu_seconds": cpu_seconds,
        "host_load": max(loads) if loads else None,
        "page_faults": None if faults_before is None or faults_after is None else faults_after - faults_before,
    }


def minor_faults() -> int | None:
    """Minor page faults of this process so far (None where ``resource`` is missing)."""
    try:
        import resource
    except ImportError:  # not on every platform
        return None
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_minflt)


def _load_average() -> float | None:
    from speechtrain.device import load_average

    return load_average()


# ---------------------------------------------------------------------------------------------
# isolation


#: builds and measures one configuration in this process (:func:`speechtrain.recipes.bench.execute`)
Execute = Callable[[RunSpec], RunResult]
#: the module run as ``python -m MODULE SPEC.json OUT.json`` to measure a configuration in a fresh process
CHILD_MODULE = "speechtrain.recipes.bench"


def run_spec(
    spec: RunSpec,
    isolate: bool = True,
    timeout: float | None = None,
    execute: Execute | None = None,
    log: str | Path | None = None,
) -> RunResult:
    """Measure ``spec`` in a fresh process (``isolate``: ``python -m speechtrain.recipes.bench``) or in
    this one with ``execute``. ``spec.processes > 1`` starts that many processes with torchrun
    (``python -m torch.distributed.run --standalone``), one per device.

    ``timeout``: seconds the fresh process may run in all (start-up, warm-up or compilation included);
    past it the process and its children (loader workers) are killed and :class:`RowTimedOut` is raised.
    ``log``: file that keeps the process's whole output (stdout and stderr); without it the output
    lives in a temporary folder. A configuration that fails raises :class:`RunFailed` with the lines that
    say what went wrong (:func:`error_excerpt`) and the log's path.
    """
    if not isolate:
        if spec.processes > 1:
            raise ValueError("several processes are always measured in fresh processes (isolate=True)")
        if execute is None:
            raise ValueError("run_spec(isolate=False) needs execute (speechtrain.recipes.bench.execute)")
        return execute(spec)
    with tempfile.TemporaryDirectory(prefix="speechtrain-bench-") as tmp:
        spec_path, out_path = Path(tmp) / "spec.json", Path(tmp) / "out.json"
        log_path = Path(log) if log is not None else Path(tmp) / "row.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        spec_path.write_text(json.dumps(asdict(spec), default=str))
        cmd = [sys.executable, "-m", CHILD_MODULE, str(spec_path), str(out_path)]
        env = None
        if spec.processes > 1:
            launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
            cmd = [*launcher, f"--nproc-per-node={spec.processes}", "-m", *cmd[2:]]
            # torchrun would set 1 thread per worker and warn; the spec sets the threads itself
            env = {**os.environ, "OMP_NUM_THREADS": str(spec.threads or 1)}
        returncode = _run_logged(cmd, log_path, timeout, env)
        text = log_path.read_text(errors="replace") if log_path.is_file() else ""
        kept = str(log_path) if log is not None else None
        if returncode is None:
            raise RowTimedOut(
                f"timed out after {timeout:.0f} s (process killed)", lines=error_excerpt(text, tail=True), log=kept
            )
        lines = error_excerpt(text)
        if returncode == NOT_APPLICABLE_EXIT:
            raise RowNotApplicable(last_error_line(text) or "not applicable", lines=lines, log=kept)
        if returncode != 0 or not out_path.is_file():
            if not lines:
                lines = [_exit_text(returncode)]
            elif returncode < 0:
                lines = [*lines, _exit_text(returncode)]
            raise RunFailed(lines[0], lines=lines, log=kept)
        return RunResult.from_raw(json.loads(out_path.read_text()))


def _run_logged(cmd: list[str], log_path: Path, timeout: float | None, env: dict[str, str] | None) -> int | None:
    """Run ``cmd`` with its output in ``log_path``; its exit status, or None when it ran past ``timeout``
    (then its whole process group is killed: a row's loader workers go with it)."""
    import signal

    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:  # it ended between the timeout and the kill
                pass
            proc.wait()
            return None
        except BaseException:  # the ladder itself is stopped (Ctrl-C): take the row's process with it
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            raise


def _exit_text(returncode: int) -> str:
    if returncode < 0:
        import signal

        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        hint = " (SIGKILL from outside: often the host's out-of-memory killer)" if name == "SIGKILL" else ""
        return f"the measuring process was killed by {name}{hint}"
    return f"exit status {returncode}"


def last_error_line(stderr: str) -> str | None:
    """The line of a failed child's stderr that says what went wrong: the last line, or under torchrun
    (whose own summary comes last) the last worker line naming an error, without the ``[rankN]:`` tag."""
    lines = [ln.strip() for ln in stderr.strip().splitlines() if ln.strip()]
    worker = [ln for ln in lines if ln.startswith("[rank")]
    if not worker:
        return lines[-1] if lines else None
    named = [ln for ln in worker if "Error" in ln or "error" in ln] or worker
    return named[-1].split("]:", 1)[-1].strip()


#: lines of a failed row's error kept in the report (the whole output stays in the row's log)
ERROR_LINES = 8


def error_excerpt(output: str, max_lines: int = ERROR_LINES, tail: bool = False) -> list[str]:
    """What a failed child said went wrong: the first lines of its last exception (the exception's type and
    message, which torch's own errors spread over several lines, e.g. dynamo's "Unsupported: ..." before its
    closing "Set TORCHDYNAMO_VERBOSE=1" line), without the traceback's frames. Without a traceback: the
    lines that name an error, else the last lines (``tail``: always the last lines, for a killed process).
    Under torchrun the worker lines are read without their ``[rankN]:`` tag."""
    lines = [ln.rstrip() for ln in output.splitlines() if ln.strip()]
    if any(ln.startswith("[rank") for ln in lines):
        lines = [ln.split("]:", 1)[-1].rstrip() for ln in lines if ln.startswith("[rank")]
    if tail:
        return [ln.strip() for ln in lines[-max_lines:]]
    starts = [i for i, ln in enumerate(lines) if ln.strip().startswith("Traceback (most recent call last)")]
    if starts:
        j = starts[-1] + 1
        while j < len(lines) and lines[j].startswith(" "):  # the frames: "  File ...", their code, "^^^" marks
            j += 1
        message = [ln.strip() for ln in lines[j : j + max_lines]]
        if message:
            return message
    named = [ln.strip() for ln in lines if "Error" in ln or "error:" in ln or "Killed" in ln]
    return named[:max_lines] if named else [ln.strip() for ln in lines[-max_lines:]]


class RunFailed(RuntimeError):
    """A configuration that could not be measured (its error is listed in the report): ``lines``, the first
    lines of the error the measuring process printed; ``log``, the file with its whole output."""

    def __init__(self, message: str, lines: list[str] | None = None, log: str | None = None) -> None:
        super().__init__(message)
        self.lines = list(lines) if lines else [message]
        self.log = log


class RowNotApplicable(RunFailed):
    """A configuration that means nothing for this model (e.g. explicit attention in a model without
    attention); listed with the reason, not as a failure."""


class RowTimedOut(RunFailed):
    """A configuration killed at its time limit (``--row-timeout``): listed as timed out, the next row runs."""


#: exit status of a measuring process whose configuration does not apply (:class:`RowNotApplicable`)
NOT_APPLICABLE_EXIT = 3


def mean_losses(outputs: list[Any], last: int) -> dict[str, float] | None:
    """The mean of every scalar loss (keys containing "loss" or ending in "_ce"/"_l1") over the last ``last``
    step outputs (dicts of tensors or numbers); None when there are none. Converts on the host at the end."""
    rows = [o for o in outputs[-last:] if isinstance(o, dict)] if last > 0 else []
    if not rows:
        return None
    keys = [k for k in rows[-1] if "loss" in k or k.endswith(("_ce", "_l1"))]
    out: dict[str, float] = {}
    for k in keys:
        vals = [float(r[k]) for r in rows if k in r and getattr(r[k], "numel", lambda: 1)() == 1]
        if vals:
            out[k] = sum(vals) / len(vals)
    return out or None


def profiler(top: int, device_type: str = "cpu") -> Any:
    """A ``torch.profiler.profile`` context over CPU (and CUDA) activity when ``top`` > 0, else a no-op context.
    A profiled measurement is slower: its rates are not the row's (``bench/peers/run.py --profile`` runs one
    extra, unranked pass for it)."""
    import contextlib

    import torch

    if top <= 0:
        return contextlib.nullcontext()
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device_type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    return torch.profiler.profile(activities=activities)


def profile_summary(prof: Any, top: int, device_type: str = "cpu") -> list[dict[str, Any]]:
    """Where the time went: the ``top`` operators by self time (device time on CUDA, else CPU time), each with
    its seconds, its share of all operators' self time and its call count."""
    events = list(prof.key_averages())

    def self_us(e: Any) -> float:
        if device_type == "cuda":
            return float(getattr(e, "self_device_time_total", 0.0) or 0.0)
        return float(getattr(e, "self_cpu_time_total", 0.0) or 0.0)

    total = sum(self_us(e) for e in events) or 1.0
    ranked = sorted(events, key=self_us, reverse=True)[:top]
    return [
        {"op": e.key, "self_seconds": self_us(e) / 1e6, "share": self_us(e) / total, "calls": int(e.count)}
        for e in ranked
    ]


#: the name of the profiler range around each timed step (:func:`profiled_step`)
STEP_RANGE = "speechtrain.bench.step"


def profiled_step(step: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``step`` inside a profiler range named :data:`STEP_RANGE`, so that :func:`profile_view` can count
    the steps and find the window they cover."""
    import torch

    def wrapped(batch: Any) -> Any:
        with torch.profiler.record_function(STEP_RANGE):
            return step(batch)

    return wrapped


def _op_rows(events: list[Any], key: Callable[[Any], float], top: int) -> list[dict[str, Any]]:
    total = sum(key(e) for e in events) or 1.0
    ranked = [e for e in sorted(events, key=key, reverse=True) if key(e) > 0][:top]
    return [{"op": e.key, "self_seconds": key(e) / 1e6, "share": key(e) / total, "calls": int(e.count)} for e in ranked]


def _union_us(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of (start, end) intervals, in their unit."""
    covered, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b <= end:
            continue
        covered += b - max(a, end)
        end = b
    return covered


def profile_view(prof: Any, top: int, device_type: str = "cpu", skip_steps: int = 0) -> dict[str, Any]:
    """What a profiled row spent its steps on (the steps are :func:`profiled_step`'s ranges; the first
    ``skip_steps``, the warm-up with any compilation, are left out of the counts and the window, not of the
    operator tables):

    - ``host_ops``: the ``top`` operators by self CPU time (the Python/dispatcher side of the step);
    - ``device_ops``: on CUDA, the ``top`` kernels and copies by device time (empty on a CPU);
    - ``launches_per_step``: on CUDA, device kernels and memory operations per step; on a CPU (no launches),
      the ATen operators the dispatcher ran per step, the host work a launch stands for;
    - ``device_idle_fraction``: on CUDA, the share of the steps' window (first step's start to the later of the
      last step's end and its last kernel's end) in which no kernel or copy ran; None on a CPU;
    - ``step_ms``: the window over the steps.
    """
    events = list(prof.events() or [])
    # the host's ranges (on CUDA the profiler mirrors each range on the GPU's timeline too: not a step, not work)
    steps = sorted(
        (e for e in events if e.name == STEP_RANGE and not _is_device_event(e)), key=lambda e: e.time_range.start
    )
    steps = steps[skip_steps:] if len(steps) > skip_steps else steps
    averages = [e for e in prof.key_averages() if e.key != STEP_RANGE]
    host = averages
    view: dict[str, Any] = {
        "steps": len(steps),
        "host_ops": _op_rows(host, lambda e: float(getattr(e, "self_cpu_time_total", 0.0) or 0.0), top),
        "device_ops": [],
        "launches_per_step": None,
        "device_idle_fraction": None,
        "step_ms": None,
    }
    if not steps:
        return view
    start = min(e.time_range.start for e in steps)
    end = max(e.time_range.end for e in steps)
    on_device = [e for e in events if _is_device_event(e) and e.name != STEP_RANGE] if device_type == "cuda" else []
    if on_device:
        view["device_ops"] = _op_rows(
            [e for e in averages if float(getattr(e, "self_device_time_total", 0.0) or 0.0) > 0],
            lambda e: float(getattr(e, "self_device_time_total", 0.0) or 0.0),
            top,
        )
        inside = [e for e in on_device if e.time_range.start >= start]
        end = max([end, *(e.time_range.end for e in inside)])
        busy = _union_us([(e.time_range.start, e.time_range.end) for e in inside])
        view["device_idle_fraction"] = max(0.0, 1.0 - busy / (end - start)) if end > start else None
        view["launches_per_step"] = len(inside) / len(steps)
    elif device_type != "cuda":
        aten = [e for e in events if e.name.startswith("aten::") and start <= e.time_range.start <= end]
        view["launches_per_step"] = len(aten) / len(steps)
    view["step_ms"] = (end - start) / 1000.0 / len(steps)
    return view


def _is_device_event(event: Any) -> bool:
    """A kernel or memory operation that ran on the GPU (the profiler's CUDA-side events; not the GPU-side
    mirrors of ``record_function`` ranges, which span whole steps)."""
    kind = getattr(event, "device_type", None)
    return kind is not None and str(kind).endswith("CUDA") and not getattr(event, "is_user_annotation", False)
