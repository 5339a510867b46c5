"""The Lightning row: the same Task in a LightningModule, timed over the same window (when lightning is
installed), and a clear "not installed" row when it is not."""

from __future__ import annotations

import pytest

from tests.peers import need
from tests.test_bench_measure import TINY


def test_row_says_how_to_install_lightning_when_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    import speechtrain.bench.ablate as ablate
    from speechtrain.config import DataConfig

    monkeypatch.setattr(ablate, "lightning_available", lambda: False)
    row = next(v for v in ablate.plan_ladder(DataConfig(), "cpu") if v.key == "lightning")
    assert row.skip_reason == "not installed: pip install lightning" and row.kind == "lightning"


@pytest.mark.parametrize("model", ["toy", "toy_gan"])
def test_lightning_row_trains_the_task_and_counts_the_window(model: str) -> None:
    need("lightning")
    from speechtrain.bench.ablate import Variant
    from speechtrain.bench.measure import RunSpec
    from speechtrain.config import load_config
    from speechtrain.recipes.bench import execute, variant_raw

    cfg = load_config(None, [*TINY, f"model.name={model}"] + (["model.heads=2"] if model == "toy" else []))
    variant = Variant("lightning", "Lightning", kind="lightning")
    spec = RunSpec(
        name="Lightning", raw=variant_raw(cfg, variant, "cpu"), kind="lightning", steps=3, warmup=1, fake_data=12
    )
    res = execute(spec)
    assert res.steps == 3 and res.samples == 3 * 4  # plain DataLoader: batch_size items per step
    assert res.audio_seconds > 0 and res.seconds > 0 and 0 <= res.data_wait_seconds <= res.seconds
    assert res.precision == "fp32"
    rec = res.applied["lightning"]
    assert rec["applied"] and "32-true" in rec["detail"]
    assert ("manual" in rec["detail"]) is (model == "toy_gan")  # several optimizer stages: manual optimization
