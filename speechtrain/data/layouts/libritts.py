"""LibriTTS (and LibriTTS-R): ``<speaker>/<chapter>/<speaker>_<chapter>_<n>_<m>.wav`` with the transcript
beside each file, ``.normalized.txt`` (read) and ``.original.txt`` (read where the normalized one is
missing); the speaker id is the speaker folder's name. ROOT is one subset (``train-clean-100/``) or the
folder holding several: then the ``train-*`` subsets train and the first ``dev-*`` (else ``test-*``) subset
is the eval split. A transcript that cannot be read or decoded is that item's problem (``unreadable_text``, the
file named; its encoding is decided for each file, by its own byte-order mark or ``data.encoding``), the rest of
the tree is read.

Recognised by the names (the file's speaker and chapter are the two folders above it), which is stronger
evidence than the plain same-stem pairs (:mod:`.pairs`) and than the classifier ``folder`` layout, which
would read each speaker folder as a label and drop every transcript.
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
    Strength,
    file_signature,
    hidden,
    is_audio,
    read_transcript,
)

#: the transcripts beside each file, the first present is read
TRANSCRIPTS = (".normalized.txt", ".original.txt")
EVAL_SUBSETS = ("dev-", "test-")


def is_libritts_audio(f: Path) -> bool:
    """``<speaker>/<chapter>/<speaker>_<chapter>_...`` audio with a LibriTTS transcript beside it."""
    parts = f.stem.split("_")
    return (
        len(parts) >= 3
        and parts[0] == f.parent.parent.name
        and parts[1] == f.parent.name
        and transcript_of(f) is not None
    )


def transcript_of(audio: Path) -> Path | None:
    for suffix in TRANSCRIPTS:
        candidate = audio.with_name(audio.stem + suffix)
        if candidate.is_file():
            return candidate
    return None


def _subsets(root: Path) -> list[Path]:
    """The folders read for training: the ``train-*`` subsets when ROOT holds them, else ROOT itself."""
    train = sorted(d for d in root.iterdir() if d.is_dir() and d.name.startswith("train-"))
    return train or [root]


def _audio(folder: Path) -> Iterator[Path]:
    for f in sorted(folder.rglob("*")):
        if is_audio(f) and not hidden(f, folder):
            yield f


def detect(path: Path, encoding: str | None = None) -> Match | None:
    if not path.is_dir():
        return None
    tops = []
    for child in sorted(path.iterdir()):
        if child.is_dir() and not child.name.startswith(".") and any(is_libritts_audio(f) for f in _audio(child)):
            tops.append(child.name)
    if not tops:
        return None
    why = "<speaker>/<chapter>/ folders with *.normalized.txt transcripts (LibriTTS)"
    return Match(why, tuple(tops), Strength.FIELDS)


def eval_listing(root: Path) -> Path | None:
    if _subsets(root) == [root]:
        return None
    for prefix in EVAL_SUBSETS:
        found = sorted(d for d in root.iterdir() if d.is_dir() and d.name.startswith(prefix))
        if found:
            return found[0]
    return None


def read(root: Path, encoding: str | None = None) -> Listing:
    entries: list[Entry] = []
    problems: list[Problem] = []
    for subset in _subsets(root):
        for f in _audio(subset):
            txt = transcript_of(f)
            text, unreadable = ("", None) if txt is None else read_transcript(txt, encoding, f.stem)
            if unreadable is not None:  # skipped and reported, as VCTK does
                problems.append(unreadable)
                continue
            speaker = f.stem.split("_")[0] if is_libritts_audio(f) else f.relative_to(subset).parts[0]
            entries.append(Entry(f.stem, str(f.absolute()), text, speaker=speaker, where=str(txt or f)))
    return entries, problems


def signature(root: Path) -> ManifestSignature:
    """A hash of every audio file's name and of its transcript's size and time."""
    listing = []
    for subset in _subsets(root):
        for f in _audio(subset):
            txt = transcript_of(f)
            listing.append(f"{f}:{file_signature(str(txt)) if txt is not None else None}")
    return hashlib.sha1("\n".join(listing).encode()).hexdigest()


LAYOUT = Layout(
    name="libritts",
    title="a LibriTTS folder",
    order=42,
    detect=detect,
    read=read,
    eval_listing=eval_listing,
    signature=signature,
    reads_folder=True,
    hint="<speaker>/<chapter>/*.normalized.txt (LibriTTS)",
    points_at="`ROOT/` with `<speaker>/<chapter>/<speaker>_<chapter>_*.wav` + `.normalized.txt`, or the folder "
    "holding `train-*` (and `dev-*`/`test-*`) subsets",
    items="id = file stem, speaker = speaker folder, text = `.normalized.txt` (else `.original.txt`); `train-*` "
    "subsets train, the first `dev-*` (else `test-*`) is the eval split; a transcript that cannot be decoded is "
    "skipped and reported (`unreadable_text`)",
)
