"""Hugging Face ``audiofolder``: audio files beside a ``metadata.csv`` (comma-separated, with a header) or
``metadata.jsonl`` (one JSON object per line) whose ``file_name`` column gives each file's path relative
to the metadata file, the other columns its transcript and speaker. The splits may be sub-folders
``train/`` and ``validation/`` (or ``valid/``, ``dev/``, ``test/``), each with its own metadata file:
``train/`` is read for training and the other as the eval split.

The transcript is the column ``data.text_column`` names, else the first of :data:`TEXT_COLUMNS` present
(``transcription``, ``text``, ...); the speaker the first of :data:`SPEAKER_COLUMNS`. Without a transcript
column the items have no text (a vocoder corpus); a TTS task then gets an error listing the columns seen.
This is the layout ``datasets.load_dataset("audiofolder", data_dir=...)`` reads.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

from speechtrain.data.layouts.base import (
    Entry,
    Layout,
    Listing,
    Match,
    Problem,
    Strength,
    first_line,
    read_text_lines,
    relative_audio,
)
from speechtrain.errors import DataError

METADATA = ("metadata.csv", "metadata.jsonl")
TEXT_COLUMNS = ("transcription", "text", "sentence", "transcript", "normalized_text")
SPEAKER_COLUMNS = ("speaker_id", "speaker", "speaker_name", "client_id")
EVAL_SPLITS = ("validation", "valid", "dev", "test")


def _names_file_name(path: Path, encoding: str | None) -> bool:
    """Whether a metadata file's header (csv) or first object (jsonl) has the ``file_name`` column."""
    line = first_line(path, encoding)
    if path.suffix.lower() == ".jsonl":
        try:
            return "file_name" in json.loads(line)
        except (json.JSONDecodeError, TypeError):
            return False
    return "file_name" in next(csv.reader([line]), [])


def _metadata(folder: Path, encoding: str | None) -> Path | None:
    """The folder's metadata file with a ``file_name`` column, if it has one."""
    for name in METADATA:
        if (folder / name).is_file() and _names_file_name(folder / name, encoding):
            return folder / name
    return None


def _splits(root: Path, encoding: str | None = None) -> tuple[Path, Path | None] | None:
    """(train, eval) metadata files: ``ROOT/metadata.*``, else ``ROOT/train/metadata.*`` and the first eval
    split folder's."""
    top = _metadata(root, encoding)
    if top is not None:
        return top, None
    train = _metadata(root / "train", encoding) if (root / "train").is_dir() else None
    if train is None:
        return None
    evals = (_metadata(root / s, encoding) for s in EVAL_SPLITS if (root / s).is_dir())
    return train, next((e for e in evals if e is not None), None)


def detect(path: Path, encoding: str | None = None) -> Match | None:
    if not path.is_dir():
        if path.name in METADATA and _names_file_name(path, encoding):
            return Match(f"{path.name} with a file_name column", (path.name,), Strength.HEADER)
        return None
    found = _splits(path, encoding)
    if found is None:
        return None
    files = tuple(p.relative_to(path).as_posix() for p in found if p is not None)
    return Match(" + ".join(files) + " with a file_name column", files, Strength.HEADER)


def listing(root: Path) -> Path:
    found = _splits(root)
    if found is None:
        raise DataError(
            f"{root}: data.format=audiofolder needs metadata.csv or metadata.jsonl with a file_name column, in the "
            f"folder or in its train/ sub-folder"
        )
    return found[0]


def eval_listing(root: Path) -> Path | None:
    found = _splits(root)
    return found[1] if found is not None else None


def _rows(src: Path, encoding: str | None) -> list[tuple[int, dict[str, Any] | None, str]]:
    """(line number, row or None when malformed, why) of a metadata file."""
    if src.suffix.lower() == ".jsonl":
        out: list[tuple[int, dict[str, Any] | None, str]] = []
        for n, line in read_text_lines(src, encoding):
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                out.append((n, None, f"not valid JSON ({exc.msg} at column {exc.colno})"))
                continue
            out.append((n, obj, "") if isinstance(obj, dict) else (n, None, "expected a JSON object"))
        return out
    # csv: quoted fields may hold commas and line breaks, so parse the whole text, not line by line
    lines = read_text_lines(src, encoding)
    numbers = [n for n, _ in lines]  # the file's line number of each non-empty line
    reader = csv.DictReader(io.StringIO("\n".join(line for _, line in lines)))
    if reader.fieldnames is None or "file_name" not in reader.fieldnames:
        raise DataError(f"{src}:1: data.format=audiofolder needs a header row with a file_name column")
    width = len(reader.fieldnames)
    rows: list[tuple[int, dict[str, Any] | None, str]] = []
    for row in reader:
        n = numbers[reader.line_num - 1]
        if None in row or None in row.values():  # DictReader: surplus fields under None, missing ones None
            rows.append((n, None, f"expected {width} comma-separated fields ({','.join(reader.fieldnames)})"))
        else:
            rows.append((n, dict(row), ""))
    return rows


def _header(src: Path, encoding: str | None) -> list[str]:
    """The column names of a metadata file: the csv header, or the keys of the jsonl's first object."""
    line = first_line(src, encoding)
    if src.suffix.lower() == ".jsonl":
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            return []
        return [str(k) for k in obj] if isinstance(obj, dict) else []
    return next(csv.reader([line]), [])


def transcript_note(src: Path, encoding: str | None = None) -> str | None:
    """Where the transcripts were looked for, when the metadata has no transcript column."""
    seen = _header(src, encoding)
    if any(c in seen for c in TEXT_COLUMNS):
        return None
    others = [c for c in seen if c != "file_name" and c not in SPEAKER_COLUMNS]
    fix = f"; if {others[0]!r} holds them, set data.text_column={others[0]}" if others else ""
    return (
        f"{src}: no transcript column: the columns are {', '.join(seen)}, and the transcript is read from "
        f"{', '.join(TEXT_COLUMNS)} or the column data.text_column names{fix}"
    )


def read_text_column(src: Path, encoding: str | None, text_column: str) -> Listing:
    """:func:`read` with the transcript from ``text_column``; a DataError listing the columns seen when the
    metadata has no such column."""
    seen = _header(src, encoding)
    if text_column not in seen:
        raise DataError(
            f"{src}: data.text_column={text_column} is not a column of the metadata (its columns: "
            f"{', '.join(seen)}); set data.text_column to the transcript's column"
        )
    return read(src, encoding, text_column)


def read(src: Path, encoding: str | None = None, text_column: str | None = None) -> Listing:
    entries: list[Entry] = []
    problems: list[Problem] = []
    text_columns = (text_column,) if text_column else TEXT_COLUMNS
    for n, row, why in _rows(src, encoding):
        where = f"{src}:{n}"
        if row is None:
            problems.append(Problem("malformed_line", why, where=where))
            continue
        audio = row.get("file_name")
        if not isinstance(audio, str) or not audio.strip():
            problems.append(
                Problem("malformed_line", f"'file_name' must be a non-empty path, got {audio!r}", where=where)
            )
            continue
        text = next((row[c] for c in text_columns if row.get(c) is not None), "")
        speaker = next((row[c] for c in SPEAKER_COLUMNS if row.get(c) not in (None, "")), None)
        entries.append(
            Entry(
                "",  # the file stem (the relative path where stems collide)
                relative_audio(audio.strip(), src.parent),
                str(text).strip(),
                speaker=None if speaker is None else str(speaker),
                where=where,
            )
        )
    return entries, problems


LAYOUT = Layout(
    name="audiofolder",
    title="a Hugging Face audiofolder",
    order=60,
    detect=detect,
    read=read,
    listing=listing,
    eval_listing=eval_listing,
    read_text_column=read_text_column,
    transcript_note=transcript_note,
    hint="metadata.csv/metadata.jsonl with a file_name column (Hugging Face audiofolder)",
    points_at="a folder with `metadata.csv` or `metadata.jsonl` (or `train/` + `validation/`, `dev/` or `test/` "
    "sub-folders, each with one), or that file",
    items="Hugging Face `audiofolder`: `file_name` (relative to the metadata file), the transcript from "
    "`transcription`, `text`, `sentence`, `transcript` or `normalized_text` (another: `data.text_column`), "
    "the speaker from `speaker_id`, "
    "`speaker`, `speaker_name` or `client_id`; the `train/` split trains, the other is the eval split",
)
