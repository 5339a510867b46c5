"""Uploads are bounded (speechtrain.ui.uploads): a zip bomb, too many members, more than the free space are refused
from the central directory before any byte is written, with nothing left on disk; a write that fails while
unpacking (a full disk) removes the partial folder and says one line; Gradio's temporary copy is removed once
handled; an XTTS checkpoint is accepted by name and format, a pickle of code is refused, nothing imported."""

from __future__ import annotations

import errno
import zipfile
from pathlib import Path

import pytest

from speechtrain.errors import DataError
from speechtrain.ui.uploads import UploadLimits, handle_upload, unpack_upload

DATASET = {"mydata/metadata.csv": "a|hello|hello\n", "mydata/wavs/a.wav": b""}


def _zip(path: Path, files: dict[str, str | bytes], level: int = 9) -> Path:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=level) as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return path


@pytest.fixture
def no_member_opened(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reading any member's bytes fails the test: a refusal must come from the central directory alone."""

    real = zipfile.ZipFile.open

    def refuse(self: zipfile.ZipFile, name: object, mode: str = "r", *args: object, **kwargs: object) -> object:
        if mode == "r":
            raise AssertionError("a member was opened before the refusal")
        return real(self, name, mode, *args, **kwargs)  # type: ignore[arg-type]  # writing the test's zips

    monkeypatch.setattr(zipfile.ZipFile, "open", refuse)


def test_a_zip_bomb_is_refused_before_any_byte_is_written(tmp_path: Path, no_member_opened: None) -> None:
    bomb = _zip(tmp_path / "bomb.zip", {**DATASET, "mydata/wavs/b.wav": bytes(96 * 1024**2)})  # 96 MiB of zeros
    assert bomb.stat().st_size < 1024**2
    uploads = tmp_path / "uploads"
    with pytest.raises(DataError, match=r"bomb.zip: member 'mydata/wavs/b.wav' unpacks \d+ times its packed size"):
        unpack_upload(bomb, uploads)
    assert not list(uploads.rglob("*"))


def test_size_members_and_free_space_are_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_member_opened: None
) -> None:
    uploads = tmp_path / "uploads"
    big = _zip(tmp_path / "big.zip", {**DATASET, "mydata/wavs/b.wav": bytes(3000)})
    with pytest.raises(DataError, match="big.zip: unpacks to 0.00 GiB, more than the 0.00 GiB an upload may"):
        unpack_upload(big, uploads, UploadLimits(max_unpacked_bytes=2000))
    many = _zip(tmp_path / "many.zip", {**DATASET, **{f"mydata/wavs/{i}.wav": b"" for i in range(20)}})
    with pytest.raises(DataError, match="many.zip: holds 22 members, more than the 10"):
        unpack_upload(many, uploads, UploadLimits(max_members=10))
    import shutil

    real = shutil.disk_usage
    monkeypatch.setattr(shutil, "disk_usage", lambda p: real(p)._replace(free=10 * 1024**2))  # a nearly full disk
    with pytest.raises(DataError, match=r"good.zip: unpacks to .* GiB, and .*uploads has 0.01 GiB free"):
        unpack_upload(_zip(tmp_path / "good.zip", DATASET), uploads)
    assert not list(uploads.rglob("*"))


def test_a_full_disk_while_unpacking_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ENOSPC on the second member's write: the partial folder is removed, one DataError names the zip."""
    import builtins

    real_open, writes = builtins.open, []

    class Full:
        def __init__(self, fh: object) -> None:
            self.fh = fh

        def __enter__(self) -> Full:
            return self

        def __exit__(self, *exc: object) -> None:
            self.fh.close()  # type: ignore[attr-defined]

        def write(self, data: bytes) -> int:
            writes.append(len(data))
            if len(writes) > 1:
                raise OSError(errno.ENOSPC, "No space left on device")
            return self.fh.write(data)  # type: ignore[attr-defined,no-any-return]

    def opener(file: object, mode: str = "r", *args: object, **kwargs: object) -> object:
        fh = real_open(file, mode, *args, **kwargs)  # type: ignore[call-overload]
        return Full(fh) if "w" in mode and str(file).startswith(str(tmp_path / "uploads")) else fh

    zipped = _zip(
        tmp_path / "two.zip", {"d/metadata.csv": "a|x|x\nb|y|y\n", "d/wavs/a.wav": b"1", "d/wavs/b.wav": b"2"}
    )
    monkeypatch.setattr(builtins, "open", opener)
    with pytest.raises(DataError, match=r"two.zip: could not be unpacked in .*No space left on device"):
        unpack_upload(zipped, tmp_path / "uploads")
    monkeypatch.undo()
    assert not list((tmp_path / "uploads").rglob("*"))


def test_gradios_copy_is_removed_once_handled(tmp_path: Path) -> None:
    cache = tmp_path / "gradio"
    (cache / "abc").mkdir(parents=True)
    kept = _zip(cache / "abc" / "good.zip", DATASET)
    assert handle_upload(kept, tmp_path / "uploads", cache)[1] == "ljspeech"
    assert not (cache / "abc").exists() and cache.is_dir()
    (cache / "def").mkdir()
    refused = cache / "def" / "big.bin"
    refused.write_bytes(b"not a zip" * 1000)
    with pytest.raises(DataError, match="not a zip file"):
        handle_upload(refused, tmp_path / "uploads", cache)
    assert not (cache / "def").exists()
    mine = _zip(tmp_path / "mine.zip", DATASET)  # not in Gradio's folder: left where it is
    handle_upload(mine, tmp_path / "uploads", cache)
    assert mine.is_file()


def test_an_xtts_checkpoint_is_accepted_by_name_and_format(tmp_path: Path) -> None:
    """model.pth of tensors (read by the safe reader) and a .safetensors file are kept; a model.pth that pickles
    code is refused, its folder removed and the code never run; any other .pth is refused as code."""
    import io
    import json
    import struct

    import torch

    weights = io.BytesIO()
    torch.save({"model": {"w": torch.zeros(2)}}, weights)
    header = json.dumps({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}).encode()
    safetensors = struct.pack("<Q", len(header)) + header + bytes(4)
    uploads = tmp_path / "uploads"
    folder, _ = unpack_upload(
        _zip(
            tmp_path / "ok.zip",
            {**DATASET, "mydata/base/model.pth": weights.getvalue(), "mydata/w.safetensors": safetensors},
        ),
        uploads,
    )
    assert (folder / "base" / "model.pth").is_file() and (folder / "w.safetensors").is_file()

    marker = tmp_path / "RAN"

    class Evil:
        def __reduce__(self) -> tuple[object, tuple[str]]:
            return (open, (str(marker), "w"))

    evil = io.BytesIO()
    torch.save({"model": Evil()}, evil)
    with pytest.raises(DataError, match=r"evil.zip: base/model.pth: .*refused: it holds Python objects"):
        unpack_upload(_zip(tmp_path / "evil.zip", {"base/model.pth": evil.getvalue()}), uploads)
    assert not marker.exists() and not (uploads / "evil").exists()
    with pytest.raises(DataError, match=r"1 file\(s\) of code \(hook.pth\)"):
        unpack_upload(_zip(tmp_path / "hook.zip", {**DATASET, "hook.pth": "import os"}), uploads)
    bad = _zip(tmp_path / "bad.zip", {**DATASET, "mydata/x.safetensors": b"\xff" * 20})
    with pytest.raises(DataError, match="x.safetensors is not a safetensors file"):
        unpack_upload(bad, uploads)
    assert sorted(p.name for p in uploads.iterdir()) == ["ok"]


@pytest.mark.filterwarnings("ignore:::gradio.queueing")
def test_through_the_page_a_bomb_is_one_line_and_gradios_copy_is_gone(tmp_path: Path) -> None:
    import socket
    import uuid

    from gradio.utils import get_upload_folder
    from gradio_client import Client, handle_file

    from speechtrain.ui.app import launch

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    app, url = launch(port=port, runs_root=tmp_path / "runs", data_root=tmp_path / "data", block=False, quiet=True)
    try:
        client = Client(url, verbose=False)
        name = f"bomb-{uuid.uuid4().hex[:8]}"
        bomb = _zip(tmp_path / f"{name}.zip", {**DATASET, "mydata/wavs/b.wav": bytes(96 * 1024**2)})
        status = client.predict(handle_file(str(bomb)), api_name="/upload_zip")[0]
        assert status.startswith(f"error: {name}.zip: member 'mydata/wavs/b.wav' unpacks") and "\n" not in status
        good = _zip(tmp_path / f"good-{name}.zip", DATASET)
        status, folder, _ = client.predict(handle_file(str(good)), api_name="/upload_zip")
        assert status.startswith("unpacked to") and Path(folder).is_dir()
    finally:
        app.close()
    assert [p.name for p in (tmp_path / "runs" / ".ui" / "uploads").iterdir()] == [f"good-{name}"]
    assert not [p for p in Path(get_upload_folder()).rglob(f"*{name}*")]  # Gradio's copies, kept or refused
