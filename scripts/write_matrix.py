"""Write docs/matrix.md from the registry: python3 scripts/write_matrix.py [--check]

The table is speechtrain.recipes.matrix.markdown of every built-in family and of examples/own_model.py (a
model of your own); --check exits 1 when the file differs from what it would write (tests/test_matrix.py
checks the same)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "matrix.md"
OWN_MODEL = "examples.own_model:build_task"


def generate() -> str:
    """The text of docs/matrix.md."""
    from speechtrain.recipes.matrix import markdown, matrix, user_row_for

    own = user_row_for(
        OWN_MODEL, "own model", "a model of your own: examples/own_model.py (a Task and a factory)", [ROOT]
    )
    return markdown(matrix([own]))


def main(argv: list[str]) -> int:
    text = generate()
    if "--check" in argv:
        if DOC.read_text(encoding="utf-8") != text:
            print(f"{DOC} is not what the registry gives: run python3 scripts/write_matrix.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(text, encoding="utf-8")
    print(f"wrote {DOC}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main(sys.argv[1:]))
