"""Time to quality (``speechtrain bench --time-to TARGET``): how long a configuration trains until it is good enough.

Each seed trains the configuration in a child ``speechtrain train`` process for at most ``minutes`` of wall time,
evaluated every ``train.eval_every`` steps with the family's quality metrics (:mod:`speechtrain.quality`). The
orchestrator reads the run's eval rows as they are written; at the first row where every goal holds it stops the
child (SIGTERM: the trainer saves and stops at the next step). Per seed: the curve (each evaluation's step, training
seconds, audio seconds seen and metric values), and the training seconds, audio and steps to the target (None: not
reached within the limit). The curves and the table are on disk after every evaluation (``time_to.json``, and the
PNG at the end): a kill keeps them.

A goal names any eval-row metric (``pesq>=3.0``, ``stoi>=0.9``, ``mcd_dtw<=8``, ``cer<=0.1``: the judge's CER plugs in
by name); a name alone with ``=`` takes the direction from :data:`speechtrain.quality.catalog.METRICS`. The time
counted is the trainer's ``train_seconds`` (evaluations left out), so the target's time does not depend on how often
it is scored; a loaded machine slows it, so the machine's load is recorded beside it.
"""

from __future__ import annotations

import math
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from speechtrain.errors import UserError
from speechtrain.logs import get_logger
from speechtrain.quality.catalog import METRICS

log = get_logger(__name__)

_GOAL = re.compile(r"^\s*([A-Za-z_][\w.]*)\s*(>=|<=|=)\s*([-+0-9.eE]+)\s*$")


@dataclass(frozen=True)
class Goal:
    """One condition of the target: ``metric`` (an eval-row key) at least (``max``) or at most (``min``) ``value``."""

    metric: str
    mode: str
    value: float

    def met(self, row: dict[str, Any]) -> bool:
        v = row.get(self.metric)
        if not isinstance(v, (int, float)) or not math.isfinite(v):
            return False
        return v >= self.value if self.mode == "max" else v <= self.value

    def text(self) -> str:
        return f"{self.metric} {'>=' if self.mode == 'max' else '<='} {self.value:g}"


def parse_goals(text: str) -> list[Goal]:
    """``pesq>=3.0,stoi>=0.9`` (or ``metric=value``: the direction is the metric's own) as goals."""
    goals = []
    for part in text.split(","):
        m = _GOAL.match(part)
        if not m:
            raise UserError(
                f"--time-to {text!r}: write METRIC>=VALUE or METRIC<=VALUE, comma-separated (e.g. pesq>=3.0,stoi>=0.9)"
            )
        name, op, value = m.group(1), m.group(2), float(m.group(3))
        if op == "=":
            if name not in METRICS:
                raise UserError(f"--time-to {part.strip()!r}: {name} is not a known metric; write {name}>= or {name}<=")
            op = ">=" if METRICS[name].mode == "max" else "<="
        goals.append(Goal(name, "max" if op == ">=" else "min", value))
    return goals


@dataclass
class SeedRun:
    """One seed: every evaluation (``step``, ``train_seconds``, ``audio_seconds``, the goals' metrics) and where the
    target was first met (None: not within the limit)."""

    seed: int
    run_dir: str
    points: list[dict[str, float]] = field(default_factory=list)
    #: what the run is when runs of different settings are read side by side (``--time-to-runs NAME=RUN_DIR``)
    label: str = ""
    seconds_to_target: float | None = None
    audio_to_target: float | None = None
    step_to_target: int | None = None
    stopped: str = "running"
    #: steps after which a run trained before 2026-11-29 was resumed: its ``train_seconds`` restarted in each process
    #: (a resume now continues the checkpoint's count), so the time axis continues from the last evaluation before
    #: it (the earlier process's time past that evaluation is lost)
    resumed_after: list[int] = field(default_factory=list)
    _offset: float = 0.0

    def name(self) -> str:
        """The run in a legend or a table: its label, else its seed."""
        return self.label or f"seed {self.seed}"

    def add(self, row: dict[str, Any], goals: list[Goal]) -> bool:
        """Record an eval row; True when it is the first to meet every goal."""
        seconds = float(row.get("train_seconds", math.nan))
        if self.points and seconds + self._offset < self.points[-1]["train_seconds"]:  # a resumed process
            self.resumed_after.append(int(self.points[-1]["step"]))
            self._offset = self.points[-1]["train_seconds"]
        point = {
            "step": float(row.get("step", math.nan)),
            "train_seconds": seconds + self._offset,
            "audio_seconds": float(row.get("audio_seconds_seen", math.nan)),
        }
        for g in goals:
            v = row.get(g.metric)
            point[g.metric] = float(v) if isinstance(v, (int, float)) else math.nan
        self.points.append(point)
        if self.seconds_to_target is None and all(g.met(row) for g in goals):
            self.seconds_to_target, self.audio_to_target = point["train_seconds"], point["audio_seconds"]
            self.step_to_target = int(point["step"])
            return True
        return False


@dataclass
class TimeToReport:
    """The time-to-quality report of one configuration over its seeds."""

    config: str
    goals: list[Goal]
    minutes: float
    runs: list[SeedRun]
    machine: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def markdown(self) -> str:
        target = " and ".join(g.text() for g in self.goals)
        reached = [r for r in self.runs if r.seconds_to_target is not None]
        lines = [
            f"| {self.config} seed | evaluations | last {' / '.join(g.metric for g in self.goals)} | "
            f"training s to {target} | audio s to it |",
            "| --- | --- | --- | --- | --- |",
        ]
        for r in self.runs:
            last = r.points[-1] if r.points else {}
            values = " / ".join(f"{last.get(g.metric, math.nan):.3f}" for g in self.goals)
            if r.seconds_to_target is None:
                when = f"not reached in {self.minutes:g} min ({r.stopped})"
                audio = "-"
            else:
                when, audio = f"{r.seconds_to_target:.0f}", f"{r.audio_to_target:.0f}"
            lines.append(f"| {r.label or r.seed} | {len(r.points)} | {values} | {when} | {audio} |")
        for r in self.runs:
            if r.resumed_after:
                lines.append(
                    f"\n{r.name()} was resumed after step(s) {', '.join(map(str, r.resumed_after))}: its training "
                    "seconds undercount the time each earlier process trained past its last evaluation"
                )
        if reached:
            times = sorted(r.seconds_to_target for r in reached if r.seconds_to_target is not None)
            lines.append(
                f"\nreached {len(reached)}/{len(self.runs)}; median {times[len(times) // 2]:.0f} s "
                f"[{times[0]:.0f}, {times[-1]:.0f}]"
            )
        else:
            lines.append(f"\nreached 0/{len(self.runs)} within {self.minutes:g} minutes")
        return "\n".join(lines)


def eval_rows(run_dir: Path) -> list[dict[str, Any]]:
    """The eval rows written so far (a half-written last line is left for the next read)."""
    from speechtrain.train.metrics import read_metrics

    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        return []
    try:
        return read_metrics(run_dir, split="eval")
    except ValueError:  # the writer is mid-line
        return []


def seed_from_run(run_dir: Path, goals: list[Goal], seed: int = 0, stopped: str = "read", label: str = "") -> SeedRun:
    """A finished (or running) run's curve and time to target, from its ``metrics.jsonl``."""
    run = SeedRun(seed, str(run_dir), stopped=stopped, label=label)
    for row in eval_rows(run_dir):
        run.add(row, goals)
    return run


def machine_load() -> dict[str, Any]:
    """The machine and its load now (``os.getloadavg``): the context every wall time is read in."""
    one, five, fifteen = os.getloadavg()
    return {"cpus": os.cpu_count(), "load_1m": one, "load_5m": five, "load_15m": fifteen}


def train_seed(cfg_path: Path, overrides: list[str], run: SeedRun, goals: list[Goal], on_row: Any) -> None:
    """Train one seed in a child ``speechtrain train`` until every goal holds (then SIGTERM) or it stops itself."""
    cmd = [sys.executable, "-m", "speechtrain", "train", "--config", str(cfg_path), *overrides]
    log.info(f"[time-to] seed {run.seed}: {' '.join(cmd[3:])}")
    with open(Path(run.run_dir).parent / f"seed_{run.seed}.log", "w") as out:
        child = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        seen = 0
        while True:
            done = child.poll() is not None
            rows = eval_rows(Path(run.run_dir))
            for row in rows[seen:]:
                if run.add(row, goals) and child.poll() is None:
                    child.send_signal(signal.SIGTERM)  # the trainer saves and stops at the next step
                    run.stopped = "target"
                on_row()
            seen = len(rows)
            if done:
                break
            time.sleep(2.0)
    if run.stopped == "running":
        run.stopped = "time limit" if child.returncode == 0 else f"exit {child.returncode}"


def run_time_to(
    cfg: Any,
    goals: list[Goal],
    minutes: float,
    repeat: int,
    out_dir: str | Path,
    plot: str | Path | None = None,
) -> TimeToReport:
    """Train ``cfg`` with seeds ``train.seed``.. ``+ repeat - 1``, each for at most ``minutes``, into
    ``out_dir/seed_<n>``; ``out_dir/time_to.json`` is rewritten after every evaluation."""
    import yaml

    if minutes <= 0 or repeat < 1:
        raise UserError("--time-minutes must be > 0 and --repeat >= 1")
    out = Path(out_dir)
    if out.exists() and any(out.iterdir()):
        raise UserError(f"--quality-out {out} holds an earlier report's runs: give another folder (or remove it)")
    out.mkdir(parents=True, exist_ok=True)
    cfg_path = out / "config.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
    name = Path(cfg.train.output_dir).name
    report = TimeToReport(name, goals, minutes, [], machine_load())

    def save() -> None:
        write_report(report, out / "time_to.json")

    for i in range(repeat):
        seed = cfg.train.seed + i
        run = SeedRun(seed, str(out / f"seed_{seed}"))
        report.runs.append(run)
        overrides = [
            f"train.seed={seed}",
            f"train.output_dir={run.run_dir}",
            f"train.max_minutes={minutes}",
            "train.max_steps=100000000",
            "train.auto_resume=false",
            "train.progress=false",
        ]
        train_seed(cfg_path, overrides, run, goals, save)
        report.machine = machine_load()
        save()
    if plot:
        write_curves(report, plot)
    return report


def read_runs(specs: list[str], goals: list[Goal]) -> list[SeedRun]:
    """``--time-to-runs``: each ``RUN_DIR`` or ``NAME=RUN_DIR`` (runs of different settings read side by side, the
    name in the legend and the table); a folder without ``metrics.jsonl`` is refused by name."""
    runs = []
    for i, spec in enumerate(specs):
        label, sep, where = spec.partition("=")
        if not sep:
            label, where = "", spec
        run_dir = Path(where)
        if not (run_dir / "metrics.jsonl").is_file():
            raise UserError(f"--time-to-runs {spec}: {run_dir} has no metrics.jsonl (give a run folder of train)")
        runs.append(seed_from_run(run_dir, goals, seed=i, label=label))
    return runs


def write_report(report: TimeToReport, path: Path) -> None:
    import json

    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(report.to_dict(), indent=1))
    tmp.replace(path)


def _when(report: TimeToReport) -> str:
    """What the load in the title is: runs read afterwards (``--time-to-runs``) did not train under it."""
    return " when read, not while training" if report.machine.get("when") == "read" else ""


def write_curves(report: TimeToReport, path: str | Path) -> Path:
    """Quality against training wall time and against audio seen, one row of panels per goal, one line per seed,
    the goal as a dashed line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(report.goals)
    fig, axes = plt.subplots(n, 2, figsize=(10, 3.2 * n), squeeze=False)
    for row, goal in enumerate(report.goals):
        for col, (x, label) in enumerate((("train_seconds", "training wall s"), ("audio_seconds", "audio seen (s)"))):
            ax = axes[row][col]
            for run in report.runs:
                pts = [p for p in run.points if math.isfinite(p.get(goal.metric, math.nan))]
                ax.plot([p[x] for p in pts], [p[goal.metric] for p in pts], marker="o", ms=3, label=run.name())
            ax.axhline(goal.value, ls="--", color="grey", label=goal.text())
            ax.set_xlabel(label)
            ax.set_ylabel(goal.metric)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
    load = report.machine.get("load_1m")
    fig.suptitle(
        f"{report.config}: time to {' and '.join(g.text() for g in report.goals)}"
        + (f" (load {load:.1f} on {report.machine.get('cpus')} CPUs{_when(report)})" if load is not None else ""),
        fontsize=10,
    )
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return out
