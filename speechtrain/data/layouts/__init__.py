"""The table of dataset layouts: every module of this package that declares one.

A layout is one module (``speechtrain/data/layouts/<name>.py``, the self-contained shape of lhotse's
``recipes/ljspeech.py``) that knows how to recognise a folder or metadata file in its layout
(``detect``), read it into :class:`~speechtrain.data.layouts.base.Entry` rows with the skipped lines as
problems (``read``), and tell when its listing changed (``signature``); it declares itself at module
level as ``LAYOUT = Layout(...)``. Detection, reading and the cache check
(:mod:`speechtrain.data.manifest`), the ``data.format`` values the config accepts, the web UI's list and
the formats table of docs/data.md all read :func:`layouts`. Adding a layout is one new module here.
"""

from __future__ import annotations

import difflib
import functools
import importlib
import pkgutil
from pathlib import Path

from speechtrain.data.layouts.base import Layout, Match, Strength
from speechtrain.errors import DataError

#: modules of the package that are not layouts
_NOT_LAYOUTS = {"base", "docs"}


def module_names() -> list[str]:
    """Every module of the package but the shared ones."""
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if m.name not in _NOT_LAYOUTS)


@functools.cache
def layouts() -> tuple[Layout, ...]:
    """Every ``LAYOUT`` declared by a module of this package, in ``order``."""
    found: dict[str, Layout] = {}
    for name in module_names():
        module = importlib.import_module(f"{__name__}.{name}")
        layout = getattr(module, "LAYOUT", None)
        if layout is None:
            continue
        if not isinstance(layout, Layout):
            raise TypeError(f"{__name__}.{name}.LAYOUT is a {type(layout).__name__}, not a Layout")
        if layout.name in found or layout.name == "auto":
            raise ValueError(f"{__name__}.{name}: the layout name {layout.name!r} is taken")
        found[layout.name] = layout
    return tuple(sorted(found.values(), key=lambda lay: (lay.order, lay.name)))


def names() -> tuple[str, ...]:
    """The ``data.format`` values besides ``auto``, in table order."""
    return tuple(lay.name for lay in layouts())


def layout(name: str) -> Layout:
    """The layout called ``name``; KeyError naming the closest one and the valid names."""
    for lay in layouts():
        if lay.name == name:
            return lay
    hint = difflib.get_close_matches(name, names(), n=1)
    raise KeyError(
        f"unknown data.format '{name}'"
        + (f"; did you mean '{hint[0]}'?" if hint else "")
        + f" (valid: auto, {', '.join(names())})"
    )


def matches(path: Path, encoding: str | None = None, fallback: bool = False) -> dict[str, Match]:
    """The evidence of every layout (the fallback ones with ``fallback``) that recognises ``path`` (a folder
    or a metadata file), by name. A match whose files another match claims with stronger evidence is left
    out (an LJSpeech ``metadata.csv`` by name, when its header names ``audio_file``: XTTS)."""
    found: dict[str, Match] = {}
    for lay in layouts():
        if lay.fallback == fallback:
            match = lay.detect(path, encoding)
            if match is not None:
                found[lay.name] = match

    def outranked(name: str, match: Match) -> bool:
        return any(
            other.strength > match.strength and set(match.files) <= set(other.files)
            for key, other in found.items()
            if key != name
        )

    return {name: match for name, match in found.items() if not outranked(name, match)}


def header_owner(path: Path, encoding: str | None = None, besides: str = "") -> Layout | None:
    """The layout (other than ``besides``) that recognises the file ``path`` by its header row, if any."""
    for lay in layouts():
        if lay.name == besides or lay.fallback:
            continue
        try:
            match = lay.detect(path, encoding)
        except DataError:
            continue
        if match is not None and match.strength == Strength.HEADER:
            return lay
    return None
