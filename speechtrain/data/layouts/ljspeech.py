"""LJSpeech: a folder with ``metadata.csv`` (or the csv itself), lines ``id|text|normalized_text``
(``id|text`` accepted), audio in ``wavs/ID.wav`` beside the csv; normalized_text is used when present.

An id with an audio extension (``wavs/a.wav``) is read as that file's path relative to the csv. A header
row is an error naming the layout it belongs to (any layout that recognises the file by its header).
"""

from __future__ import annotations

from pathlib import Path

from speechtrain.data.layouts.base import (
    AUDIO_EXTENSIONS,
    Entry,
    Layout,
    Listing,
    Match,
    Problem,
    Strength,
    first_line,
    read_text_lines,
)
from speechtrain.errors import DataError


def detect(path: Path, encoding: str | None = None) -> Match | None:
    if path.is_dir():
        return Match("metadata.csv", ("metadata.csv",)) if (path / "metadata.csv").is_file() else None
    line = first_line(path, encoding)
    json_like = path.suffix.lower() in (".jsonl", ".json", ".ndjson") or line.lstrip().startswith("{")
    if path.suffix.lower() != ".tsv" and not json_like and "|" in line:
        return Match(f"{path.name} with id|text lines", (path.name,), Strength.SHAPE)
    return None


def read(src: Path, encoding: str | None = None) -> Listing:
    entries, problems = [], []
    wavs = src.parent / "wavs"
    for k, (n, line) in enumerate(read_text_lines(src, encoding)):
        where = f"{src}:{n}"
        fields = line.split("|")
        if k == 0:
            _refuse_header(src, line, where, encoding)
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
        if uid.lower().endswith(AUDIO_EXTENSIONS):  # a path, not an id
            if len(fields) == 3 and _looks_like_speaker(fields[1], fields[2]):
                raise DataError(
                    f"{where}: {line[:80]!r} looks like audio_file|text|speaker_name (XTTS/Coqui) without its "
                    f"header row, not LJSpeech's id|text|normalized_text (the speaker would become the transcript): "
                    f"add the line 'audio_file|text|speaker_name' at the top and set data.format=xtts"
                )
            path = Path(uid) if Path(uid).is_absolute() else src.parent / uid
            entries.append(Entry(Path(uid).stem, str(path.absolute()), text, where=where))
            continue
        entries.append(Entry(uid, str((wavs / f"{uid}.wav").absolute()), text, where=where))
    return entries, problems


def _refuse_header(src: Path, line: str, where: str, encoding: str | None) -> None:
    """A first line that another layout recognises as its header row is that layout's file, not an item."""
    from speechtrain.data.layouts import header_owner

    owner = header_owner(src, encoding, besides=LAYOUT.name)
    if owner is not None:
        raise DataError(
            f"{where}: a header row ({line[:60]!r}): this is not LJSpeech (id|text|normalized_text) but "
            f"{owner.title}; set data.format={owner.name}"
        )


def _looks_like_speaker(text: str, third: str) -> bool:
    """Whether the third field of a path-id line is a speaker name rather than normalised text: one word
    where the text has several."""
    third, text = third.strip(), text.strip()
    return bool(third) and len(third.split()) == 1 and len(text.split()) > 1


LAYOUT = Layout(
    name="ljspeech",
    title="LJSpeech",
    order=10,
    detect=detect,
    read=read,
    listing=lambda root: root / "metadata.csv",
    hint="metadata.csv (LJSpeech)",
    points_at="a folder with `metadata.csv`, or the csv itself",
    items="lines `id\\|text\\|normalized_text` (or `id\\|text`); audio `wavs/ID.wav` beside the csv; normalized_text "
    "is used when present, else text",
)
