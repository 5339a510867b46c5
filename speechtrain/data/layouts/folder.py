"""Labelled folders for classifiers: ``ROOT/<label>/*.wav`` (also flac/ogg/aiff/mp3); the label is the
folder name, the id ``label/stem``. Detected only when no other layout matches, with two or more
``<label>/`` folders holding audio (one alone is more likely a TTS corpus without its metadata)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from speechtrain.data.layouts.base import (
    AUDIO_EXTENSIONS,
    OTHER_AUDIO_EXTENSIONS,
    Entry,
    Layout,
    Listing,
    ManifestSignature,
    Match,
    Problem,
    hidden,
    is_audio,
)
from speechtrain.errors import DataError


def label_dirs(root: Path) -> list[Path]:
    """The sub-folders of ``root`` that hold audio (at any depth), not hidden."""
    return [
        d
        for d in sorted(root.iterdir())
        if d.is_dir() and not d.name.startswith(".") and any(is_audio(f) for f in d.rglob("*"))
    ]


def detect(path: Path, encoding: str | None = None) -> Match | None:
    if not path.is_dir():
        return None
    labels = label_dirs(path)
    if len(labels) == 1:
        raise DataError(
            f"{path}: the only sub-folder with audio is {labels[0].name}/ and there is no metadata file: a classifier "
            f"folder needs at least two ROOT/<label>/ folders, TTS data a manifest (metadata.csv, train.csv, *.jsonl)"
        )
    if len(labels) < 2:
        return None
    names = tuple(d.name for d in labels)
    return Match(f"{len(names)} <label>/ folders with audio", names)


def read(root: Path, encoding: str | None = None) -> Listing:
    entries, problems = [], []
    for f in sorted(root.iterdir()):
        if is_audio(f):
            problems.append(Problem("malformed_line", "audio directly under ROOT has no <label>/ folder", where=str(f)))
    for d in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        for f in sorted(p for p in d.rglob("*") if p.suffix.lower() in OTHER_AUDIO_EXTENSIONS and not hidden(p, d)):
            problems.append(
                Problem(
                    "unreadable_audio",
                    f"'{f.suffix}' files are not read in a folder dataset (it reads {', '.join(AUDIO_EXTENSIONS)}): "
                    f"convert it, e.g. ffmpeg -i '{f.name}' '{f.with_suffix('.wav').name}'",
                    id=f.relative_to(root).with_suffix("").as_posix(),
                    where=str(f),
                )
            )
    for d in label_dirs(root):
        for f in sorted(p for p in d.rglob("*") if is_audio(p) and not hidden(p, d)):
            rel = f.relative_to(root).with_suffix("").as_posix()
            entries.append(Entry(rel, str(f.absolute()), "", label=d.name, where=str(f)))
    return entries, problems


def signature(root: Path) -> ManifestSignature:
    """A hash of the files the folder lists (and of the ones it reports)."""
    entries, problems = read(root)
    listing = [e.audio_path for e in entries] + [p.where for p in problems]
    return hashlib.sha1("\n".join(listing).encode()).hexdigest()


LAYOUT = Layout(
    name="folder",
    title="a labelled folder",
    order=90,
    detect=detect,
    read=read,
    signature=signature,
    reads_folder=True,
    fallback=True,
    hint="<label>/ sub-folders with audio",
    points_at="`ROOT/` with `ROOT/<label>/*.wav` (also flac/ogg/aiff/mp3)",
    items="one item per audio file, id `label/stem`, label = folder name; no text (classifiers)",
)
