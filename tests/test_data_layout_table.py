"""The table of dataset layouts (issue 26): each layout is one module that declares itself, and the
detection, the config's data.format values, the web UI's list and docs/data.md are drawn from it."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from speechtrain.config import ConfigError, load_config
from speechtrain.data import layouts as table
from speechtrain.data.layouts import layouts, names
from speechtrain.data.layouts.base import Entry, Layout, Match, Strength
from speechtrain.data.manifest import detect_format, read_manifest

ROOT = Path(__file__).resolve().parents[1]


def test_the_config_and_the_ui_offer_every_layout_of_the_table() -> None:
    from speechtrain.ui import backend

    assert {"ljspeech", "jsonl", "xtts", "vctk", "commonvoice", "folder"} <= set(names())
    assert backend.FORMATS == ("auto", *names())  # the UI's copy lacked xtts, vctk and commonvoice
    for name in names():
        assert load_config(None, [f"data.format={name}"]).data.format == name
    with pytest.raises(ConfigError, match=r"data.format.*did you mean 'commonvoice'.*valid: auto, ljspeech"):
        load_config(None, ["data.format=comonvoice"])


def test_every_layout_lives_in_its_own_module() -> None:
    owners = [
        m
        for m in table.module_names()
        if isinstance(getattr(sys.modules.get(f"{table.__name__}.{m}"), "LAYOUT", None), Layout)
    ]
    assert sorted(owners) == sorted(lay.name for lay in layouts())
    for lay in layouts():
        assert lay.hint and lay.points_at and lay.items and lay.title, lay.name
    assert [lay.name for lay in layouts() if lay.fallback] == ["folder"]


def test_docs_data_formats_table_is_the_tables() -> None:
    from speechtrain.data.layouts.docs import TABLE_BEGIN, TABLE_END, formats_markdown

    text = (ROOT / "docs" / "data.md").read_text(encoding="utf-8")
    start, end = text.index(TABLE_BEGIN), text.index(TABLE_END) + len(TABLE_END)
    assert text[start:end] == formats_markdown(), "docs/data.md is stale: run python -m speechtrain.data.layouts.docs"


def test_stronger_evidence_for_the_same_file_wins_and_equal_evidence_is_named(tmp_path: Path) -> None:
    (tmp_path / "metadata.csv").write_text("audio_file|text|speaker_name\nwavs/a.wav|salom|s\n", encoding="utf-8")
    assert detect_format(tmp_path) == "xtts"  # LJSpeech claims metadata.csv by name only
    (tmp_path / "metadata.csv").write_text("a|salom\n", encoding="utf-8")
    assert detect_format(tmp_path) == "ljspeech"
    (tmp_path / "x.jsonl").write_text('{"audio_filepath": "a.wav"}\n', encoding="utf-8")
    with pytest.raises(Exception, match="several dataset layouts: ljspeech .*; jsonl"):
        detect_format(tmp_path)


# ------------------------------------------------------------ adding one: a module, picked up by everything
def _detect_scp(path: Path, encoding: str | None = None) -> Match | None:
    if path.is_dir() and (path / "list.scp").is_file():
        return Match("list.scp", ("list.scp",), Strength.NAME)
    return None


def _read_scp(src: Path, encoding: str | None = None) -> tuple[list[Entry], list]:
    rows = [line.split(maxsplit=1) for line in src.read_text().splitlines() if line.strip()]
    return [
        Entry(uid, str((src.parent / wav).absolute()), where=f"{src}:{n}") for n, (uid, wav) in enumerate(rows, 1)
    ], []


NEW = Layout(
    name="scplist",
    title="a made-up scp list",
    order=70,
    detect=_detect_scp,
    read=_read_scp,
    listing=lambda root: root / "list.scp",
    hint="list.scp (made up)",
    points_at="a folder with `list.scp`",
    items="`id path` lines",
)


def test_a_new_module_is_picked_up_by_detection_reading_config_and_docs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = types.ModuleType(f"{table.__name__}.scplist")
    module.LAYOUT = NEW  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    known = table.module_names()
    monkeypatch.setattr(table, "module_names", lambda: sorted([*known, "scplist"]))
    layouts.cache_clear()
    try:
        (tmp_path / "list.scp").write_text("u1 a.wav\nu2 b.wav\n", encoding="utf-8")
        assert detect_format(tmp_path) == "scplist"
        entries, _ = read_manifest(tmp_path)
        assert [e.id for e in entries] == ["u1", "u2"]
        assert load_config(None, ["data.format=scplist"]).data.format == "scplist"
        from speechtrain.data.layouts.docs import formats_markdown

        assert "| `scplist` | a folder with `list.scp` |" in formats_markdown()
    finally:
        layouts.cache_clear()
