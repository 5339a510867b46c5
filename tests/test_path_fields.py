"""Config values that are files or folders of the machine are declared as such in the schema
(``speechtrain.config.NAMES_DATASET``, ``NAMES_RUN``, ``NAMES_FILES``), so that the web UI keeps every one of them
under its own folders (``Workspace.check_paths`` loops over the schema: no list of keys by hand).

The schema is walked as tests/test_code_fields.py walks it for code: every text field whose name or description
speaks of a file, folder, path, checkpoint or manifest must carry a path mark (or be listed below with the reason it
names none), and the UI refuses every declared one pointed outside its folders, family by family."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from speechtrain.config import path_kind
from speechtrain.errors import UserError
from tests.doors import RECIPES
from tests.test_code_fields import TINY, _all_fields, _takes_str

SPEAKS_OF_PATHS = re.compile(r"folder|file|director|path|checkpoint|manifest|\bruns?\b", re.I)
NAMED_LIKE_PATHS = re.compile(r"(dir|path|file|manifest|folder|_from)$")
#: text fields that speak of files but hold none, and why
NOT_PATHS = {
    "data.format": "a layout's name (its description names docs/data.md)",
    "data.text.symbols": "the text symbols (recorded in the run)",
    "model.labels": "class names (the data's folder names)",
    "model.speakers": "speaker names (written by training)",
    "data.text_column": "a column's name in a metadata file (its description names a metadata file)",
}
DECLARED = {
    "data.manifest": "dataset",
    "data.eval_manifest": "dataset",
    "data.cache_dir": "files",
    "train.init_from": "files",
    "train.output_dir": "run",
    "model.checkpoint_dir": "files",  # XTTS
    "train.quality_asr": "files",  # the user's ASR model (cer); also refused off localhost (test_quality_asr.py)
}


def test_every_field_that_speaks_of_paths_is_declared() -> None:
    undeclared = [
        f"{owner.__name__}.{key}"
        for key, field, owner in _all_fields()
        if _takes_str(field.annotation)
        and (SPEAKS_OF_PATHS.search(field.description or "") or NAMED_LIKE_PATHS.search(key.rsplit(".", 1)[-1]))
        and path_kind(field) is None
        and key not in NOT_PATHS
    ]
    assert not undeclared, (
        "declare these with json_schema_extra=NAMES_DATASET/NAMES_RUN/NAMES_FILES (speechtrain.config), or list "
        f"them in NOT_PATHS with the reason: {undeclared}"
    )


def test_the_known_path_fields_are_declared() -> None:
    declared = {key: path_kind(field) for key, field, _ in _all_fields() if path_kind(field) is not None}
    assert declared == DECLARED
    assert not set(NOT_PATHS) & set(declared)


def _family_of(key: str) -> list[str]:
    """The tiny recipes whose config has ``key`` (a model key: the families whose section declares it)."""
    owners = {owner.__name__ for k, field, owner in _all_fields() if k == key and path_kind(field)}
    if not key.startswith("model."):
        return ["gpt_tts"]
    from speechtrain import registry

    return [f for f in TINY if registry.model_config_class(f).__name__ in owners]  # type: ignore[union-attr]


@pytest.mark.parametrize("key", sorted(DECLARED))
def test_the_ui_keeps_every_declared_path_in_its_folders(key: str, tmp_path: Path) -> None:
    """Each declared path pointed outside the UI's folders is one line naming the key; under them it is taken (the
    check loops over the schema, so a field declared later is covered without touching the UI)."""
    from speechtrain.ui.page import Workspace

    ws = Workspace(tmp_path / "runs", tmp_path / "data")
    corpus = tmp_path / "data" / "corpus"
    corpus.mkdir()
    inside = (tmp_path / "data" if DECLARED[key] != "run" else tmp_path / "runs") / "x"
    for family in _family_of(key):
        over = [f"data.manifest={corpus}", "model.language=en"] if family == "xtts" else [f"data.manifest={corpus}"]
        recipe = str(RECIPES / TINY[family])
        named = re.escape(key) + "[= ]" + re.escape(str(tmp_path / "elsewhere"))  # datasets: "data.manifest PATH"
        with pytest.raises(UserError, match=named) as refused:
            ws.load_config(recipe, [*over, f"{key}={tmp_path / 'elsewhere'}"])
        assert "\n" not in str(refused.value)
        if key != "data.manifest":
            assert ws.load_config(recipe, [*over, f"{key}={inside}"]) is not None
        cfg = ws.load_config(recipe, over)  # the recipe's own values: the operator's
        assert cfg is not None
