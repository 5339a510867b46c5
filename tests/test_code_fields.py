"""Config values that name code (``package.module:function``) are declared as such in the schema
(``speechtrain.config.NAMES_CODE``), so that the web UI can refuse every one its operator did not allow.

The schema is walked two ways: every string field whose description speaks of code must be declared, and every
string field is given a module that does not exist (``st_probe_N:fn``) while the config is read and while the
family's task is built and its prepare hooks run: a field whose value something tried to import is code-naming,
and must be declared; a declared field must be one whose value is imported (a mark on a field that names no code
would be a switch that does nothing)."""

from __future__ import annotations

import importlib.abc
import re
import sys
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from speechtrain import registry
from speechtrain.config import Config, code_values, load_config, marks_code
from tests.doors import RECIPES

#: a family's tiny recipe (its model section is validated by the family's config class)
TINY = {
    "hifigan": "vocoder_hifigan_tiny.yaml",
    "nsf_hifigan": "vocoder_nsf_hifigan_tiny.yaml",
    "gpt_tts": "gpt_tts_tiny.yaml",
    "cnn_lstm": "classifier_cnn_lstm_tiny.yaml",
    "vits": "vits_tiny.yaml",
    "xtts": "xtts_finetune_tiny.yaml",
}
DECLARED = {("model", "name"), ("xtts", "text_front_end")}  # known today; the walk finds the rest
SPEAKS_OF_CODE = re.compile(r"module:|:function|:factory|:callable|\bimport(s|ed)?\b|python (file|path|module)", re.I)


def _takes_str(annotation: Any) -> bool:
    if annotation is str:
        return True
    return any(_takes_str(a) for a in typing.get_args(annotation))


def _sections(cls: type[BaseModel], prefix: str = "") -> Iterator[tuple[str, Any, type[BaseModel]]]:
    """``(dotted key, field, owner class)`` of every field of ``cls``, into its sub-sections."""
    for name, field in cls.model_fields.items():
        key = f"{prefix}{name}"
        nested = [a for a in (field.annotation, *typing.get_args(field.annotation)) if isinstance(a, type)]
        sub = next((a for a in nested if issubclass(a, BaseModel)), None)
        if sub is not None and name != "model":
            yield from _sections(sub, f"{key}.")
        else:
            yield key, field, cls


def _all_fields() -> list[tuple[str, Any, type[BaseModel]]]:
    """Every field of the config: its sections, and each family's model section."""
    fields = [f for f in _sections(Config) if not f[0].startswith("model")]
    for name in registry.families():
        cls = registry.model_config_class(name)
        assert cls is not None
        fields += list(_sections(cls, "model."))
    return fields


def test_every_field_that_speaks_of_code_is_declared() -> None:
    undeclared = [
        f"{owner.__name__}.{key}"
        for key, field, owner in _all_fields()
        if _takes_str(field.annotation) and SPEAKS_OF_CODE.search(field.description or "") and not marks_code(field)
    ]
    assert not undeclared, f"declare these with json_schema_extra=NAMES_CODE (speechtrain.config): {undeclared}"


def test_the_known_code_fields_are_declared() -> None:
    from speechtrain.config import ModelSection, OpaqueModelConfig
    from speechtrain.models.xtts.config import XttsConfig

    assert marks_code(ModelSection.model_fields["name"]) and marks_code(OpaqueModelConfig.model_fields["name"])
    assert marks_code(XttsConfig.model_fields["text_front_end"])


class _ImportSpy(importlib.abc.MetaPathFinder):
    """Records every module asked for whose name starts with ``st_probe_`` (none exists: nothing runs)."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def find_spec(self, fullname: str, path: Any, target: types.ModuleType | None = None) -> None:
        if fullname.startswith("st_probe_"):
            self.asked.append(fullname.split(".")[0])
        return None


@pytest.fixture
def spy() -> Iterator[_ImportSpy]:
    finder = _ImportSpy()
    sys.meta_path.insert(0, finder)
    try:
        yield finder
    finally:
        sys.meta_path.remove(finder)


def _str_keys(cfg: Config) -> list[str]:
    """The dotted keys of ``cfg`` whose field takes text (the model section's by the family's own class)."""
    keys = [k for k, f, _ in _sections(Config) if not k.startswith("model") and _takes_str(f.annotation)]
    return keys + [f"model.{k}" for k, f, _ in _sections(type(cfg.model)) if _takes_str(f.annotation)]


def _exercise(cfg: Config) -> None:
    """What reads the model section's values: the family's task and its prepare hooks (item limits, features)."""
    for call in (registry.build_task, registry.item_limits, registry.derived_features):
        try:
            call(cfg.model, cfg.data)
        except Exception:  # noqa: BLE001 - a probe value may break the build after (or before) it imports
            pass


@pytest.mark.slow
@pytest.mark.parametrize("family", list(TINY))
def test_a_field_whose_value_is_imported_is_declared(
    family: str, spy: _ImportSpy, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # XTTS's tiny base is written where the recipe names it (runs/xtts_tiny_base)
    recipe = RECIPES / TINY[family]
    base = load_config(recipe, ["model.language=en"] if family == "xtts" else [])
    if family == "xtts":
        registry.build_task(base.model, base.data)  # a tiny XTTS writes its random base once here
    imported, declared_silent = [], []
    for i, key in enumerate(_str_keys(base)):
        probe = f"st_probe_{i}"
        try:
            cfg = load_config(recipe, [*(["model.language=en"] if family == "xtts" else []), f"{key}={probe}:fn"])
        except Exception:  # noqa: BLE001 - the field does not take such a value: it cannot name code
            if probe in spy.asked:
                imported.append(key)
            continue
        _exercise(cfg)
        owner_field = _field_of(cfg, key)
        if probe in spy.asked and not marks_code(owner_field):
            imported.append(key)
        if marks_code(owner_field) and probe not in spy.asked:
            declared_silent.append(key)
        if marks_code(owner_field):
            assert (key, f"{probe}:fn") in code_values(cfg), key
    assert not imported, f"{family}: these values were imported but are not declared NAMES_CODE: {imported}"
    assert not declared_silent, f"{family}: declared NAMES_CODE but nothing imports them: {declared_silent}"


def _field_of(cfg: Config, key: str) -> Any:
    obj: Any = cfg
    *parents, last = key.split(".")
    for part in parents:
        obj = getattr(obj, part)
    return type(obj).model_fields[last]
