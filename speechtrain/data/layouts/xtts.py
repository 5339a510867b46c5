"""XTTS/Coqui CSV: a header row naming the columns (``audio_file|text|speaker_name``; ``|``, tab or ``,``
separated; quoted fields as CSV reads them, line breaks inside quotes included), paths relative to the csv.
A folder with ``train.csv`` + ``eval.csv`` (or ``metadata_train.csv`` + ``metadata_eval.csv``) uses that pair
as the train/eval split; a folder with one ``metadata.csv`` that has such a header is read as one listing."""

from __future__ import annotations

from pathlib import Path

from speechtrain.data.layouts.base import (
    Entry,
    Layout,
    Listing,
    Match,
    Problem,
    Strength,
    columns,
    first_line,
    header_names,
    join_quoted_rows,
    split_row,
)

PAIRS = (("train.csv", "eval.csv"), ("metadata_train.csv", "metadata_eval.csv"))
KEY = "audio_file"


def _pair(root: Path) -> tuple[Path, Path | None] | None:
    """The (train, eval) CSV pair of an XTTS/Coqui folder (eval None when absent)."""
    for train, evaluation in PAIRS:
        if (root / train).is_file():
            return root / train, (root / evaluation) if (root / evaluation).is_file() else None
    return None


def _has_header(path: Path, encoding: str | None) -> bool:
    return header_names(first_line(path, encoding), KEY) is not None


def detect(path: Path, encoding: str | None = None) -> Match | None:
    if not path.is_dir():
        return (
            Match(f"{path.name} with an audio_file header", (path.name,), Strength.HEADER)
            if _has_header(path, encoding)
            else None
        )
    meta = path / "metadata.csv"
    headed = meta.is_file() and _has_header(meta, encoding)
    pair = _pair(path)
    strength = Strength.HEADER if headed else Strength.NAME
    claimed = ("metadata.csv",) if headed else ()
    if pair is not None:
        names = tuple(p.name for p in pair if p is not None)
        return Match(" + ".join(names), names + claimed, strength)
    return Match("metadata.csv with an audio_file header", claimed, strength) if headed else None


def listing(root: Path) -> Path:
    pair = _pair(root)
    return pair[0] if pair is not None else root / "metadata.csv"  # a single CSV with the header


def eval_listing(root: Path) -> Path | None:
    pair = _pair(root)
    return pair[1] if pair is not None else None


def read(src: Path, encoding: str | None = None) -> Listing:
    """A header row, then ``audio_file|text|speaker_name`` (paths relative to the CSV)."""
    names, sep, lines = columns(src, encoding, (KEY, "text"), "xtts")
    col = {name: i for i, name in enumerate(names)}
    entries, problems = [], []
    for n, line in join_quoted_rows(lines, sep):  # a quoted text may go on over a line break
        where = f"{src}:{n}"
        fields = split_row(line, sep)
        if len(fields) != len(names):
            problems.append(
                Problem(
                    "malformed_line",
                    f"expected {len(names)} fields ({sep.join(names)}), got {len(fields)}",
                    where=where,
                )
            )
            continue
        audio = fields[col[KEY]].strip()
        if not audio:
            problems.append(Problem("malformed_line", "empty audio_file", where=where))
            continue
        path = Path(audio) if Path(audio).is_absolute() else src.parent / audio
        speaker = fields[col["speaker_name"]].strip() if "speaker_name" in col else ""
        text = fields[col["text"]].strip()
        entries.append(Entry("", str(path.absolute()), text, speaker=speaker or None, where=where))
    return entries, problems


LAYOUT = Layout(
    name="xtts",
    title="an XTTS/Coqui manifest",
    order=30,
    detect=detect,
    read=read,
    listing=listing,
    eval_listing=eval_listing,
    hint="train.csv/eval.csv (XTTS)",
    points_at="a folder with `train.csv` + `eval.csv` (or `metadata_train.csv` + `metadata_eval.csv`), or one such csv",
    items="XTTS/Coqui: a header row naming the columns (`audio_file\\|text\\|speaker_name`; `\\|`, tab or `,` "
    "separated; quoted fields as CSV reads them, line breaks inside quotes included), paths relative to the csv; "
    "the pair is the train/eval split",
)
