"""The data section in sections (audio, text, batching, loader, augment), the flat keys kept as aliases
(issue 26): YAML, key=value overrides, keyword arguments and attributes take either spelling; the config
is written with the flat keys and loads back; an unknown key names the closest valid one."""

from __future__ import annotations

import copy
import typing
from pathlib import Path

import pytest
import yaml

from speechtrain.cli.main import main
from speechtrain.config import (
    DATA_ALIASES,
    DATA_SECTIONS,
    AudioSection,
    ConfigError,
    DataConfig,
    build_config,
    load_config,
)


def test_every_section_key_has_a_flat_alias_of_the_same_type() -> None:
    hints = typing.get_type_hints(DataConfig, include_extras=True)
    keys = [k for cls in DATA_SECTIONS.values() for k in cls.model_fields]
    assert len(keys) == len(set(keys))  # no key in two sections
    assert set(DATA_ALIASES) == set(keys)
    assert not set(keys) & set(DataConfig.model_fields)  # the fields are the sections and the source keys
    for key, section in DATA_ALIASES.items():
        alias = hints[key]  # ClassVar[_Alias[T]]
        (inner,) = typing.get_args(alias)
        (declared,) = typing.get_args(inner)
        assert declared == DATA_SECTIONS[section].model_fields[key].annotation, key
        assert getattr(DataConfig, key).section == section


def test_yaml_flat_and_sectioned_and_overrides_both_ways(tmp_path: Path) -> None:
    flat = tmp_path / "flat.yaml"
    flat.write_text("data:\n  n_mels: 64\n  batch_size: 4\n  num_workers: 1\n", encoding="utf-8")
    nested = tmp_path / "nested.yaml"
    nested.write_text("data:\n  audio: {n_mels: 64}\n  batching: {batch_size: 4}\n  loader: {num_workers: 1}\n")
    a, b = load_config(flat), load_config(nested)
    assert a.data == b.data and a.data.audio.n_mels == 64 and b.data.n_mels == 64
    c = load_config(nested, ["data.n_mels=32", "data.batching.batch_size=2", "data.audio.hop_length=128"])
    assert (c.data.n_mels, c.data.batch_size, c.data.hop_length) == (32, 2, 128)
    child = tmp_path / "child.yaml"  # a flat child over a sectioned base: the child wins
    child.write_text("extends: nested.yaml\ndata:\n  n_mels: 40\n")
    assert load_config(child).data.audio.n_mels == 40
    d = DataConfig(sample_rate=16000, audio={"n_mels": 40}, time_masks=2)
    assert (d.audio.sample_rate, d.n_mels, d.augment.time_masks) == (16000, 40, 2)
    assert DataConfig(audio=AudioSection(n_mels=12)).n_mels == 12


def test_the_config_is_written_flat_and_loads_back(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = load_config(None, ["data.audio.n_mels=64", "data.crop_frames=32", "data.pitch_shift_prob=0.5"])
    raw = cfg.to_dict()["data"]
    assert raw["n_mels"] == 64 and raw["crop_frames"] == 32 and not set(raw) & set(DATA_SECTIONS)
    assert set(raw) == set(DATA_ALIASES) | set(DataConfig.model_fields) - set(DATA_SECTIONS)
    assert build_config(yaml.safe_load(cfg.to_yaml())) == cfg
    assert main(["config", "show", "data.batching.batch_size=3"]) == 0
    shown = yaml.safe_load(capsys.readouterr().out)["data"]
    assert shown["batch_size"] == 3 and "batching" not in shown


def test_unknown_and_misplaced_keys_name_the_valid_one() -> None:
    with pytest.raises(ConfigError, match=r"unknown key 'data.n_mel'; did you mean 'data.n_mels'"):
        load_config(None, ["data.n_mel=3"])
    with pytest.raises(ConfigError, match=r"unknown key 'data.audio.n_mel'; did you mean 'data.audio.n_mels'"):
        load_config(None, ["data.audio.n_mel=3"])
    with pytest.raises(ConfigError, match=r"'data.audio.batch_size': it is a key of data.batching"):
        load_config(None, ["data.audio.batch_size=3"])
    with pytest.raises(ConfigError, match=r"bad value for 'data.sample_rate': 'abc'"):
        load_config(None, ["data.audio.sample_rate=abc"])
    with pytest.raises(ConfigError, match=r"data.n_mels and data.audio.n_mels are the same key, given twice"):
        build_config({"data": {"n_mels": 64, "audio": {"n_mels": 32}}})


def test_attributes_copies_and_checks_across_sections() -> None:
    d = DataConfig()
    d.max_frames = 100
    assert d.batching.max_frames == 100
    with pytest.raises(ValueError, match="n_mels"):
        d.n_mels = -1  # validated by its section
    with pytest.raises(ValueError, match="data.pitch_shift_prob shifts random crops"):
        d.pitch_shift_prob = 0.5  # needs data.crop_frames, a key of another section
    assert d.pitch_shift_prob == 0.0  # left as it was
    e = d.model_copy(update={"hop_length": 32, "manifest": "x"})
    assert (e.hop_length, e.manifest, d.hop_length) == (32, "x", 256)
    for other in (copy.copy(d), d.model_copy(), copy.deepcopy(d)):
        other.n_mels = 7  # a copy owns its sections
        assert d.n_mels == 80
