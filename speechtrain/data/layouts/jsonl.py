"""JSONL (NeMo): one JSON object per line with ``audio_filepath`` (relative to the manifest's folder, or
absolute), optional ``text`` (``normalized_text`` is preferred when present, as NeMo's text normalisation
writes it), ``duration``, ``offset``, ``speaker``, ``label`` and ``id`` (default: the file stem).

With ``offset`` the line is a segment of the file: ``offset`` .. ``offset + duration`` seconds (to the
file's end without ``duration``), read as its own utterance (id: the stem and the offset, ``book_12.5``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from speechtrain.data.audio import segment_path
from speechtrain.data.layouts.base import Entry, Layout, Listing, Match, Problem, Strength, first_line, read_text_lines
from speechtrain.errors import DataError

SUFFIXES = (".jsonl", ".json", ".ndjson")


def detect(path: Path, encoding: str | None = None) -> Match | None:
    if path.is_dir():
        found = tuple(sorted(p.name for p in path.glob("*.jsonl")))
        return Match(", ".join(found), found) if found else None
    if path.suffix.lower() in SUFFIXES or first_line(path, encoding).lstrip().startswith("{"):
        return Match(f"{path.name} with JSON lines", (path.name,), Strength.SHAPE)
    return None


def listing(root: Path) -> Path:
    found = sorted(root.glob("*.jsonl"))
    if len(found) != 1:
        names = ", ".join(f.name for f in found)
        raise DataError(
            f"{root}: expected exactly one *.jsonl manifest in the folder, found {len(found)}"
            + (f" ({names}); point data.manifest at one and data.eval_manifest at another" if found else "")
        )
    return found[0]


def read(src: Path, encoding: str | None = None) -> Listing:
    entries, problems = [], []
    base = src.parent
    for n, line in read_text_lines(src, encoding):
        where = f"{src}:{n}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            problems.append(Problem("malformed_line", f"not valid JSON ({exc.msg} at column {exc.colno})", where=where))
            continue
        entry = _entry(obj, base, where)
        if isinstance(entry, Problem):
            problems.append(entry)
        else:
            entries.append(entry)
    return entries, problems


def _entry(obj: Any, base: Path, where: str) -> Entry | Problem:
    if not isinstance(obj, dict):
        return Problem("malformed_line", f"expected a JSON object, got {type(obj).__name__}", where=where)
    audio = obj.get("audio_filepath")
    uid = obj.get("id")
    if audio is None:
        return Problem("malformed_line", "missing key 'audio_filepath'", id=uid, where=where)
    if not isinstance(audio, str) or not audio.strip():
        return Problem("malformed_line", f"'audio_filepath' must be a non-empty string, got {audio!r}", where=where)
    checks = {
        "text": (str,),
        "normalized_text": (str,),
        "duration": (int, float),
        "offset": (int, float),
        "speaker": (str, int),
        "label": (str, int),
        "id": (str, int),
    }
    for key, types in checks.items():
        value = obj.get(key)
        if value is not None and (not isinstance(value, types) or isinstance(value, bool)):
            want = " or ".join(t.__name__ for t in types)
            return Problem("malformed_line", f"'{key}' must be {want}, got {value!r}", id=uid, where=where)
    path = Path(audio)
    if not path.is_absolute():
        path = base / path
    audio_path = str(path.absolute())
    offset, duration = obj.get("offset"), obj.get("duration")
    if offset is not None:
        if offset < 0 or (duration is not None and duration <= 0):
            return Problem(
                "malformed_line", f"a segment needs offset >= 0 and duration > 0, got {offset}, {duration}", uid, where
            )
        audio_path = segment_path(audio_path, float(offset), None if duration is None else float(duration))
        if uid is None:
            uid = f"{path.stem}_{float(offset):g}"
    text = obj.get("normalized_text") or obj.get("text") or ""
    return Entry(
        id=str(uid) if uid is not None else "",
        audio_path=audio_path,
        text=str(text).strip(),
        speaker=None if obj.get("speaker") is None else str(obj["speaker"]),
        label=None if obj.get("label") is None else str(obj["label"]),
        duration=None if obj.get("duration") is None else float(obj["duration"]),
        where=where,
    )


LAYOUT = Layout(
    name="jsonl",
    title="a JSONL (NeMo) manifest",
    order=20,
    detect=detect,
    read=read,
    listing=listing,
    hint="*.jsonl (NeMo)",
    points_at="a `.jsonl` file (or a folder with exactly one)",
    items="one object per line: `audio_filepath` (relative to the manifest's folder, or absolute), optional "
    "`text` (`normalized_text` preferred when present), `duration`, `offset` (a segment: offset .. offset + "
    "duration s of the file), `speaker`, `label`, `id` (default: the file stem, with the offset for a segment; "
    "the relative path when stems collide)",
)
