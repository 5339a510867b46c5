"""What every dataset layout shares: the utterance table's rows (:class:`Entry`), the skipped lines
(:class:`Problem`), the declaration a layout module makes (:class:`Layout`, :class:`Match`), and the
helpers the readers use (metadata decoding with a clear error, header rows, audio files).

A layout module (``speechtrain/data/layouts/<name>.py``) imports this module only; the table of layouts
is :func:`speechtrain.data.layouts.layouts`.
"""

from __future__ import annotations

import codecs
import csv
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import asdict, dataclass
from enum import IntEnum
from pathlib import Path
from typing import Any

from speechtrain.errors import DataError

AUDIO_EXTENSIONS = (".wav", ".flac", ".ogg", ".oga", ".aiff", ".aif", ".mp3")
#: audio a folder dataset does not read: reported (unreadable_audio) instead of passed over in silence
OTHER_AUDIO_EXTENSIONS = (".m4a", ".aac", ".wma", ".opus", ".webm", ".mp4", ".amr", ".ape", ".wv")
#: metadata a folder may hold: one that no layout recognises by name is named in the error
METADATA_SUFFIXES = (".csv", ".tsv", ".jsonl", ".json", ".ndjson", ".psv")

ManifestSignature = list[int] | str | None  # file signature, or a hash of a folder's listing
Listing = tuple[list["Entry"], list["Problem"]]


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
    "outside_data_roots": "audio outside the web UI's data roots (a manifest read for the UI only; the CLI reads any)",
    "unreadable_audio": "not an audio file soundfile can open (garbage bytes, unknown format)",
    "truncated_audio": "fewer samples in the file than its header says",
    "empty_audio": "zero samples",
    "too_short": "shorter than data.min_duration",
    "too_long": "longer than data.max_duration",
    "empty_text": "no text where the task needs text (data.require_text)",
    "unreadable_text": "a transcript file of its own that cannot be read or decoded (data.encoding)",
    "non_speech_text": "a transcript mostly of what is not speech (emoji, symbols) or with no letters at all",
    "unknown_label": "an eval-manifest label or speaker the training data does not have",
    "feature_error": "feature computation failed for this file",
    "model_limit": "breaks a limit of the model (XTTS: more BPE tokens or audio codes than it takes)",
}


# ------------------------------------------------------------------------------ the declaration
class Strength(IntEnum):
    """How a layout recognised a file: by its name only, by the shape of its lines (``|`` fields,
    JSON objects), by what its fields hold, or by the column names of its header row. Where two
    layouts claim the same files, the stronger evidence wins (an LJSpeech ``metadata.csv`` is any file
    of that name; one whose header names ``audio_file`` is XTTS's)."""

    NAME = 0
    SHAPE = 1
    FIELDS = 2  # the shape and what the fields hold (a path first, a duration last: CSS10)
    HEADER = 3


@dataclass(frozen=True)
class Match:
    """A layout's evidence for a folder or file: what it saw (``why``, shown in messages), the files
    it claims (names relative to the folder; the file's own name for a file) and how strongly."""

    why: str
    files: tuple[str, ...]
    strength: Strength = Strength.NAME


def _same(path: Path) -> Path:
    return path


def _no_eval(path: Path) -> Path | None:
    return None


def _no_note(path: Path, encoding: str | None) -> str | None:
    return None


def file_signature(path: str) -> list[int] | None:
    """``[size, mtime_ns]`` of a file (of the file a segment path names), None when it does not exist."""
    from speechtrain.data.audio import split_segment

    try:
        st = os.stat(split_segment(path)[0])
    except OSError:
        return None
    return [int(st.st_size), int(st.st_mtime_ns)]


def _listing_file_signature(path: Path) -> ManifestSignature:
    return file_signature(str(path))


@dataclass(frozen=True)
class Layout:
    """One dataset layout, declared by its module as ``LAYOUT = Layout(...)``.

    ``name``: the ``data.format`` value. ``detect(path, encoding)``: evidence that a folder (or a
    metadata file) is in this layout, else None; it may raise a DataError that names the fix.
    ``read(listing, encoding)``: the entries and skipped lines of a listing (a file, or the folder
    itself when ``reads_folder``). ``listing(folder)``: the file of a folder that lists the training
    items; ``eval_listing(folder)``: the eval file the folder brings (XTTS ``eval.csv``), else None.
    ``signature(listing)``: changes whenever the listing does (the feature cache's staleness check).
    ``fallback``: detected only when no other layout matches (``folder``: any two sub-folders with
    audio). ``hint``: the evidence to name when nothing matches (``metadata.csv (LJSpeech)``).
    ``title``, ``points_at``, ``items``: the row of docs/data.md. ``order``: its place in lists.
    ``read_text_column(listing, encoding, column)``: for layouts with named columns, read the transcript
    from ``column`` (``data.text_column``); None: the layout has no columns to choose from.
    ``transcript_note(listing, encoding)``: where the transcripts were looked for, when the listing has
    none (named in the error when a TTS task finds no text), else None.
    """

    name: str
    title: str
    order: int
    detect: Callable[[Path, str | None], Match | None]
    read: Callable[[Path, str | None], Listing]
    hint: str
    points_at: str
    items: str
    listing: Callable[[Path], Path] = _same
    eval_listing: Callable[[Path], Path | None] = _no_eval
    signature: Callable[[Path], ManifestSignature] = _listing_file_signature
    reads_folder: bool = False
    fallback: bool = False
    read_text_column: Callable[[Path, str | None, str], Listing] | None = None
    transcript_note: Callable[[Path, str | None], str | None] = _no_note


# ---------------------------------------------------------------------------------- helpers
def is_audio(path: Path) -> bool:
    """An audio file the readers take (by suffix), not hidden."""
    return path.suffix.lower() in AUDIO_EXTENSIONS and path.is_file() and not path.name.startswith(".")


def hidden(path: Path, root: Path) -> bool:
    """Any part of ``path`` below ``root`` starts with a dot."""
    return any(part.startswith(".") for part in path.relative_to(root).parts)


def first_line(path: Path, encoding: str | None = None) -> str:
    """The first non-empty line of a metadata file (decoded as :func:`read_text_lines` does)."""
    for _, line in read_text_lines(path, encoding, limit=1):
        return line
    return ""


HEADER_SEPARATORS = ("|", "\t", ",")


def header_names(line: str, key: str) -> list[str] | None:
    """The column names when ``line`` is a header row holding the column ``key`` (``|``, tab or ``,``
    separated, case-insensitive); None otherwise."""
    for sep in HEADER_SEPARATORS:
        names = [c.strip().lower() for c in line.split(sep)]
        if key in names:
            return names
    return None


def columns(src: Path, encoding: str | None, required: tuple[str, ...], fmt: str) -> tuple[list[str], str, list]:
    """(column names, separator, data lines) of a metadata file whose header row holds ``required``
    (the first is the key column that tells the header apart); a DataError naming the columns otherwise."""
    lines = read_text_lines(src, encoding)
    if not lines:
        raise DataError(f"{src}: empty manifest")
    n, first = lines[0]
    names = header_names(first, required[0])
    missing = [c for c in required if c not in (names or [])]
    if names is None or missing:
        raise DataError(
            f"{src}:{n}: data.format={fmt} needs a header row with the columns {'|'.join(required)}"
            f"{' (missing: ' + ', '.join(missing) + ')' if names is not None else ''}; the first line is {first[:80]!r}"
        )
    sep = next(s for s in HEADER_SEPARATORS if [c.strip().lower() for c in first.split(s)] == names)
    return names, sep, lines[1:]


def split_row(line: str, sep: str) -> list[str]:
    """The fields of a data line (``,``: CSV quoting rules; ``|`` and tab: :func:`split_fields`)."""
    if sep != ",":
        return split_fields(line, sep)
    return next(csv.reader([line]))


def _quoted_split(line: str, sep: str) -> tuple[list[str], bool] | None:
    """CSV's reading of ``line`` (``sep``-separated, ``"`` quotes a field from its start, ``""`` inside is a quote):
    (fields, still inside a quote at the end), or None where the quotes are not CSV's (a quote closed just
    after a ``|``: LJSpeech's own open quotes in both text columns)."""
    fields, field, i, quoted, opened = [], [], 0, False, False
    while i < len(line):
        c = line[i]
        if quoted:
            if c == '"' and line[i + 1 : i + 2] == '"':
                field.append('"')
                i += 1
            elif c == '"':
                if i > 0 and line[i - 1] == sep:
                    return None
                quoted = False
            else:
                field.append(c)
        elif c == '"' and not field and not opened:
            quoted = opened = True
        elif c == sep:
            fields.append("".join(field))
            field, opened = [], False
        else:
            field.append(c)
        i += 1
    fields.append("".join(field))
    return fields, quoted


def split_fields(line: str, sep: str) -> list[str]:
    """The fields of one row: CSV's quoting where a quote encloses a ``|`` or a line break, else plain ``|``."""
    if '"' not in line:
        return line.split(sep)
    parsed = _quoted_split(line, sep)
    if parsed is None or parsed[1]:
        return line.split(sep)
    fields, _ = parsed
    plain = line.split(sep)
    return fields if len(fields) != len(plain) or "\n" in line else plain


def join_quoted_rows(lines: list[tuple[int, str]], sep: str = "|") -> list[tuple[int, str]]:
    """Physical lines joined where a quoted field goes on over a line break (the next lines hold its closing
    quote before any separator)."""
    out: list[tuple[int, str]] = []
    i = 0
    while i < len(lines):
        n, line = lines[i]
        j = i
        while '"' in line and (parsed := _quoted_split(line, sep)) is not None and parsed[1] and j + 1 < len(lines):
            following = lines[j + 1][1]
            if '"' not in following.split(sep)[0]:
                break
            line, j = line + "\n" + following, j + 1
        parsed = _quoted_split(line, sep) if j > i else None
        if parsed is not None and not parsed[1]:
            out.append((n, line))
            i = j + 1
        else:
            out.append(lines[i])
            i += 1
    return out


def relative_audio(listed: str, base: Path) -> str:
    """The absolute path of an audio file listed relative to ``base`` (or absolute)."""
    path = Path(listed)
    return str((path if path.is_absolute() else base / path).absolute())


# ---------------------------------------------------------------------------------- encodings
_LANGUAGE: ContextVar[str | None] = ContextVar("manifest_language", default=None)


@contextmanager
def reading_language(language: str | None) -> Iterator[None]:
    """Manifests read inside are in ``language`` (data.language): a file that is not UTF-8 is told that
    language's code page (cp1255 for Hebrew, cp1256 for Persian ...) instead of a Latin one."""
    token = _LANGUAGE.set(language)
    try:
        yield
    finally:
        _LANGUAGE.reset(token)


_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)


def _declared_or_sniffed(blob: bytes, encoding: str | None) -> str | None:
    """The encoding to decode with (None: strict UTF-8 with a clear error)."""
    if encoding is not None:
        return encoding
    for bom, name in _BOMS:
        if blob.startswith(bom):
            return name
    return None


def read_text_lines(src: Path, encoding: str | None = None, limit: int | None = None) -> list[tuple[int, str]]:
    """(line number, text) of the non-empty lines of a metadata file.

    Decoded with ``encoding`` when given; else by its byte-order mark (UTF-8, UTF-16, UTF-32), else
    as UTF-8. Text that does not decode is a DataError naming the file, the line and the fix
    (``data.encoding``), never a silently dropped line."""
    try:
        blob = src.read_bytes()
    except OSError as exc:
        raise DataError(f"cannot read manifest {src}: {exc.strerror or exc}") from None
    name = _declared_or_sniffed(blob, encoding)
    if name is None and b"\x00" in blob:
        order = "utf-16-le" if blob.find(b"\x00") % 2 == 1 else "utf-16-be"
        raise DataError(
            f"{src}: has NUL bytes, so it is not UTF-8 text: probably UTF-16 without a byte-order mark. "
            f"Set data.encoding={order} (or save the file as UTF-8)"
        )
    try:
        text = blob.decode(name or "utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(_decode_message(src, blob, exc, name)) from None
    except LookupError:
        raise DataError(f"data.encoding={encoding!r} is not a known text encoding") from None
    out: list[tuple[int, str]] = []
    for n, line in enumerate(text.split("\n"), start=1):
        line = line.rstrip("\r")
        if line.strip():
            out.append((n, line))
            if limit is not None and len(out) >= limit:
                break
    return out


def read_transcript(src: Path, encoding: str | None, uid: str) -> tuple[str, Problem | None]:
    """The text of a per-utterance transcript file (its non-empty lines joined by spaces), or ``("", the
    problem)`` when it cannot be read or decoded: one bad file among thousands is that item's problem
    (``unreadable_text``), not the corpus's. An unknown ``data.encoding`` is still everyone's error."""
    codec = _declared_or_sniffed(b"", encoding)
    if codec is not None:
        try:
            codecs.lookup(codec)
        except LookupError:
            raise DataError(f"data.encoding={encoding!r} is not a known text encoding") from None
    try:
        lines = read_text_lines(src, encoding)
    except DataError as exc:
        where, _, detail = str(exc).partition(": ")  # "FILE[:LINE]: why"
        if not where.startswith(str(src)):
            where, detail = str(src), str(exc)
        return "", Problem("unreadable_text", detail, id=uid, where=where)
    return " ".join(line.strip() for _, line in lines), None


def _decode_message(src: Path, blob: bytes, exc: UnicodeDecodeError, encoding: str | None) -> str:
    line_no = blob.count(b"\n", 0, exc.start) + 1
    start = blob.rfind(b"\n", 0, exc.start) + 1
    end = blob.find(b"\n", exc.start)
    raw = blob[start : end if end >= 0 else len(blob)]
    bad = sum(1 for line in blob.split(b"\n") if not _decodes(line, encoding or "utf-8"))
    if encoding is not None:
        return (
            f"{src}:{line_no}: cannot be decoded as data.encoding={encoding} "
            f"(byte 0x{blob[exc.start]:02x}); {bad} line(s) fail. Set data.encoding to the file's encoding"
        )
    from speechtrain.data.text.scripts import code_page

    language = _LANGUAGE.get()
    page = code_page(language) if language and language != "und" else None
    if page is not None and page != "cp1252" and _decodes(blob, page):
        preview = raw.decode(page, errors="replace")[:80]
        return (
            f"{src}:{line_no}: not UTF-8 text (byte 0x{blob[exc.start]:02x} at column {exc.start - start + 1}; "
            f"{bad} line(s) are not UTF-8). Read as {page}, the usual code page of data.language={language}, that "
            f"line says {preview!r}. Save the file as UTF-8 (e.g. iconv -f {page} -t utf-8), or set "
            f"data.encoding={page}"
        )
    preview = raw.decode("cp1252", errors="replace")[:80]
    return (
        f"{src}:{line_no}: not UTF-8 text (byte 0x{blob[exc.start]:02x} at column {exc.start - start + 1}; "
        f"{bad} line(s) are not UTF-8). Read as Windows-1252 that line says {preview!r}. Save the file as UTF-8 "
        f"(e.g. iconv -f latin1 -t utf-8), or set data.encoding to its encoding (latin-1, cp1252, cp1251, ...)"
    )


def _decodes(raw: bytes, encoding: str) -> bool:
    try:
        raw.decode(encoding)
    except UnicodeDecodeError:
        return False
    return True
