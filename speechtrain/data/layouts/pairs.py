"""Recordings as people keep them: every audio file with its transcript in a text file of the same stem
beside it (``clip01.wav`` + ``clip01.txt``; ``.lab`` as the aligners keep them; ``.normalized.txt``),
in one folder or in sub-folders at any depth.

The id is the file stem (the path below ROOT where two folders hold the same stem), the speaker the name
of the top folder below ROOT when the audio sits in sub-folders (``ROOT/<speaker>/...``; none in a flat
folder). Where several
transcripts lie beside one file, :data:`SIDECARS` says which is read (``.normalized.txt`` before
``.txt``). Audio without a transcript is kept with empty text (a vocoder can use it; a TTS task skips it
as ``empty_text`` and counts it); a transcript without audio is reported as ``missing_file``; a transcript that
cannot be read or decoded is that item's problem (``unreadable_text``, the file named; its encoding is decided
for each file, by its own byte-order mark or ``data.encoding``), the rest of the folder is read.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

from speechtrain.data.layouts.base import (
    Entry,
    Layout,
    Listing,
    ManifestSignature,
    Match,
    Problem,
    file_signature,
    hidden,
    is_audio,
    read_transcript,
)

#: transcript suffixes beside ``<stem>.wav``, the first present is read
SIDECARS = (".normalized.txt", ".txt", ".lab", ".original.txt")


def sidecar(audio: Path) -> Path | None:
    """The transcript file of ``audio`` (same folder, same stem), the first of :data:`SIDECARS` present."""
    for suffix in SIDECARS:
        candidate = audio.with_name(audio.stem + suffix)
        if candidate.is_file():
            return candidate
    return None


def _audio_files(root: Path) -> Iterator[Path]:
    for f in sorted(root.rglob("*")):
        if is_audio(f) and not hidden(f, root):
            yield f


def paired_tops(root: Path) -> tuple[str, ...]:
    """The entries of ``root`` (files, or sub-folders) that hold an audio file with a transcript beside it."""
    tops: list[str] = []
    for child in sorted(root.iterdir()):
        if child.name.startswith("."):
            continue
        if child.is_dir():
            if any(sidecar(f) is not None for f in _audio_files(child)):
                tops.append(child.name)
        elif is_audio(child) and sidecar(child) is not None:
            tops.append(child.name)
    return tuple(tops)


def detect(path: Path, encoding: str | None = None) -> Match | None:
    if not path.is_dir():
        return None
    tops = paired_tops(path)
    if not tops:
        return None
    return Match("audio files with a same-stem .txt/.lab transcript beside them", tops)


def read(root: Path, encoding: str | None = None) -> Listing:
    entries: list[Entry] = []
    problems: list[Problem] = []
    heard: set[Path] = set()
    for f in _audio_files(root):
        rel = f.relative_to(root)
        speaker = rel.parts[0] if len(rel.parts) > 1 else None
        txt = sidecar(f)
        heard.update(f.with_name(f.stem + s) for s in SIDECARS)
        if txt is None:
            entries.append(Entry("", str(f.absolute()), "", speaker=speaker, where=str(f)))
            continue
        text, unreadable = read_transcript(txt, encoding, f.stem)
        if unreadable is not None:  # skipped and reported (its audio is not kept text-less either)
            problems.append(unreadable)
            continue
        entries.append(Entry("", str(f.absolute()), text, speaker=speaker, where=str(txt)))
    for txt in sorted(root.rglob("*")):
        if txt.suffix in (".txt", ".lab") and txt.is_file() and not hidden(txt, root) and txt not in heard:
            stem = txt.name[: -len(next(s for s in SIDECARS if txt.name.endswith(s)))]
            problems.append(
                Problem("missing_file", f"no audio file {stem}.wav (or .flac, ...) beside it", id=stem, where=str(txt))
            )
    return entries, problems


def signature(root: Path) -> ManifestSignature:
    """A hash of every audio file's name and of its transcript's size and time."""
    listing = []
    for f in _audio_files(root):
        txt = sidecar(f)
        listing.append(f"{f}:{txt}:{file_signature(str(txt)) if txt is not None else None}")
    return hashlib.sha1("\n".join(listing).encode()).hexdigest()


LAYOUT = Layout(
    name="pairs",
    title="a folder of recordings with same-stem transcripts",
    order=70,
    detect=detect,
    read=read,
    signature=signature,
    reads_folder=True,
    hint="audio files with a same-stem .txt/.lab beside them (clip01.wav + clip01.txt)",
    points_at="`ROOT/` with `<name>.wav` + `<name>.txt` (or `.lab`, `.normalized.txt`) pairs, flat or in "
    "sub-folders at any depth",
    items="id = file stem, text = the transcript file (`.normalized.txt` before `.txt`, `.lab`, `.original.txt`), "
    "speaker = the top folder below ROOT (`ROOT/<speaker>/...`); audio without a transcript is kept with empty text; "
    "a transcript that cannot be decoded is skipped and reported (`unreadable_text`)",
)
