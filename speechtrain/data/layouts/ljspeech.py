"""LJSpeech: a folder with ``metadata.csv`` (or the csv itself), lines ``id|text|normalized_text``
(``id|text`` accepted), audio in ``wavs/ID.wav`` beside the csv; normalized_text is used when present.

An id with an audio extension (``wavs/a.wav``) is read as that file's path relative to the csv. A header
row is an error naming the layout it belongs to (any layout that recognises the file by its header),
except LJSpeech's own optional one, ``id|text|normalized_text`` or ``id|text|speaker`` (``speaker_name``),
which says what the third column holds. Without it, a third column that reads as speaker names (by its
statistics, in any script: few distinct values repeated across many ids, none of them the text) is an error
naming that header: it is never taken for the transcript.

Quotes are read as CSV reads them where they enclose a ``|`` or a line break: ``sw05|"Alisema | habari yako"
kisha akaondoka.`` is one text, and a quoted field may go on over the next lines. A quote that encloses
nothing of the kind (LJSpeech's own ``"The earliest book...``) is part of the text, as before.
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
    join_quoted_rows,
    read_text_lines,
    split_fields,
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


THIRD = {"normalized_text": "normalized_text", "speaker": "speaker", "speaker_name": "speaker"}


def read(src: Path, encoding: str | None = None) -> Listing:
    entries, problems = [], []
    wavs = src.parent / "wavs"
    lines = join_quoted_rows(read_text_lines(src, encoding))
    third = "normalized_text"
    if lines and _own_header(lines[0][1]):
        third = THIRD[_own_header(lines[0][1]) or "normalized_text"]
        lines = lines[1:]
    elif lines:
        _refuse_header(src, lines[0][1], f"{src}:{lines[0][0]}", encoding)
        _refuse_speaker_column(src, lines)
    for n, line in lines:
        where = f"{src}:{n}"
        fields = split_fields(line, "|")
        if len(fields) not in (2, 3):
            detail = f"expected 3 fields id|text|normalized_text (or id|text), got {len(fields)}"
            if len(fields) == 4:
                detail += " (path|text|normalized|duration lines are CSS10's: data.format=css10)"
            problems.append(Problem("malformed_line", detail, id=fields[0].strip() or None, where=where))
            continue
        uid = fields[0].strip()
        if not uid:
            problems.append(Problem("malformed_line", "empty id", where=where))
            continue
        extra = fields[2].strip() if len(fields) == 3 else ""
        text = extra if third == "normalized_text" and extra else fields[1].strip()
        speaker = (extra or None) if third == "speaker" else None
        if uid.lower().endswith(AUDIO_EXTENSIONS):  # a path, not an id
            path = Path(uid) if Path(uid).is_absolute() else src.parent / uid
            entries.append(Entry(Path(uid).stem, str(path.absolute()), text, speaker=speaker, where=where))
            continue
        entries.append(Entry(uid, str((wavs / f"{uid}.wav").absolute()), text, speaker=speaker, where=where))
    return entries, problems


def _own_header(line: str) -> str | None:
    """The third column's name when ``line`` is LJSpeech's optional header (``id|text|speaker``...)."""
    names = [c.strip().lower() for c in line.split("|")]
    if len(names) == 3 and names[:2] == ["id", "text"] and names[2] in THIRD:
        return names[2]
    return None


def _refuse_speaker_column(src: Path, lines: list[tuple[int, str]]) -> None:
    """A third column of speaker names is never read as the transcript, judged by the column's statistics in
    any script: most 3-field lines hold one word there, shorter than the text and not part of it, and few
    distinct values repeat across the ids."""
    rows = [f for f in (split_fields(line, "|") for _, line in lines) if len(f) == 3]
    if not rows:
        return
    speaker_like = [f for f in rows if _looks_like_speaker(f[1], f[2])]
    distinct = {f[2].strip() for f in speaker_like}
    if len(speaker_like) < 0.8 * len(rows) or len(distinct) > max(1, len(rows) // 2):
        return
    n, line = lines[0]
    example = ", ".join(repr(v) for v in sorted(distinct)[:3])
    if rows[0][0].strip().lower().endswith(AUDIO_EXTENSIONS):
        raise DataError(
            f"{src}:{n}: {line[:80]!r} looks like audio_file|text|speaker_name (XTTS/Coqui) without its "
            f"header row, not LJSpeech's id|text|normalized_text (the speaker would become the transcript): "
            f"add the line 'audio_file|text|speaker_name' at the top and set data.format=xtts"
        )
    raise DataError(
        f"{src}: the third column looks like speaker names, not normalized text ({len(speaker_like)} of {len(rows)} "
        f"lines hold one word there, shorter than the text and not part of it; {len(distinct)} distinct values, "
        f"e.g. {example}): "
        "the speaker would become the transcript. Add the header row 'id|text|speaker' at the top (or "
        "'id|text|normalized_text' if it is normalized text)"
    )


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
    """Whether the third field of a line reads as a speaker name rather than normalised text, in any script
    (Thai and Japanese put no spaces between words): one word, shorter than the text and not in it."""
    third, text = third.strip(), text.strip()
    return bool(third) and len(third.split()) == 1 and len(third) < len(text) and third.lower() not in text.lower()


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
    "is used when present, else text; an optional header `id\\|text\\|speaker` makes the third column the speaker "
    "(without it, a third column of speaker names is an error); quotes around a `\\|` or a line break are read as CSV",
)
