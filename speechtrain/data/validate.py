"""The validation pass: which listed utterances are usable, and why the others are not.

Each entry is checked in this order and gets the first reason that applies: missing file,
unreadable (not audio), truncated (fewer samples than the header says), empty, shorter than
``data.min_duration``, longer than ``data.max_duration``, empty text when text is required.
Nothing here raises on bad data: every problem becomes a :class:`Problem` with the item id, and
an unexpected exception while checking one file is recorded against that file.

Header reads are reused across runs through ``probes`` (path -> file signature + header or
problem), so a second ``prepare`` with unchanged files opens no audio.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from speechtrain.data.audio import AudioInfo, AudioProblem, probe_audio
from speechtrain.data.manifest import Entry, Problem


@dataclass
class Checked:
    """An entry that passed validation, with its header and file signature."""

    entry: Entry
    info: AudioInfo
    sig: list[int]


def file_signature(path: str) -> list[int] | None:
    """``[size, mtime_ns]`` of a file, None when it does not exist."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [int(st.st_size), int(st.st_mtime_ns)]


def probe_with_cache(path: str, probes: dict[str, Any]) -> dict[str, Any]:
    """Header probe record ``{"sig", "info": [sr, ch, frames]}`` or ``{"sig", "problem": [reason, detail]}``,
    reused from ``probes`` when the file signature is unchanged."""
    sig = file_signature(path)
    old = probes.get(path)
    if old is not None and old.get("sig") == sig:
        return old
    try:
        info = probe_audio(path)
        rec: dict[str, Any] = {"sig": sig, "info": [info.sample_rate, info.channels, info.frames]}
    except AudioProblem as exc:
        rec = {"sig": sig, "problem": [exc.reason, exc.detail]}
    except Exception as exc:  # one odd file must not stop the pass
        rec = {"sig": sig, "problem": ["unreadable_audio", f"unexpected {type(exc).__name__}: {exc}"[:200]]}
    return rec


def validate_entries(
    entries: list[Entry],
    data_cfg: Any,
    require_text: bool | None,
    probes: dict[str, Any] | None = None,
    threads: int = 8,
) -> tuple[list[Checked], list[Problem], dict[str, Any]]:
    """Split entries into kept ones and problems; returns ``(kept, problems, new_probes)``.

    ``require_text``: True skips empty-text items (``empty_text``); False/None keeps them.
    ``data_cfg`` supplies ``min_duration`` and ``max_duration`` (seconds).
    """
    probes = probes or {}
    paths = [e.audio_path for e in entries]
    if len(paths) > 16 and threads > 1:
        with ThreadPoolExecutor(threads) as pool:
            records = list(pool.map(lambda p: probe_with_cache(p, probes), paths))
    else:
        records = [probe_with_cache(p, probes) for p in paths]
    new_probes: dict[str, Any] = {}
    kept, problems = [], []
    for entry, rec in zip(entries, records):
        new_probes[entry.audio_path] = rec
        problem = _check(entry, rec, data_cfg, require_text)
        if problem is not None:
            problems.append(problem)
        else:
            sr, ch, frames = rec["info"]
            kept.append(Checked(entry, AudioInfo(sr, ch, frames), rec["sig"]))
    return kept, problems, new_probes


def _check(entry: Entry, rec: dict[str, Any], data_cfg: Any, require_text: bool | None) -> Problem | None:
    where = entry.where
    if "problem" in rec:
        reason, detail = rec["problem"]
        detail = detail if entry.audio_path in detail else f"{detail} ({entry.audio_path})"
        return Problem(reason, detail, id=entry.id, where=where)
    sr, _, frames = rec["info"]
    seconds = frames / sr
    if seconds < data_cfg.min_duration:
        return Problem("too_short", f"{seconds:.3f} s < data.min_duration={data_cfg.min_duration}", entry.id, where)
    if seconds > data_cfg.max_duration:
        return Problem("too_long", f"{seconds:.2f} s > data.max_duration={data_cfg.max_duration}", entry.id, where)
    if require_text and not entry.text.strip():
        return Problem("empty_text", "empty transcript (data.require_text is on)", entry.id, where)
    return None


def totals(problems: list[Problem]) -> dict[str, int]:
    """Count of problems per reason, most frequent first."""
    out: dict[str, int] = {}
    for p in problems:
        out[p.reason] = out.get(p.reason, 0) + 1
    return dict(sorted(out.items(), key=lambda kv: (-kv[1], kv[0])))
