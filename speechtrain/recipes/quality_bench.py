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

Two variants are rungs of the ablation ladder (:func:`speechtrain.bench.ablate.plan_ladder`), named alone:
``fp32`` (the ladder's "speechtrain, all off": fp32, random batches, every change off) and ``autopilot`` (its
"all": what the hardware recommendation switches on, plus bucketing and the config's own tuned sizes). The same
machinery gives the ladder its "quality after equal audio" column (:func:`run_ladder_quality`,
``speechtrain bench --ablate --quality-audio S``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from speechtrain.bench.ablate import AUTOPILOT, QUALITY_REFERENCE, Spread, set_dotted
from speechtrain.config import Config, apply_overrides, build_config
from speechtrain.errors import UserError
from speechtrain.logs import get_logger
from speechtrain.quality.catalog import METRICS, resolve_best
from speechtrain.registry import quality_kind
from speechtrain.train.metrics import read_metrics

if TYPE_CHECKING:
    from speechtrain.bench.ablate import LadderRow

log = get_logger(__name__)

#: the variants compared when none are given: the same run in fp32 and in bf16 (the approximate speed-up)
DEFAULT_VARIANTS = ("fp32:accel.precision=fp32", "bf16:accel.precision=bf16")

#: variants named alone: a rung of the ablation ladder, with every override the ladder sets for it
LADDER_VARIANTS = {"fp32": QUALITY_REFERENCE, "autopilot": AUTOPILOT}


@dataclass(frozen=True)
class QualityVariant:
    """A configuration compared: a name, its ``key=value`` overrides and typed dotted settings (a ladder rung's
    overrides, set before the ``key=value`` ones)."""

    name: str
    overrides: tuple[str, ...]
    settings: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def parse(cls, text: str, builtin: Callable[[], Mapping[str, QualityVariant]] | None = None) -> QualityVariant:
        """``NAME:key=value,key=value`` (``NAME:`` alone: the config as it is), or a name of
        :data:`LADDER_VARIANTS` alone (``builtin()`` gives those variants)."""
        name, sep, rest = text.partition(":")
        if not sep and text.strip() in LADDER_VARIANTS and builtin is not None:
            return builtin()[text.strip()]
        if not sep or not name.strip():
            raise UserError(
                f"--quality-variant {text!r}: write NAME:key=value,key=value (e.g. bf16:accel.precision=bf16), "
                f"or one of {', '.join(LADDER_VARIANTS)} alone (a rung of the ablation ladder)"
            )
        return cls(name.strip(), tuple(o.strip() for o in rest.split(",") if o.strip()))

    def config(self, cfg: Config, extra: Sequence[str] = ()) -> Config:
        """``cfg`` with this variant's settings and overrides, then ``extra``."""
        raw = cfg.to_dict()
        for key, value in self.settings:
            set_dotted(raw, key, value)
        out = build_config(apply_overrides(raw, [*self.overrides, *extra]))
        out._source_dir = cfg.source_dir  # the YAML's folder (a user's own model code), lost in the raw dict
        return out


def ladder_variants(cfg: Config) -> dict[str, QualityVariant]:
    """:data:`LADDER_VARIANTS` for ``cfg`` on its device: the ladder's own rungs (:func:`plan_ladder` without the
    tuner: the config's own per-bucket sizes, if any), each with every override the ladder sets for it."""
    from speechtrain.bench.ablate import plan_ladder, row_overrides
    from speechtrain.bench.measure import probe
    from speechtrain.device import resolve_device

    device_type = resolve_device(cfg.train.device).type
    rungs = {v.key: v for v in plan_ladder(cfg.data, device_type, probe())}
    return {
        name: QualityVariant(name, (), tuple(row_overrides(rungs[key], device_type).items()))
        for name, key in LADDER_VARIANTS.items()
    }


def parse_variants(cfg: Config, texts: Sequence[str] | None) -> list[QualityVariant]:
    """The ``--quality-variant`` texts as variants; ``autopilot`` alone is compared against ``fp32`` (the ladder's
    "speechtrain, all off"), which comes first as the reference."""
    cache: dict[str, QualityVariant] = {}

    def builtin() -> Mapping[str, QualityVariant]:
        if not cache:
            cache.update(ladder_variants(cfg))
        return cache

    texts = list(texts or DEFAULT_VARIANTS)
    if [t.strip() for t in texts] == ["autopilot"]:
        texts.insert(0, "fp32")
    parsed = [QualityVariant.parse(t, builtin) for t in texts]
    names = [v.name for v in parsed]
    if len(set(names)) != len(names):
        raise UserError(f"--quality-variant: each variant needs its own name, got {', '.join(names)}")
    return parsed


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
    #: what each variant sets (``key=value``: a ladder rung's settings, then its overrides)
    variants: dict[str, list[str]] = field(default_factory=dict)

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


def reached(value: float, target: float | None, mode: str) -> bool:
    if target is None:
        return False
    return value >= target if mode == "max" else value <= target


def run_from_rows(
    variant: str, seed: int, rows: list[dict[str, Any]], metric: str, mode: str, target: float | None
) -> QualityRun:
    """A :class:`QualityRun` from a run's eval rows (``audio_seconds_seen``, ``train_seconds`` and the metric);
    ``target`` None: no target (the ladder's column)."""
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
    if audio_seconds <= 0 or repeat < 1:
        raise UserError("--quality-audio must be > 0 and --repeat >= 1")
    best = quality_metric(cfg, metric)
    parsed = parse_variants(cfg, variants)
    check_out_dir(out_dir)
    runs: list[QualityRun] = []
    for i in range(repeat):  # interleaved: the machine's load drifts over every variant alike
        for v in parsed:
            seed = cfg.train.seed + i
            log.info(f"[quality {i + 1}/{repeat}] {v.name}: {_describe(v)}")
            rows = train_for_audio(cfg, v, seed, Path(out_dir) / v.name / f"seed_{seed}", audio_seconds, best.name)
            runs.append(run_from_rows(v.name, seed, rows, best.name, best.mode, target))
    names = [v.name for v in parsed]
    sets = {v.name: [*(f"{k}={val}" for k, val in v.settings), *v.overrides] for v in parsed}
    return QualityBench(best.name, best.mode, target, audio_seconds, summarise(names, runs, best.mode), runs, sets)


def _describe(v: QualityVariant) -> str:
    parts = [f"{k}={val}" for k, val in v.settings if not k.startswith("train.")] + list(v.overrides)
    return " ".join(parts) or "(as configured)"


def quality_metric(cfg: Config, metric: str | None) -> Any:
    """The metric judged (``--quality-metric``, else ``train.best_metric``'s, else the family's default)."""
    best = resolve_best(quality_kind(cfg.model.name) or "", metric or cfg.train.best_metric, cfg.train.quality_items)
    if best.name not in METRICS or best.name == "loss":
        raise UserError(f"--quality: {best.name} is not a quality metric of this model; name one with --quality-metric")
    return best


def check_out_dir(out_dir: str | Path) -> None:
    if Path(out_dir).exists() and any(Path(out_dir).iterdir()):
        raise UserError(f"--quality-out {out_dir} holds an earlier report's runs: give another folder (or remove it)")


def train_for_audio(
    cfg: Config, variant: QualityVariant, seed: int, folder: Path, audio_seconds: float, metric: str
) -> list[dict[str, Any]]:
    """Train ``variant`` of ``cfg`` with ``seed`` for ``audio_seconds`` of audio into ``folder``; its eval rows."""
    from speechtrain.recipes.train import train_from_config

    extra = [
        f"train.max_audio_seconds={audio_seconds}",
        "train.max_steps=100000000",
        f"train.seed={seed}",
        f"train.output_dir={folder}",
        f"train.best_metric={metric}",
        "train.auto_resume=false",
        "train.progress=false",  # a bar to 10^8 steps says nothing: the run ends at the audio budget
    ]
    run_dir, _ = train_from_config(variant.config(cfg, extra))
    return read_metrics(run_dir, split="eval")


# ---------------------------------------------------------------------------------------------------------
# the ablation ladder's quality column


@dataclass(frozen=True)
class LadderQualityPlan:
    """``bench --ablate --quality-audio S``: every Trainer rung trained for ``audio_seconds`` of audio, ``repeat``
    seeds, into ``out_dir/<rung>/seed_<n>``; judged on ``metric`` (None: as :func:`quality_metric`)."""

    audio_seconds: float
    repeat: int = 3
    metric: str | None = None
    out_dir: str | Path = "runs/quality_bench"


def quality_rungs(rows: Sequence[LadderRow]) -> tuple[list[str], dict[str, str]]:
    """The rungs the quality column trains (the Trainer's rows whose speed was measured; the reference first) and,
    for the others, why not."""
    from speechtrain.bench.ablate import applied_text

    trained: list[str] = []
    left_out: dict[str, str] = {}
    for row in rows:
        key = row.variant.key
        if row.variant.kind != "engine":
            left_out[key] = "not trained: a loop outside the Trainer (quality's reference: 'speechtrain, all off')"
        elif row.result is None:
            left_out[key] = "not trained: its speed was not measured"
        elif row.variant.records and applied_text(row.result, row.variant).startswith("no:"):
            left_out[key] = "not trained: the change did not take effect (the same training as the reference)"
        else:
            trained.append(key)
    trained.sort(key=lambda k: k != QUALITY_REFERENCE)
    return trained, left_out


@dataclass
class LadderQuality:
    """The quality column as it stands: the runs so far, the rungs planned, failed or left out."""

    metric: str
    mode: str
    audio_seconds: float
    repeat: int
    out_dir: str
    rungs: list[str]
    labels: dict[str, str]
    left_out: dict[str, str] = field(default_factory=dict)
    runs: list[QualityRun] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    last: str | None = None  # the rung trained last (None: none yet)

    def cells(self) -> dict[str, dict[str, Any]]:
        """One cell per rung: ``status`` (trained, in progress, not trained yet, failed, not trained), the
        quality's median/low/high over the seeds so far with each seed's value, and the verdict against the
        reference rung; ``costs_quality`` marks a rung whose median lies beyond the reference's worst seed."""
        spreads = {k: Spread.of([r.quality for r in self.runs if r.variant == k]) for k in self.rungs}
        ref = spreads.get(QUALITY_REFERENCE)
        out: dict[str, dict[str, Any]] = {
            k: {"status": "not trained", "reason": why} for k, why in self.left_out.items()
        }
        for key in self.rungs:
            mine = [r for r in self.runs if r.variant == key]
            spread = spreads[key]
            cell: dict[str, Any] = {"seeds": len(mine), "of": self.repeat, "values": [r.quality for r in mine]}
            if key in self.failed:
                cell.update(status="failed", reason=self.failed[key])
            elif spread is None:
                cell["status"] = "not trained yet"
            else:
                cell["status"] = "trained" if len(mine) >= self.repeat else "in progress"
            if spread is not None:
                cell.update(median=spread.median, low=spread.low, high=spread.high)
                if key == QUALITY_REFERENCE:
                    cell["verdict"] = "reference"
                elif ref is None:
                    cell["verdict"] = "no reference: 'speechtrain, all off' was not trained"
                else:
                    cell["verdict"] = verdict(spread, ref, self.mode)
                cell["costs_quality"] = cell["verdict"].startswith("costs quality")
            out[key] = cell
        return out

    def to_dict(self) -> dict[str, Any]:
        """The report's ``quality`` section (``rows``: the cells by rung key; ``runs``: every seed's run)."""
        return {
            "metric": self.metric,
            "mode": self.mode,
            "audio_seconds": self.audio_seconds,
            "repeat": self.repeat,
            "reference": QUALITY_REFERENCE,
            "reference_label": self.labels.get(QUALITY_REFERENCE, QUALITY_REFERENCE),
            "out_dir": self.out_dir,
            "rows": self.cells(),
            "runs": [asdict(r) for r in self.runs],
        }


def run_ladder_quality(
    cfg: Config,
    rows: Sequence[LadderRow],
    device_type: str,
    plan: LadderQualityPlan,
    on_run: Callable[[LadderQuality], None] | None = None,
) -> LadderQuality:
    """Train every Trainer rung of the measured ladder ``rows`` (its overrides, as the ladder set them) for equal
    audio, ``plan.repeat`` seeds interleaved over the rungs; ``on_run`` gets the column after every run (and once
    before the first, every rung "not trained yet"), so that a report written there survives a kill. A rung whose
    training fails is marked failed and not trained again."""
    from speechtrain.bench.ablate import row_overrides

    if plan.audio_seconds <= 0 or plan.repeat < 1:
        raise UserError("--quality-audio must be > 0 and --repeat >= 1")
    best = quality_metric(cfg, plan.metric)
    trained, left_out = quality_rungs(rows)
    by_key = {row.variant.key: row.variant for row in rows}
    labels = {key: v.label for key, v in by_key.items()}
    column = LadderQuality(
        best.name, best.mode, plan.audio_seconds, plan.repeat, str(plan.out_dir), trained, labels, left_out
    )
    if on_run is not None:
        on_run(column)
    for i in range(plan.repeat):
        for key in trained:
            if key in column.failed:
                continue
            seed = cfg.train.seed + i
            variant = QualityVariant(key, (), tuple(row_overrides(by_key[key], device_type).items()))
            log.info(f"[quality {i + 1}/{plan.repeat}] {labels[key]}: {plan.audio_seconds:g} s of audio, seed {seed}")
            try:
                eval_rows = train_for_audio(
                    cfg, variant, seed, Path(plan.out_dir) / key / f"seed_{seed}", plan.audio_seconds, best.name
                )
                column.runs.append(run_from_rows(key, seed, eval_rows, best.name, best.mode, None))
            except Exception as exc:  # one rung's failure (a compile error, say) is its cell, not the ladder's end
                column.failed[key] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                log.warning(f"quality of {labels[key]} (seed {seed}) failed: {column.failed[key]}")
            column.last = key
            if on_run is not None:
                on_run(column)
    return column
