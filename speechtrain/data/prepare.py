"""``prepare``: validate the data, then compute features once into the cache (parallel, resumable).

Everything here takes the :class:`speechtrain.config.DataConfig` section (never the whole Config);
the cache itself is a :class:`speechtrain.data.store.FeatureStore`.

1. Read the manifest(s) (``data.manifest``, and ``data.eval_manifest`` when set).
2. Validation pass (headers only; reused across runs for unchanged files); ``strict`` raises
   :class:`DataError` here, before any feature work, when anything was skipped.
3. Features for items whose cache files are missing: decode, downmix, resample to
   ``data.sample_rate``, trim to ``frames * hop_length`` samples, store the audio (int16), its
   log-mel (float32) and, with ``data.f0_method``, its f0 (float32 Hz per mel frame, 0 = unvoiced,
   measured on the stored audio at the centre of each frame's hop: :mod:`speechtrain.data.pitch`)
   -- in ``workers`` spawned processes.
4. The model family's derived features (:mod:`speechtrain.data.derived`; XTTS's DVAE codes), in this
   process, from the stored audio of every kept item whose feature file is missing; their weights are
   loaded only when there is something to compute.
5. The text front end (:mod:`speechtrain.data.text`) turns every transcript into symbols (phonemes
   with ``data.phonemizer``; cached in the index and reused while the text settings stay the same);
   the training transcripts' symbols are the run's symbol set unless ``data.symbols`` pins one.
6. The model family's item limits (:mod:`speechtrain.data.limits`; XTTS: BPE tokens and audio codes): an
   item that breaks one is skipped as ``model_limit`` (``strict``: a DataError), so that no run meets it;
   the text limits are checked before the feature work too (no features for such items).
7. Write one index per manifest, delete feature files nothing refers to, return a
   :class:`PrepareReport` with the text report (inventory, unknown characters and their share:
   above 1% a warning, and with ``strict`` a DataError).

``repair``: before step 3, every feature file of a kept item is checked against the index (readable to its
end, its shape: :func:`speechtrain.data.store.damaged_files`) and the damaged ones are deleted, so that steps
3 and 4 compute them again. A full disk stops prepare with a one-line error (not one skipped item per file).
Each stage says what it does as it begins, and the ones that work through the files (headers, features, derived
features) how far they are every few seconds, with the time left (:class:`speechtrain.progress.Progress`:
``prepare: 120 of 800 files checked (0:05 so far, about 0:28 left)``, on standard error; ``progress=False``
leaves the counts out). The worker processes leave Ctrl-C and SIGTERM to this process, which stops them at once;
they die with it (``PR_SET_PDEATHSIG`` on Linux, a watchdog elsewhere) and never hold the cache lock.
"""

from __future__ import annotations

import errno
import multiprocessing as mp
import os
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from speechtrain.data.derived import DerivedFeature
from speechtrain.data.features import MelSettings
from speechtrain.data.layouts.base import reading_language
from speechtrain.data.limits import REASON as LIMIT_REASON
from speechtrain.data.limits import CheckItems, ItemLimits, LimitItem, Verdict
from speechtrain.data.manifest import Problem, manifest_signature, read_manifest, transcript_note
from speechtrain.data.pitch import F0Settings
from speechtrain.data.store import (
    HELD_LOCK_FDS,
    CachedItem,
    CacheIndex,
    FeatureStore,
    ManifestRef,
    Role,
    damaged_files,
    not_written,
    read_audio,
)
from speechtrain.data.text.frontend import Processed, TextFrontEnd
from speechtrain.data.text.inventory import TextItem, TextReport, learn_symbols, text_report
from speechtrain.data.validate import Checked, Probe, totals, validate_entries
from speechtrain.errors import DataError
from speechtrain.logs import get_logger
from speechtrain.progress import Progress, Tally

if TYPE_CHECKING:
    from concurrent.futures import Future

    from speechtrain.config import DataConfig

log = get_logger(__name__)


@dataclass
class DerivedReport:
    """What prepare did for one derived feature: utterances computed now and reused from the cache."""

    name: str
    description: str
    computed: int = 0
    reused: int = 0
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "description": self.description,
            "computed": self.computed,
            "reused": self.reused,
            "seconds": self.seconds,
        }


@dataclass
class PrepareReport:
    """What ``prepare`` did: kept and skipped utterances (with reasons and ids), conversions, cache use."""

    manifest: str
    format: str
    cache_dir: str
    eval_manifest: str | None = None
    listed: int = 0
    kept: int = 0
    train: int = 0
    eval: int = 0
    problems: list[Problem] = field(default_factory=list)
    resampled: int = 0
    downmixed: int = 0
    empty_text_kept: int = 0
    hours: float = 0.0
    duration: dict[str, float] = field(default_factory=dict)
    reused: int = 0
    computed: int = 0
    removed_stale: int = 0
    workers: int = 1
    seconds: float = 0.0
    up_to_date: bool = False
    clipped: dict[str, int] = field(default_factory=dict)  # id -> samples beyond [-1, 1] clipped (float files)
    repaired: int = 0  # damaged feature files deleted and computed again (``repair``)
    text: TextReport | None = None
    derived: list[DerivedReport] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # the model family's lines (XTTS: its text rules)

    @property
    def skipped(self) -> dict[str, list[str]]:
        """reason -> ids (or ``file:line`` for lines without an id)."""
        out: dict[str, list[str]] = {}
        for p in self.problems:
            out.setdefault(p.reason, []).append(p.id if p.id is not None else p.where)
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict (``prepare --json``)."""
        return {
            "manifest": self.manifest,
            "format": self.format,
            "eval_manifest": self.eval_manifest,
            "cache_dir": self.cache_dir,
            "listed": self.listed,
            "kept": self.kept,
            "train": self.train,
            "eval": self.eval,
            "skipped_total": len(self.problems),
            "skipped_counts": totals(self.problems),
            "skipped": self.skipped,
            "problems": [p.to_dict() for p in self.problems],
            "resampled": self.resampled,
            "downmixed": self.downmixed,
            "empty_text_kept": self.empty_text_kept,
            "hours": self.hours,
            "duration_s": self.duration,
            "cache": {
                "reused": self.reused,
                "computed": self.computed,
                "removed_stale": self.removed_stale,
                "derived": {d.name: d.to_dict() for d in self.derived},
            },
            "workers": self.workers,
            "repaired": self.repaired,
            "seconds": self.seconds,
            "clipped": self.clipped,
            "text": self.text.to_dict() if self.text is not None else None,
            "notes": list(self.notes),
        }

    def summary(self, max_listed: int = 20) -> str:
        """A readable multi-line summary (what ``speechtrain prepare`` prints)."""
        d = self.duration
        lines = [
            f"data      {self.manifest} ({self.format})"
            + (f" + eval {self.eval_manifest}" if self.eval_manifest else ""),
            f"kept      {self.kept} of {self.listed} listed utterances ({self.train} train, {self.eval} eval), "
            f"{self.hours:.3f} h",
        ]
        if d:
            lines.append(
                f"duration  min {d['min']:.2f} s, median {d['median']:.2f} s, "
                f"p95 {d['p95']:.2f} s, max {d['max']:.2f} s"
            )
        lines.append(f"converted {self.resampled} resampled, {self.downmixed} downmixed to mono")
        if self.empty_text_kept:
            lines.append(f"note      {self.empty_text_kept} kept items have empty text (fine for vocoders/classifiers)")
        if self.clipped:
            ids = ", ".join(list(self.clipped)[:5]) + (" ..." if len(self.clipped) > 5 else "")
            lines.append(f"clipped   {len(self.clipped)} float file(s) beyond [-1, 1] stored clipped: {ids}")
        if self.text is not None and self.text.total:
            lines += self.text.summary_lines()
            lines += [f"WARNING   {w}" for w in self.text.warnings()]
        lines += [f"note      {note}" for note in self.notes]
        lines.append(
            f"cache     {self.cache_dir}: reused {self.reused}, computed {self.computed}"
            + (f", removed {self.removed_stale} stale files" if self.removed_stale else "")
            + f" ({self.workers} worker{'s' if self.workers != 1 else ''}, {self.seconds:.1f} s)"
        )
        if self.repaired:
            lines.append(f"repaired  {self.repaired} damaged feature file(s), computed again")
        for feature in self.derived:
            lines.append(
                f"{feature.name:<9} {feature.description or 'derived feature'}: reused {feature.reused}, "
                f"computed {feature.computed}" + (f" ({feature.seconds:.1f} s)" if feature.computed else "")
            )
        if self.problems:
            counts = ", ".join(f"{r} {n}" for r, n in totals(self.problems).items())
            lines.append(f"skipped   {len(self.problems)}: {counts}")
            for p in self.problems[:max_listed]:
                lines.append(f"  - {p}")
            if len(self.problems) > max_listed:
                lines.append(f"  ... {len(self.problems) - max_listed} more (see --json)")
        else:
            lines.append("skipped   0")
        return "\n".join(lines)


def _require_text(data: DataConfig, require_text: bool | None) -> bool | None:
    return require_text if require_text is not None else data.require_text


def is_prepared(
    data: DataConfig,
    require_text: bool | None = None,
    derived: Sequence[DerivedFeature] = (),
    limits: Sequence[ItemLimits] = (),
) -> str | None:
    """None when every manifest's cache is fresh, else why not (``missing``, ``stale (...)``).

    ``require_text``: the task's need (None: ``data.require_text``); ``derived``: the model family's
    derived features (:mod:`speechtrain.data.derived`); ``limits``: its item limits
    (:mod:`speechtrain.data.limits`)."""
    return FeatureStore.from_data(data, derived, limits).status(_require_text(data, require_text))


def ensure_prepared(
    data: DataConfig,
    require_text: bool | None = None,
    workers: int | None = None,
    progress: bool = True,
    derived: Sequence[DerivedFeature] = (),
    limits: Sequence[ItemLimits] = (),
) -> PrepareReport | None:
    """Prepare only when the cache is missing or stale; returns the report, or None when it was fresh."""
    reason = is_prepared(data, require_text, derived, limits)
    if reason is None:
        return None
    log.info("feature cache %s: preparing", reason)
    return prepare_dataset(
        data, workers=workers, progress=progress, require_text=require_text, derived=derived, limits=limits
    )


@dataclass
class _ManifestPlan:
    """One manifest after the validation pass, before feature work."""

    ref: ManifestRef
    listed: int  # lines or files listed, usable or not
    kept: list[Checked]
    problems: list[Problem]
    probes: dict[str, Probe]
    previous: CacheIndex | None  # the index last written for it (any settings variant)


@dataclass(frozen=True)
class FeatureResult:
    """What computing one item's features gave: its length, or the problem that stopped it."""

    frames: int  # mel frames
    samples: int  # stored audio samples
    problem: tuple[str, str] | None = None  # (reason, detail)
    clipped: int = 0  # samples beyond [-1, 1] (a float file) clipped to full scale in the stored int16 audio


@dataclass(frozen=True)
class FeatureTask:
    """One item to compute in a worker (picklable)."""

    mel_key: str
    audio_key: str
    audio_file: str
    root: str
    mel: MelSettings
    f0_key: str | None = None
    f0: F0Settings | None = None


class _Lengths:
    """Frames and samples of every kept item: computed now, known from an earlier index, or read
    from the header of a feature file another manifest's run wrote."""

    def __init__(self, computed: dict[str, FeatureResult], previous: list[CacheIndex], store: FeatureStore) -> None:
        self.computed, self.store = computed, store
        self.known = {it.key: FeatureResult(it.frames, it.samples) for index in previous for it in index.items}

    def of(self, mel_key: str) -> FeatureResult:
        if mel_key in self.computed:
            return self.computed[mel_key]
        if mel_key in self.known:
            return self.known[mel_key]
        frames = int(np.load(self.store.mel_path(mel_key), mmap_mode="r").shape[1])
        return FeatureResult(frames, frames * self.store.mel.hop_length)


def prepare_dataset(
    data: DataConfig,
    workers: int | None = None,
    strict: bool = False,
    progress: bool = True,
    require_text: bool | None = None,
    derived: Sequence[DerivedFeature] = (),
    limits: Sequence[ItemLimits] = (),
    repair: bool = False,
) -> PrepareReport:
    """Validation pass + feature cache for a data section; see the module doc.

    ``workers``: feature processes (None: up to 8, at most the CPU count; 1: in this process).
    ``strict``: any skipped item raises DataError (before feature work for validation problems).
    ``require_text``: True skips empty-text items; None: ``data.require_text``.
    ``derived``: the model family's derived features (XTTS's DVAE codes), computed for every kept item.
    ``limits``: the model family's item limits (XTTS: BPE tokens, audio codes); items beyond them are skipped.
    ``repair``: delete the feature files that do not read as their index says, and compute them again.
    """
    if getattr(mp.current_process(), "_inheriting", False):
        raise DataError(
            "prepare was called while a worker process was starting: the script's top level runs again in each "
            'spawned worker; put it under `if __name__ == "__main__":`'
        )
    if workers is not None and workers < 1:
        raise DataError(f"workers must be >= 1, got {workers}")
    start = time.perf_counter()
    say = Progress("prepare")
    counts = say if progress else None
    with reading_language(data.language):  # a not-UTF-8 file is told data.language's code page
        store = FeatureStore.from_data(data, derived, limits)
        plans = _read_plans(store, data, _require_text(data, require_text), say, counts)
    front_end = TextFrontEnd(store.settings.text)
    checks = _LimitChecks(store.limits)

    for plan in plans:  # text limits first: no features for what the model cannot take
        where = {c.entry.id: c.entry.where for c in plan.kept}
        plan.kept = checks.screen(plan.kept, plan.problems, where)
        if not plan.kept:
            raise DataError(_nothing_kept(plan, data.encoding))
    all_problems = [p for plan in plans for p in plan.problems]
    if strict and all_problems:
        raise DataError(_strict_message(all_problems))
    _strict_reported(checks, strict)
    processed = _process_texts(plans, front_end, say)
    if strict:
        _strict_text(_report_of(plans, processed, data), strict)

    report = PrepareReport(
        manifest=str(data.manifest),
        format=plans[0].ref.format,
        cache_dir=str(store.root),
        eval_manifest=next((plan.ref.path for plan in plans if plan.ref.role == Role.EVAL), None),
        notes=[note for x in store.limits for note in x.notes],
    )
    with store.lock():
        if repair:
            report.repaired = _repair(plans, store)
        todo: dict[str, FeatureTask] = {}
        kept_keys = set()
        for plan in plans:
            for c in plan.kept:
                key, akey = store.feature_keys(c.entry.audio_path, c.sig)
                fkey = store.f0_key(c.entry.audio_path, c.sig)
                kept_keys.add(key)
                if not store.has_features(key, akey, fkey):
                    f0 = store.settings.f0
                    todo[key] = FeatureTask(key, akey, c.entry.audio_path, str(store.root), store.mel, fkey, f0)
        report.reused = len(kept_keys - set(todo))
        computed, report.workers = _compute_all(todo, workers, say, counts)
        full = next(
            (r.problem[1] for r in computed.values() if r.problem is not None and r.problem[0] == DISK_FULL), None
        )
        if full is not None:
            stored = sum(1 for r in computed.values() if r.problem is None)
            raise DataError(f"{full} ({stored} item(s) were stored now and are reused next time)")
        report.computed = sum(1 for r in computed.values() if r.problem is None)
        for plan in plans:
            for c in plan.kept:
                found = computed.get(store.feature_keys(c.entry.audio_path, c.sig)[0])
                if found is not None and found.problem is None and found.clipped:
                    report.clipped[c.entry.id] = found.clipped
        if report.clipped:
            first = next(iter(report.clipped))
            log.warning(
                f"warning: {len(report.clipped)} file(s) hold float samples beyond [-1, 1], clipped to full scale "
                f"in the cache (e.g. '{first}': {report.clipped[first]} samples); scale them down (peak-normalise) "
                f"and prepare again to keep their waveform"
            )
        lengths = _Lengths(computed, [p.previous for p in plans if p.previous is not None], store)
        report.derived, shapes = _derived_pass(plans, store, lengths, say, counts)

        indexes: dict[Role, CacheIndex] = {}
        for plan in plans:
            index = _index_of(plan, store, lengths, processed, indexes.get(Role.TRAIN), checks, shapes)
            indexes[plan.ref.role] = index
            report.listed += plan.listed
            report.problems.extend(index.problems)
            report.kept += len(index.items)
            report.resampled += sum(1 for it in index.items if it.orig_sr != data.sample_rate)
            report.downmixed += sum(1 for it in index.items if it.channels > 1)
            report.empty_text_kept += sum(1 for it in index.items if not it.text)
        train, eval_index = indexes[Role.TRAIN], indexes.get(Role.EVAL)
        if eval_index is not None:  # the run's symbols are the corpus's: an eval-only symbol is no <unk>
            train.symbols = sorted(set(train.symbols) | set(eval_index.symbols))
        for plan in plans:
            store.write_index(plan.ref, indexes[plan.ref.role])
        report.train = len(store.split_items(Role.TRAIN, train, eval_index).items)
        report.eval = len(store.split_items(Role.EVAL, train, eval_index).items)
        report.removed_stale = store.collect_garbage()

    report.notes += checks.notes()
    seconds = [it.samples / data.sample_rate for index in indexes.values() for it in index.items]
    secs = np.asarray(seconds, dtype=np.float64)
    if secs.size:
        report.hours = float(secs.sum() / 3600)
        report.duration = {
            "min": float(secs.min()),
            "median": float(np.median(secs)),
            "p95": float(np.percentile(secs, 95)),
            "max": float(secs.max()),
        }
    report.text = _text_report(indexes, data)
    for warning in report.text.warnings():
        log.warning(warning)
    report.seconds = time.perf_counter() - start
    if strict and report.problems:
        raise DataError(_strict_message(report.problems))
    _strict_reported(checks, strict)
    _strict_text(report.text, strict)
    return report


def _read_plans(
    store: FeatureStore, data: DataConfig, require_text: bool | None, say: Progress, counts: Progress | None
) -> list[_ManifestPlan]:
    """Each manifest read and validated (headers only)."""
    plans = []
    for ref in store.manifests():
        say.stage(f"reading {ref.path} as data.format={ref.format}")
        previous = store.latest_index(ref)
        entries, problems = read_manifest(ref.path, ref.format, data.encoding, data.text_column)
        known = previous.probes if previous is not None else {}
        fresh = len({e.audio_path for e in entries} - set(known))
        say.stage(f"checking the audio of {len(entries)} listed item(s) ({fresh} file(s) not seen before)")
        kept, vproblems, probes = validate_entries(
            entries,
            min_duration=data.min_duration,
            max_duration=data.max_duration,
            require_text=require_text,
            probes=previous.probes if previous is not None else None,
            on_checked=Tally(counts, len(entries), "files checked").update,
        )
        plans.append(_ManifestPlan(ref, len(entries) + len(problems), kept, problems + vproblems, probes, previous))
    return plans


def _process_texts(plans: list[_ManifestPlan], front_end: TextFrontEnd, say: Progress) -> dict[str, Processed]:
    """Every kept transcript through the front end, once per distinct text; what an earlier index
    with the same text settings made of a text is reused (phonemes are the costly part)."""
    known: dict[str, Processed] = {}
    for plan in plans:
        if plan.previous is not None and plan.previous.settings.text == front_end.settings:
            for it in plan.previous.items:
                known[it.text] = Processed(it.symbols, Counter(it.unmapped), it.reading.splitlines())
    texts = sorted({c.entry.text for plan in plans for c in plan.kept if c.entry.text} - set(known))
    if texts:
        text = front_end.settings
        say.stage(f"text front end: {len(texts)} transcript(s), language {text.language}, phonemizer {text.phonemizer}")
        known.update(zip(texts, front_end.process_many(texts)))
    return known


def _text_items(items: list[Any]) -> list[TextItem]:
    return [it if isinstance(it, TextItem) else it.text_item() for it in items]


def _report_of(plans: list[_ManifestPlan], processed: dict[str, Processed], data: DataConfig) -> TextReport:
    """The text report of the validated items (before feature work: ``strict`` fails early)."""
    by_role: dict[Role, list[TextItem]] = {}
    for plan in plans:
        rows = by_role.setdefault(plan.ref.role, [])
        for c in plan.kept:
            p = processed.get(c.entry.text)
            rows.append(
                TextItem(c.entry.id, p.symbols, "".join(p.unmapped.elements()), c.entry.text, "\n".join(p.reading))
                if p
                else TextItem(c.entry.id, "", "", c.entry.text or "")
            )
    return _report(by_role.get(Role.TRAIN, []), by_role.get(Role.EVAL, []), data)


def _text_report(indexes: dict[Role, CacheIndex], data: DataConfig) -> TextReport:
    train, evaluation = indexes[Role.TRAIN], indexes.get(Role.EVAL)
    return _report(_text_items(train.items), _text_items(evaluation.items) if evaluation else [], data)


def _report(train: list[TextItem], evaluation: list[TextItem], data: DataConfig) -> TextReport:
    from speechtrain.data.text.tokenizer import symbols_of

    if data.symbols is None:
        source, symbols = "learned", learn_symbols([*train, *evaluation])
    else:
        source, symbols = ("ascii" if data.symbols == "ascii" else "pinned"), list(symbols_of(data.symbols))
    from speechtrain.data.text.frontend import TextSettings

    return text_report(
        train,
        symbols,
        source=source,
        language=data.language,
        phonemizer=data.phonemizer,
        eval_items=evaluation,
        settings=TextSettings.from_data(data),
    )


def _strict_text(report: TextReport, strict: bool) -> None:
    warnings = report.warnings()
    if strict and warnings:
        lines = [f"--strict: {w}" for w in warnings]
        if report.too_many_unknown:
            lines += [f"  - {u}" for u in report.unknown[:10]]
        lines.append("fix the transcripts or the settings named above, or run without --strict to keep them")
        raise DataError("\n".join(lines))


def _nothing_kept(plan: _ManifestPlan, encoding: str | None = None, show: int = 5) -> str:
    """The error of a manifest that yields no usable utterance (a run could not train on it)."""
    what = f"{plan.ref.path} (read as data.format={plan.ref.format})"
    if not plan.problems:
        return f"{what}: lists no utterance; check data.manifest"
    counts = ", ".join(f"{r} {n}" for r, n in totals(plan.problems).items())
    lines = [f"{what}: none of its {plan.listed} listed utterance(s) can be used ({counts}):"]
    lines += [f"  - {p}" for p in plan.problems[:show]]
    if len(plan.problems) > show:
        lines.append(f"  ... {len(plan.problems) - show} more")
    note = transcript_note(plan.ref.path, plan.ref.format, encoding) if "empty_text" in totals(plan.problems) else None
    if note is not None:  # say where the transcripts were looked for (the column the metadata calls them)
        lines.append(note)
    lines.append("fix the manifest, or set data.format if the layout was misread")
    return "\n".join(lines)


def _strict_reported(checks: _LimitChecks, strict: bool) -> None:
    """``--strict`` refuses the kept items a model's check reported (XTTS: digits left as digits)."""
    if strict and checks.reported:
        lines = [f"--strict: {note}" for note in checks.notes()]
        raise DataError("\n".join([*lines, "fix the transcripts named above, or run without --strict to keep them"]))


def _strict_message(problems: list[Problem], show: int = 10) -> str:
    counts = ", ".join(f"{r} {n}" for r, n in totals(problems).items())
    lines = [f"--strict: {len(problems)} problem(s) in the data ({counts}):"]
    lines += [f"  - {p}" for p in problems[:show]]
    if len(problems) > show:
        lines.append(f"  ... {len(problems) - show} more")
    lines.append("fix or remove these items, or run without --strict to skip them and get a report")
    return "\n".join(lines)


def _index_of(
    plan: _ManifestPlan,
    store: FeatureStore,
    lengths: _Lengths,
    processed: dict[str, Processed],
    train: CacheIndex | None,
    checks: _LimitChecks | None = None,
    shapes: dict[str, list[int]] | None = None,
) -> CacheIndex:
    """The index of one manifest; an eval manifest's items are mapped to the training data's names, and
    the items that break a model limit are left out (``model_limit`` problems)."""
    items = []
    problems = list(plan.problems)
    probes = dict(plan.probes)
    for c in plan.kept:
        key, akey = store.feature_keys(c.entry.audio_path, c.sig)
        found = lengths.of(key)
        if found.problem is not None:
            reason, detail = found.problem
            problems.append(Problem(reason, f"{detail} ({c.entry.audio_path})", c.entry.id, c.entry.where))
            if reason != "feature_error":  # a property of the file: not retried until it changes
                probes[c.entry.audio_path] = Probe(c.sig, problem=found.problem)
            continue
        e = c.entry
        text = processed.get(e.text) if e.text else None
        items.append(
            CachedItem(
                id=e.id,
                path=e.audio_path,
                key=key,
                audio_key=akey,
                frames=found.frames,
                samples=found.samples,
                text=e.text,
                symbols=text.symbols if text is not None else "",
                unmapped="".join(text.unmapped.elements()) if text is not None else "",
                speaker=e.speaker,
                label=e.label,
                orig_sr=c.info.sample_rate,
                channels=c.info.channels,
                f0_key=store.f0_key(c.entry.audio_path, c.sig),
                derived=(dkeys := store.derived_keys(akey)),
                shapes={name: shapes[k] for name, k in dkeys.items() if shapes and k in shapes},
                reading="\n".join(text.reading) if text is not None else "",
            )
        )
    if checks is not None:
        where = {c.entry.id: c.entry.where for c in plan.kept}
        items = checks.apply(items, problems, where)
    speakers = sorted({it.speaker for it in items if it.speaker is not None})
    labels = sorted({it.label for it in items if it.label is not None})
    if plan.ref.role == Role.EVAL and train is not None:
        items = _map_to_train(items, problems, train)
        speakers, labels = list(train.speakers), list(train.labels)
    return CacheIndex(
        settings=store.settings,
        role=plan.ref.role,
        manifest=str(Path(plan.ref.path).absolute()),
        format=plan.ref.format,
        manifest_sig=manifest_signature(plan.ref.path, plan.ref.format),
        items=items,
        speakers=speakers,
        labels=labels,
        problems=problems,
        probes=probes,
        symbols=learn_symbols(it.text_item() for it in items),
    )


class _LimitChecks:
    """The model's item limits, their check functions loaded on first use."""

    def __init__(self, limits: Sequence[ItemLimits]) -> None:
        self.limits = tuple(limits)
        self._loaded: list[CheckItems] | None = None
        self.reported: dict[str, Verdict] = {}  # id -> what a check reports of an item it keeps

    def notes(self) -> list[str]:
        """The kept items a check reported (one line each, for the report's notes)."""
        return [f"{v.reason}: {uid}: {v.detail}" for uid, v in self.reported.items()]

    def screen(self, kept: list[Checked], problems: list[Problem], where: dict[str, str]) -> list[Checked]:
        """``kept`` less the entries whose text breaks a limit (before the features: samples not known)."""
        return self._keep(kept, [LimitItem(c.entry.id, c.entry.text, 0) for c in kept], problems, where)

    def apply(self, items: list[CachedItem], problems: list[Problem], where: dict[str, str]) -> list[CachedItem]:
        """``items`` less those that break a limit (each one a ``model_limit`` problem in ``problems``)."""
        return self._keep(items, [LimitItem(it.id, it.text, it.samples) for it in items], problems, where)

    def _keep(
        self, rows: list[Any], items: list[LimitItem], problems: list[Problem], where: dict[str, str]
    ) -> list[Any]:
        if not self.limits or not items:
            return rows
        if self._loaded is None:
            self._loaded = [x.load() for x in self.limits]
        broken: dict[int, Verdict] = {}
        for check in self._loaded:
            verdicts = check(items)
            for i, found in enumerate(verdicts):
                verdict = Verdict(LIMIT_REASON, found) if isinstance(found, str) else found
                if verdict is not None and verdict.keep:
                    self.reported.setdefault(items[i].id, verdict)
                elif verdict is not None and i not in broken:
                    broken[i] = verdict
        for i in sorted(broken):
            problems.append(Problem(broken[i].reason, broken[i].detail, items[i].id, where.get(items[i].id, "")))
        return [row for i, row in enumerate(rows) if i not in broken]


def _map_to_train(items: list[CachedItem], problems: list[Problem], train: CacheIndex) -> list[CachedItem]:
    """Eval items must use the training data's speaker/label ids; unknown names are skipped."""
    out = []
    for it in items:
        for field_name, name, pool in (("speaker", it.speaker, train.speakers), ("label", it.label, train.labels)):
            if name is not None and name not in pool:
                problems.append(Problem("unknown_label", f"{field_name} '{name}' is not in the training data", it.id))
                break
        else:
            out.append(it)
    return out


def _repair(plans: list[_ManifestPlan], store: FeatureStore) -> int:
    """Delete the feature files of kept items that do not read as the index says (truncated, another shape);
    the passes after it compute them again. The shapes come from the last index of each manifest (an item it
    does not know yet is checked for readability and the mel/audio/f0 lengths against each other)."""
    known = {it.key: it for plan in plans if plan.previous is not None for it in plan.previous.items}
    n_mels = store.mel.n_mels
    removed = 0
    for plan in plans:
        for c in plan.kept:
            key, akey = store.feature_keys(c.entry.audio_path, c.sig)
            item = known.get(key)
            if item is None:
                item = _probe_item(store, c.entry.id, key, akey, store.f0_key(c.entry.audio_path, c.sig))
            for path in damaged_files(store.root, item, n_mels):
                log.warning(f"repair: {path} ('{item.id}') is damaged: computing it again")
                path.unlink(missing_ok=True)
                removed += 1
    return removed


def _probe_item(store: FeatureStore, item_id: str, key: str, akey: str, fkey: str | None) -> CachedItem:
    """A stand-in index entry for an item no index knows: its lengths from its own audio file when that reads
    (else from its mel), so that the three files are checked against each other."""
    frames = samples = -1
    try:
        samples = int(np.load(store.audio_path(akey), mmap_mode="r").shape[0])
        frames = samples // store.mel.hop_length
    except (ValueError, OSError, EOFError, IndexError):
        try:
            frames = int(np.load(store.mel_path(key), mmap_mode="r").shape[1])
            samples = frames * store.mel.hop_length
        except (ValueError, OSError, EOFError, IndexError):
            pass
    return CachedItem(item_id, "", key, akey, frames, samples, "", "", "", None, None, 0, 1, fkey)


# ---------------------------------------------------------------- derived features


def _derived_pass(
    plans: list[_ManifestPlan], store: FeatureStore, lengths: _Lengths, say: Progress, counts: Progress | None
) -> tuple[list[DerivedReport], dict[str, list[int]]]:
    """Compute the derived features missing from the cache for every kept item whose features are there;
    one report per feature, and the shape of every derived file (derived key -> shape, for the index: what a
    reader checks the file against). Shapes an earlier index recorded are reused, others read from the header."""
    reports = []
    shapes = {
        key: shape
        for plan in plans
        if plan.previous is not None
        for it in plan.previous.items
        for name, key in it.derived.items()
        if (shape := it.shapes.get(name)) is not None
    }
    for feature in store.derived:
        report = DerivedReport(feature.name, feature.description)
        todo: dict[str, tuple[str, str, str]] = {}  # derived key -> (item id, audio file, audio key)
        have: set[str] = set()
        for plan in plans:
            for c in plan.kept:
                key, akey = store.feature_keys(c.entry.audio_path, c.sig)
                if lengths.of(key).problem is not None:
                    continue  # no stored audio: skipped with its problem
                dkey = store.derived_keys(akey)[feature.name]
                if store.derived_path(dkey, feature.name).is_file():
                    have.add(dkey)
                else:
                    todo[dkey] = (c.entry.id, c.entry.audio_path, akey)
        report.reused = len(have)
        for dkey in have - set(shapes):
            try:
                shapes[dkey] = list(np.load(store.derived_path(dkey, feature.name), mmap_mode="r").shape)
            except (ValueError, OSError, EOFError):
                pass  # damaged: the reader says so (and prepare --repair mends it)
        if todo:
            start = time.perf_counter()
            shapes.update(_compute_derived(feature, todo, store, say, counts))
            report.computed, report.seconds = len(todo), time.perf_counter() - start
        reports.append(report)
    return reports, shapes


def _compute_derived(
    feature: DerivedFeature,
    todo: dict[str, tuple[str, str, str]],
    store: FeatureStore,
    say: Progress,
    counts: Progress | None,
) -> dict[str, list[int]]:
    """Load the feature's model once, then compute and store each item from its stored audio (a failure
    names the item: a model that cannot read this audio is not a property of one file to skip); the shape of
    each (derived key -> shape)."""
    what = feature.description or feature.name
    say.stage(f"computing {what} of {len(todo)} utterance(s) (loading its model first)")
    compute = feature.load()
    tally = Tally(counts, len(todo), "utterances computed")
    shapes: dict[str, list[int]] = {}
    for dkey, (item_id, audio_file, akey) in todo.items():
        try:
            value = np.asarray(compute(read_audio(store.root, akey)))
        except Exception as exc:
            raise DataError(f"{what} of '{item_id}' ({audio_file}) failed: {type(exc).__name__}: {exc}"[:500]) from None
        path = store.derived_path(dkey, feature.name)
        try:
            _save_npy(path, value)
        except OSError as exc:
            raise not_written(path, exc) from None
        shapes[dkey] = list(value.shape)
        tally.update()
    return shapes


# ---------------------------------------------------------------- feature workers


#: a worker's result when the disk is full: prepare stops (a full disk is no property of one file to skip)
DISK_FULL = "disk_full"


def _init_worker(parent: int) -> None:
    """A feature worker: one torch thread; no hold on the cache lock (its forked copy of the descriptor is
    closed); Ctrl-C and SIGTERM left to the parent, which stops the workers itself; dies with its parent."""
    import torch

    torch.set_num_threads(1)  # one process per core; torch threads would oversubscribe
    for fd in list(HELD_LOCK_FDS):
        try:
            os.close(fd)  # the parent's lock must end with the parent, not outlive it in an orphaned worker
        except OSError:
            pass
    HELD_LOCK_FDS.clear()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _die_with(parent)


def _die_with(parent: int) -> None:
    """End this process when ``parent`` ends (kill -9 included): the kernel's parent-death signal on Linux,
    and a watchdog thread everywhere (the parent may be gone before the signal was armed)."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    if os.getppid() != parent:
        os._exit(1)
    threading.Thread(target=watch, name="speechtrain-parent-watchdog", daemon=True).start()


def compute_features(audio_file: str, mel: MelSettings) -> tuple[np.ndarray, np.ndarray, int]:
    """``(mel float32 (n_mels, T_frames), audio int16 (T_frames * hop_length,), clipped)`` of one file;
    ``clipped``: samples beyond [-1, 1] (float files can hold them) stored at full scale.

    The log-mel is computed from the stored int16 audio, so on-device features of the cached audio
    equal the cached mel. Raises :class:`speechtrain.data.audio.AudioProblem`.
    """
    from speechtrain.data.audio import AudioProblem, load_audio

    wave, _ = load_audio(audio_file, mel.sample_rate)
    hop = mel.hop_length
    frames = wave.shape[0] // hop
    if frames < 1:
        raise AudioProblem("too_short", f"{wave.shape[0]} samples, less than one hop ({hop})")
    wave = wave[: frames * hop]
    clipped = int(np.count_nonzero(np.abs(wave) > 1.0))
    pcm = np.round(np.clip(wave, -1.0, 1.0) * 32767.0).astype(np.int16)
    return mel_of_pcm(pcm, mel), pcm, clipped


def mel_of_pcm(pcm: np.ndarray, mel: MelSettings) -> np.ndarray:
    """float32 (n_mels, T_frames) log-mel of int16 audio (T_frames * hop_length,)."""
    from speechtrain.data.features import log_mel_numpy

    out = log_mel_numpy(pcm.astype(np.float32) / 32767.0, mel)  # (n_mels, T_frames)
    return np.ascontiguousarray(out, dtype=np.float32)


def f0_of_pcm(pcm: np.ndarray, mel: MelSettings, f0: F0Settings) -> np.ndarray:
    """float32 (T_frames,) f0 in Hz (0 = unvoiced) of int16 audio (T_frames * hop_length,): one value per
    mel frame, measured at the centre of the frame's hop."""
    return f0.extract(pcm.astype(np.float32) / 32767.0, mel.sample_rate, mel.hop_length)


def _save_npy(path: Path, array: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp.npy")
    try:
        np.save(tmp, array)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()  # a write cut short (a full disk) leaves nothing behind


def _compute_one(task: FeatureTask) -> tuple[str, FeatureResult]:
    """Worker entry: compute and store one item (the mel and f0 from already stored audio when there
    is some, e.g. after an n_mels change or when f0 is asked for); any failure comes back as a
    problem, never raises."""
    from speechtrain.data.audio import AudioProblem
    from speechtrain.data.store import audio_path, f0_path, mel_path

    root = Path(task.root)
    try:
        audio_out, mel_out = audio_path(root, task.audio_key), mel_path(root, task.mel_key)
        clipped = 0
        if audio_out.is_file():
            pcm = np.load(audio_out)
            mel = np.load(mel_out, mmap_mode="r") if mel_out.is_file() else mel_of_pcm(pcm, task.mel)
        else:
            mel, pcm, clipped = compute_features(task.audio_file, task.mel)
            _save_npy(audio_out, pcm)
        if task.f0_key is not None and task.f0 is not None and not f0_path(root, task.f0_key).is_file():
            _save_npy(f0_path(root, task.f0_key), f0_of_pcm(pcm, task.mel, task.f0))
        if not mel_out.is_file():
            _save_npy(mel_out, mel)  # written last: its presence marks the item complete
        return task.mel_key, FeatureResult(int(mel.shape[1]), int(pcm.shape[0]), clipped=clipped)
    except AudioProblem as exc:
        return task.mel_key, FeatureResult(0, 0, (exc.reason, exc.detail))
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            where = Path(exc.filename) if exc.filename else mel_path(root, task.mel_key)
            return task.mel_key, FeatureResult(0, 0, (DISK_FULL, str(not_written(where, exc))))
        return task.mel_key, FeatureResult(0, 0, ("feature_error", f"{type(exc).__name__}: {exc}"[:300]))
    except Exception as exc:
        return task.mel_key, FeatureResult(0, 0, ("feature_error", f"{type(exc).__name__}: {exc}"[:300]))


def default_workers(n_tasks: int) -> int:
    """Up to 8 processes, at most the CPU count; 1 (in this process) for fewer than 32 items, where
    starting processes (each imports torch) costs more than it saves."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if n_tasks < 32:
        return 1
    return max(1, min(8, cpus, n_tasks // 8))


def _pool_context() -> Any:
    """fork on Linux (as torch's DataLoader does): workers start at once and do not re-run the user's
    script, which spawn and forkserver do when it lacks an ``if __name__ == "__main__":`` guard. The
    workers use one torch thread and no CUDA, which keeps fork safe. Elsewhere spawn: the workers are
    top-level functions with picklable arguments, so they work under any start method."""
    if sys.platform.startswith("linux"):
        return mp.get_context("fork")
    return mp.get_context("spawn")


def _run_pool(tasks: list[FeatureTask], workers: int, results: dict[str, FeatureResult], tally: Tally) -> None:
    """Compute ``tasks`` in worker processes; a worker that dies (killed, out of memory) turns its
    unfinished items into ``feature_error`` problems instead of hanging or crashing the run."""
    from concurrent.futures import ProcessPoolExecutor, as_completed
    from concurrent.futures.process import BrokenProcessPool

    pool = ProcessPoolExecutor(workers, mp_context=_pool_context(), initializer=_init_worker, initargs=(os.getpid(),))
    try:
        futures: dict[Future[tuple[str, FeatureResult]], str] = {
            pool.submit(_compute_one, task): task.mel_key for task in tasks
        }
        for fut in as_completed(futures):
            try:
                key, result = fut.result()
            except BrokenProcessPool:
                died = ("feature_error", "worker process died (see its error above); run again")
                key, result = futures[fut], FeatureResult(0, 0, died)
            results[key] = result
            tally.update()
    except BaseException:  # Ctrl-C: stop now; finished items are on disk and reused next time
        _stop_workers(pool)
        raise
    pool.shutdown()


def _stop_workers(pool: Any) -> None:
    """Cancel what is queued and kill the workers now (they ignore Ctrl-C; a half-written file of theirs is a
    temporary one, never a cache file)."""
    kill = getattr(pool, "kill_workers", None)  # Python 3.14 (it shuts the executor down too)
    if callable(kill):
        kill()
        return
    processes = list((getattr(pool, "_processes", None) or {}).values())  # before: the executor's own table
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        try:
            process.kill()
        except (OSError, AttributeError, ValueError):
            pass


def _compute_all(
    todo: dict[str, FeatureTask], workers: int | None, say: Progress, counts: Progress | None
) -> tuple[dict[str, FeatureResult], int]:
    """Features of every task (by mel key) and the number of processes used (0: nothing to do)."""
    tasks = list(todo.values())
    results: dict[str, FeatureResult] = {}
    if not tasks:
        return results, 0
    n = len(tasks)
    workers = default_workers(n) if workers is None else min(workers, max(1, n))
    say.stage(f"computing features of {n} utterance(s) in {workers} process(es)")
    tally = Tally(counts, n, "utterances computed")
    if workers == 1:
        import torch

        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # as in the workers: per-item STFTs gain nothing from more threads
        try:
            for task in tasks:
                key, result = _compute_one(task)
                results[key] = result
                tally.update()
        finally:
            torch.set_num_threads(threads)
    else:
        _run_pool(tasks, workers, results, tally)
    return results, workers
