"""speechtrain export RUN OUT --format singingvocoders: SingingVocoders' export layout (model.ckpt with the
generator in legacy weight-norm names, config.json as their export_ckpt.py writes it), which their own Generator
loads and runs to the same waveform as ours (their class when ``SPEECHTRAIN_SINGINGVOCODERS`` names a copy of
their repository, else the reference layout written in tests/test_models_nsf_hifigan.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from speechtrain.config import load_config
from speechtrain.errors import UserError
from speechtrain.models.nsf_hifigan.importers import config_overrides, import_singingvocoders
from speechtrain.recipes import build_task
from tests.singingvocoders_ref import jitter, their_module
from tests.test_models_nsf_hifigan import RECIPES, _RefGenerator, _singing_f0

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SMALL = [
    "model.upsample_initial_channel=16",
    "model.resblock_kernel_sizes=[3,5]",
    "model.resblock_dilation_sizes=[[1,3,5],[1,3,5]]",
]


def _their_generator(config: dict) -> torch.nn.Module:
    """Their Generator built from an exported config.json: their class when at hand, else the reference layout."""
    models = their_module("models/nsf_HiFigan/models.py")
    if models is not None:
        return models.Generator(models.AttrDict(config))
    c = config
    return _RefGenerator(
        c["num_mels"], c["sampling_rate"], c["upsample_initial_channel"], c["upsample_rates"],
        c["upsample_kernel_sizes"], c["resblock_kernel_sizes"], c["resblock_dilation_sizes"], c["mini_nsf"],
    )  # fmt: skip


def _waveforms(ours: torch.nn.Module, theirs: torch.nn.Module, n_mels: int = 80) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(3)
    mel, f0 = torch.randn(2, n_mels, 12), _singing_f0()
    with torch.no_grad():
        torch.manual_seed(7)
        want = theirs.eval()(mel, f0)
        torch.manual_seed(7)
        got = ours.eval()(mel, f0)
    return got, want


@pytest.mark.parametrize("mini_nsf", [False, True])
def test_export_loads_in_their_generator_with_the_same_waveform(tmp_path: Path, mini_nsf: bool) -> None:
    task = build_task(load_config(RECIPES / "vocoder_nsf_hifigan_tiny.yaml", [*SMALL, f"model.mini_nsf={mini_nsf}"]))
    jitter(task.generator, 0.05, seed=1)  # weight_g no longer the norm of weight_v: a real round trip
    out = task.export(tmp_path / "export")
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.ckpt"]
    config = json.loads((out / "config.json").read_text())
    assert config["mini_nsf"] is mini_nsf and config["pc_aug"] is False and config["sampling_rate"] == 22050
    assert config["noise_sigma"] == 0.0  # their generator adds noise_sigma at inference; our synthesis adds none
    assert config["upsample_initial_channel"] == 16 and config["discriminator_periods"] == [2, 3]
    state = torch.load(out / "model.ckpt", weights_only=True)
    assert list(state) == ["generator"] and "conv_pre.weight_g" in state["generator"]
    assert not any("parametrizations" in k for k in state["generator"])
    theirs = _their_generator(config)
    theirs.load_state_dict(state["generator"])  # strict: every tensor of theirs, nothing else
    got, want = _waveforms(task.generator, theirs)
    assert want.std() > 1e-4 and (got - want).abs().max() < 1e-5, (got - want).abs().max()
    # and back: our importer reads the export, with the overrides of its config.json
    cfg = load_config(RECIPES / "vocoder_nsf_hifigan_tiny.yaml", config_overrides(config))
    again = build_task(cfg)
    import_singingvocoders(out / "model.ckpt").load_into(again, strict=False)
    assert torch.equal(_waveforms(again.generator, task.generator)[0], got)


def test_folded_weight_norm_is_written_back_as_g_and_v(tmp_path: Path) -> None:
    task = build_task(load_config(RECIPES / "vocoder_nsf_hifigan_tiny.yaml", SMALL))
    jitter(task.generator, 0.05, seed=2)
    before = _waveforms(task.generator, task.generator)[0]
    task.generator.remove_weight_norm()
    out = task.export(tmp_path / "folded")
    config = json.loads((out / "config.json").read_text())
    theirs = _their_generator(config)
    theirs.load_state_dict(torch.load(out / "model.ckpt", weights_only=True)["generator"])
    assert (_waveforms(theirs, theirs)[0] - before).abs().max() < 1e-5


def test_settings_their_generator_cannot_hold_are_refused(tmp_path: Path) -> None:
    task = build_task(load_config(RECIPES / "vocoder_nsf_hifigan_tiny.yaml", [*SMALL, "model.harmonic_num=4"]))
    with pytest.raises(UserError, match="harmonic_num=8"):
        task.export(tmp_path / "x")
    assert not (tmp_path / "x").exists()


def test_fast_discriminator_keys_go_into_config_json(tmp_path: Path) -> None:
    cfg = load_config(RECIPES / "vocoder_nsf_hifigan.yaml")
    from speechtrain.data.features import MelSettings
    from speechtrain.models.nsf_hifigan.export import export_config

    config = export_config(cfg.model, MelSettings.from_data(cfg.data))
    assert cfg.model.noise_sigma > 0 and config["noise_sigma"] == 0.0  # what inference adds, here and in theirs
    assert config["train_noise_sigma"] == cfg.model.noise_sigma  # and back, below
    assert config["fast_mpd_strides"] == [4, 4, 4] and config["fast_mpd_kernel_size"] == 11
    assert config["discriminator_periods"] == [2, 3, 5, 7, 11, 17, 23] and config["upsample_initial_channel"] == 1024
    assert (config["sampling_rate"], config["num_mels"], config["hop_size"], config["fmax"]) == (
        44100,
        128,
        512,
        16000.0,
    )
    # read back by our importer's config reader: the same model and features
    back = load_config(RECIPES / "vocoder_nsf_hifigan_tiny.yaml", config_overrides(config))
    for key in ("mini_nsf", "noise_sigma", "upsample_initial_channel", "period_discriminator", "scale_discriminator"):
        assert getattr(back.model, key) == getattr(cfg.model, key), key
    assert list(back.model.fast_mpd_strides) == [4, 4, 4] and back.data.n_mels == 128


@pytest.mark.slow
def test_cli_exports_a_trained_run(tmp_path: Path) -> None:
    """make a run (2 steps of the tiny recipe), speechtrain export RUN OUT --format singingvocoders, load it."""
    from speechtrain.cli.main import main
    from speechtrain.data.demo_singing import make_singing_corpus
    from speechtrain.recipes.inference import load_task
    from speechtrain.recipes.train import train_from_config

    corpus = make_singing_corpus(tmp_path / "corpus", utterances=6, seed=1)
    over = [
        f"data.manifest={corpus}",
        f"data.cache_dir={tmp_path / 'cache'}",
        "data.eval_utterances=2",
        *SMALL,
        "train.max_steps=2",
        "train.eval_every=2",
        "train.save_every=2",
        "train.eval_audio_samples=0",
        f"train.output_dir={tmp_path / 'run'}",
    ]
    run_dir, _ = train_from_config(load_config(RECIPES / "vocoder_nsf_hifigan_tiny.yaml", over))
    out = tmp_path / "export"
    assert main(["export", str(run_dir), str(out), "--format", "singingvocoders"]) == 0
    assert main(["export", str(run_dir), str(tmp_path / "other"), "--format", "coqui"]) == 2
    config = json.loads((out / "config.json").read_text())
    theirs = _their_generator(config)
    theirs.load_state_dict(torch.load(out / "model.ckpt", weights_only=True)["generator"])
    _, task = load_task(run_dir, device="cpu")
    got, want = _waveforms(task.generator, theirs)
    assert math.isfinite(float(got.abs().max())) and (got - want).abs().max() < 1e-5
    # rtf --runtime onnx: the ONNX graph OpenUtau runs, timed beside PyTorch on the same eval mels and f0
    rtf_json = tmp_path / "rtf.json"
    args = ["rtf", str(run_dir), "--device", "cpu", "--runtime", "onnx", "--items", "2", "--warmup", "0"]
    assert main([*args, "--json", str(rtf_json)]) == 0
    rtf = json.loads(rtf_json.read_text())
    assert rtf["onnx"]["runtime"] == "onnxruntime" and rtf["onnx"]["rtf"] > 0
    assert [i["input"] for i in rtf["items"]] == [i["input"] for i in rtf["onnx"]["items"]]
