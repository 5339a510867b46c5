"""Memory estimate: static bytes by optimizer, measured activations that grow with length (CPU)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from speechtrain.config import load_config
from speechtrain.data.collate import collate
from speechtrain.memory.estimate import (
    SavedTensorMeter,
    activation_bytes,
    fit_activations,
    format_estimate,
    measure_activation_bytes,
    optimizer_state_bytes,
    synthetic_items,
)
from speechtrain.recipes.estimate import EstimateRecipe
from speechtrain.train.task import Needs, OptimizerSpec, Task


class TinyConvTask(Task):
    """mel -> conv -> mel reconstruction; activations linear in length."""

    def __init__(self, n_mels: int = 8, channels: int = 16) -> None:
        self.net = nn.Sequential(nn.Conv1d(n_mels, channels, 3, padding=1), nn.ReLU(), nn.Conv1d(channels, n_mels, 1))

    def modules(self) -> dict[str, nn.Module]:
        return {"net": self.net}

    def training_step(self, batch: Any, stage: str, cache: dict[str, Any]) -> dict[str, torch.Tensor]:
        mel = batch["mel"]  # (B, n_mels, T_frames)
        return {"loss": (self.net(mel) - mel).pow(2).mean()}


class TinyAttentionTask(TinyConvTask):
    """Adds full self-attention over frames (score matrix T x T): quadratic in length."""

    def __init__(self, n_mels: int = 8, channels: int = 16) -> None:
        super().__init__(n_mels, channels)
        self.attn = nn.MultiheadAttention(n_mels, 2, batch_first=True)

    def modules(self) -> dict[str, nn.Module]:
        return {"net": self.net, "attn": self.attn}

    def training_step(self, batch: Any, stage: str, cache: dict[str, Any]) -> dict[str, torch.Tensor]:
        x = batch["mel"].transpose(1, 2)  # (B, T_frames, n_mels)
        y, _ = self.attn(x, x, x, need_weights=True)
        return {"loss": (self.net(y.transpose(1, 2)) - batch["mel"]).pow(2).mean()}


def _cfg(**over: Any) -> Any:
    base = ["data.n_mels=8", "data.hop_length=16", "data.sample_rate=1600", "train.device=cpu", "data.max_duration=5"]
    return load_config(None, base + [f"{k}={v}" for k, v in over.items()])


def test_optimizer_state_bytes_by_optimizer() -> None:
    lin = nn.Linear(10, 20)  # weight 200 (2-D) + bias 20
    params = list(lin.parameters())
    assert optimizer_state_bytes(params, "adamw") == 2 * 4 * 220
    assert optimizer_state_bytes(params, "sgd") == 4 * 220
    assert optimizer_state_bytes(params, "muon") == 4 * 200 + 2 * 4 * 20


def test_saved_tensor_meter_counts_live_saved_bytes_once() -> None:
    w = nn.Parameter(torch.randn(64, 64))
    x = torch.randn(32, 64, requires_grad=True)
    meter = SavedTensorMeter(exclude={w.untyped_storage().data_ptr()})
    with meter.hooks():
        y = (x @ w).relu()  # saves x (mm) and the relu output
        loss = (y * y).sum()  # saves y (twice, one storage)
    assert meter.peak >= x.numel() * 4 + y.numel() * 4
    assert meter.peak < 4 * x.numel() * 4 + 4 * y.numel() * 4  # the parameter is not counted
    loss.backward()
    del loss, y
    assert meter.live <= x.numel() * 4  # the graph is freed after backward


def test_activation_measurement_grows_with_length() -> None:
    cfg = _cfg()
    task = TinyConvTask()
    items_short = synthetic_items(2, 32, cfg.data, Needs(), 0.1)
    items_long = synthetic_items(2, 128, cfg.data, Needs(), 0.1)
    short = measure_activation_bytes(task, collate(items_short, 1, 16, 1600), torch.device("cpu"))
    long = measure_activation_bytes(task, collate(items_long, 1, 16, 1600), torch.device("cpu"))
    assert 0 < short < long
    assert all(p.grad is None for p in task.net.parameters())  # no gradients left behind


def test_fit_linear_and_quadratic() -> None:
    lin = fit_activations([(2, 10, 2 * (100 + 10 * 10)), (2, 20, 2 * (100 + 10 * 20))], quadratic=False)
    assert lin["model"] == "linear"
    assert lin["per_item"] == pytest.approx(100) and lin["per_frame"] == pytest.approx(10)
    assert activation_bytes(lin, 4, 50) == 4 * (100 + 500)
    quad = fit_activations([(1, 10, 3 * 10 + 0.5 * 100), (1, 20, 3 * 20 + 0.5 * 400)], quadratic=True)
    assert quad["model"] == "quadratic"
    assert quad["per_frame"] == pytest.approx(3) and quad["per_frame2"] == pytest.approx(0.5)


def test_estimate_figures_are_positive_and_scale_with_budget() -> None:
    task = TinyConvTask()
    est = EstimateRecipe(_cfg(**{"data.max_frames": 2000})).run(task=task, longest_frames=200)
    n = sum(p.numel() for p in task.net.parameters())
    assert est["parameters"] == n
    assert est["weights_bytes"] == 4 * n and est["gradients_bytes"] == 4 * n
    assert est["optimizer_bytes"] == 8 * n  # AdamW: two fp32 moments
    assert est["static_bytes"] == 16 * n
    fit = est["activations"]
    assert fit["model"] == "linear"
    assert fit["measured"][0]["bytes"] < fit["measured"][1]["bytes"]
    assert est["budget_batch_size"] == 10 and est["longest_frames"] == 200
    assert 0 < est["activations_longest_bytes"] < est["activations_budget_bytes"]
    assert est["total_budget_bytes"] == est["static_bytes"] + est["activations_budget_bytes"]
    assert est["device_memory_bytes"] > 0 and est["fits"] is True
    bigger = EstimateRecipe(_cfg(**{"data.max_frames": 8000})).run(task=task, longest_frames=200)
    assert bigger["activations_budget_bytes"] > est["activations_budget_bytes"]
    sgd = EstimateRecipe(_cfg(**{"optim.name": "sgd"})).run(task=task, longest_frames=200)
    assert sgd["optimizer_bytes"] == 4 * n
    text = format_estimate(est)
    assert "activations" in text and "GiB" in text


def test_estimate_fits_attention_quadratically() -> None:
    est = EstimateRecipe(_cfg()).run(task=TinyAttentionTask(), longest_frames=300, lengths=(32, 96))
    fit = est["activations"]
    assert fit["model"] == "quadratic" and fit["per_frame2"] > 0
    # the attention weights (B x heads x T x T) are kept for backward: the square term shows
    assert activation_bytes(fit, 1, 300) > 300 / 96 * fit["measured"][1]["bytes"] / 2


def test_estimate_of_a_two_stage_task_counts_each_stage_optimizer() -> None:
    class TwoStage(TinyConvTask):
        def __init__(self) -> None:
            super().__init__()
            self.disc = nn.Conv1d(8, 1, 3, padding=1)

        def modules(self) -> dict[str, nn.Module]:
            return {"net": self.net, "disc": self.disc}

        def optimizer_specs(self) -> list[OptimizerSpec]:
            return [OptimizerSpec("disc", ["disc"]), OptimizerSpec("gen", ["net"])]

        def training_step(self, batch: Any, stage: str, cache: dict[str, Any]) -> dict[str, torch.Tensor]:
            if "fake" not in cache:
                cache["fake"] = self.net(batch["mel"])
            if stage == "disc":
                return {"loss": self.disc(cache["fake"].detach()).mean() - self.disc(batch["mel"]).mean()}
            return {"loss": -self.disc(cache["fake"]).mean()}

    task = TwoStage()
    est = EstimateRecipe(_cfg()).run(task=task, longest_frames=100)
    n = sum(p.numel() for m in task.modules().values() for p in m.parameters())
    assert est["optimizer_bytes"] == 8 * n
    assert est["activations"]["measured"][0]["bytes"] > 0


def test_estimate_builds_the_configured_task_with_its_accelerations(capsys: pytest.CaptureFixture[str]) -> None:
    from speechtrain.cli.main import main

    base = ["model.name=toy", "model.channels=8", "model.blocks=2", "data.max_frames=1000"]
    est = EstimateRecipe(load_config(None, [*base, "train.device=cpu", "data.n_mels=8"])).run(longest_frames=100)
    ckpt = EstimateRecipe(
        load_config(None, [*base, "train.device=cpu", "data.n_mels=8", "accel.activation_checkpointing=true"])
    ).run(
        longest_frames=100,
    )
    assert est["parameters"] > 0 and est["activations"]["accelerations"] is not None
    assert "activation_checkpointing" in ckpt["activations"]["accelerations"]
    # recomputing the blocks in backward keeps fewer tensors alive
    assert ckpt["activations"]["measured"][1]["bytes"] < est["activations"]["measured"][1]["bytes"]
    assert main(["estimate", *base, "train.device=cpu", "data.n_mels=8"]) == 0
    out = capsys.readouterr().out
    assert "optimizer" in out and "frame budget" in out


def test_estimate_of_a_text_model_on_a_prepared_corpus_uses_its_learned_symbols(demo_data: list[str]) -> None:
    """The estimate sets the task up on synthetic data: its tokens must come from the run's symbols (the
    corpus's learned set), else the text families refuse the set-up (what `tune` and `bench --tune` met for
    gpt_tts_tiny on the demo corpus once symbols were learned from the data)."""
    from speechtrain.recipes.common import find_recipe
    from speechtrain.recipes.data import DataRecipe

    cfg = load_config(find_recipe("gpt_tts_tiny"), [*demo_data, "train.device=cpu"])
    DataRecipe(cfg).ensure_prepared()
    est = EstimateRecipe(cfg).run()
    assert est["parameters"] > 0
    assert cfg.data.symbols is not None and len(cfg.data.symbols) < 72  # learned, not the ASCII set


@pytest.mark.parametrize(
    "recipe",
    [
        "gpt_tts_tiny",
        "vits_tiny",
        "vocoder_hifigan_tiny",
        "vocoder_nsf_hifigan_tiny",
        "classifier_cnn_lstm_tiny",
        "xtts_finetune_tiny",
    ],
)
def test_estimate_from_the_cli_for_every_tiny_recipe(
    recipe: str, demo_corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`speechtrain estimate` is a door every family goes through: VITS failed on the synthetic set's two
    speakers ("pass a task that is already set up"), NSF-HiFiGAN on a batch without f0."""
    from speechtrain.cli.main import main

    manifest = demo_corpus / "classes" if recipe.startswith("classifier") else demo_corpus
    root = Path(__file__).resolve().parents[1]
    code = main(
        [
            "estimate",
            "--config",
            str(root / "recipes" / f"{recipe}.yaml"),
            f"data.manifest={manifest}",
            f"data.cache_dir={tmp_path / 'cache'}",
            "train.device=cpu",
        ]
    )
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "frame budget" in out.out and "error" not in out.err
