"""Time-to-quality (``speechtrain bench --quality TARGET``): is a speed-up a gain at equal quality?

Each configuration (a variant: the config with some overrides, e.g. ``accel.precision=fp32`` against
``accel.precision=bf16``) trains the same model on the same data for the same seconds of audio
(``train.max_audio_seconds``), evaluated every ``train.eval_every`` steps with the family's quality metric
(:mod:`speechtrain.quality`); ``repeat`` seeds per variant, interleaved (seed 1 of every variant, then seed 2...)
so that a change in the machine's load falls on every variant alike. Per variant: the quality after equal audio
(median and range over the seeds), the training wall time (evaluations left out) and its audio-s/s, and the wall
time and audio to the first evaluation at ``target``. A variant whose median quality lies beyond the first
variant's worst seed (outside its run-to-run spread) is marked: its speed-up costs quality.

Quality after equal audio does not depend on the machine's load; wall times do (a loaded machine slows every
variant, not always alike): compare wall times only between variants of one report.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from speechtrain.bench.ablate import Spread
from speechtrain.config import Config, apply_overrides, build_config
from speechtrain.errors import UserError
from speechtrain.logs import get_logger
from speechtrain.quality.catalog import METRICS, resolve_best
from speechtrain.registry import quality_kind
from speechtrain.train.metrics import read_metrics

log = get_logger(__name__)

#: the variants compared when none are given: the same run in fp32 and in bf16 (the approximate speed-up)
DEFAULT_VARIANTS = ("fp32:accel.precision=fp32", "bf16:accel.precision=bf16")


@dataclass(frozen=True)
class QualityVariant:
    """A configuration compared: a name and its ``key=value`` overrides."""

    name: str
    overrides: tuple[str, ...]

    @classmethod
    def parse(cls, text: str) -> QualityVariant:
        """``NAME:key=value,key=value`` (``NAME:`` alone: the config as it is)."""
        name, sep, rest = text.partition(":")
        if not sep or not name.strip():
            raise UserError(
                f"--quality-variant {text!r}: write NAME:key=value,key=value (e.g. bf16:accel.precision=bf16)"
            )
        return cls(name.strip(), tuple(o.strip() for o in rest.split(",") if o.strip()))


@dataclass
class QualityRun:
    """One variant trained with one seed: the metric after equal audio, the audio and training wall time it took,
    and the first evaluation at the target (None: not reached), with every evaluation's (audio s, value)."""

    variant: str
    seed: int
    quality: float
    audio_seconds: float
    train_seconds: float
    seconds_to_target: float | None
    audio_to_target: float | None
    curve: list[tuple[float, float]] = field(default_factory=list)


@dataclass
class QualityRow:
    """A variant over its seeds."""

    variant: str
    quality: Spread | None
    train_seconds: Spread | None
    audio_per_second: Spread | None
    seconds_to_target: Spread | None
    reached: int
    runs: int
    verdict: str


@dataclass
class QualityBench:
    """The time-to-quality report."""

    metric: str
    mode: str
    target: float
    audio_seconds: float
    rows: list[QualityRow]
    runs: list[QualityRun]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def markdown(self) -> str:
        """The rows as a markdown table (median [low, high] over the seeds)."""
        better = "higher" if self.mode == "max" else "lower"
        head = (
            f"| configuration | {self.metric} ({better} is better) after {self.audio_seconds:g} s of audio "
            f"| train wall s | audio-s/s | wall s to {self.metric} {'>=' if self.mode == 'max' else '<='} "
            f"{self.target:g} | reached | verdict |\n| --- | --- | --- | --- | --- | --- | --- |"
        )
        lines = [head]
        for r in self.rows:
            lines.append(
                f"| {r.variant} | {_spread(r.quality, 3)} | {_spread(r.train_seconds, 1)} | "
                f"{_spread(r.audio_per_second, 2)} | {_spread(r.seconds_to_target, 1)} | {r.reached}/{r.runs} | "
                f"{r.verdict} |"
            )
        return "\n".join(lines)


def _spread(s: Spread | None, digits: int) -> str:
    if s is None:
        return "-"
    if s.count == 1:
        return f"{s.median:.{digits}f}"
    return f"{s.median:.{digits}f} [{s.low:.{digits}f}, {s.high:.{digits}f}]"


def reached(value: float, target: float, mode: str) -> bool:
    return value >= target if mode == "max" else value <= target


def run_from_rows(
    variant: str, seed: int, rows: list[dict[str, Any]], metric: str, mode: str, target: float
) -> QualityRun:
    """A :class:`QualityRun` from a run's eval rows (``audio_seconds_seen``, ``train_seconds`` and the metric)."""
    scored = [r for r in rows if isinstance(r.get(metric), (int, float)) and math.isfinite(r[metric])]
    if not scored:
        raise UserError(f"{variant} (seed {seed}): no evaluation reported {metric}; see the run's metrics.jsonl")
    last = scored[-1]
    first = next((r for r in scored if reached(float(r[metric]), target, mode)), None)
    return QualityRun(
        variant,
        seed,
        float(last[metric]),
        float(last.get("audio_seconds_seen", math.nan)),
        float(last.get("train_seconds", math.nan)),
        float(first["train_seconds"]) if first is not None and "train_seconds" in first else None,
        float(first["audio_seconds_seen"]) if first is not None and "audio_seconds_seen" in first else None,
        [(float(r.get("audio_seconds_seen", math.nan)), float(r[metric])) for r in scored],
    )


def summarise(variants: list[str], runs: list[QualityRun], mode: str) -> list[QualityRow]:
    """One row per variant; a variant whose median quality is worse than the first variant's worst seed is marked
    as costing quality (with one seed each there is no spread to judge by)."""
    rows = []
    for name in variants:
        mine = [r for r in runs if r.variant == name]
        to_target = [r.seconds_to_target for r in mine if r.seconds_to_target is not None]
        rows.append(
            QualityRow(
                name,
                Spread.of([r.quality for r in mine]),
                Spread.of([r.train_seconds for r in mine]),
                Spread.of([r.audio_seconds / r.train_seconds for r in mine if r.train_seconds > 0]),
                Spread.of(to_target) if len(to_target) == len(mine) else None,
                len(to_target),
                len(mine),
                "",
            )
        )
    base = rows[0].quality if rows else None
    for row in rows:
        row.verdict = verdict(row.quality, base, mode) if row is not rows[0] else "reference"
    return rows


def verdict(quality: Spread | None, base: Spread | None, mode: str) -> str:
    """Whether a variant keeps the reference's quality: its median within (or better than) the reference's range."""
    if quality is None or base is None:
        return "no value"
    if quality.count < 2 or base.count < 2:
        return "one seed: no spread to judge by"
    worst = base.low if mode == "max" else base.high
    worse = quality.median < worst if mode == "max" else quality.median > worst
    return "costs quality (beyond the reference's spread)" if worse else "keeps quality (within the spread)"


def run_quality_bench(
    cfg: Config,
    target: float,
    *,
    audio_seconds: float,
    repeat: int = 3,
    variants: list[str] | None = None,
    metric: str | None = None,
    out_dir: str | Path = "runs/quality_bench",
) -> QualityBench:
    """Train every variant ``repeat`` times (seeds ``train.seed``, +1, ...) for ``audio_seconds`` of audio into
    ``out_dir/<variant>/seed_<n>`` and report time-to-quality on ``metric`` (default: ``train.best_metric``, else the
    family's default quality metric)."""
    from speechtrain.recipes.train import train_from_config

    if audio_seconds <= 0 or repeat < 1:
        raise UserError("--quality-audio must be > 0 and --repeat >= 1")
    parsed = [QualityVariant.parse(v) for v in (variants or DEFAULT_VARIANTS)]
    best = resolve_best(quality_kind(cfg.model.name) or "", metric or cfg.train.best_metric, cfg.train.quality_items)
    if best.name not in METRICS or best.name == "loss":
        raise UserError(f"--quality: {best.name} is not a quality metric of this model; name one with --quality-metric")
    if Path(out_dir).exists() and any(Path(out_dir).iterdir()):
        raise UserError(f"--quality-out {out_dir} holds an earlier report's runs: give another folder (or remove it)")
    runs: list[QualityRun] = []
    for i in range(repeat):  # interleaved: the machine's load drifts over every variant alike
        for v in parsed:
            seed = cfg.train.seed + i
            folder = Path(out_dir) / v.name / f"seed_{seed}"
            extra = [
                f"train.max_audio_seconds={audio_seconds}",
                "train.max_steps=100000000",
                f"train.seed={seed}",
                f"train.output_dir={folder}",
                f"train.best_metric={best.name}",
                "train.auto_resume=false",
                "train.progress=false",  # a bar to 10^8 steps says nothing: the run ends at the audio budget
            ]
            run_cfg = build_config(apply_overrides(cfg.to_dict(), [*v.overrides, *extra]))
            log.info(f"[quality {i + 1}/{repeat}] {v.name}: {' '.join(v.overrides) or '(as configured)'}")
            run_dir, _ = train_from_config(run_cfg)
            rows = read_metrics(run_dir, split="eval")
            runs.append(run_from_rows(v.name, seed, rows, best.name, best.mode, target))
    names = [v.name for v in parsed]
    return QualityBench(best.name, best.mode, target, audio_seconds, summarise(names, runs, best.mode), runs)
