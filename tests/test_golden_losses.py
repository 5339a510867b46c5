"""Per-step losses of every tiny recipe equal the pinned golden values (tests/golden/losses.json).

A refactor keeps behaviour: the same seed gives the same losses, bit for bit on the machine that
pinned them. Re-pin only for a deliberate change of behaviour: ``python -m tests.golden.golden --write``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.golden.golden import GOLDEN, RECIPES, compare, fingerprint, run_recipe

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("recipe", RECIPES)
def test_tiny_recipe_losses_equal_the_golden_values(recipe: str, demo_corpus: Path, tmp_path: Path) -> None:
    want = json.loads(GOLDEN.read_text())
    exact = want["fingerprint"] == fingerprint()
    got = run_recipe(recipe, demo_corpus, tmp_path)
    assert compare(got, want["recipes"][recipe], exact) == []
