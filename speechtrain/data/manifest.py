"""Read a dataset description into an utterance table, whatever layout the data came in.

- **LJSpeech** (``ljspeech``): a folder with ``metadata.csv`` (or the csv itself); lines
  ``id|text|normalized_text`` (``id|text`` accepted), audio in ``wavs/ID.wav`` beside the csv;
  normalized_text is used when present. An id with an audio extension (``wavs/a.wav``) is read as
  that file's path relative to the csv. A header row is an error naming the right format.
- **JSONL** (``jsonl``, NeMo): one JSON object per line with ``audio_filepath`` (relative to the
  manifest's folder, or absolute), optional ``text``, ``duration``, ``speaker``, ``label`` and ``id``
  (default: the file stem).
- **XTTS/Coqui CSV** (``xtts``): a header row naming the columns (``audio_file|text|speaker_name``;
  ``|``, tab or ``,`` separated), paths relative to the csv. A folder with ``train.csv`` + ``eval.csv``
  (or ``metadata_train.csv`` + ``metadata_eval.csv``) uses that pair as the train/eval split.
- **VCTK** (``vctk``): ``txt/<speaker>/<id>.txt`` + ``wav48*/<speaker>/<id>[_micN].wav|flac``
  (mic1 preferred); the speaker is the folder name; audio without a transcript is kept with empty text.
- **Common Voice** (``commonvoice``): ``train.tsv`` (+ ``dev.tsv`` as the eval split) when present,
  else ``validated.tsv``; columns ``path`` (under ``clips/``), ``sentence``, ``client_id`` (speaker).
- **folder**: ``ROOT/<label>/*.wav`` (also flac/ogg/mp3) for classifiers; the label is the folder name.

Detection (``data.format=auto``) never guesses: a folder that matches several layouts, an unknown
metadata file, or a single ``<label>/`` folder is a DataError naming the candidates and
``data.format``. Metadata is read as UTF-8 (UTF-8/UTF-16/UTF-32 with a byte-order mark too), or
with ``data.encoding``; text in another encoding is one DataError naming the file, line and fix.

``read_manifest(path, fmt="auto", encoding=None) -> (entries, problems)``: malformed lines become
:class:`Problem` records with the file and line number, never exceptions; only a manifest that
cannot be read at all (missing, empty, unknown format, undecodable) raises :class:`DataError`.
``manifest_signature(path, fmt)`` changes whenever the listing does (the feature cache's staleness
check uses it).
"""

from __future__ import annotations

import codecs
import csv
import hashlib
import json
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from speechtrain.errors import DataError

AUDIO_EXTENSIONS = (".wav", ".flac", ".ogg", ".oga", ".aiff", ".aif", ".mp3")
#: audio a folder dataset does not read: reported (unreadable_audio) instead of passed over in silence
OTHER_AUDIO_EXTENSIONS = (".m4a", ".aac", ".wma", ".opus", ".webm", ".mp4", ".amr", ".ape", ".wv")
FORMATS = ("ljspeech", "jsonl", "xtts", "vctk", "commonvoice", "folder")


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
    "model_limit": "breaks a limit of the model (XTTS: more BPE tokens or audio codes than it takes)",
}


# ------------------------------------------------------------------------------------ layouts
XTTS_PAIRS = (("train.csv", "eval.csv"), ("metadata_train.csv", "metadata_eval.csv"))
CV_SPLITS = (("train.tsv", "dev.tsv"), ("validated.tsv", None))
METADATA_SUFFIXES = (".csv", ".tsv", ".jsonl", ".json", ".ndjson", ".psv")


def _first_line(path: Path, encoding: str | None = None) -> str:
    """The first non-empty line of a metadata file (decoded as :func:`read_text_lines` does)."""
    for _, line in read_text_lines(path, encoding, limit=1):
        return line
    return ""


def _header(line: str) -> list[str] | None:
    """Column names when ``line`` is a header row with an ``audio_file`` (XTTS/Coqui) or ``path`` +
    ``sentence`` (Common Voice) column; None otherwise."""
    for sep in ("|", "\t", ","):
        names = [c.strip().lower() for c in line.split(sep)]
        if "audio_file" in names or ("path" in names and "sentence" in names):
            return names
    return None


def _sniff_file(p: Path, encoding: str | None = None) -> str:
    """The format of one metadata file, from its suffix and first line."""
    suffix = p.suffix.lower()
    if suffix in (".jsonl", ".json", ".ndjson"):
        return "jsonl"
    line = _first_line(p, encoding)
    names = _header(line)
    if names is not None:
        return "xtts" if "audio_file" in names else "commonvoice"
    if line.lstrip().startswith("{"):
        return "jsonl"
    if suffix == ".tsv":
        raise DataError(
            f"{p}: a .tsv without a Common Voice header (path, sentence columns); its first line is {line[:80]!r}"
        )
    if "|" in line:
        return "ljspeech"
    raise DataError(
        f"{p}: cannot tell the manifest format (not id|text lines, not a header with audio_file or path/sentence, "
        f"not JSON lines); set data.format"
    )


def _xtts_files(root: Path) -> tuple[Path, Path | None] | None:
    """The (train, eval) CSV pair of an XTTS/Coqui folder, or its single CSV with a header."""
    for train, evaluation in XTTS_PAIRS:
        if (root / train).is_file():
            return root / train, (root / evaluation) if (root / evaluation).is_file() else None
    return None


def _vctk_audio_dirs(root: Path) -> list[Path]:
    return sorted(d for d in root.glob("wav48*") if d.is_dir())


def _cv_files(root: Path) -> tuple[Path, Path | None] | None:
    """Common Voice: train.tsv (+ dev.tsv as the eval split) when present, else validated.tsv."""
    for train, evaluation in CV_SPLITS:
        if (root / train).is_file():
            ev = root / evaluation if evaluation and (root / evaluation).is_file() else None
            return root / train, ev
    return None


def layout_candidates(root: Path, encoding: str | None = None) -> dict[str, str]:
    """Every layout a folder looks like, with the evidence (``format -> files``)."""
    found: dict[str, str] = {}
    meta = root / "metadata.csv"
    if meta.is_file():
        kind = "xtts" if _header(_first_line(meta, encoding)) is not None else "ljspeech"
        found[kind] = "metadata.csv" + (" with an audio_file header" if kind == "xtts" else "")
    jsonl = sorted(p.name for p in root.glob("*.jsonl"))
    if jsonl:
        found["jsonl"] = ", ".join(jsonl)
    xtts = _xtts_files(root)
    if xtts is not None:
        found["xtts"] = " + ".join(p.name for p in xtts if p is not None)
    if (root / "txt").is_dir() and _vctk_audio_dirs(root):
        found["vctk"] = "txt/ + " + ", ".join(d.name + "/" for d in _vctk_audio_dirs(root))
    cv = _cv_files(root)
    if cv is not None and (root / "clips").is_dir():
        found["commonvoice"] = " + ".join(p.name for p in cv if p is not None) + " + clips/"
    return found


def detect_format(path: str | os.PathLike[str], encoding: str | None = None) -> str:
    """The layout of a folder or manifest file; DataError when it is none, or (a folder) several."""
    p = Path(path)
    if not p.exists():
        raise DataError(
            f"data not found: {p} (set data.manifest to a dataset folder or manifest file: LJSpeech, JSONL, "
            f"XTTS/Coqui CSV, VCTK, Common Voice, or ROOT/<label>/)"
        )
    if not p.is_dir():
        return _sniff_file(p, encoding)
    found = layout_candidates(p, encoding)
    if len(found) == 1:
        return next(iter(found))
    if len(found) > 1:
        listed = "; ".join(f"{fmt} ({why})" for fmt, why in found.items())
        raise DataError(
            f"{p}: the folder matches several dataset layouts: {listed}. Say which: "
            + " or ".join(f"data.format={fmt}" for fmt in found)
            + " (or point data.manifest at the manifest file)"
        )
    labels = _label_dirs(p)
    loose = sorted(f.name for f in p.iterdir() if f.is_file() and f.suffix.lower() in METADATA_SUFFIXES)
    if loose:
        raise DataError(
            f"{p}: {', '.join(loose)} is not a layout speechtrain knows by name (metadata.csv, train.csv/eval.csv, "
            f"*.jsonl, validated.tsv/train.tsv); point data.manifest at the file and set data.format"
        )
    if len(labels) >= 2:
        return "folder"
    if len(labels) == 1:
        raise DataError(
            f"{p}: the only sub-folder with audio is {labels[0].name}/ and there is no metadata file: a classifier "
            f"folder needs at least two ROOT/<label>/ folders, TTS data a manifest (metadata.csv, train.csv, *.jsonl)"
        )
    raise DataError(
        f"{p}: cannot tell the dataset format: no metadata.csv (LJSpeech), train.csv/eval.csv (XTTS), *.jsonl "
        f"(NeMo), txt/ + wav48*/ (VCTK), validated.tsv + clips/ (Common Voice), or <label>/ sub-folders with audio; "
        f"point data.manifest at the file or set data.format"
    )


def resolve_format(path: str | os.PathLike[str], fmt: str, encoding: str | None = None) -> str:
    """``fmt``, or the detected format when ``fmt`` is ``auto``."""
    return detect_format(path, encoding) if fmt == "auto" else fmt


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
    files (``folder``; ``vctk`` with the size and time of every transcript)."""
    src = manifest_file(path, fmt)
    if fmt == "vctk":
        listing = [f"{f}:{file_signature(str(f))}" for f in sorted((src / "txt").rglob("*.txt"))]
        listing += [str(f) for d in _vctk_audio_dirs(src) for f in sorted(d.rglob("*")) if _is_audio(f)]
        return hashlib.sha1("\n".join(listing).encode()).hexdigest()
    if fmt != "folder":
        return file_signature(str(src))
    entries, problems = _read_folder(src)
    listing = [e.audio_path for e in entries] + [p.where for p in problems]
    return hashlib.sha1("\n".join(listing).encode()).hexdigest()


def manifest_file(path: str | os.PathLike[str], fmt: str) -> Path:
    """The file (or folder, for ``folder`` and ``vctk``) that lists the training items."""
    p = Path(path)
    if not p.is_dir() or fmt in ("folder", "vctk"):
        return p
    if fmt == "ljspeech":
        return p / "metadata.csv"
    if fmt == "jsonl":
        found = sorted(p.glob("*.jsonl"))
        if len(found) != 1:
            names = ", ".join(f.name for f in found)
            raise DataError(
                f"{p}: expected exactly one *.jsonl manifest in the folder, found {len(found)}"
                + (f" ({names}); point data.manifest at one and data.eval_manifest at another" if found else "")
            )
        return found[0]
    if fmt == "xtts":
        pair = _xtts_files(p)
        if pair is None:
            return p / "metadata.csv"  # a single CSV with the header
        return pair[0]
    if fmt == "commonvoice":
        cv = _cv_files(p)
        if cv is None:
            raise DataError(f"{p}: a Common Voice folder needs train.tsv or validated.tsv (and clips/)")
        return cv[0]
    return p


def paired_eval_file(path: str | os.PathLike[str], fmt: str) -> Path | None:
    """The eval manifest that a layout's folder brings with it: XTTS ``eval.csv``
    (``metadata_eval.csv``), Common Voice ``dev.tsv`` beside ``train.tsv``; None otherwise."""
    p = Path(path)
    if not p.is_dir():
        return None
    if fmt == "xtts":
        pair = _xtts_files(p)
        return pair[1] if pair is not None else None
    if fmt == "commonvoice":
        cv = _cv_files(p)
        return cv[1] if cv is not None else None
    return None


def read_manifest(
    path: str | os.PathLike[str], fmt: str = "auto", encoding: str | None = None
) -> tuple[list[Entry], list[Problem]]:
    """Entries (in listing order, unique ids) and the problems of the lines that were skipped.

    ``encoding``: of the metadata (None: UTF-8, or UTF-16/UTF-8 with a byte-order mark)."""
    if fmt == "auto":
        fmt = detect_format(path, encoding)
    if fmt not in FORMATS:
        raise DataError(f"unknown data.format '{fmt}' (valid: auto, {', '.join(FORMATS)})")
    src = manifest_file(path, fmt)
    if not src.exists():
        raise DataError(f"manifest not found: {src}")
    if fmt in ("folder", "vctk"):
        if not src.is_dir():
            layout = "ROOT/<label>/*.wav" if fmt == "folder" else "ROOT/txt/<speaker>/*.txt + ROOT/wav48*/<speaker>/*"
            raise DataError(f"{src}: data.format={fmt} needs a folder {layout}")
        entries, problems = _read_folder(src) if fmt == "folder" else _read_vctk(src, encoding)
    else:
        if not src.is_file():
            raise DataError(f"{src}: expected a {fmt} manifest file")
        readers = {"ljspeech": _read_ljspeech, "jsonl": _read_jsonl, "xtts": _read_xtts, "commonvoice": _read_cv}
        entries, problems = readers[fmt](src, encoding)
    return _dedupe(entries, problems)


# ---------------------------------------------------------------------------------- encodings
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


# ------------------------------------------------------------------------------------ readers
def _read_ljspeech(src: Path, encoding: str | None = None) -> tuple[list[Entry], list[Problem]]:
    entries, problems = [], []
    wavs = src.parent / "wavs"
    for k, (n, line) in enumerate(read_text_lines(src, encoding)):
        where = f"{src}:{n}"
        fields = line.split("|")
        if k == 0:
            names = _header(line)
            if names is not None:
                fmt = "xtts" if "audio_file" in names else "commonvoice"
                raise DataError(
                    f"{where}: a header row ({line[:60]!r}): this is not LJSpeech (id|text|normalized_text) but "
                    f"{'an XTTS/Coqui' if fmt == 'xtts' else 'a Common Voice'} manifest; set data.format={fmt}"
                )
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


def _looks_like_speaker(text: str, third: str) -> bool:
    """Whether the third field of a path-id line is a speaker name rather than normalised text: one word
    where the text has several."""
    third, text = third.strip(), text.strip()
    return bool(third) and len(third.split()) == 1 and len(text.split()) > 1


def _columns(src: Path, encoding: str | None, required: tuple[str, ...], fmt: str) -> tuple[list[str], str, list]:
    """(column names, separator, data lines) of a metadata file with a header row."""
    lines = read_text_lines(src, encoding)
    if not lines:
        raise DataError(f"{src}: empty manifest")
    n, first = lines[0]
    names = _header(first)
    missing = [c for c in required if c not in (names or [])]
    if names is None or missing:
        raise DataError(
            f"{src}:{n}: data.format={fmt} needs a header row with the columns {'|'.join(required)}"
            f"{' (missing: ' + ', '.join(missing) + ')' if names is not None else ''}; the first line is {first[:80]!r}"
        )
    sep = next(s for s in ("|", "\t", ",") if [c.strip().lower() for c in first.split(s)] == names)
    return names, sep, lines[1:]


def _split_row(line: str, sep: str) -> list[str]:
    if sep != ",":
        return line.split(sep)
    return next(csv.reader([line]))


def _read_xtts(src: Path, encoding: str | None = None) -> tuple[list[Entry], list[Problem]]:
    """XTTS/Coqui: a header row, then ``audio_file|text|speaker_name`` (paths relative to the CSV)."""
    names, sep, lines = _columns(src, encoding, ("audio_file", "text"), "xtts")
    col = {name: i for i, name in enumerate(names)}
    entries, problems = [], []
    for n, line in lines:
        where = f"{src}:{n}"
        fields = _split_row(line, sep)
        if len(fields) != len(names):
            problems.append(
                Problem(
                    "malformed_line",
                    f"expected {len(names)} fields ({sep.join(names)}), got {len(fields)}",
                    where=where,
                )
            )
            continue
        audio = fields[col["audio_file"]].strip()
        if not audio:
            problems.append(Problem("malformed_line", "empty audio_file", where=where))
            continue
        path = Path(audio) if Path(audio).is_absolute() else src.parent / audio
        speaker = fields[col["speaker_name"]].strip() if "speaker_name" in col else ""
        text = fields[col["text"]].strip()
        entries.append(Entry("", str(path.absolute()), text, speaker=speaker or None, where=where))
    return entries, problems


def _read_cv(src: Path, encoding: str | None = None) -> tuple[list[Entry], list[Problem]]:
    """Common Voice: tab-separated with a header; ``path`` (under ``clips/``), ``sentence``, ``client_id``."""
    names, sep, lines = _columns(src, encoding, ("path", "sentence"), "commonvoice")
    col = {name: i for i, name in enumerate(names)}
    clips = src.parent / "clips"
    entries, problems = [], []
    for n, line in lines:
        where = f"{src}:{n}"
        fields = line.split(sep)
        if len(fields) < len(names):
            detail = f"expected {len(names)} tab-separated fields, got {len(fields)}"
            problems.append(Problem("malformed_line", detail, where=where))
            continue
        clip = fields[col["path"]].strip()
        if not clip:
            problems.append(Problem("malformed_line", "empty path", where=where))
            continue
        path = Path(clip) if Path(clip).is_absolute() else clips / clip
        speaker = fields[col["client_id"]].strip() if "client_id" in col else ""
        text = fields[col["sentence"]].strip()
        entries.append(Entry(Path(clip).stem, str(path.absolute()), text, speaker=speaker or None, where=where))
    return entries, problems


_MIC = re.compile(r"_mic(\d+)$")


def _read_vctk(root: Path, encoding: str | None = None) -> tuple[list[Entry], list[Problem]]:
    """VCTK: ``txt/<speaker>/<id>.txt`` and ``wav48*/<speaker>/<id>[_micN].<ext>`` (mic1 preferred).
    Audio without a transcript is kept with empty text (a vocoder can use it)."""
    audio_dirs = _vctk_audio_dirs(root)
    if len(audio_dirs) != 1:
        found = ", ".join(d.name for d in audio_dirs) or "none"
        raise DataError(
            f"{root}: data.format=vctk needs exactly one wav48*/ audio folder beside txt/, found {found} "
            f"(move the ones you do not train on out of the folder)"
        )
    audio: dict[tuple[str, str], list[Path]] = {}
    for f in sorted(audio_dirs[0].rglob("*")):
        if _is_audio(f) and not _hidden(f, audio_dirs[0]):
            uid = _MIC.sub("", f.stem)
            audio.setdefault((f.parent.name, uid), []).append(f)
    entries, problems = [], []
    transcribed = set()
    for txt in sorted((root / "txt").rglob("*.txt")):
        speaker, uid = txt.parent.name, txt.stem
        transcribed.add((speaker, uid))
        lines = read_text_lines(txt, encoding)
        text = " ".join(line.strip() for _, line in lines)
        files = audio.get((speaker, uid))
        if not files:
            problems.append(
                Problem("missing_file", f"no audio {audio_dirs[0].name}/{speaker}/{uid}*", id=uid, where=str(txt))
            )
            continue
        entries.append(Entry(uid, str(_preferred_mic(files).absolute()), text, speaker=speaker, where=str(txt)))
    for (speaker, uid), files in sorted(audio.items()):
        if (speaker, uid) not in transcribed:
            f = _preferred_mic(files)
            entries.append(Entry(uid, str(f.absolute()), "", speaker=speaker, where=str(f)))
    return entries, problems


def _preferred_mic(files: list[Path]) -> Path:
    """mic1 when there is one, then the file without a mic suffix, then the first."""

    def rank(f: Path) -> tuple[int, str]:
        return (0 if f.stem.endswith("_mic1") else 1 if not _MIC.search(f.stem) else 2, f.name)

    return min(files, key=rank)


def _read_jsonl(src: Path, encoding: str | None = None) -> tuple[list[Entry], list[Problem]]:
    entries, problems = [], []
    base = src.parent
    for n, line in read_text_lines(src, encoding):
        where = f"{src}:{n}"
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
    for d in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        for f in sorted(p for p in d.rglob("*") if p.suffix.lower() in OTHER_AUDIO_EXTENSIONS and not _hidden(p, d)):
            problems.append(
                Problem(
                    "unreadable_audio",
                    f"'{f.suffix}' files are not read in a folder dataset (it reads {', '.join(AUDIO_EXTENSIONS)}): "
                    f"convert it, e.g. ffmpeg -i '{f.name}' '{f.with_suffix('.wav').name}'",
                    id=f.relative_to(root).with_suffix("").as_posix(),
                    where=str(f),
                )
            )
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
