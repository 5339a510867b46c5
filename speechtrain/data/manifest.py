"""Read a dataset description into an utterance table: LJSpeech, JSONL, or a labelled folder.

- **LJSpeech**: a folder with ``metadata.csv`` (or the csv itself); lines ``id|text|normalized_text``
  (``id|text`` accepted), audio in ``wavs/ID.wav`` beside the csv; normalized_text is used when present.
- **JSONL**: one JSON object per line with ``audio_filepath`` (relative to the manifest's folder, or
  absolute), optional ``text``, ``duration``, ``speaker``, ``label`` and ``id`` (default: the file stem).
- **folder**: ``ROOT/<label>/*.wav`` (also flac/ogg) for classifiers; the label is the folder name.

``read_manifest(path, fmt="auto") -> (entries, problems)``: malformed lines become
:class:`Problem` records with the file and line number, never exceptions; only a manifest that
cannot be read at all (missing, empty, unknown format) raises :class:`DataError`.
``manifest_signature(path, fmt)`` changes whenever the listing does (the feature cache's staleness
check uses it).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from speechtrain.errors import DataError

AUDIO_EXTENSIONS = (".wav", ".flac", ".ogg", ".oga", ".aiff", ".aif")
FORMATS = ("ljspeech", "jsonl", "folder")


@dataclass
class Entry:
    """One utterance as listed: where its audio is and what it says."""

    id: str
    audio_path: str  # absolute path
    text: str = ""
    speaker: str | None = None
    label: str | None = None
    duration: float | None = None  # as listed (JSONL); the audio header is what counts
    where: str = ""  # "file:line" of the listing (or the file itself for folders)


@dataclass
class Problem:
    """Why an item (or manifest line) was skipped; ``reason`` is one of :data:`REASONS`."""

    reason: str
    detail: str
    id: str | None = None
    where: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        who = self.id if self.id is not None else "-"
        at = f" ({self.where})" if self.where else ""
        return f"{self.reason}: {who}{at}: {self.detail}"


#: reason code -> meaning (docs/data.md lists the same)
REASONS = {
    "malformed_line": "a manifest line that cannot be parsed (field count, JSON, missing or mistyped key)",
    "duplicate_id": "an id listed twice (the first is kept)",
    "missing_file": "the listed audio file does not exist",
    "unreadable_audio": "not an audio file soundfile can open (garbage bytes, unknown format)",
    "truncated_audio": "fewer samples in the file than its header says",
    "empty_audio": "zero samples",
    "too_short": "shorter than data.min_duration",
    "too_long": "longer than data.max_duration",
    "empty_text": "no text where the task needs text (data.require_text)",
    "unknown_label": "an eval-manifest label or speaker the training data does not have",
    "feature_error": "feature computation failed for this file",
}


def detect_format(path: str | os.PathLike[str]) -> str:
    """``ljspeech``, ``jsonl`` or ``folder`` for a path (DataError when it is none of them)."""
    p = Path(path)
    if not p.exists():
        raise DataError(f"data not found: {p} (set data.manifest to an LJSpeech folder, a JSONL file or ROOT/<label>/)")
    if p.is_dir():
        if (p / "metadata.csv").is_file():
            return "ljspeech"
        jsonl = sorted(p.glob("*.jsonl"))
        if len(jsonl) == 1:
            return "jsonl"
        if _label_dirs(p):
            return "folder"
        raise DataError(
            f"{p}: cannot tell the dataset format: no metadata.csv (LJSpeech), no single *.jsonl manifest, "
            f"and no <label>/ sub-folders with audio; point data.manifest at the file or set data.format"
        )
    suffix = p.suffix.lower()
    if suffix == ".csv":
        return "ljspeech"
    if suffix in (".jsonl", ".json", ".ndjson"):
        return "jsonl"
    with open(p, "rb") as f:
        head = f.read(4096).lstrip()
    if head.startswith(b"{"):
        return "jsonl"
    if b"|" in head.split(b"\n", 1)[0]:
        return "ljspeech"
    raise DataError(f"{p}: cannot tell the manifest format (not id|text lines, not JSON lines); set data.format")


def resolve_format(path: str | os.PathLike[str], fmt: str) -> str:
    """``fmt``, or the detected format when ``fmt`` is ``auto``."""
    return detect_format(path) if fmt == "auto" else fmt


def data_folder(path: str | os.PathLike[str]) -> Path:
    """The folder the data lives in: the folder itself, or the folder of a manifest file."""
    p = Path(path).absolute()
    return p if p.is_dir() else p.parent


def file_signature(path: str) -> list[int] | None:
    """``[size, mtime_ns]`` of a file, None when it does not exist."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [int(st.st_size), int(st.st_mtime_ns)]


ManifestSignature = list[int] | str | None  # file signature, or a hash of a folder's listing


def manifest_signature(path: str | os.PathLike[str], fmt: str) -> ManifestSignature:
    """Changes when the listing changes: size+mtime of the manifest file, or a hash of the folder's
    file list (``folder`` format)."""
    src = manifest_file(path, fmt)
    if fmt != "folder":
        return file_signature(str(src))
    entries, problems = _read_folder(src)
    listing = [e.audio_path for e in entries] + [p.where for p in problems]
    return hashlib.sha1("\n".join(listing).encode()).hexdigest()


def manifest_file(path: str | os.PathLike[str], fmt: str) -> Path:
    """The file (or folder, for ``folder``) that lists the items."""
    p = Path(path)
    if fmt == "ljspeech" and p.is_dir():
        return p / "metadata.csv"
    if fmt == "jsonl" and p.is_dir():
        found = sorted(p.glob("*.jsonl"))
        if len(found) != 1:
            raise DataError(f"{p}: expected exactly one *.jsonl manifest in the folder, found {len(found)}")
        return found[0]
    return p


def read_manifest(path: str | os.PathLike[str], fmt: str = "auto") -> tuple[list[Entry], list[Problem]]:
    """Entries (in listing order, unique ids) and the problems of the lines that were skipped."""
    if fmt == "auto":
        fmt = detect_format(path)
    if fmt not in FORMATS:
        raise DataError(f"unknown data.format '{fmt}' (valid: auto, {', '.join(FORMATS)})")
    src = manifest_file(path, fmt)
    if not src.exists():
        raise DataError(f"manifest not found: {src}")
    if fmt == "folder":
        if not src.is_dir():
            raise DataError(f"{src}: data.format=folder needs a folder ROOT/<label>/*.wav")
        entries, problems = _read_folder(src)
    else:
        if not src.is_file():
            raise DataError(f"{src}: expected a {fmt} manifest file")
        reader = _read_ljspeech if fmt == "ljspeech" else _read_jsonl
        entries, problems = reader(src)
    return _dedupe(entries, problems)


def _lines(src: Path) -> list[tuple[int, str | None]]:
    """(line number, text or None when not UTF-8) of the non-empty lines."""
    try:
        blob = src.read_bytes()
    except OSError as exc:
        raise DataError(f"cannot read manifest {src}: {exc.strerror or exc}") from None
    out: list[tuple[int, str | None]] = []
    for n, raw in enumerate(blob.split(b"\n"), start=1):
        raw = raw.rstrip(b"\r")
        if not raw.strip():
            continue
        try:
            out.append((n, raw.decode("utf-8-sig" if n == 1 else "utf-8")))
        except UnicodeDecodeError:
            out.append((n, None))
    return out


def _read_ljspeech(src: Path) -> tuple[list[Entry], list[Problem]]:
    entries, problems = [], []
    wavs = src.parent / "wavs"
    for n, line in _lines(src):
        where = f"{src}:{n}"
        if line is None:
            problems.append(Problem("malformed_line", "not UTF-8 text", where=where))
            continue
        fields = line.split("|")
        if len(fields) not in (2, 3):
            problems.append(
                Problem(
                    "malformed_line",
                    f"expected 3 fields id|text|normalized_text (or id|text), got {len(fields)}",
                    id=fields[0].strip() or None,
                    where=where,
                )
            )
            continue
        uid = fields[0].strip()
        if not uid:
            problems.append(Problem("malformed_line", "empty id", where=where))
            continue
        text = fields[2].strip() if len(fields) == 3 and fields[2].strip() else fields[1].strip()
        entries.append(Entry(uid, str((wavs / f"{uid}.wav").absolute()), text, where=where))
    return entries, problems


def _read_jsonl(src: Path) -> tuple[list[Entry], list[Problem]]:
    entries, problems = [], []
    base = src.parent
    for n, line in _lines(src):
        where = f"{src}:{n}"
        if line is None:
            problems.append(Problem("malformed_line", "not UTF-8 text", where=where))
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            problems.append(Problem("malformed_line", f"not valid JSON ({exc.msg} at column {exc.colno})", where=where))
            continue
        entry = _jsonl_entry(obj, base, where)
        if isinstance(entry, Problem):
            problems.append(entry)
        else:
            entries.append(entry)
    return entries, problems


def _jsonl_entry(obj: Any, base: Path, where: str) -> Entry | Problem:
    if not isinstance(obj, dict):
        return Problem("malformed_line", f"expected a JSON object, got {type(obj).__name__}", where=where)
    audio = obj.get("audio_filepath")
    uid = obj.get("id")
    if audio is None:
        return Problem("malformed_line", "missing key 'audio_filepath'", id=uid, where=where)
    if not isinstance(audio, str) or not audio.strip():
        return Problem("malformed_line", f"'audio_filepath' must be a non-empty string, got {audio!r}", where=where)
    checks = {"text": (str,), "duration": (int, float), "speaker": (str, int), "label": (str, int), "id": (str, int)}
    for key, types in checks.items():
        value = obj.get(key)
        if value is not None and (not isinstance(value, types) or isinstance(value, bool)):
            want = " or ".join(t.__name__ for t in types)
            return Problem("malformed_line", f"'{key}' must be {want}, got {value!r}", id=uid, where=where)
    path = Path(audio)
    if not path.is_absolute():
        path = base / path
    return Entry(
        id=str(uid) if uid is not None else "",
        audio_path=str(path.absolute()),
        text=str(obj.get("text") or "").strip(),
        speaker=None if obj.get("speaker") is None else str(obj["speaker"]),
        label=None if obj.get("label") is None else str(obj["label"]),
        duration=None if obj.get("duration") is None else float(obj["duration"]),
        where=where,
    )


def _label_dirs(root: Path) -> list[Path]:
    return [
        d
        for d in sorted(root.iterdir())
        if d.is_dir() and not d.name.startswith(".") and any(_is_audio(f) for f in d.rglob("*"))
    ]


def _is_audio(path: Path) -> bool:
    return path.suffix.lower() in AUDIO_EXTENSIONS and path.is_file() and not path.name.startswith(".")


def _read_folder(root: Path) -> tuple[list[Entry], list[Problem]]:
    entries, problems = [], []
    for f in sorted(root.iterdir()):
        if _is_audio(f):
            problems.append(Problem("malformed_line", "audio directly under ROOT has no <label>/ folder", where=str(f)))
    for d in _label_dirs(root):
        for f in sorted(p for p in d.rglob("*") if _is_audio(p) and not _hidden(p, d)):
            rel = f.relative_to(root).with_suffix("").as_posix()
            entries.append(Entry(rel, str(f.absolute()), "", label=d.name, where=str(f)))
    return entries, problems


def _hidden(path: Path, root: Path) -> bool:
    return any(part.startswith(".") for part in path.relative_to(root).parts)


def _dedupe(entries: list[Entry], problems: list[Problem]) -> tuple[list[Entry], list[Problem]]:
    # JSONL lines without an id get their file stem, or the relative path when stems collide
    stems: dict[str, int] = {}
    for e in entries:
        if not e.id:
            stem = Path(e.audio_path).stem
            stems[stem] = stems.get(stem, 0) + 1
    for e in entries:
        if not e.id:
            stem = Path(e.audio_path).stem
            e.id = stem if stems[stem] == 1 else Path(e.audio_path).with_suffix("").as_posix().lstrip("/")
    seen: dict[str, str] = {}
    out = []
    for e in entries:
        if e.id in seen:
            problems.append(Problem("duplicate_id", f"id already listed at {seen[e.id]}", id=e.id, where=e.where))
            continue
        seen[e.id] = e.where
        out.append(e)
    return out, problems
