"""VCTK: ``txt/<speaker>/<id>.txt`` + one ``wav48*/<speaker>/<id>[_micN].wav|flac`` folder (mic1
preferred); the speaker is the folder name; audio without a transcript is kept with empty text (a
vocoder can use it); a transcript file that cannot be read or decoded is that item's problem
(``unreadable_text``), the rest of the corpus is read."""

from __future__ import annotations

import hashlib
import re
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
from speechtrain.errors import DataError

_MIC = re.compile(r"_mic(\d+)$")


def _audio_dirs(root: Path) -> list[Path]:
    return sorted(d for d in root.glob("wav48*") if d.is_dir())


def detect(path: Path, encoding: str | None = None) -> Match | None:
    if not path.is_dir() or not (path / "txt").is_dir() or not _audio_dirs(path):
        return None
    dirs = [d.name for d in _audio_dirs(path)]
    return Match("txt/ + " + ", ".join(d + "/" for d in dirs), ("txt", *dirs))


def signature(root: Path) -> ManifestSignature:
    """A hash of every transcript's size and time and of the audio files' names."""
    listing = [f"{f}:{file_signature(str(f))}" for f in sorted((root / "txt").rglob("*.txt"))]
    listing += [str(f) for d in _audio_dirs(root) for f in sorted(d.rglob("*")) if is_audio(f)]
    return hashlib.sha1("\n".join(listing).encode()).hexdigest()


def read(root: Path, encoding: str | None = None) -> Listing:
    audio_dirs = _audio_dirs(root)
    if len(audio_dirs) != 1:
        found = ", ".join(d.name for d in audio_dirs) or "none"
        raise DataError(
            f"{root}: data.format=vctk needs exactly one wav48*/ audio folder beside txt/, found {found} "
            f"(move the ones you do not train on out of the folder)"
        )
    audio: dict[tuple[str, str], list[Path]] = {}
    for f in sorted(audio_dirs[0].rglob("*")):
        if is_audio(f) and not hidden(f, audio_dirs[0]):
            uid = _MIC.sub("", f.stem)
            audio.setdefault((f.parent.name, uid), []).append(f)
    entries, problems = [], []
    transcribed = set()
    for txt in sorted((root / "txt").rglob("*.txt")):
        speaker, uid = txt.parent.name, txt.stem
        transcribed.add((speaker, uid))
        files = audio.get((speaker, uid))
        text, unreadable = read_transcript(txt, encoding, uid)
        if unreadable is not None:  # skipped and reported (its audio is not kept text-less either)
            problems.append(unreadable)
            continue
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


LAYOUT = Layout(
    name="vctk",
    title="a VCTK folder",
    order=40,
    detect=detect,
    read=read,
    signature=signature,
    reads_folder=True,
    hint="txt/ + wav48*/ (VCTK)",
    points_at="`ROOT/` with `txt/<speaker>/<id>.txt` and one `wav48*/<speaker>/<id>[_micN].wav\\|flac` folder",
    items="id = file stem, speaker = folder name, mic1 preferred; audio without a transcript is kept with empty text; "
    "a transcript that cannot be decoded is skipped and reported (`unreadable_text`)",
)
