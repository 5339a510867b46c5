"""Read a dataset description into an utterance table, whatever layout the data came in.

Each layout is one module of :mod:`speechtrain.data.layouts` (ljspeech, jsonl, xtts, vctk, commonvoice,
folder, ...; docs/data.md lists them with what ``data.manifest`` points at): it recognises a folder or
metadata file (``detect``), reads it (``read``) and says when its listing changed (``signature``). This
module asks the table; it names no layout.

Detection (``data.format=auto``) never guesses: a folder that matches several layouts, an unknown
metadata file, or a single ``<label>/`` folder is a DataError naming the candidates and
``data.format``. Where two layouts claim the same file, the one that recognised it by its header row
wins over one that went by the file's name (a ``metadata.csv`` whose header names ``audio_file`` is
XTTS's, not LJSpeech's). Metadata is read as UTF-8 (UTF-8/UTF-16/UTF-32 with a byte-order mark too), or
with ``data.encoding``; text in another encoding is one DataError naming the file, line and fix.

``read_manifest(path, fmt="auto", encoding=None) -> (entries, problems)``: malformed lines become
:class:`Problem` records with the file and line number, never exceptions; only a manifest that
cannot be read at all (missing, empty, unknown format, undecodable) raises :class:`DataError`.
``manifest_signature(path, fmt)`` changes whenever the listing does (the feature cache's staleness
check uses it).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

from speechtrain.data.layouts import layout, layouts, matches, names
from speechtrain.data.layouts.base import (
    AUDIO_EXTENSIONS,
    METADATA_SUFFIXES,
    OTHER_AUDIO_EXTENSIONS,
    REASONS,
    Entry,
    Layout,
    ManifestSignature,
    Problem,
    file_signature,
    read_text_lines,
)
from speechtrain.errors import DataError
from speechtrain.paths import Roots

__all__ = [
    "AUDIO_EXTENSIONS",
    "ROOTS_ENV",
    "OTHER_AUDIO_EXTENSIONS",
    "REASONS",
    "Entry",
    "ManifestSignature",
    "Problem",
    "data_folder",
    "detect_format",
    "file_signature",
    "layout_candidates",
    "manifest_file",
    "manifest_signature",
    "paired_eval_file",
    "read_manifest",
    "audio_roots",
    "read_text_lines",
    "refuse_cached_outside_roots",
    "resolve_format",
    "transcript_note",
]

#: set by a door that reads data on others' behalf (the web UI, for the jobs it starts): the folders, joined by
#: os.pathsep, that a manifest's audio must lie in; unset (the command line), a manifest may name any file
ROOTS_ENV = "SPEECHTRAIN_DATA_ROOTS"
_ROOTS: ContextVar[tuple[Path, ...] | None] = ContextVar("speechtrain_data_roots", default=None)


@contextmanager
def audio_roots(roots: list[Path] | tuple[Path, ...]) -> Iterator[None]:
    """Within it, :func:`read_manifest` (in this thread) refuses entries whose audio lies outside ``roots``, as
    :data:`ROOTS_ENV` does for a whole process."""
    token = _ROOTS.set(tuple(Path(r) for r in roots))
    try:
        yield
    finally:
        _ROOTS.reset(token)


def _roots() -> tuple[Path, ...] | None:
    roots = _ROOTS.get()
    if roots is None and os.environ.get(ROOTS_ENV):
        roots = tuple(Path(p) for p in os.environ[ROOTS_ENV].split(os.pathsep) if p)
    return roots


def _inside_roots(entries: list[Entry], problems: list[Problem]) -> list[Entry]:
    """``entries`` whose audio lies under the data roots as the kernel resolves it (:class:`speechtrain.paths.Roots`:
    ``..`` after a link is the target's parent; the links under a root are the operator's and admit their targets;
    the file is not opened: nothing tells whether it exists); each other one is an ``outside_data_roots`` problem.
    All of them without roots."""
    roots = _roots()
    if roots is None:
        return entries
    check = Roots(roots, follow=roots)
    kept = []
    for e in entries:
        if check.inside(e.audio_path):
            kept.append(e)
        else:
            where = ", ".join(str(r) for r in roots)
            problems.append(
                Problem(
                    "outside_data_roots", f"audio {e.audio_path} lies outside the data roots ({where})", e.id, e.where
                )
            )
    return kept


def refuse_cached_outside_roots(listing: str | os.PathLike[str], audio: list[str]) -> None:
    """Under data roots (a door acting for others, :func:`audio_roots`), a prepared corpus is checked as a freshly
    read one is: the cached items' ``audio`` must lie under the roots, else one DataError (a fresh cache is read
    without reading the manifest, so the check of :func:`read_manifest` would never see it). Nothing without
    roots."""
    roots = _roots()
    if roots is None:
        return
    check = Roots(roots, follow=roots)
    outside = [path for path in audio if not check.inside(path)]
    if outside:
        raise DataError(
            f"{listing}: its feature cache holds {len(outside)} utterance(s) whose audio lies outside the data roots "
            f"({', '.join(str(r) for r in roots)}), e.g. {outside[0]}: a job of the web UI reads audio under its "
            "data folders only; put the corpus under --data (or link it there) and prepare it again, or run it from "
            "the command line"
        )


def layout_candidates(root: Path, encoding: str | None = None) -> dict[str, str]:
    """Every layout a folder looks like, with the evidence (``format -> files``)."""
    return {name: match.why for name, match in matches(root, encoding).items()}


def _listed(hints: list[str]) -> str:
    return ", ".join(hints[:-1]) + f", or {hints[-1]}" if len(hints) > 1 else "".join(hints)


def detect_format(path: str | os.PathLike[str], encoding: str | None = None) -> str:
    """The layout of a folder or manifest file; DataError when it is none, or several."""
    p = Path(path)
    if not p.exists():
        titles = [lay.title for lay in layouts()]
        raise DataError(
            f"data not found: {p} (set data.manifest to a dataset folder or manifest file: {_listed(titles)})"
        )
    found = matches(p, encoding)
    if len(found) == 1:
        return next(iter(found))
    if len(found) > 1:
        listed = "; ".join(f"{fmt} ({m.why})" for fmt, m in found.items())
        what = "folder" if p.is_dir() else "file"
        raise DataError(
            f"{p}: the {what} matches several dataset layouts: {listed}. Say which: "
            + " or ".join(f"data.format={fmt}" for fmt in found)
            + (" (or point data.manifest at the manifest file)" if p.is_dir() else "")
        )
    hints = [lay.hint for lay in layouts() if not lay.fallback]
    if not p.is_dir():
        raise DataError(f"{p}: cannot tell the manifest format (none of: {'; '.join(hints)}); set data.format")
    loose = sorted(f.name for f in p.iterdir() if f.is_file() and f.suffix.lower() in METADATA_SUFFIXES)
    if loose:
        raise DataError(
            f"{p}: {', '.join(loose)} is not a layout speechtrain knows by name ({'; '.join(hints)}); point "
            f"data.manifest at the file and set data.format"
        )
    fallback = matches(p, encoding, fallback=True)
    if len(fallback) == 1:
        return next(iter(fallback))
    all_hints = [lay.hint for lay in layouts()]
    raise DataError(
        f"{p}: cannot tell the dataset format: no {_listed(all_hints)}; point data.manifest at the file or set "
        f"data.format"
    )


def resolve_format(path: str | os.PathLike[str], fmt: str, encoding: str | None = None) -> str:
    """``fmt``, or the detected format when ``fmt`` is ``auto``."""
    return detect_format(path, encoding) if fmt == "auto" else fmt


def data_folder(path: str | os.PathLike[str]) -> Path:
    """The folder the data lives in: the folder itself, or the folder of a manifest file."""
    p = Path(path).absolute()
    return p if p.is_dir() else p.parent


def _layout(fmt: str) -> Layout:
    """The layout of a format name; a DataError when there is none."""
    try:
        return layout(fmt)
    except KeyError as exc:
        raise DataError(str(exc.args[0])) from None


def manifest_signature(path: str | os.PathLike[str], fmt: str) -> ManifestSignature:
    """Changes when the listing changes: size+mtime of the manifest file, or a hash of a folder's files
    (the layouts that read a folder: ``folder``, ``vctk``)."""
    return _layout(fmt).signature(manifest_file(path, fmt))


def manifest_file(path: str | os.PathLike[str], fmt: str) -> Path:
    """The file (or folder, for the layouts that read one) that lists the training items."""
    p = Path(path)
    lay = _layout(fmt)
    if not p.is_dir() or lay.reads_folder:
        return p
    return lay.listing(p)


def paired_eval_file(path: str | os.PathLike[str], fmt: str) -> Path | None:
    """The eval manifest that a layout's folder brings with it: XTTS ``eval.csv``
    (``metadata_eval.csv``), Common Voice ``dev.tsv`` beside ``train.tsv``; None otherwise."""
    p = Path(path)
    if not p.is_dir():
        return None
    return _layout(fmt).eval_listing(p)


def read_manifest(
    path: str | os.PathLike[str], fmt: str = "auto", encoding: str | None = None, text_column: str | None = None
) -> tuple[list[Entry], list[Problem]]:
    """Entries (in listing order, unique ids) and the problems of the lines that were skipped.

    ``encoding``: of the metadata (None: UTF-8, or UTF-16/UTF-8 with a byte-order mark). ``text_column``:
    the transcript's column (``data.text_column``), for the layouts with named columns."""
    if fmt == "auto":
        fmt = detect_format(path, encoding)
    if fmt not in names():
        raise DataError(f"unknown data.format '{fmt}' (valid: auto, {', '.join(names())})")
    lay = _layout(fmt)
    src = manifest_file(path, fmt)
    if not src.exists():
        raise DataError(f"manifest not found: {src}")
    if lay.reads_folder and not src.is_dir():
        layout_text = lay.points_at.replace("`", "").replace("\\|", "|")
        raise DataError(f"{src}: data.format={fmt} needs a folder: {layout_text}")
    if not lay.reads_folder and not src.is_file():
        raise DataError(f"{src}: expected a {fmt} manifest file")
    if text_column:
        if lay.read_text_column is None:
            takes = ", ".join(x.name for x in layouts() if x.read_text_column is not None)
            raise DataError(
                f"data.text_column={text_column}: data.format={fmt} has no named columns to choose from (the "
                f"layouts that have: {takes}); remove data.text_column"
            )
        entries, problems = lay.read_text_column(src, encoding, text_column)
    else:
        entries, problems = lay.read(src, encoding)
    entries = _inside_roots(entries, problems)
    return _dedupe(entries, problems)


def transcript_note(path: str | os.PathLike[str], fmt: str, encoding: str | None = None) -> str | None:
    """Where the layout looked for transcripts, when its listing has none (None: nothing to say)."""
    try:
        return _layout(fmt).transcript_note(manifest_file(path, fmt), encoding)
    except (DataError, OSError):
        return None


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
