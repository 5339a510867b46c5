"""The docs cards of the accelerations, rendered from their modules' declarations into docs/accelerations.md.

``python -m speechtrain.accel.cards [docs/accelerations.md]`` rewrites the block between the markers;
``tests/test_accel_catalog.py`` fails when the file and the modules disagree.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from speechtrain.accel.catalog import Acceleration, accelerations

CARDS_BEGIN = "<!-- cards: generated from speechtrain/accel/*.py by `python -m speechtrain.accel.cards` -->"
CARDS_END = "<!-- end of cards -->"


def _choices(acc: Acceleration) -> str:
    """``auto | true | false`` from the config field: the default first."""
    import typing

    from speechtrain.config import AccelConfig, OptimConfig

    sections: dict[str, type[BaseModel]] = {"accel": AccelConfig, "optim": OptimConfig}
    info = sections[acc.section].model_fields[acc.field]

    def values(ann: Any) -> list[Any]:
        if ann is bool:
            return [True, False]
        if typing.get_origin(ann) is typing.Literal:
            return list(typing.get_args(ann))
        return [v for arg in typing.get_args(ann) for v in values(arg)]

    found = values(info.annotation)
    ordered = [info.default] + [v for v in found if v != info.default]
    return " | ".join(str(v).lower() if isinstance(v, bool) else str(v) for v in ordered)


def _wrap(text: str, first: str) -> list[str]:
    return textwrap.wrap(
        first + text,
        width=104,
        subsequent_indent="  ",
        break_long_words=False,
        break_on_hyphens=False,
    )


def card_markdown(acc: Acceleration) -> str:
    """The card of ``acc`` as it stands in docs/accelerations.md."""
    c = acc.card
    keys = ", ".join(f"`{acc.section}.{k}`" for k in (acc.field, *acc.options))
    head = f"## {c.title} — {keys}" + ("" if acc.options else f" ({_choices(acc)})")
    lines = [head, ""]
    lines += _wrap(c.what, "- **What**: ")
    lines += _wrap(c.helps, "- **Helps**: ")
    lines += _wrap(c.costs, "- **Costs**: ")
    exact = "Yes" if acc.exact else "No (approximate)"
    note = c.exact_note
    exact += "." if not note else f" {note}" if note.startswith("(") else f". {note}"
    lines += _wrap(exact, "- **Exact?** ")
    if acc.devices != ("cuda", "cpu"):
        lines += _wrap(f"{', '.join(acc.devices)} only: {acc.device_note}.", "- **Devices**: ")
    if c.auto:
        lines += _wrap(c.auto, "- **auto**: ")
    for more in c.more:
        lines += _wrap(more, "- ")
    if c.own_loop:
        lines += _wrap(c.own_loop, "- **Own loop**: ")
    return "\n".join(lines)


def cards_markdown() -> str:
    """Every card, in table order, between the markers of docs/accelerations.md."""
    body = "\n\n".join(card_markdown(a) for a in accelerations())
    return f"{CARDS_BEGIN}\n\n{body}\n\n{CARDS_END}"


def write_cards(path: str | Path) -> bool:
    """Rewrite the cards between the markers of ``path``; True when the file changed."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    start, end = text.index(CARDS_BEGIN), text.index(CARDS_END) + len(CARDS_END)
    new = text[:start] + cards_markdown() + text[end:]
    if new != text:
        path.write_text(new, encoding="utf-8")
    return new != text


if __name__ == "__main__":
    import sys

    target = sys.argv[1] if len(sys.argv) > 1 else "docs/accelerations.md"
    print(f"{target}: {'rewritten' if write_cards(target) else 'already up to date'}")
