"""The validation pass: which listed utterances are usable, and why the others are not.

Each entry is checked in this order and gets the first reason that applies: missing file,
unreadable (not audio), truncated (fewer samples than the header says), empty, shorter than
``data.min_duration``, longer than ``data.max_duration``, empty text when text is required.
Nothing here raises on bad data: every problem becomes a :class:`Problem` with the item id, and
an unexpected exception while checking one file is recorded against that file.

Header reads are reused across runs through ``probes`` (path -> :class:`Probe`: file signature +
header or problem), so a second ``prepare`` with unchanged files opens no audio.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from speechtrain.data.audio import AudioInfo, AudioProblem, probe_audio
from speechtrain.data.manifest import Entry, Problem, file_signature


@dataclass(frozen=True)
class Probe:
    """What a header read found for one file (``info``, or a ``problem`` as ``(reason, detail)``),
    with the file's signature at the time, so that an unchanged file is not opened again."""

    sig: list[int] | None
    info: AudioInfo | None = None
    problem: tuple[str, str] | None = None

    def to_json(self) -> dict[str, Any]:
        """The cache-index layout: ``{"sig", "info": [sr, channels, samples]}`` or ``{"sig", "problem"}``."""
        if self.info is not None:
            return {"sig": self.sig, "info": [self.info.sample_rate, self.info.channels, self.info.samples]}
        return {"sig": self.sig, "problem": list(self.problem or ("unreadable_audio", ""))}

    @classmethod
    def from_json(cls, raw: Any) -> Probe:
        """Inverse of :meth:`to_json`; raises ValueError (or KeyError/TypeError) on another layout."""
        sig = raw["sig"]
        sig = None if sig is None else [int(x) for x in sig]
        if "info" in raw:
            sr, channels, samples = raw["info"]
            return cls(sig, info=AudioInfo(int(sr), int(channels), int(samples)))
        reason, detail = raw["problem"]
        return cls(sig, problem=(str(reason), str(detail)))


@dataclass
class Checked:
    """An entry that passed validation, with its header and file signature."""

    entry: Entry
    info: AudioInfo
    sig: list[int] | None


def probe_with_cache(path: str, probes: dict[str, Probe]) -> Probe:
    """The header probe of ``path``, reused from ``probes`` when the file signature is unchanged."""
    sig = file_signature(path)
    old = probes.get(path)
    if old is not None and old.sig == sig:
        return old
    try:
        return Probe(sig, info=probe_audio(path))
    except AudioProblem as exc:
        return Probe(sig, problem=(exc.reason, exc.detail))
    except Exception as exc:  # one odd file must not stop the pass
        return Probe(sig, problem=("unreadable_audio", f"unexpected {type(exc).__name__}: {exc}"[:200]))


def validate_entries(
    entries: list[Entry],
    *,
    min_duration: float,
    max_duration: float,
    require_text: bool | None,
    probes: dict[str, Probe] | None = None,
    threads: int = 8,
    on_checked: Callable[[], None] | None = None,
) -> tuple[list[Checked], list[Problem], dict[str, Probe]]:
    """Split entries into kept ones and problems; returns ``(kept, problems, new_probes)``.

    ``min_duration``/``max_duration`` in seconds; ``require_text``: True skips empty-text items
    (``empty_text``), False/None keeps them. ``on_checked()`` is called in this thread after each file's
    header was read (prepare's count lines).
    """
    probes = probes or {}
    paths = [e.audio_path for e in entries]
    if len(paths) > 16 and threads > 1:
        with ThreadPoolExecutor(threads) as pool:
            records = _collect(pool.map(lambda p: probe_with_cache(p, probes), paths), on_checked)
    else:
        records = _collect((probe_with_cache(p, probes) for p in paths), on_checked)
    new_probes: dict[str, Probe] = {}
    kept: list[Checked] = []
    problems: list[Problem] = []
    for entry, probe in zip(entries, records):
        new_probes[entry.audio_path] = probe
        problem = _check(entry, probe, min_duration, max_duration, require_text)
        if problem is not None:
            problems.append(problem)
        elif probe.info is not None:
            kept.append(Checked(entry, probe.info, probe.sig))
    return kept, problems, new_probes


def _collect(found: Iterable[Probe], on_checked: Callable[[], None] | None) -> list[Probe]:
    records = []
    for record in found:
        records.append(record)
        if on_checked is not None:
            on_checked()
    return records


def _check(
    entry: Entry, probe: Probe, min_duration: float, max_duration: float, require_text: bool | None
) -> Problem | None:
    where = entry.where
    if probe.info is None:
        reason, detail = probe.problem or ("unreadable_audio", "no header")
        detail = detail if entry.audio_path in detail else f"{detail} ({entry.audio_path})"
        return Problem(reason, detail, id=entry.id, where=where)
    seconds = probe.info.duration
    if seconds < min_duration:
        return Problem("too_short", f"{seconds:.3f} s < data.min_duration={min_duration}", entry.id, where)
    if seconds > max_duration:
        return Problem("too_long", f"{seconds:.2f} s > data.max_duration={max_duration}", entry.id, where)
    if require_text and not entry.text.strip():
        return Problem("empty_text", "empty transcript (data.require_text is on)", entry.id, where)
    return None


def totals(problems: list[Problem]) -> dict[str, int]:
    """Count of problems per reason, most frequent first."""
    out: dict[str, int] = {}
    for p in problems:
        out[p.reason] = out.get(p.reason, 0) + 1
    return dict(sorted(out.items(), key=lambda kv: (-kv[1], kv[0])))
