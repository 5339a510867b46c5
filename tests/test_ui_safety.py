"""What the web UI refuses, through its HTTP API (gradio_client, as the page calls it): a config value that names
code (``model.text_front_end=os:system``) unless its operator allowed it, a dataset outside its data roots
(``/etc/passwd`` as an LJSpeech manifest), a recipe file outside its recipe folders and data roots, a path value
(``data.cache_dir``, ``train.output_dir`` ...) outside its folders, and a manifest's audio outside the data roots.
Each refusal is one line, and nothing starts."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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

    build_task(load_config(XTTS, ["model.language=en", f"model.checkpoint_dir={root / 'data' / 'base'}"]))  # tiny base
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
    attack = f"model.language=en model.checkpoint_dir={root / 'data' / 'base'} model.text_front_end=os:system"
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


APIS = ("/prepare", "/estimate", "/plan", "/tune")  # each takes (recipe, data, format, switches, overrides)


def _every_door(client: Any, recipe: str, data: str, overrides: str, train: bool = True) -> list[Any]:
    """What Prepare, Estimate, Plan, Tune, Bench (and Train) answer for this recipe and these overrides."""
    outs = [client.predict(recipe, data, "auto", "", overrides, api_name=api) for api in APIS]
    outs.append(client.predict(recipe, data, "auto", "", overrides, 3, 1, "", api_name="/bench"))
    if train:
        outs.append(client.predict(recipe, data, "auto", "", overrides, "probe_run", 1, api_name="/start_train"))
    return outs


@pytest.mark.slow
def test_a_recipe_outside_the_roots_is_refused_through_the_page(served: tuple[str, Path]) -> None:
    """The recipe box took any path: a YAML file elsewhere on the server was read as a recipe, and its errors named
    its keys (``unknown key train.db_password``). A recipe is a listed one or a .yaml file under the data roots (and
    so is every file it extends); anything else is one line naming the roots, before the file is read."""
    from gradio_client import Client

    url, root = served
    secret = root / "secret.yaml"  # outside every root of the page
    secret.write_text("train:\n  db_password: hunter2\n")
    data = str(_shell_corpus(root / "data" / "for_recipes", root / "unused"))
    client = Client(url, verbose=False)
    for out in _every_door(client, str(secret), data, ""):
        assert str(out[0]).startswith(f"error: recipe {secret}: the web UI reads recipes only from"), out[0]
        assert str(root / "data") in out[0] and "\n" not in out[0]
        assert "db_password" not in str(out) and "hunter2" not in str(out)
    wrapper = root / "data" / "recipes" / "wrapper.yaml"  # under the data roots, but pulling in the secret
    wrapper.parent.mkdir(parents=True)
    wrapper.write_text("extends: ../../secret.yaml\n")
    status = client.predict(str(wrapper), data, "auto", "", "", api_name="/estimate")[0]
    assert status.startswith(f"error: recipe {wrapper.parent / '../../secret.yaml'} (extends: of {wrapper})"), status
    assert "db_password" not in status
    status = client.predict(str(root / "data" / "notes.txt"), data, "auto", "", "", api_name="/estimate")[0]
    assert "reads recipes only from" in status, status  # a recipe is a .yaml file
    own = root / "data" / "recipes" / "mine.yaml"  # the operator's way: a recipe under the data roots works
    own.write_text(f"extends: {RECIPES / 'gpt_tts_tiny.yaml'}\ntrain:\n  output_dir: {root / 'runs' / 'mine'}\n")
    status = client.predict(str(own), data, "auto", "", "", api_name="/estimate")[0]
    assert status == "estimate done (`speechtrain estimate`)", status
    assert _started(root) == []


@pytest.mark.slow
def test_a_path_value_outside_the_folders_is_refused_through_the_page(served: tuple[str, Path]) -> None:
    """``data.cache_dir`` (and every path the schema declares: train.output_dir, train.init_from,
    model.checkpoint_dir) from the page pointed anywhere: Plan wrote its feature cache there. Each is refused with
    one line naming the key and the UI's folders, however the override spells it; nothing is written outside."""
    from gradio_client import Client

    url, root = served
    outside = root / "elsewhere"
    data = str(_shell_corpus(root / "data" / "for_paths", root / "unused"))
    client = Client(url, verbose=False)
    attacks = {
        "data.cache_dir": f"data.cache_dir={outside / 'cache'}",
        "train.output_dir": f'train={{"output_dir":"{outside / "run"}"}}',  # a whole section, another spelling
        "train.init_from": "train.init_from=/etc/passwd",
    }
    for key, attack in attacks.items():
        # Train names the run's folder itself (under --runs), after the page's overrides
        for out in _every_door(client, "gpt_tts_tiny", data, attack, train=key != "train.output_dir"):
            assert str(out[0]).startswith(f"error: {key}="), (key, out[0])
            assert "the web UI reads and writes only under its folders" in out[0] and "\n" not in out[0]
            assert str(root / "runs") in out[0]
    xtts = f"model.language=en model.checkpoint_dir={outside / 'xtts'} model.random_checkpoint=tiny"
    status = client.predict(XTTS, data, "auto", "", xtts, api_name="/estimate")[0]
    assert status.startswith(f"error: model.checkpoint_dir={outside / 'xtts'}"), status
    inside = f"data.cache_dir={root / 'data' / 'cache'}"  # under the data folder: fine
    status = client.predict("gpt_tts_tiny", data, "auto", "", inside, api_name="/plan")[0]
    assert status == "plan done (`speechtrain plan`)", status
    assert not outside.exists(), sorted(outside.rglob("*"))
    assert _started(root) == []


@pytest.mark.slow
def test_a_manifests_audio_outside_the_data_roots_is_refused_through_the_page(served: tuple[str, Path]) -> None:
    """An LJSpeech folder under --data whose metadata names ``../../../elsewhere/secret`` read a wav outside the data
    roots (kept, its duration shown): from the page such an entry is skipped as ``outside_data_roots``, the rest
    prepared; the command line reads it as before."""
    import numpy as np
    import soundfile as sf
    from gradio_client import Client

    url, root = served
    corpus = root / "data" / "escaping"
    (corpus / "wavs").mkdir(parents=True)
    (root / "secret_audio").mkdir()
    sf.write(str(root / "secret_audio" / "secret.wav"), np.zeros(33075, dtype=np.float32), 22050)
    lines = []
    for i in range(10):
        sf.write(str(corpus / "wavs" / f"u{i}.wav"), np.zeros(11025 + 512 * i, dtype=np.float32), 22050)
        lines.append(f"u{i}|hello number {i}|hello number {i}")
    lines.append("../../../secret_audio/secret|a secret|a secret")
    (corpus / "metadata.csv").write_text("\n".join(lines) + "\n")
    out = Client(url, verbose=False).predict("gpt_tts_tiny", str(corpus), "ljspeech", "", "", api_name="/prepare")
    assert out[0] == "prepared: kept 10 utterances", out[0]
    skipped = {row[0]: row for row in out[3]["data"]}
    assert skipped["outside_data_roots"][1] == 1, skipped
    from speechtrain.data.manifest import read_manifest

    entries, _ = read_manifest(corpus, "ljspeech")  # the command line: unchanged
    assert len(entries) == 11


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
    assert ws.data_path(tmp_path / "data" / "linked") == elsewhere  # resolved: what the job is handed
    assert ws.data_path(elsewhere) == elsewhere  # the link's target is a root of its own
    assert ws.data_path(ws.uploads / "z" / "metadata.csv") == ws.uploads / "z" / "metadata.csv"
    (tmp_path / "other").mkdir()
    with pytest.raises(UserError, match=f"reads datasets only under its data folder {tmp_path / 'data'}"):
        ws.data_path(tmp_path / "other")
    with pytest.raises(UserError, match="data.manifest"):
        ws.load_config("gpt_tts_tiny", [f"data.manifest={tmp_path / 'other'}"])
    assert ws.load_config("gpt_tts_tiny", [f"data.manifest={tmp_path / 'other'}"], reads_data=False)  # the probe


def test_recipes_come_from_the_listed_folders_and_the_data_roots(tmp_path: Path) -> None:
    """A recipe by name is one of the listed folders' (recipes/, --recipes DIR, the tuned configs); by path a .yaml
    file under those or the data roots, and so is every file it extends; anything else is refused before it is read.
    """
    from speechtrain.ui.page import Workspace

    mine = tmp_path / "my_recipes"
    mine.mkdir()
    (mine / "voice.yaml").write_text(f"extends: {RECIPES / 'gpt_tts_tiny.yaml'}\n")
    ws = Workspace(tmp_path / "runs", tmp_path / "data", recipe_folders=[mine])
    assert ws.recipe("gpt_tts_tiny") == RECIPES / "gpt_tts_tiny.yaml"
    assert str(mine / "voice.yaml") in ws.recipes() and ws.recipe(str(mine / "voice.yaml")) == mine / "voice.yaml"
    assert ws.recipe("voice") == mine / "voice.yaml"
    with pytest.raises(UserError, match="recipe 'no_such' is not listed here"):
        ws.recipe("no_such")
    for bad in ("/etc/passwd", str(tmp_path / "x.yaml"), str(tmp_path / "data" / ".." / "x.yaml")):
        with pytest.raises(UserError, match="the web UI reads recipes only from its recipe folders and data roots"):
            ws.recipe(bad)
    under = tmp_path / "data" / "r.yaml"
    under.write_text("extends: ../outside.yaml\n")
    with pytest.raises(UserError, match=r"extends: of .*r\.yaml"):
        ws.recipe(str(under))
    closed = Workspace(tmp_path / "runs", tmp_path / "data")  # without --recipes: that folder is elsewhere
    with pytest.raises(UserError, match="reads recipes only"):
        closed.recipe(str(mine / "voice.yaml"))


def test_path_values_of_the_page_and_of_the_operator(tmp_path: Path) -> None:
    """The operator's recipe keeps its own path values (train.output_dir: runs/... beside the server); the page's
    overrides and a recipe under the data roots do not; a resume's overrides are checked against the run's own."""
    from speechtrain.config import save_config
    from speechtrain.ui.page import Workspace

    ws = Workspace(tmp_path / "runs", tmp_path / "data")
    corpus = tmp_path / "data" / "c"
    corpus.mkdir()
    over = [f"data.manifest={corpus}"]
    assert ws.load_config("gpt_tts_tiny", over).train.output_dir == "runs/gpt_tts_tiny"  # the recipe's own
    with pytest.raises(UserError, match="train.output_dir=runs/gpt_tts_tiny: the web UI reads and writes only"):
        uploaded = tmp_path / "data" / "up.yaml"
        uploaded.write_text(f"extends: {RECIPES / 'gpt_tts_tiny.yaml'}\n")
        ws.load_config(str(uploaded), over)
    with pytest.raises(UserError, match="data.cache_dir=/var/tmp/c"):
        ws.load_config("gpt_tts_tiny", [*over, 'data={"cache_dir": "/var/tmp/c"}'])
    for own in (ws.shown, ws.tuned, ws.ui / "jobs"):  # the UI's own folder: what it serves, its tuned recipes
        with pytest.raises(UserError, match=f"not in its own {ws.ui}"):
            ws.load_config("gpt_tts_tiny", [*over, f"data.cache_dir={own / 'c'}"])
    assert ws.load_config("gpt_tts_tiny", [*over, f"data.cache_dir={ws.uploads / 'z' / 'c'}"])  # an upload's
    with pytest.raises(UserError, match="train.output_dir=.*uploads"):
        ws.load_config("gpt_tts_tiny", [*over, f"train.output_dir={ws.uploads / 'r'}"])
    run = tmp_path / "runs" / "r"
    run.mkdir()
    cfg = ws.load_config("gpt_tts_tiny", [*over, f"train.output_dir={run}"])
    cfg.data.cache_dir = "/opt/its_own_cache"  # written by whoever started the run (the CLI): kept
    save_config(cfg, run / "config.yaml")
    assert ws.load_run_config(run, ["train.max_steps=5"]).data.cache_dir == "/opt/its_own_cache"
    with pytest.raises(UserError, match="train.init_from=/etc/passwd"):
        ws.load_run_config(run, ["train.init_from=/etc/passwd"])


def test_a_manifests_audio_outside_the_roots_is_skipped_for_the_ui_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inside the UI's reads (its own process: a context; its jobs: the environment) an entry whose audio lies
    outside the data roots is an ``outside_data_roots`` problem, named before the file is touched; elsewhere (the
    command line) the manifest reads as before."""
    from speechtrain.data.manifest import ROOTS_ENV, audio_roots, read_manifest

    corpus = tmp_path / "data" / "lj"
    (corpus / "wavs").mkdir(parents=True)
    (corpus / "metadata.csv").write_text("a|hi|hi\n../../../elsewhere/b|x|x\n")  # the files need not exist
    listed = [e.id for e in read_manifest(corpus, "ljspeech")[0]]
    assert listed == ["a", "../../../elsewhere/b"]
    with audio_roots([tmp_path / "data"]):
        entries, problems = read_manifest(corpus, "ljspeech")
    assert [e.id for e in entries] == ["a"]
    assert [(p.reason, p.id) for p in problems] == [("outside_data_roots", "../../../elsewhere/b")]
    monkeypatch.setenv(ROOTS_ENV, str(tmp_path / "data"))
    assert [e.id for e in read_manifest(corpus, "ljspeech")[0]] == ["a"]
    monkeypatch.setenv(ROOTS_ENV, os.pathsep.join([str(tmp_path / "elsewhere"), str(tmp_path / "data")]))
    assert len(read_manifest(corpus, "ljspeech")[0]) == 2
