"""The web UI's one path check, on paths as the kernel resolves them (speechtrain.paths.Roots): with an operator's
link ``data/myvoice -> elsewhere/myvoice``, ``data/myvoice/../X`` is ``elsewhere/X`` to ``open()``, outside every root,
and each door refuses it (the dataset box, data.cache_dir, a recipe's ``extends:``, a manifest's audio,
train.quality_asr, train.init_from); what lies inside the link's target is accepted and handed on resolved."""

from __future__ import annotations

from pathlib import Path

import pytest

from speechtrain.errors import UserError
from tests.doors import RECIPES


@pytest.fixture
def linked(tmp_path: Path) -> tuple[object, Path, Path]:
    """A workspace whose ``data/myvoice`` is the operator's link to ``elsewhere/myvoice``, beside which lie a secret
    file, a secret folder and a secret recipe."""
    from speechtrain.ui.page import Workspace

    ws = Workspace(tmp_path / "runs", tmp_path / "data")
    target = tmp_path / "elsewhere" / "myvoice"
    (target / "wavs").mkdir(parents=True)
    (target / "metadata.csv").write_text("a|hi|hi\n")
    (tmp_path / "elsewhere" / "secret.csv").write_text("s1|secret line|secret line\n")
    (tmp_path / "elsewhere" / "secret_audio").mkdir()
    (tmp_path / "elsewhere" / "outside.yaml").write_text("train:\n  max_steps: 7\n")
    (tmp_path / "data" / "myvoice").symlink_to(target, target_is_directory=True)
    return ws, tmp_path / "data" / "myvoice", target


def test_the_dataset_box_through_a_link_then_up_is_refused(linked: tuple[object, Path, Path]) -> None:
    ws, link, target = linked
    with pytest.raises(UserError, match="reads datasets only under its data folder"):
        ws.data_path(f"{link}/../secret.csv")  # type: ignore[attr-defined]
    assert ws.data_path(link) == target  # type: ignore[attr-defined]  # handed on resolved
    assert ws.data_path(f"{link}/wavs/../metadata.csv") == target / "metadata.csv"  # type: ignore[attr-defined]
    assert ws.data_path(target) == target  # type: ignore[attr-defined]  # the link's target is a root of its own


def test_path_values_through_a_link_then_up_are_refused(linked: tuple[object, Path, Path]) -> None:
    """data.cache_dir, train.init_from and train.quality_asr (on localhost) through the link and up: refused."""
    ws, link, target = linked
    over = [f"data.manifest={link}"]
    for key in ("data.cache_dir", "train.init_from", "train.quality_asr"):
        with pytest.raises(UserError, match=f"{key}=.*the web UI reads and writes only under its folders"):
            ws.load_config("gpt_tts_tiny", [*over, f"{key}={link}/../X"])  # type: ignore[attr-defined]
    cfg = ws.load_config("gpt_tts_tiny", [*over, f"data.cache_dir={link}/cache"])  # type: ignore[attr-defined]
    assert cfg.data.cache_dir == f"{link}/cache"


def test_a_recipe_extending_through_a_link_then_up_is_refused(linked: tuple[object, Path, Path]) -> None:
    ws, link, target = linked
    uploaded = ws.uploads / "r" / "recipe.yaml"  # type: ignore[attr-defined]
    uploaded.parent.mkdir(parents=True)
    uploaded.write_text(f"extends: {link}/../outside.yaml\n")
    with pytest.raises(UserError, match=r"extends: of .*recipe\.yaml"):
        ws.recipe(str(uploaded))  # type: ignore[attr-defined]
    with pytest.raises(UserError, match="reads recipes only"):
        ws.recipe(f"{link}/../outside.yaml")  # type: ignore[attr-defined]
    (target / "mine.yaml").write_text(f"extends: {RECIPES / 'gpt_tts_tiny.yaml'}\n")
    assert ws.recipe(f"{link}/mine.yaml") == target / "mine.yaml"  # type: ignore[attr-defined]


def test_a_manifests_audio_through_a_link_then_up_is_refused(linked: tuple[object, Path, Path]) -> None:
    """An uploaded manifest's audio ``../../../../../data/myvoice/../secret_audio/x`` (the plain ``../..`` form was
    refused already) is an ``outside_data_roots`` problem, in the page's process and in its jobs (their roots come from
    the environment, the link's target among them)."""
    from speechtrain.data.manifest import ROOTS_ENV, audio_roots, read_manifest

    ws, link, target = linked
    up = ws.uploads / "u"  # type: ignore[attr-defined]
    (up / "wavs").mkdir(parents=True)
    rel = f"../../../../../data/{link.name}/../secret_audio/x"  # from up/wavs: up, uploads, .ui, runs, tmp
    (up / "metadata.csv").write_text(f"ok|hi|hi\n{rel}|x|x\n../../../../../data/{link.name}/wavs/b|y|y\n")
    with ws.reading_data():  # type: ignore[attr-defined]
        entries, problems = read_manifest(up, "ljspeech")
    assert [e.id for e in entries] == ["ok", f"../../../../../data/{link.name}/wavs/b"]
    assert [(p.reason, p.id) for p in problems] == [("outside_data_roots", rel)]
    import os

    env_roots = ws.roots(ws.data_roots()).roots  # type: ignore[attr-defined]  # what a job is given
    assert target in env_roots
    os.environ[ROOTS_ENV] = os.pathsep.join(str(r) for r in env_roots)
    try:
        assert [e.id for e in read_manifest(up, "ljspeech")[0]] == [e.id for e in entries]
    finally:
        del os.environ[ROOTS_ENV]
    with audio_roots([link.parent]):  # --data alone: its link's target is followed, the upload's own audio is out
        assert [e.id for e in read_manifest(up, "ljspeech")[0]] == [f"../../../../../data/{link.name}/wavs/b"]


def test_roots_resolve_as_the_kernel_does(tmp_path: Path) -> None:
    """Roots.resolve equals Path.resolve for every form, and says inside only under a root or a followed link's
    target; a link under a root that is not followed does not admit its target; a loop of links is outside."""
    from speechtrain.paths import Roots

    root, out = tmp_path / "root", tmp_path / "out"
    (out / "deep" / "er").mkdir(parents=True)
    (root / "a").mkdir(parents=True)
    (root / "a" / "l").symlink_to(out / "deep", target_is_directory=True)  # a link two folders down
    (root / "loop").symlink_to(root / "loop")
    followed, plain = Roots([root], follow=[root]), Roots([root])
    for given in ("a/l/er", "a/l/..", "a/l/er/../../x", "a/./l/er/f", "a/../a/l"):
        assert (root / given).resolve() == Path(root / given).resolve()  # the reference
        real = followed.resolve(root / given)
        inside = (root / given).resolve().is_relative_to(out / "deep") or (root / given).resolve().is_relative_to(root)
        assert (real == (root / given).resolve()) if inside else real is None, given
    assert followed.resolve(root / "a" / "l" / "..") is None  # the target's parent: outside
    assert followed.resolve(root / "a" / "l" / "er") == out / "deep" / "er"
    assert plain.resolve(root / "a" / "l" / "er") is None
    assert followed.resolve(root / "loop" / "x") is None
    assert followed.resolve(root / "new" / "file") == root / "new" / "file"  # nothing need exist


def test_a_job_is_handed_the_resolved_paths_it_was_checked_with(
    linked: tuple[object, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    from speechtrain.ui import jobs

    ws, link, target = linked
    over = [f"data.manifest={link}", f"data.cache_dir={link}/cache"]
    ws.load_config("gpt_tts_tiny", over)  # type: ignore[attr-defined]
    started: list[list[str]] = []
    monkeypatch.setattr(jobs, "start", lambda folder, argv, env: started.append(list(argv)))
    ws.start(Path("job"), ["train", "--config", "x.yaml", *over, "train.max_steps=3"])  # type: ignore[attr-defined]
    assert started == [
        [
            "train",
            "--config",
            "x.yaml",
            f"data.manifest={target}",
            f"data.cache_dir={target}/cache",
            "train.max_steps=3",
        ]
    ]
