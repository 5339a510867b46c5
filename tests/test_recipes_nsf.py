"""The singing-vocoder user's set-up as a recipe: `speechtrain config show recipes/vocoder_nsf_hifigan.yaml` carries
their twelve settings, the recommended variant differs only where it says why, and precision auto never picks
bf16 for NSF-HiFiGAN (SingingVocoders warns against it), saying so in accel.json."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from speechtrain.accel.precision import resolve_precision
from speechtrain.cli.main import main
from speechtrain.config import load_config
from speechtrain.models.nsf_hifigan.config import NSFHiFiGANConfig

RECIPES = Path(__file__).resolve().parents[1] / "recipes"

#: the user's SingingVocoders fast-task set-up: their key and value -> ours (docs/recipes.md has the table)
USER_SETTINGS = {
    "data.crop_frames": 80,  # crop_mel_frames
    "data.batch_size": 32,  # batch_size
    "data.num_workers": 12,  # ds_workers
    "data.volume_aug_prob": 0.5,  # volume_aug: true, volume_aug_prob: 0.5
    "model.upsample_initial_channel": 1024,
    "model.mini_nsf": True,  # their fast config's mini_nsf defaults ...
    "model.noise_sigma": 0.01,  # ... with its noise
    "model.periods": [2, 3, 5, 7, 11, 17, 23],  # discriminator_periods
    "model.period_discriminator": "fast",  # FastMPD ...
    "model.fast_mpd_strides": [4, 4, 4],
    "model.fast_mpd_kernel_size": 11,
    "model.scale_discriminator": "fast_mrd",  # ... + FastMRD: the fast task's pair
    "optim.name": "muon",  # Muon_AdamW ...
    "optim.muon_variant": "singingvocoders",
    "optim.lr": 3.0e-4,  # ... at 3e-4 for both parts
    "optim.muon_lr": 3.0e-4,
    "accel.precision": "fp16",  # 16-mixed: fp16 autocast with a dynamic grad scaler
    "optim.scheduler": "none",  # their configure_optimizers returns no scheduler: constant lr
    "optim.grad_clip": None,  # the fast task's step never clips
}


def _show(path: Path, capsys: pytest.CaptureFixture[str]) -> dict:
    assert main(["config", "show", str(path)]) == 0
    return yaml.safe_load(capsys.readouterr().out)


def _get(shown: dict, key: str):  # noqa: ANN202
    section, name = key.split(".")
    return shown[section][name]


def test_config_show_carries_the_users_twelve_settings(capsys: pytest.CaptureFixture[str]) -> None:
    """Before: upsample_initial_channel 512, lr 2e-4, 8 workers, periods 3..37, no fast MPD, precision auto
    (bf16 on an RTX 5090), a warm-up and a clip they do not have, no volume augmentation, mini_nsf off."""
    shown = _show(RECIPES / "vocoder_nsf_hifigan.yaml", capsys)
    wrong = {k: (_get(shown, k), v) for k, v in USER_SETTINGS.items() if _get(shown, k) != v}
    assert not wrong, wrong
    assert shown["data"]["f0_method"] == "parselmouth" and shown["data"]["f0_frame_offset"] == 0.0  # their f0
    header = (RECIPES / "vocoder_nsf_hifigan.yaml").read_text().split("\ndata:")[0]
    assert "WarmupLR is never built" in header and "never clips" in header  # the header says what they do
    numbered = [int(m) for m in re.findall(r"^#\s+(\d+) ", header, flags=re.MULTILINE)]
    assert numbered == list(range(1, 13))  # the twelve, numbered


def test_recommended_variant_differs_only_where_it_says_why(capsys: pytest.CaptureFixture[str]) -> None:
    user = _show(RECIPES / "vocoder_nsf_hifigan.yaml", capsys)
    ours = _show(RECIPES / "vocoder_nsf_hifigan_recommended.yaml", capsys)
    differ = {f"{s}.{k}" for s in user for k in user[s] if user[s][k] != ours[s][k]}
    assert differ == {
        "optim.grad_clip",
        "optim.scheduler",
        "optim.warmup_steps",
        "optim.min_lr_ratio",
        "train.output_dir",
    }
    text = (RECIPES / "vocoder_nsf_hifigan_recommended.yaml").read_text()
    for key in ("grad_clip", "scheduler", "min_lr_ratio"):  # each change sits under the comment giving its reason
        before = text.split(f"  {key}:")[0].rstrip().splitlines()[-1]
        assert before.lstrip().startswith("#") or "warmup" in before, key
    assert ours["accel"]["precision"] == "fp16" and ours["optim"]["lr"] == 3.0e-4


def _bf16_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe of a GPU with bf16 tensor cores (an RTX 5090), whatever this machine has."""
    import speechtrain.accel.precision as precision

    monkeypatch.setattr(precision, "_rule", lambda info: ("bf16", "compute capability 12.0 has bf16 tensor cores"))


def test_precision_auto_never_picks_bf16_for_nsf_hifigan(monkeypatch: pytest.MonkeyPatch) -> None:
    _bf16_gpu(monkeypatch)
    assert resolve_precision("auto", "cpu").name == "bf16"  # any other family: bf16
    plan = resolve_precision("auto", "cpu", NSFHiFiGANConfig.avoid_bf16)
    assert plan.name == "fp16" and plan.use_grad_scaler
    assert "instead of bf16" in plan.reason and "SingingVocoders" in plan.reason
    assert plan.to_dict()["avoid_bf16"] == NSFHiFiGANConfig.avoid_bf16
    assert plan.fallback() is not None and plan.fallback().name == "fp32"  # non-finite fp16: fp32, not bf16
    explicit = resolve_precision("bf16", "cpu", NSFHiFiGANConfig.avoid_bf16)
    assert explicit.name == "bf16" and "against the model's advice" in explicit.reason


def test_the_train_recipe_writes_the_reason_into_accel_json(monkeypatch: pytest.MonkeyPatch) -> None:
    from speechtrain.recipes import build_task
    from speechtrain.recipes.train import TrainRecipe

    _bf16_gpu(monkeypatch)
    cfg = load_config(RECIPES / "vocoder_nsf_hifigan_tiny.yaml", ["accel.precision=auto", "train.device=cpu"])
    recipe = TrainRecipe(cfg)
    trainer = recipe.build_trainer(build_task(cfg))
    accel_json = trainer.accel.records_dict()
    assert accel_json["precision"]["name"] == "fp16" and "SingingVocoders" in accel_json["precision"]["reason"]
    assert accel_json["resolved"]["precision"]["value"] == "fp16"
    hifigan = load_config(RECIPES / "vocoder_hifigan_tiny.yaml", ["accel.precision=auto", "train.device=cpu"])
    other = TrainRecipe(hifigan)
    assert other.build_trainer(build_task(hifigan)).precision.name == "bf16"
