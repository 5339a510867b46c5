"""Typed config: unknown keys with suggestions, wrong types, overrides, extends, `config show`."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from speechtrain.cli.main import main
from speechtrain.config import ConfigError, load_config, parse_override


def test_defaults_load() -> None:
    cfg = load_config()
    assert cfg.data.sample_rate == 22050 and cfg.model.name == "toy"


def test_unknown_top_level_section_suggests_closest() -> None:
    with pytest.raises(ConfigError, match=r"unknown section 'dta'; did you mean 'data'"):
        load_config(None, ["dta.n_mels=64"])


def test_unknown_key_in_section_suggests_closest(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"unknown key 'data.n_mel'; did you mean 'data.n_mels'"):
        load_config(None, ["data.n_mel=64"])
    cfg_file = tmp_path / "c.yaml"
    cfg_file.write_text("train:\n  max_step: 10\n")
    with pytest.raises(ConfigError, match=r"train.max_step'; did you mean 'train.max_steps'"):
        load_config(cfg_file)


def test_unknown_model_key_checked_by_family_class() -> None:
    with pytest.raises(ConfigError, match=r"unknown key 'model.chanels'; did you mean 'model.channels'"):
        load_config(None, ["model.chanels=8"])
    with pytest.raises(ConfigError, match=r"unknown model.name 'toi'; did you mean 'toy'"):
        load_config(None, ["model.name=toi"])


def test_wrong_type_names_key_value_and_expected_type() -> None:
    with pytest.raises(ConfigError) as err:
        load_config(None, ["train.max_steps=abc"])
    msg = str(err.value)
    assert "train.max_steps" in msg and "'abc'" in msg and "expected int" in msg
    with pytest.raises(ConfigError, match=r"model.channels.*'wide'.*expected int"):
        load_config(None, ["model.channels=wide"])
    with pytest.raises(ConfigError, match=r"data.n_mels"):
        load_config(None, ["data.n_mels=-3"])  # constraint (gt=0), not only type


def test_overrides_apply_and_parse_yaml_values() -> None:
    cfg = load_config(None, ["train.max_steps=7", "data.fmax=null", "optim.betas=[0.5, 0.9]", "data.manifest=a b"])
    assert cfg.train.max_steps == 7 and cfg.data.fmax is None
    assert tuple(cfg.optim.betas) == (0.5, 0.9) and cfg.data.manifest == "a b"
    assert parse_override("a.b=1") == (["a", "b"], 1)
    with pytest.raises(ConfigError, match="not key=value"):
        parse_override("train.max_steps")
    with pytest.raises(ConfigError, match="is a value, not a section"):
        load_config(None, ["train.max_steps=3", "train.max_steps.x=1"])


def test_extends_merges_base_then_file_then_overrides(tmp_path: Path) -> None:
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "base.yaml").write_text("data:\n  n_mels: 64\n  hop_length: 128\ntrain:\n  max_steps: 5\n")
    child = tmp_path / "child.yaml"
    child.write_text("extends: base/base.yaml\ndata:\n  hop_length: 200\n")
    cfg = load_config(child, ["train.max_steps=9"])
    assert (cfg.data.n_mels, cfg.data.hop_length, cfg.train.max_steps) == (64, 200, 9)
    bad = tmp_path / "bad.yaml"
    bad.write_text("extends: missing.yaml\n")
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(bad)


def test_config_show_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg_file = tmp_path / "c.yaml"
    cfg_file.write_text("data:\n  n_mels: 64\n")
    assert main(["config", "show", str(cfg_file), "train.max_steps=11"]) == 0
    shown = yaml.safe_load(capsys.readouterr().out)
    assert shown["data"]["n_mels"] == 64 and shown["train"]["max_steps"] == 11
    assert set(shown) == {"data", "model", "optim", "accel", "train", "tune", "bench"}
    assert main(["config", "show", "data.n_mel=3"]) == 2  # a user error: message, no traceback
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "did you mean 'data.n_mels'" in err and "Traceback" not in err


# ---------------------------------------------------------------- issue 14, defect 10: config loading
def test_an_extends_loop_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("extends: b.yaml\ntrain:\n  max_steps: 3\n")
    (tmp_path / "b.yaml").write_text("extends: a.yaml\n")
    with pytest.raises(ConfigError, match=r"loops back.*a\.yaml -> .*b\.yaml -> .*a\.yaml"):  # RecursionError before
        load_config(tmp_path / "a.yaml")


def test_a_config_that_is_not_utf8_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes("train:\n  output_dir: runs/caf\xe9\n".encode("latin-1"))
    with pytest.raises(ConfigError, match=r"latin1\.yaml:2: not UTF-8 text \(byte 0xe9\)"):  # UnicodeDecodeError
        load_config(path)


@pytest.mark.parametrize("value", [".inf", "-.inf", ".nan"])
def test_infinite_or_nan_floats_are_refused(value: str) -> None:
    with pytest.raises(ConfigError, match="optim.lr.*finite"):
        load_config(None, [f"optim.lr={value}"])


def test_a_model_factory_that_raises_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from speechtrain.errors import UserError
    from speechtrain.recipes.common import build_task

    (tmp_path / "broken_model.py").write_text("def make(model, data):\n    raise ValueError('hidden must be even')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = load_config(None, ["model.name=broken_model:make"])
    with pytest.raises(UserError, match=r"make\(model, data\) raised ValueError at .*broken_model\.py:2: hidden must"):
        build_task(cfg)
