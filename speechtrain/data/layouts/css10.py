"""CSS10 (and Coqui's ``css10`` formatter): ``transcript.txt`` at the top of a language folder, lines
``path|original text|normalized text|duration`` with the audio path relative to the file
(``achtgesichterambiwasse/achtgesichterambiwasse_0000.wav``). The normalized text is used when present,
as in LJSpeech; the listed duration is kept (the audio header is what counts)."""

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
    relative_audio,
)

LISTING = "transcript.txt"


def _css10_line(line: str) -> bool:
    fields = line.split("|")
    if len(fields) != 4 or not fields[0].strip().lower().endswith(AUDIO_EXTENSIONS):
        return False
    try:
        float(fields[3])
    except ValueError:
        return False
    return True


def detect(path: Path, encoding: str | None = None) -> Match | None:
    if path.is_dir():
        listing = path / LISTING
        if listing.is_file() and _css10_line(first_line(listing, encoding)):
            return Match(f"{LISTING} with path|text|normalized|duration lines", (LISTING,), Strength.FIELDS)
        return None
    if _css10_line(first_line(path, encoding)):
        return Match(f"{path.name} with path|text|normalized|duration lines", (path.name,), Strength.FIELDS)
    return None


def read(src: Path, encoding: str | None = None) -> Listing:
    entries, problems = [], []
    for n, line in read_text_lines(src, encoding):
        where = f"{src}:{n}"
        fields = line.split("|")
        if len(fields) != 4:
            detail = f"expected 4 fields path|text|normalized|duration, got {len(fields)}"
            problems.append(Problem("malformed_line", detail, where=where))
            continue
        audio, text, normalized, seconds = (f.strip() for f in fields)
        try:
            duration = float(seconds)
        except ValueError:
            problems.append(Problem("malformed_line", f"the duration field is not a number: {seconds!r}", where=where))
            continue
        if not audio:
            problems.append(Problem("malformed_line", "empty audio path", where=where))
            continue
        path = relative_audio(audio, src.parent)
        entries.append(Entry(Path(audio).stem, path, normalized or text, duration=duration, where=where))
    return entries, problems


LAYOUT = Layout(
    name="css10",
    title="CSS10",
    order=45,
    detect=detect,
    read=read,
    listing=lambda root: root / LISTING,
    hint=f"{LISTING} (CSS10)",
    points_at=f"a language folder with `{LISTING}`, or the file itself",
    items="lines `path\\|text\\|normalized text\\|duration`, paths relative to the file; normalized text is used "
    "when present, else the text",
)
