"""Each export format declares what its runtime accepts, read from the runtime's own code, and refuses a run that
runtime cannot load before writing anything (issue 39): jik876's and SingingVocoders' ResBlock1 index exactly three
dilations (ResBlock2 two), jik876's conv_pre reads 80 mels. The tiny vocoder recipes export files that the
three-dilation generator layout loads strictly (tests/jik876_ref.py, and tests/test_models_nsf_hifigan.py's
reference of SingingVocoders' generator); with their own code at hand (``SPEECHTRAIN_JIK876`` /
``SPEECHTRAIN_SINGINGVOCODERS``) their loaders are checked too."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from speechtrain.config import load_config, save_config
from speechtrain.errors import UserError
from tests.jik876_ref import RefGenerator, their_jik876_module
from tests.test_export import ROOT, _export, _task

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TWO_DILATIONS = "model.resblock_dilation_sizes=[[1,3]]"


def _nothing_in(folder: Path) -> bool:
    return not folder.exists() or not any(folder.iterdir())


@pytest.mark.parametrize(
    ("recipe", "fmt"), [("vocoder_hifigan_tiny", "jik876"), ("vocoder_nsf_hifigan_tiny", "singingvocoders")]
)
def test_two_dilations_per_resblock1_are_refused_before_writing(tmp_path: Path, recipe: str, fmt: str) -> None:
    out = tmp_path / "out"
    with pytest.raises(UserError, match=r"ResBlock1 reads exactly 3 dilations") as err:
        _export(recipe, fmt, out, TWO_DILATIONS)
    assert "train with model.resblock_dilation_sizes=[[1,3,5]]" in str(err.value)
    assert "nothing written" in str(err.value) and _nothing_in(out)


def test_resblock2_takes_two_dilations_and_jik876_reads_80_mels() -> None:
    from speechtrain.export.formats import FORMATS

    jik = FORMATS["jik876"]
    cfg, _ = _task("vocoder_hifigan_tiny")
    three = load_config(ROOT / "recipes" / "vocoder_hifigan_tiny.yaml", ["model.resblock=2"])
    assert "ResBlock2 reads exactly 2 dilations" in " ".join(jik.contract(three.model, three.data))
    two = load_config(ROOT / "recipes" / "vocoder_hifigan_tiny.yaml", ["model.resblock=2", TWO_DILATIONS])
    assert jik.contract(two.model, two.data) == [] and jik.contract(cfg.model, cfg.data) == []
    mels = load_config(ROOT / "recipes" / "vocoder_hifigan_tiny.yaml", ["data.n_mels=64"])
    assert "reads 80 mel bands" in " ".join(jik.contract(mels.model, mels.data))
    assert FORMATS["onnx"].contract(mels.model, mels.data) == []  # onnxruntime runs any shape we trace


def test_the_command_refuses_before_loading_the_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A run directory with its config only: the refusal comes from the config, no checkpoint is read."""
    from speechtrain.cli.main import main

    run = tmp_path / "run"
    run.mkdir()
    save_config(load_config(ROOT / "recipes" / "vocoder_hifigan_tiny.yaml", [TWO_DILATIONS]), run / "config.yaml")
    assert main(["export", str(run), str(tmp_path / "out"), "--format", "jik876"]) == 2
    err = capsys.readouterr().err
    assert "jik876/hifi-gan (PyTorch) cannot load this run" in err and "[[1,3,5]]" in err
    assert not (tmp_path / "out").exists()


def _their_audio(generator: torch.nn.Module, mel: torch.Tensor) -> np.ndarray:
    with torch.no_grad():
        return generator.eval()(mel).squeeze().numpy()


def test_tiny_hifigan_exports_files_jik876s_layout_loads_strictly(tmp_path: Path) -> None:
    result = _export("vocoder_hifigan_tiny", "jik876", tmp_path, step=7)
    assert result.ok, result.lines()
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["resblock_dilation_sizes"] == [[1, 3, 5]]
    state = torch.load(tmp_path / "g_00000007", map_location="cpu", weights_only=True)["generator"]
    theirs = RefGenerator(config)
    theirs.load_state_dict(state, strict=True)  # every tensor of their layout, nothing else
    _, task = _task("vocoder_hifigan_tiny")  # same seed: the exported weights
    mel = torch.randn(1, 80, 30, generator=torch.Generator().manual_seed(1)) - 4
    diff = float(np.max(np.abs(_their_audio(theirs, mel) - task.vocode(mel[0]))))
    assert diff < 1e-5, diff


def test_tiny_nsf_exports_files_singingvocoders_layout_loads_strictly(tmp_path: Path) -> None:
    from tests.test_models_nsf_export import _their_generator

    result = _export("vocoder_nsf_hifigan_tiny", "singingvocoders", tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert result.files and config["resblock_dilation_sizes"] == [[1, 3, 5]]
    theirs = _their_generator(config)  # their class with SPEECHTRAIN_SINGINGVOCODERS, else the reference layout
    theirs.load_state_dict(torch.load(tmp_path / "model.ckpt", weights_only=True)["generator"], strict=True)


def test_jik876s_own_generator_loads_the_export(tmp_path: Path) -> None:
    """Dev check with their code: ``SPEECHTRAIN_JIK876=/path/to/hifi-gan`` (a checkout or a bare git directory)."""
    models = their_jik876_module()
    if models is None:
        pytest.skip("SPEECHTRAIN_JIK876 does not name a copy of jik876/hifi-gan")
    _export("vocoder_hifigan_tiny", "jik876", tmp_path, step=3)
    config: dict[str, Any] = json.loads((tmp_path / "config.json").read_text())

    class AttrDict(dict):
        __getattr__ = dict.__getitem__

    theirs = models.Generator(AttrDict(config))
    theirs.load_state_dict(torch.load(tmp_path / "g_00000003", map_location="cpu", weights_only=True)["generator"])
    _, task = _task("vocoder_hifigan_tiny")
    mel = torch.randn(1, 80, 30, generator=torch.Generator().manual_seed(1)) - 4
    with torch.no_grad():
        out = theirs.eval()(mel)
    audio = (out[0] if isinstance(out, tuple) else out).squeeze().numpy()
    assert float(np.max(np.abs(audio - task.vocode(mel[0])))) < 1e-5


def _readme_vits_lines() -> tuple[str, str]:
    """The README's VITS training command and the export line after it."""
    text = (ROOT / "README.md").read_text().replace("\\\n", " ")  # a command continued on the next line
    lines = [line.split("  #")[0] for line in text.splitlines()]
    train = next(i for i, line in enumerate(lines) if "train --config recipes/vits_tiny.yaml" in line)
    export = next(line for line in lines[train:] if line.startswith("speechtrain export") and "--format" in line)
    return lines[train], export


def test_the_readmes_vits_command_leads_to_the_export_it_names(
    tmp_path: Path, demo_data: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """The README's VITS command trains a run its export line can make (it once trained one that `export --format
    piper` refused after the training); a run that cannot be exported as a format of its family is told so at step
    0, with the recipe change."""
    import shlex

    from speechtrain.cli.main import main
    from speechtrain.recipes.train import export_notice

    train, export = _readme_vits_lines()
    fmt = export.split("--format", 1)[1].split()[0]
    overrides = [w for w in shlex.split(train.split("#")[0]) if "=" in w and not w.startswith("data.manifest")]
    readme_cfg = load_config(ROOT / "recipes" / "vits_tiny.yaml", overrides)
    assert not [n for n in export_notice(readme_cfg) if f"--format {fmt} " in n]

    plain = [*demo_data, "train.max_steps=1", "train.eval_every=1000", "train.progress=false", "train.device=cpu"]
    notices = export_notice(load_config(ROOT / "recipes" / "vits_tiny.yaml", plain))
    assert len(notices) == 1 and "--format piper" in notices[0] and "data.phonemizer=piper" in notices[0]
    run = tmp_path / "run"
    assert main(["train", "--config", str(ROOT / "recipes" / "vits_tiny.yaml"), *plain, f"train.output_dir={run}"]) == 0
    assert notices[0] in capsys.readouterr().err


def test_make_datasets_next_step_prepares_what_the_readmes_vits_command_trains_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The first-hour timing (issue 50): `make-dataset --language uz` said `next: speechtrain prepare data/uz
    data.language=uz`, which prepared for speechtrain's own front end, and the README's VITS command then prepared
    the corpus again ("stale (settings changed: phonemizer 'none' -> 'piper')"). Its next step now prepares what that
    command reads."""
    import shlex

    from speechtrain.cli.main import main
    from speechtrain.recipes.data import DataRecipe

    corpus = tmp_path / "uz"
    assert main(["make-dataset", str(corpus), "--language", "uz", "-n", "6"]) == 0
    hint = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("next: speechtrain prepare"))
    assert main(shlex.split(hint.removeprefix("next: speechtrain ").split("  (")[0])) == 0
    train, _ = _readme_vits_lines()
    overrides = [w for w in shlex.split(train) if "=" in w and not w.startswith(("data.manifest", "train.output"))]
    cfg = load_config(ROOT / "recipes" / "vits_tiny.yaml", [f"data.manifest={corpus}", *overrides])
    assert DataRecipe(cfg).ensure_prepared(require_text=True) is None  # up to date: not prepared again


def test_the_readme_speaks_the_voice_its_export_line_writes() -> None:
    """The README's export line writes `OUT_DIR/RUN.onnx` (no --name: the run folder's name); the line that speaks it
    with piper-tts names that file (docs/deploy.md's line names `--name uz_UZ-tiny`'s file, which this export does
    not write)."""
    import shlex

    _, export = _readme_vits_lines()
    words = shlex.split(export)
    run, out = words[2], words[3]
    name = words[words.index("--name") + 1] if "--name" in words else Path(run).name
    text = (ROOT / "README.md").read_text()
    speak = next(line for line in text.splitlines() if "| piper " in line)
    assert f"-m {Path(out) / (name + '.onnx')} " in speak


def test_a_read_only_target_is_not_told_to_free_space(tmp_path: Path) -> None:
    import errno

    from speechtrain.recipes.export import _not_exported

    for code in (errno.EROFS, errno.EACCES):
        said = str(_not_exported(tmp_path / "out", OSError(code, os.strerror(code))))
        assert "free some space" not in said and "cannot be written" in said and "\n" not in said, said
    assert "free some space" in str(_not_exported(tmp_path / "out", OSError(errno.ENOSPC, "No space left on device")))
