"""A user's ``model.name: module:factory`` resolves from the working directory and the config's
folder for every command, as the console script runs it (no working directory on sys.path)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from speechtrain.config import load_config
from speechtrain.errors import UserError
from speechtrain.recipes.common import build_task
from speechtrain.registry import import_user_module

REPO = Path(__file__).resolve().parents[1]


def _package(root: Path, name: str) -> None:
    (root / name).mkdir(parents=True)
    (root / name / "__init__.py").write_text("")
    (root / name / "factory.py").write_text(
        textwrap.dedent(
            """
            from speechtrain.testing.toy.task import ToyTask

            def build(model, data):
                return ToyTask(n_mels=data.n_mels)
            """
        )
    )


def test_module_is_found_in_the_working_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _package(tmp_path, "stuser_cwd_pkg")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    mod = import_user_module("stuser_cwd_pkg.factory:build", "stuser_cwd_pkg.factory")
    assert hasattr(mod, "build")


def test_module_is_found_beside_the_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _package(tmp_path / "proj", "stuser_cfg_pkg")
    (tmp_path / "proj" / "stuser_cfg_pkg" / "run.yaml").write_text(
        "model:\n  name: stuser_cfg_pkg.factory:build\ndata:\n  n_mels: 8\n"
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    cfg = load_config(tmp_path / "proj" / "stuser_cfg_pkg" / "run.yaml")
    assert cfg.source_dir == (tmp_path / "proj" / "stuser_cfg_pkg").resolve()
    task = build_task(cfg)  # found through the config folder's parent: stuser_cfg_pkg/run.yaml
    assert type(task).__name__ == "ToyTask"


def test_missing_module_names_where_it_looked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError, match=r"no module 'nowhere_mod'.*looked in .*PYTHONPATH"):
        import_user_module("nowhere_mod:build", "nowhere_mod")


def test_a_missing_dependency_of_the_user_module_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "stuser_dep_mod.py").write_text("import surely_not_installed_pkg\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError, match="surely_not_installed_pkg"):
        import_user_module("stuser_dep_mod:build", "stuser_dep_mod")


@pytest.mark.slow
def test_documented_own_model_command_works_without_cwd_on_the_path(tmp_path: Path) -> None:
    """`speechtrain train --config examples/own_model.yaml` from the repository root, run as the console
    script runs it (python -P: the working directory is not on sys.path)."""
    from speechtrain.data.demo import make_demo_corpus

    corpus = make_demo_corpus(tmp_path / "demo", utterances=24, seed=0)
    args = [
        "train",
        "--config",
        "examples/own_model.yaml",
        f"data.manifest={corpus}",
        f"data.cache_dir={tmp_path / 'cache'}",
        f"train.output_dir={tmp_path / 'run'}",
        "train.max_steps=2",
        "train.eval_every=1000",
        "train.save_every=1000",
        "data.eval_utterances=4",
    ]
    code = f"import sys; from speechtrain.cli.main import main; sys.exit(main({args!r}))"
    out = subprocess.run([sys.executable, "-P", "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "No module named" not in out.stderr
