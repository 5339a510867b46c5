"""What the README promises works in the default install (issue 40): espeak-ng comes with it, and every
optional part missing is one line naming its extra (exit 2, no traceback), checked before its module is
imported."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]


def _without(modules: list[str], argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``speechtrain ARGV`` in a fresh interpreter where importing any of ``modules`` fails, as when the
    package is not installed (``sys.modules[name] = None`` makes ``import name`` raise ImportError)."""
    code = (
        "import sys\n"
        f"for name in {modules!r}:\n"
        "    sys.modules[name] = None\n"
        "from speechtrain.cli.main import main\n"
        f"sys.exit(main({argv!r}))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_ui_without_gradio_is_one_line_naming_the_extra(tmp_path: Path) -> None:
    done = _without(["gradio"], ["ui", "--runs", str(tmp_path / "runs"), "--port", "7999"], tmp_path)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and "ModuleNotFoundError" not in done.stderr  # was: a traceback
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "pip install 'speechtrain[ui]'" in lines[0], done.stderr


def test_espeak_ng_is_in_the_default_install() -> None:
    """README: "espeak-ng comes with the install"; `make-dataset --language` uses it (it was the `espeak` extra)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert any(dep.startswith("espeakng-loader") for dep in project["dependencies"])
    run_sh = (ROOT / "scripts" / "run.sh").read_text(encoding="utf-8")
    demo_imports = next(line for line in run_sh.splitlines() if line.strip().startswith('imports="speechtrain, soundf'))
    assert "espeakng_loader" in demo_imports  # a venv made before is topped up by `scripts/run.sh demo`
    extras = project["optional-dependencies"]
    assert "espeak" in extras  # the old install line still works


def test_the_test_command_installs_what_the_tests_need_and_ci_the_peers() -> None:
    """`scripts/run.sh test` installed [dev] with the heavy peers (lightning) and the browser driver (playwright)
    before the first test; they are the peers and browser extras now, which CI installs (CI=true: the ci extra).
    librosa stays in dev: the quality metrics' DNSMOS (speechmos) imports it, and their tests are in the suite."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    names = {dep.split(">")[0].split("=")[0].split("[")[0] for dep in extras["dev"]}
    assert not names & {"lightning", "playwright"}
    assert extras["ci"] == ["speechtrain[dev,peers,browser]"]
    run_sh = (ROOT / "scripts" / "run.sh").read_text(encoding="utf-8")
    assert 'if [ "${CI:-}" = true ]; then\n      extra="[ci]"' in run_sh
    assert "export CI=true" in (ROOT / ".ci" / "run").read_text(encoding="utf-8")


def test_a_test_that_needs_a_missing_peer_skips_outside_ci_and_fails_in_ci(monkeypatch) -> None:  # noqa: ANN001
    import pytest

    from tests.peers import need

    monkeypatch.setitem(sys.modules, "librosa", None)  # as if not installed
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match=r"'peers' extra: pip install -e '.\[peers\]'"):
        need("librosa")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI must test against librosa"):
        need("librosa")
