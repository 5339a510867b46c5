"""What the web UI refuses, through its HTTP API (gradio_client, as the page calls it): a config value that names
code (``model.text_front_end=os:system``) unless its operator allowed it, and a dataset outside its data roots
(``/etc/passwd`` as an LJSpeech manifest). Each refusal is one line, and nothing starts."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from speechtrain.errors import UserError
from tests.doors import RECIPES

pytestmark = [pytest.mark.filterwarnings("ignore:::gradio.queueing")]

XTTS = str(RECIPES / "xtts_finetune_tiny.yaml")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _shell_corpus(folder: Path, marker: Path) -> Path:
    """An LJSpeech folder whose transcripts are shell commands that create ``marker`` (what a front end of
    ``os:system`` would run)."""
    import numpy as np
    import soundfile as sf

    (folder / "wavs").mkdir(parents=True)
    lines = []
    for i in range(4):
        sf.write(str(folder / "wavs" / f"u{i}.wav"), np.zeros(22050, dtype=np.float32), 22050)
        lines.append(f"u{i}|touch {marker}|touch {marker}")
    (folder / "metadata.csv").write_text("\n".join(lines) + "\n")
    return folder


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """The page on 127.0.0.1 over a fresh workspace, started with no --allow-code."""
    from speechtrain.ui.app import launch

    root = tmp_path_factory.mktemp("ui_safety")
    from speechtrain.config import load_config
    from speechtrain.recipes.common import build_task

    build_task(load_config(XTTS, ["model.language=en", f"model.checkpoint_dir={root / 'base'}"]))  # tiny base
    app, url = launch(port=_free_port(), runs_root=root / "runs", data_root=root / "data", block=False, quiet=True)
    yield url, root
    app.close()


def _started(root: Path) -> list[Path]:
    """The jobs the page started (each has its folder under runs/.ui/jobs or a run directory)."""
    return sorted((root / "runs").rglob("process.json"))


@pytest.mark.slow
def test_a_value_naming_code_is_refused_through_the_page(served: tuple[str, Path]) -> None:
    """``model.text_front_end=os:system`` in the page's overrides with the XTTS recipe: Prepare, Estimate, Plan,
    Tune, Bench and Train each answer one line naming the key and --allow-code; no job starts, the shell command in
    the transcripts never runs."""
    from gradio_client import Client

    url, root = served
    marker = root / "RAN"
    data = str(_shell_corpus(root / "data" / "shell", marker))
    attack = f"model.language=en model.checkpoint_dir={root / 'base'} model.text_front_end=os:system"
    client = Client(url, verbose=False)
    for api in ("/prepare", "/estimate", "/plan", "/tune"):
        status = client.predict(XTTS, data, "ljspeech", "", attack, api_name=api)[0]
        assert status.startswith("error: model.text_front_end=os:system names code"), (api, status)
        assert "speechtrain ui --allow-code model.text_front_end=os:system" in status and "\n" not in status
    status = client.predict(XTTS, data, "ljspeech", "", attack, 3, 1, "", api_name="/bench")[0]
    assert status.startswith("error: model.text_front_end=os:system"), status
    status = client.predict(XTTS, data, "ljspeech", "", attack, "attack", 1, api_name="/start_train")[0]
    assert status.startswith("error: model.text_front_end=os:system"), status
    assert not marker.exists(), "the transcripts' shell command ran"
    assert _started(root) == [], "a job started with a value naming code"


@pytest.mark.slow
def test_a_dataset_outside_the_data_roots_is_refused_through_the_page(served: tuple[str, Path]) -> None:
    """``/etc/passwd`` with format ljspeech (the data box, or data.manifest in the overrides): one line naming the
    data root; nothing is read, no job starts."""
    from gradio_client import Client

    url, root = served
    client = Client(url, verbose=False)
    out = client.predict("gpt_tts_tiny", "/etc/passwd", "ljspeech", "", "", api_name="/prepare")
    status = out[0]
    assert status.startswith("error: dataset /etc/passwd: the web UI reads datasets only under its data folder")
    assert str(root / "data") in status and "\n" not in status
    assert "root:" not in str(out), "the page showed the file's lines"
    inside = str(_shell_corpus(root / "data" / "plain", root / "unused"))
    for api in ("/plan", "/estimate"):
        status = client.predict("gpt_tts_tiny", inside, "auto", "", "data.eval_manifest=/etc/passwd", api_name=api)[0]
        assert status.startswith("error: data.eval_manifest /etc/passwd: the web UI reads datasets only"), status
    escape = str(root / "data" / ".." / ".." / ".." / "etc" / "passwd")
    status = client.predict("gpt_tts_tiny", escape, "ljspeech", "", "", api_name="/prepare")[0]
    assert status.startswith(f"error: dataset {escape}: the web UI reads datasets only"), status
    assert _started(root) == []


# ------------------------------------------------------------------------------------------- without a server
def test_the_operator_allows_a_value_by_name(tmp_path: Path) -> None:
    """--allow-code KEY=M:F lets exactly that value through (another value, another key: refused); the CLI's
    config reader keeps every value."""
    from speechtrain.config import load_config
    from speechtrain.ui.page import Workspace

    g2p = "speechtrain.data.text.amharic:g2p"
    data = tmp_path / "data" / "x"
    data.mkdir(parents=True)
    over = ["model.language=en", f"data.manifest={data}"]
    closed = Workspace(tmp_path / "runs", tmp_path / "data")
    with pytest.raises(UserError, match=f"--allow-code model.text_front_end={g2p}"):
        closed.load_config(XTTS, [*over, f"model.text_front_end={g2p}"])
    opened = Workspace(tmp_path / "runs", tmp_path / "data", allow_code=[f"model.text_front_end={g2p}"])
    assert opened.load_config(XTTS, [*over, f"model.text_front_end={g2p}"]).model.text_front_end == g2p
    with pytest.raises(UserError, match="model.text_front_end=os:system names code"):
        opened.load_config(XTTS, [*over, "model.text_front_end=os:system"])
    assert opened.load_config(XTTS, [*over, "model.text_front_end=basic"]).model.text_front_end == "basic"
    assert load_config(XTTS, ["model.text_front_end=os:system"]).model.text_front_end == "os:system"  # the CLI
    with pytest.raises(UserError, match="--allow-code os:system: give the key"):
        Workspace(tmp_path / "runs", tmp_path / "data", allow_code=["os:system"])


def test_data_roots_follow_the_operators_links_and_the_uploads(tmp_path: Path) -> None:
    from speechtrain.ui.page import Workspace

    ws = Workspace(tmp_path / "runs", tmp_path / "data")
    elsewhere = tmp_path / "corpus"
    elsewhere.mkdir()
    (tmp_path / "data" / "linked").symlink_to(elsewhere, target_is_directory=True)  # the operator's own link
    assert ws.data_path(tmp_path / "data" / "linked") == tmp_path / "data" / "linked"
    assert ws.data_path(ws.uploads / "z" / "metadata.csv") == ws.uploads / "z" / "metadata.csv"
    with pytest.raises(UserError, match=f"reads datasets only under its data folder {tmp_path / 'data'}"):
        ws.data_path(elsewhere)
    with pytest.raises(UserError, match="data.manifest"):
        ws.load_config("gpt_tts_tiny", [f"data.manifest={elsewhere}"])
    assert ws.load_config("gpt_tts_tiny", [f"data.manifest={elsewhere}"], reads_data=False)  # the probe reads none
