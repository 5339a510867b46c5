"""Run directories as the UI lists them: found by scanning, whoever started them (UI or CLI).

Status comes from the files alone, so a reloaded page or a restarted UI sees the same thing:
``running`` (its UI process is alive, another process holds the run's lock (a ``speechtrain train``
started elsewhere), or metrics.jsonl was written in the last minute by a run started elsewhere; at the step its
``progress.json`` says, written every step, where metrics rows come every ``train.log_every`` steps),
``finished`` (reached train.max_steps), ``stopped`` (a checkpoint short of max_steps: resumable),
``failed`` (the command ended with an error; the message is kept) or ``starting`` (no config.yaml yet: the
data is being prepared).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from speechtrain.train.metrics import read_progress
from speechtrain.train.rundir import RunDir, lock_holder
from speechtrain.ui import backend, jobs

ACTIVE_SECONDS = 60.0  # metrics.jsonl younger than this: a run started outside the UI is taken as running


@dataclass
class RunInfo:
    name: str
    path: Path
    status: str
    model: str
    step: int
    max_steps: int | None
    last_loss: float | None
    updated: float
    command: str = ""
    error: str = ""
    best: BestQuality | None = None  # the run's best quality metric and its step

    def row(self) -> list[Any]:
        steps = f"{self.step}/{self.max_steps}" if self.max_steps else str(self.step)
        loss = "" if self.last_loss is None else f"{self.last_loss:.4g}"
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.updated)) if self.updated else ""
        best = "" if self.best is None else str(self.best)
        return [self.name, self.status, self.model, steps, best, loss, when, str(self.path), self.error]


COLUMNS = ["run", "status", "model", "step", "best quality @ step", "last loss", "updated", "directory", "error"]


def job_folder(run_dir: str | Path) -> Path:
    """The UI's job files of a run (its command, log and exit status)."""
    return RunDir(run_dir).ui


def is_run_dir(path: str | Path) -> bool:
    """A run, or one the UI has started that has not written its config yet."""
    return RunDir(path).is_run() or jobs.is_job(job_folder(path))


def find_runs(root: str | Path, depth: int = 2) -> list[Path]:
    """Run directories under ``root`` (itself, children, grandchildren)."""
    root = Path(root)
    found: list[Path] = []
    level = [root]
    for _ in range(depth + 1):
        nxt: list[Path] = []
        for d in level:
            if not d.is_dir() or d.name in (*RunDir.OWN_FOLDERS, ".ui"):
                continue
            if is_run_dir(d):
                found.append(d)
            else:
                nxt.extend(p for p in sorted(d.iterdir()) if p.is_dir())
        level = nxt
    return found


def run_info(run_dir: str | Path) -> RunInfo:
    run_dir = Path(run_dir)
    cfg = backend.run_config(run_dir)
    rows = backend.read_metrics(run_dir)
    train_rows = [r for r in rows if r.get("split", "train") == "train"]
    ckpts = backend.checkpoint_steps(run_dir)
    step = max([int(r.get("step", 0)) for r in train_rows] + ckpts + [0])
    max_steps = (cfg.get("train") or {}).get("max_steps")
    model = (cfg.get("model") or {}).get("name", "")
    loss = train_rows[-1].get("loss") if train_rows else None
    run = RunDir(run_dir)
    updated = max([p.stat().st_mtime for p in (run.metrics, run.config) if p.exists()] + [0.0])
    job = jobs.status(job_folder(run_dir))
    error = ""
    if job.status == "running":
        status = "running" if cfg else "starting"
    elif lock_holder(run_dir) is not None:  # a `speechtrain train` of the command line trains it now
        status = "running"
    elif max_steps and step >= max_steps and ckpts:
        status = "finished"
    elif job.status in ("failed", "gone"):
        status, error = "failed", job.error or f"exit code {job.exit_code}"
    elif job.status == "none" and updated and time.time() - updated < ACTIVE_SECONDS and not ckpts:
        status = "running"  # started outside the UI, writing right now
    elif ckpts:
        status = "stopped"
    else:
        status = "empty"
    if status == "running":  # metrics rows come every log_every steps: the step it has reached is in progress.json
        step = max(step, read_progress(run_dir) or 0)
    updated = max(updated, job.started or 0.0)
    best = best_quality(rows, (cfg.get("train") or {}).get("best_metric"))
    return RunInfo(run_dir.name, run_dir, status, model, step, max_steps, _num(loss), updated, job.command, error, best)


@dataclass(frozen=True)
class RunHeader:
    """What the page's header row shows for a run: its recipe (as the recipe list names it), dataset, format."""

    recipe: str | None
    data: str | None
    fmt: str | None


def header_of(info: RunInfo, recipes: list[str]) -> RunHeader:
    """The header of the run ``info``: the recipe of the command that started it (``--config``; by name when it is
    one of ``recipes``), the dataset and format of its saved config (of the command while it starts)."""
    import shlex

    try:
        argv = shlex.split(info.command)
    except ValueError:
        argv = []
    recipe = None
    if "--config" in argv[:-1]:
        given = argv[argv.index("--config") + 1]
        recipe = Path(given).stem if Path(given).stem in recipes else given
    given_data = dict(a.split("=", 1) for a in argv if a.startswith(("data.manifest=", "data.format=")))
    data = (backend.run_config(info.path).get("data") or {}) if info.path.is_dir() else {}
    manifest = data.get("manifest") or given_data.get("data.manifest")
    fmt = data.get("format") or given_data.get("data.format")
    return RunHeader(recipe, None if manifest is None else str(manifest), None if fmt is None else str(fmt))


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def list_runs(root: str | Path) -> list[RunInfo]:
    """Every run under ``root``, most recently updated first."""
    return sorted((run_info(p) for p in find_runs(root)), key=lambda r: -r.updated)


# ------------------------------------------------------------------------------------------ live view
LOSS_SKIP = {"step", "epoch", "samples_seen", "audio_seconds_seen", "oom_recoveries", "nonfinite_steps"}


def loss_series(rows: list[dict[str, Any]]) -> list[tuple[int, str, float]]:
    """(step, series, value) of the train losses (keys ``loss`` and ``*_loss``/``loss_*``/``*_ce``)."""
    out = []
    for r in rows:
        if r.get("split", "train") != "train":
            continue
        for k, v in r.items():
            if _num(v) is not None and k not in LOSS_SKIP and ("loss" in k or k.endswith(("_ce", "_l1"))):
                out.append((int(r["step"]), k, float(v)))
    return out


#: eval-row fields that say how and when the evaluation was taken, not how good the model is (not plotted)
QUALITY_BOOKKEEPING = ("quality_items", "quality_seconds", "quality_share", "audio_seconds_seen", "train_seconds")


def eval_series(rows: list[dict[str, Any]]) -> list[tuple[int, str, float]]:
    """(step, series, value) of the eval scores (the task's eval losses and its quality metrics of
    :mod:`speechtrain.quality`) in their own units, each named with its unit and which way is better
    (``mcd_dtw (dB, lower is better)``); the Train tab draws each on a small chart of its own. Divided by their first
    value (as they once were), a KL term that rose 1.66x flattened mcd_dtw's 63.27 -> 61.66 dB into a line at 1."""
    out = []
    for r in rows:
        if r.get("split") != "eval":
            continue
        for k, v in r.items():
            if k != "step" and k not in QUALITY_BOOKKEEPING and _num(v) is not None:
                out.append((int(r["step"]), metric_label(k), float(v)))
    return out


def metric_label(key: str) -> str:
    """An eval key with its unit and direction where :mod:`speechtrain.quality.catalog` knows them."""
    from speechtrain.quality.catalog import METRICS

    spec = METRICS.get(key)
    if spec is None or key == "loss":
        return key
    better = "lower" if spec.mode == "min" else "higher"
    return f"{key} ({spec.unit + ', ' if spec.unit else ''}{better} is better)"


@dataclass(frozen=True)
class BestQuality:
    """A run's best value of its quality metric in its eval rows, and the step it was reached at."""

    metric: str
    value: float
    step: int

    def __str__(self) -> str:
        from speechtrain.quality.catalog import METRICS

        unit = METRICS[self.metric].unit if self.metric in METRICS else ""
        return f"{self.metric} {self.value:.4g}{' ' + unit if unit else ''} @ {self.step}"


def best_quality(rows: list[dict[str, Any]], best_metric: str | None = None) -> BestQuality | None:
    """The best eval value of the run's quality metric: ``train.best_metric`` when set, else the first of the
    kinds' default metrics (mcd_dtw, mcd, macro_f1) the eval rows carry, else any catalogued quality metric they
    carry; None when they carry none."""
    from speechtrain.quality.catalog import DEFAULT_BEST, METRICS

    evals = [r for r in rows if r.get("split") == "eval"]
    keys = list(dict.fromkeys(k for r in evals for k, v in r.items() if _num(v) is not None))
    name, _, mode = (best_metric or "").partition(":")
    order = [name] if name else []
    order += [*dict.fromkeys(DEFAULT_BEST.values()), *(k for k in METRICS if k != "loss")]
    metric = next((k for k in order if k in keys), None)
    if metric is None:
        return None
    lower = (mode or (METRICS[metric].mode if metric in METRICS else "min")) == "min"
    scored = [(float(r[metric]), int(r.get("step", 0))) for r in evals if _num(r.get(metric)) is not None]
    scored = [sv for sv in scored if math.isfinite(sv[0])]
    if not scored:
        return None
    value, step = min(scored, key=lambda sv: (sv[0] if lower else -sv[0], sv[1]))
    return BestQuality(metric, value, step)


def speed_series(rows: list[dict[str, Any]]) -> list[tuple[int, str, float]]:
    """audio-s/s and the data-wait share (percent) per logged step."""
    out = []
    for r in rows:
        if r.get("split", "train") != "train":
            continue
        if _num(r.get("audio_seconds_per_second")) is not None:
            out.append((int(r["step"]), "audio s/s", float(r["audio_seconds_per_second"])))
        if _num(r.get("data_wait_fraction")) is not None:
            out.append((int(r["step"]), "data wait %", 100.0 * float(r["data_wait_fraction"])))
    return out


def memory_series(rows: list[dict[str, Any]]) -> list[tuple[int, str, float]]:
    """Memory columns (``mem_*`` bytes) in GiB; columns equal at every step are one series named by both
    (``rss = peak_rss``): drawn apart, the later one hid the other and left a legend entry without a line."""
    by_key: dict[str, list[tuple[int, float]]] = {}
    for r in rows:
        if r.get("split", "train") != "train":
            continue
        for k, v in r.items():
            if k.startswith("mem_") and _num(v) is not None:
                by_key.setdefault(k[4:], []).append((int(r["step"]), float(v) / 2**30))
    names: dict[str, str] = {}
    for key, points in by_key.items():
        same = next((k for k in names if names[k] == k and by_key[k] == points), None)
        names[key] = same if same is not None else key
    merged = {k: " = ".join(n for n in by_key if names[n] == k) for k in by_key if names[k] == k}
    out = [(step, merged[key], value) for key in merged for step, value in by_key[key]]
    return sorted(out, key=lambda r: r[0])


def events(rows: list[dict[str, Any]]) -> list[list[Any]]:
    """Events the trainer reported (OOM recovered, precision fallback, numerics skips, warnings)."""
    out: list[list[Any]] = []
    last_nonfinite = 0
    for r in rows:
        for e in r.get("events") or []:
            detail = ", ".join(f"{k}={v}" for k, v in e.items() if k not in ("event", "step"))
            out.append([e.get("step", r.get("step")), e.get("event", "event"), detail])
        n = r.get("nonfinite_steps")
        if isinstance(n, int) and n > last_nonfinite:
            out.append([r.get("step"), "nonfinite_skipped", f"{n - last_nonfinite} step(s) skipped (NaN/inf)"])
            last_nonfinite = n
        if r.get("warning"):
            out.append([r.get("step"), "warning", r["warning"]])
    return out
