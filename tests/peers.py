"""The heavy peers some tests compare against (librosa, lightning: the ``peers`` extra) and the browser driver
(playwright: the ``browser`` extra) are not in the test command's ``dev`` install. Outside CI a test that needs
one skips and says what to install; in CI (``CI=true``, where ``scripts/run.sh test`` installs the ``ci`` extra)
a missing one fails the test instead of hiding it."""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import pytest


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("true", "1", "yes")


def need(module: str, extra: str = "peers") -> ModuleType:
    """``module`` imported; skipped outside CI when it is not installed (naming the extra), an error in CI."""
    hint = f"{module} is in the '{extra}' extra: pip install -e '.[{extra}]' (CI installs it)"
    if in_ci():
        try:
            return importlib.import_module(module)
        except ImportError as exc:
            pytest.fail(f"CI must test against {module}: {exc}; {hint}")
    return pytest.importorskip(module, reason=hint)
