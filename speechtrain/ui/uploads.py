"""Uploaded zips, bounded: what the page unpacks is checked from the zip's central directory before one byte is
written (member names, code, member count, total size, compression ratio, free space), unpacked in a folder of its
own with a running byte budget (a central directory can understate a member), and on any failure that folder is
removed and one DataError names the zip and the limit. Gradio's own temporary copy of the upload is removed once
handled (:func:`handle_upload`), kept or refused.

An XTTS checkpoint folder may come in the zip: ``model.pth``, ``dvae.pth``, ``mel_stats.pth`` (the names of
:data:`speechtrain.models.xtts.checkpoint.FILES`) and ``*.safetensors`` files are accepted by name, then by format once
unpacked: a ``.pth`` must be read by the one safe reader (:func:`speechtrain.ckptio.load`, tensors and plain
containers only, memory-mapped), a ``.safetensors`` must have a JSON header; nothing is imported. Every other
``.pth`` (a site hook) and every module stays refused as code.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import struct
import zipfile
from dataclasses import dataclass
from pathlib import Path

from speechtrain.errors import DataError, UserError
from speechtrain.paths import Roots

__all__ = ["CODE_SUFFIXES", "CHECKPOINT_NAMES", "UploadLimits", "extract_zip", "handle_upload", "unpack_upload"]

GiB = 1024**3
MiB = 1024**2

#: files a dataset upload never needs and that Python could load as code (a module, a compiled one, a .pth hook)
CODE_SUFFIXES = (".py", ".pyw", ".pyc", ".pyo", ".pyd", ".so", ".pth", ".dll", ".dylib")
#: checkpoint files accepted by name (XTTS's folder) and checked by format once unpacked
CHECKPOINT_NAMES = ("model.pth", "dvae.pth", "mel_stats.pth")
CHECKPOINT_SUFFIXES = (".safetensors",)


@dataclass(frozen=True)
class UploadLimits:
    """What one upload may be. ``max_upload_bytes``: the uploaded file itself (Gradio's ``max_file_size``, refused
    while it arrives); ``max_unpacked_bytes``: a zip's members together; ``max_members``: how many; ``max_ratio``:
    unpacked/compressed of a member larger than ``ratio_floor_bytes`` (audio compresses about 1:1, text 1:4; a
    bomb 1:1000); ``spare_bytes``: free space left on the uploads' disk after unpacking."""

    max_upload_bytes: int = 4 * GiB
    max_unpacked_bytes: int = 16 * GiB
    max_members: int = 200_000
    max_ratio: float = 100.0
    ratio_floor_bytes: int = 64 * MiB
    spare_bytes: int = 1 * GiB


def _checkpoint(name: str) -> bool:
    base = name.rsplit("/", 1)[-1].lower()
    return base in CHECKPOINT_NAMES or base.endswith(CHECKPOINT_SUFFIXES)


def _gib(n: int) -> str:
    return f"{n / GiB:.2f} GiB"


def check_members(zf: zipfile.ZipFile, name: str, dest_root: Path, limits: UploadLimits) -> list[zipfile.ZipInfo]:
    """The members to unpack, from the central directory only; a DataError naming the first limit passed."""
    infos = zf.infolist()
    code = [i.filename for i in infos if i.filename.lower().endswith(CODE_SUFFIXES) and not _checkpoint(i.filename)]
    if code:
        raise DataError(
            f"{name}: holds {len(code)} file(s) of code ({', '.join(code[:3])}); a dataset upload is audio and text "
            f"(and checkpoints named {', '.join(CHECKPOINT_NAMES)} or *.safetensors) only: remove them and upload again"
        )
    if len(infos) > limits.max_members:
        raise DataError(f"{name}: holds {len(infos)} members, more than the {limits.max_members} an upload may hold")
    total = sum(i.file_size for i in infos)
    if total > limits.max_unpacked_bytes:
        raise DataError(
            f"{name}: unpacks to {_gib(total)}, more than the {_gib(limits.max_unpacked_bytes)} an upload may "
            "(speechtrain ui --max-unpacked-gb), or put the dataset under --data"
        )
    for i in infos:
        ratio = i.file_size / max(i.compress_size, 1)
        if i.file_size > limits.ratio_floor_bytes and ratio > limits.max_ratio:
            raise DataError(
                f"{name}: member '{i.filename}' unpacks {ratio:.0f} times its packed size ({_gib(i.file_size)}), more "
                f"than the {limits.max_ratio:.0f} an upload may (a zip bomb?)"
            )
    free = shutil.disk_usage(dest_root).free
    if total + limits.spare_bytes > free:
        raise DataError(
            f"{name}: unpacks to {_gib(total)}, and {dest_root} has {_gib(free)} free (keeping "
            f"{_gib(limits.spare_bytes)} spare): free some space, or put the dataset under --data"
        )
    return infos


def _unpack(zf: zipfile.ZipFile, infos: list[zipfile.ZipInfo], name: str, dest: Path, limits: UploadLimits) -> None:
    """Each member under ``dest`` (as the kernel resolves it), with a running budget of the sizes declared."""
    inside = Roots([dest])
    budget = sum(i.file_size for i in infos)
    for info in infos:
        target = inside.resolve(dest / info.filename)
        if target is None or target == dest.resolve():
            raise DataError(f"{name}: member '{info.filename}' would be written outside {dest}; refusing it")
        if info.is_dir():
            target.mkdir(parents=True, exist_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        with zf.open(info) as src, open(target, "wb") as out:
            while chunk := src.read(MiB):
                budget -= len(chunk)
                if budget < 0:
                    raise DataError(f"{name}: member '{info.filename}' holds more than its zip entry says; refusing it")
                out.write(chunk)


def _check_checkpoints(folder: Path, name: str) -> None:
    """Each checkpoint file unpacked is what its name says: a weights-only torch file (read by the safe reader,
    memory-mapped) or a safetensors file (a JSON header)."""
    from speechtrain import ckptio
    from speechtrain.errors import CheckpointError

    for path in sorted(p for p in folder.rglob("*") if p.is_file() and _checkpoint(p.name)):
        if path.suffix.lower() == ".safetensors":
            try:
                with open(path, "rb") as fh:
                    (n,) = struct.unpack("<Q", fh.read(8))
                    if not 2 <= n <= min(path.stat().st_size - 8, 100 * MiB):
                        raise ValueError(f"a header of {n} bytes")
                    json.loads(fh.read(n))
            except (OSError, ValueError, struct.error) as exc:
                raise DataError(f"{name}: {path.name} is not a safetensors file ({exc})") from None
            continue
        try:
            ckptio.load(path, mmap=True)
        except CheckpointError as exc:
            raise DataError(f"{name}: {path.relative_to(folder)}: {exc}") from None


def extract_zip(zip_file: str | Path, dest_root: str | Path, limits: UploadLimits | None = None) -> Path:
    """Unpack an uploaded zip into a new folder ``dest_root/<zip stem>`` (``-2``, ``-3`` ... when taken); the
    dataset folder inside it. Refused before anything is written: what :func:`check_members` finds; refused once
    unpacked (the folder removed): a member larger than declared, a checkpoint not in its format, a write that
    fails (a full disk)."""
    zip_file, limits = Path(zip_file), limits or UploadLimits()
    if not zipfile.is_zipfile(zip_file):
        raise DataError(f"{zip_file.name}: not a zip file (upload a .zip of the dataset folder)")
    Path(dest_root).mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(zip_file) as zf:
        infos = check_members(zf, zip_file.name, Path(dest_root), limits)
        dest = _new_folder(Path(dest_root), zip_file.stem)
        try:
            _unpack(zf, infos, zip_file.name, dest, limits)
            _check_checkpoints(dest, zip_file.name)
        except (OSError, zipfile.BadZipFile, EOFError) as exc:
            shutil.rmtree(dest, ignore_errors=True)
            raise DataError(f"{zip_file.name}: could not be unpacked in {dest_root}: {exc}") from None
        except UserError:
            shutil.rmtree(dest, ignore_errors=True)
            raise
    # a zip of one folder: the dataset is that folder
    inner = [p for p in dest.iterdir() if not p.name.startswith((".", "__MACOSX"))]
    if len(inner) == 1 and inner[0].is_dir():
        return inner[0]
    return dest


def _new_folder(root: Path, stem: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for n in range(1, 10_000):
        folder = root / (stem if n == 1 else f"{stem}-{n}")
        try:
            folder.mkdir()
            return folder
        except FileExistsError:
            continue
    raise DataError(f"{root}: no free folder name for {stem}")


def unpack_upload(zip_file: str | Path, uploads: str | Path, limits: UploadLimits | None = None) -> tuple[Path, str]:
    """An uploaded dataset zip unpacked under ``uploads`` and its detected format; a rejected upload (not a zip,
    code inside, a member outside, a limit passed, no dataset layout found) leaves nothing on disk."""
    from speechtrain.data.manifest import detect_format

    uploads = Path(uploads)
    before = set(uploads.iterdir()) if uploads.is_dir() else set()
    try:
        folder = extract_zip(zip_file, uploads, limits)
        return folder, detect_format(folder)
    except UserError:
        for made in set(uploads.iterdir()) - before if uploads.is_dir() else ():
            shutil.rmtree(made, ignore_errors=True)
        raise


def handle_upload(
    upload: str | Path, uploads: str | Path, cache: str | Path, limits: UploadLimits | None = None
) -> tuple[Path, str]:
    """:func:`unpack_upload` of the file Gradio received in its ``cache`` folder, which is removed afterwards, kept
    or refused, with its folder once empty (Gradio's cache would keep every upload, a refused 300 MB file among them,
    until the server stops). A file outside ``cache`` is left where it is."""
    upload = Path(upload)
    try:
        return unpack_upload(upload, uploads, limits)
    finally:
        real, cache = upload.resolve(), Path(cache).resolve()
        if real.is_relative_to(cache) and real != cache:
            real.unlink(missing_ok=True)
            if real.parent != cache:
                with contextlib.suppress(OSError):  # Gradio keeps each upload in a folder of its own
                    real.parent.rmdir()
