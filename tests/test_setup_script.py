"""`scripts/run.sh` on a stock Debian/Ubuntu Python: an "externally managed" interpreter (PEP 668) that pip
refuses to install into. The script must make and use a project virtual environment and reach the demo.

The interpreter is simulated without containers: a copy of this Python's binary beside a standard library
made of links to this one's, with PEP 668's marker file ``EXTERNALLY-MANAGED`` in it and no site-packages
of its own -- what Debian's ``/usr/bin/python3`` looks like to pip."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
VER = f"python{sys.version_info[0]}.{sys.version_info[1]}"


def externally_managed_python(root: Path) -> Path:
    """A throwaway interpreter under ``root`` that pip refuses to install into; returns its ``bin/python3``."""
    bin_dir = root / "bin"
    bin_dir.mkdir(parents=True)
    # a copy, not a link: Python finds its prefix (and so its stdlib) from where the binary lies
    shutil.copy2(os.path.realpath(sys.executable), bin_dir / VER)
    (bin_dir / "python3").symlink_to(VER)
    stdlib = root / "lib" / VER
    stdlib.mkdir(parents=True)
    for entry in Path(sysconfig.get_path("stdlib")).iterdir():
        if entry.name not in ("site-packages", "dist-packages", "EXTERNALLY-MANAGED"):
            (stdlib / entry.name).symlink_to(entry)
    (stdlib / "site-packages").mkdir()
    (stdlib / "EXTERNALLY-MANAGED").write_text(
        "[externally-managed]\nError=This Python is managed by the system (a test's simulation of Debian's).\n"
    )
    return bin_dir / "python3"


def copy_checkout(dest: Path) -> Path:
    """The repository's tracked files (what a fresh clone holds), without the developer's environment."""
    listed = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True)
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    for rel in listed.stdout.splitlines():
        src = REPO / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    return dest


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "SPEECHTRAIN_"))}
    env.update(extra)
    return env


def test_the_simulated_interpreter_is_refused_by_pip(tmp_path: Path) -> None:
    """The simulation is faithful: pip itself refuses this interpreter, as on Debian."""
    py = externally_managed_python(tmp_path / "py")
    out = subprocess.run(
        [str(py), "-c", "import sys, sysconfig; print(sys.prefix); print(sysconfig.get_path('stdlib'))"],
        capture_output=True,
        text=True,
        env=clean_env(),
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[0] == str(tmp_path / "py")
    venv = tmp_path / "v"
    subprocess.run([str(py), "-m", "venv", str(venv)], check=True, env=clean_env())
    # installing into the interpreter itself is refused, as pip refuses Debian's /usr/bin/python3 ...
    refused = subprocess.run([str(py), "-m", "ensurepip"], capture_output=True, text=True, env=clean_env())
    assert refused.returncode != 0 and "externally-managed-environment" in refused.stdout + refused.stderr
    # ... while a virtual environment made from it works
    venv_pip = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "--version"], capture_output=True, text=True, env=clean_env()
    )
    assert venv_pip.returncode == 0 and str(venv) in venv_pip.stdout


@pytest.mark.slow
def test_run_sh_demo_on_an_externally_managed_python_makes_a_venv_and_reaches_the_demo(tmp_path: Path) -> None:
    py = externally_managed_python(tmp_path / "py")
    repo = copy_checkout(tmp_path / "repo")
    out = subprocess.run(
        ["bash", "scripts/run.sh", "demo", "--minutes", "1", "--utterances", "40"],
        cwd=repo,
        capture_output=True,
        text=True,
        env=clean_env(PYTHON=str(py)),
        timeout=1500,
    )
    log = out.stdout + out.stderr
    assert out.returncode == 0, log[-4000:]
    assert "is externally managed (PEP 668)" in log
    assert "making a virtual environment in .venv" in log
    assert "into " + str(repo / ".venv") in log  # says what it installed where
    assert (repo / ".venv" / "bin" / "python").exists()
    assert (repo / "reports" / "demo").is_dir(), log[-3000:]
    # a second run reuses that environment and installs nothing again
    again = subprocess.run(
        ["bash", "scripts/run.sh", "demo", "--help"],
        cwd=repo,
        capture_output=True,
        text=True,
        env=clean_env(PYTHON=str(py)),
        timeout=300,
    )
    assert again.returncode == 0, again.stdout + again.stderr
    assert "using the virtual environment .venv" in again.stdout
    assert "installing" not in again.stdout and "making a virtual environment" not in again.stdout
