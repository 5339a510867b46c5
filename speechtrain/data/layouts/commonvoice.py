"""Common Voice: ``train.tsv`` (+ ``dev.tsv`` as the eval split) when present, else ``validated.tsv``,
beside ``clips/``; tab-separated with a header: ``path`` (under ``clips/``), ``sentence``, ``client_id``
(the speaker)."""

from __future__ import annotations

from pathlib import Path

from speechtrain.data.layouts.base import (
    Entry,
    Layout,
    Listing,
    Match,
    Problem,
    Strength,
    columns,
    first_line,
    header_names,
)
from speechtrain.errors import DataError

SPLITS = (("train.tsv", "dev.tsv"), ("validated.tsv", None))


def _files(root: Path) -> tuple[Path, Path | None] | None:
    for train, evaluation in SPLITS:
        if (root / train).is_file():
            ev = root / evaluation if evaluation and (root / evaluation).is_file() else None
            return root / train, ev
    return None


def detect(path: Path, encoding: str | None = None) -> Match | None:
    if path.is_dir():
        found = _files(path)
        if found is None or not (path / "clips").is_dir():
            return None
        names = tuple(p.name for p in found if p is not None)
        return Match(" + ".join(names) + " + clips/", names)
    line = first_line(path, encoding)
    header = header_names(line, "path")
    if header is not None and "sentence" in header:
        return Match(f"{path.name} with a path/sentence header", (path.name,), Strength.HEADER)
    if path.suffix.lower() == ".tsv":
        raise DataError(
            f"{path}: a .tsv without a Common Voice header (path, sentence columns); its first line is {line[:80]!r}"
        )
    return None


def listing(root: Path) -> Path:
    found = _files(root)
    if found is None:
        raise DataError(f"{root}: a Common Voice folder needs train.tsv or validated.tsv (and clips/)")
    return found[0]


def eval_listing(root: Path) -> Path | None:
    found = _files(root)
    return found[1] if found is not None else None


def read(src: Path, encoding: str | None = None) -> Listing:
    names, sep, lines = columns(src, encoding, ("path", "sentence"), "commonvoice")
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


LAYOUT = Layout(
    name="commonvoice",
    title="a Common Voice manifest",
    order=50,
    detect=detect,
    read=read,
    listing=listing,
    eval_listing=eval_listing,
    hint="validated.tsv + clips/ (Common Voice)",
    points_at="`ROOT/` with `train.tsv` (+ `dev.tsv`: the eval split) or `validated.tsv`, and `clips/`",
    items="columns `path` (under `clips/`), `sentence`, `client_id` (speaker); mp3 is read by soundfile",
)
