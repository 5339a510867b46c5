"""The table of accelerations: each module declares itself, and the config, the probe, the apply path,
the ablation ladder and the docs cards all follow the table (issue 26: no free strings in seven places)."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import pytest
from pydantic import Field

from speechtrain.accel import catalog
from speechtrain.accel.catalog import Acceleration, Card, Rung, accelerations
from speechtrain.accel.record import AccelRecord
from speechtrain.config import AccelConfig, DataConfig, OptimConfig, Switch

ROOT = Path(__file__).resolve().parents[1]


def test_the_configs_accel_switches_are_the_tables_keys() -> None:
    table = {a.field for a in accelerations() if a.section == "accel"}
    options = {o for a in accelerations() for o in a.options}
    assert set(AccelConfig.model_fields) == table | options
    for acc in accelerations():  # the other sections' keys (optim.implementation) exist too
        section = {"accel": AccelConfig, "optim": OptimConfig}[acc.section]
        assert acc.field in section.model_fields, acc.key


def test_every_acceleration_lives_in_its_own_module_and_declares_everything() -> None:
    modules = {type(a).__module__ for a in accelerations()}
    assert modules == {"speechtrain.accel.catalog"}
    owners = [m for m in catalog.module_names() if hasattr(sys.modules.get(f"speechtrain.accel.{m}"), "ACCELERATION")]
    assert len(owners) == len(accelerations())  # one acceleration per module
    for acc in accelerations():
        assert acc.card.title and acc.card.what and acc.card.helps and acc.card.costs, acc.key
        assert set(acc.devices) <= {"cuda", "cpu"} and (acc.devices == ("cuda", "cpu") or acc.device_note)
    orders = [a.order for a in accelerations()]
    assert len(set(orders)) == len(orders)
    assert accelerations()[-1].key == "accel.compile"  # compiled last: it sees what the others did


def test_the_probe_apply_and_ladder_follow_the_table() -> None:
    from speechtrain.accel import apply_accelerations
    from speechtrain.accel.probe import HardwareInfo, decide
    from speechtrain.bench.ablate import RUNGS, all_off, plan_ladder

    ruled = {a.key for a in accelerations() if a.probe is not None}
    for info in (HardwareInfo(device_type="cpu", cpu_cores=2), _gpu()):
        keys = set(decide(info))
        assert {k for k in keys if not k.startswith(("data.", "note."))} == ruled
    plan = apply_accelerations(AccelConfig(), {}, "cpu")
    applied = [a.record for a in accelerations() if a.apply is not None and a.section == "accel"]
    assert [r.name for r in plan.records] == applied
    assert set(plan.resolved) == {a.field for a in accelerations() if a.apply is not None}
    rungs = [r for a in accelerations() if (r := a.rung_for("cpu", {})) is not None]
    assert [r.key for r in rungs] == [k for k in RUNGS if k in {r.key for r in rungs}]
    off = all_off("cuda")
    assert all(off[a.key] == a.off("cuda") for a in accelerations() if a.off is not None)
    assert "accel.deterministic" not in off  # not a speed-up: the rows keep the configured value
    rows = {v.key: v for v in plan_ladder(DataConfig(), "cpu")}
    for acc in accelerations():
        rung = acc.rung_for("cpu", {})
        if rung is None:
            continue
        row = rows[rung.key]
        assert row.records == rung.records and row.overrides == dict(rung.overrides)
        assert (row.skip_reason is not None) == (not acc.runs_on("cpu")), rung.key
    assert "TF32 is an NVIDIA tensor-core format" in (rows["tf32"].skip_reason or "")


def test_docs_cards_are_the_modules_cards() -> None:
    from speechtrain.accel.cards import CARDS_BEGIN, CARDS_END, cards_markdown

    text = (ROOT / "docs" / "accelerations.md").read_text(encoding="utf-8")
    start, end = text.index(CARDS_BEGIN), text.index(CARDS_END) + len(CARDS_END)
    assert text[start:end] == cards_markdown(), "docs/accelerations.md is stale: run python -m speechtrain.accel.cards"
    for acc in accelerations():
        assert f"`{acc.key}`" in text


def _gpu() -> Any:
    from speechtrain.accel.probe import HardwareInfo

    return HardwareInfo(
        device_type="cuda",
        gpu_name="NVIDIA L4",
        gpu_count=1,
        gpu_memory_bytes=22 * 1024**3,
        compute_capability=(8, 9),
        bf16_supported=True,
        cpu_cores=8,
        triton_available=True,
    )


# ------------------------------------------------------------ adding one: a module and its config field
def apply_denoise(model: Any, enabled: bool) -> AccelRecord:
    """A made-up acceleration for the test: it marks the model."""
    model.denoised = enabled
    return AccelRecord("denoise", enabled, True, "marked" if enabled else "off")


NEW = Acceleration(
    key="accel.denoise",
    record="denoise",
    exact=True,
    order=85,
    apply=lambda on, ctx: ctx.per_module("denoise", lambda m: apply_denoise(m, bool(on))),
    probe=lambda info: (info.has_gpu, "only where a GPU is"),
    rung=Rung("denoise", "+ denoise", {"accel.denoise": True}, ("denoise",)),
    devices=("cuda",),
    device_note="a GPU-only trick",
    card=Card("Denoise", what="marks the model.", helps="tests.", costs="nothing."),
)


class ConfigWithDenoise(AccelConfig):
    denoise: Switch = Field("auto", description="The made-up acceleration of the test.")


@pytest.fixture
def new_module(monkeypatch: pytest.MonkeyPatch) -> Any:
    """``speechtrain/accel/denoise.py`` as if it had been added: one module declaring ACCELERATION."""
    module = types.ModuleType("speechtrain.accel.denoise")
    module.ACCELERATION = NEW  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "speechtrain.accel.denoise", module)
    names = catalog.module_names()
    monkeypatch.setattr(catalog, "module_names", lambda: sorted([*names, "denoise"]))
    accelerations.cache_clear()
    yield module
    accelerations.cache_clear()


def test_a_new_module_is_picked_up_by_probe_apply_ladder_and_cards(
    new_module: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from torch import nn

    import speechtrain.config
    from speechtrain.accel import apply_accelerations
    from speechtrain.accel.cards import card_markdown
    from speechtrain.accel.probe import HardwareInfo, decide
    from speechtrain.bench.ablate import all_off, plan_ladder

    assert NEW in accelerations()
    assert decide(_gpu())["accel.denoise"].value is True
    assert decide(HardwareInfo(device_type="cpu", cpu_cores=2))["accel.denoise"].value is False
    model = nn.Linear(2, 2)
    plan = apply_accelerations(ConfigWithDenoise(denoise=True), {"model": model}, "cpu")
    assert model.denoised is True and plan.record("denoise").applied  # type: ignore[union-attr]
    auto = apply_accelerations(ConfigWithDenoise(), {"model": nn.Linear(2, 2)}, "cpu")
    assert auto.resolved["denoise"] == {"config": "auto", "value": False, "why": "auto: only where a GPU is"}
    row = next(v for v in plan_ladder(DataConfig(), "cpu") if v.key == "denoise")
    assert row.overrides == {"accel.denoise": True} and "a GPU-only trick" in (row.skip_reason or "")
    assert all_off("cuda")["accel.denoise"] is False  # the default "off" of a switch
    monkeypatch.setattr(speechtrain.config, "AccelConfig", ConfigWithDenoise)  # its field, added to the config
    assert card_markdown(NEW).startswith("## Denoise — `accel.denoise` (auto | true | false)")
