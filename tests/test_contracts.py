"""The one-way import contracts (.importlinter) hold, and a violation breaks them."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINT = "import sys; from importlinter.cli import lint_imports; sys.exit(lint_imports())"


def _lint(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", LINT], cwd=root, capture_output=True, text=True, env={"PYTHONPATH": str(root)}
    )


def test_contracts_are_kept() -> None:
    out = _lint(ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 broken" in out.stdout


def test_a_library_import_of_the_test_toys_breaks_the_contracts(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "speechtrain", tmp_path / "speechtrain", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / ".importlinter", tmp_path / ".importlinter")
    with open(tmp_path / "speechtrain" / "memory" / "__init__.py", "a") as f:
        f.write("\nimport speechtrain.testing  # a violation on purpose\n")
    with open(tmp_path / "speechtrain" / "config.py", "a") as f:
        f.write("\nimport speechtrain.train.trainer  # a lower layer importing a higher one\n")
    out = _lint(tmp_path)
    assert out.returncode != 0
    assert "speechtrain.memory -> speechtrain.testing" in out.stdout
    assert "BROKEN" in out.stdout
    assert "speechtrain.config -> speechtrain.train" in out.stdout
