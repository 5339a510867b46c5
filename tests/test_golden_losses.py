"""Per-step losses of every tiny recipe equal the pinned golden values (tests/golden/losses.json).

A refactor keeps behaviour: the same seed gives the same losses, bit for bit on the machine that
pinned them. Re-pin only for a deliberate change of behaviour: ``python -m tests.golden.golden --write``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.golden.golden import GOLDEN, RECIPES, compare, fingerprint, run_recipe


@pytest.mark.slow
@pytest.mark.parametrize("recipe", RECIPES)
def test_tiny_recipe_losses_equal_the_golden_values(recipe: str, demo_corpus: Path, tmp_path: Path) -> None:
    want = json.loads(GOLDEN.read_text())
    exact = want["fingerprint"] == fingerprint()
    got = run_recipe(recipe, demo_corpus, tmp_path)
    assert compare(got, want["recipes"][recipe], exact) == []


def test_the_recipes_child_runs_the_pinned_instruction_set() -> None:
    """The golden values hold on AVX-512 CPUs too because the child's kernels are capped at AVX2."""
    import os
    import subprocess
    import sys

    from tests.golden.golden import PINNED_ISA

    code = "import torch; print(torch.backends.cpu.get_cpu_capability())"
    out = subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, **PINNED_ISA}, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "AVX2"
