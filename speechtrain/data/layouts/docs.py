"""The formats table of docs/data.md, rendered from the layouts' declarations.

``python -m speechtrain.data.layouts.docs [docs/data.md]`` rewrites the block between the markers;
``tests/test_data_layout_table.py`` fails when the file and the modules disagree.
"""

from __future__ import annotations

from pathlib import Path

from speechtrain.data.layouts import layouts

TABLE_BEGIN = "<!-- formats: generated from the layouts by `python -m speechtrain.data.layouts.docs` -->"
TABLE_END = "<!-- end of formats -->"


def formats_markdown() -> str:
    """The formats table, one row per layout in table order, between the markers."""
    rows = ["| format | what `data.manifest` points at | items |", "|---|---|---|"]
    rows += [f"| `{lay.name}` | {lay.points_at} | {lay.items} |" for lay in layouts()]
    return "\n".join([TABLE_BEGIN, *rows, TABLE_END])


def write_formats(path: str | Path) -> bool:
    """Rewrite the table between the markers of ``path``; True when the file changed."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    start, end = text.index(TABLE_BEGIN), text.index(TABLE_END) + len(TABLE_END)
    new = text[:start] + formats_markdown() + text[end:]
    if new != text:
        path.write_text(new, encoding="utf-8")
    return new != text


if __name__ == "__main__":
    import sys

    target = sys.argv[1] if len(sys.argv) > 1 else "docs/data.md"
    print(f"{target}: {'rewritten' if write_formats(target) else 'already up to date'}")
