"""jaywalnut310/vits G_/D_ files: state dicts in the reference layout (key names and shapes recorded from the
reference's SynthesizerTrn and MultiPeriodDiscriminator for configs/ljs_base.json and vctk_base.json, in
tests/data/vits_jaywalnut310_layout.json; random weights here) import with every tensor accounted for and load
into recipes/vits.yaml; the text embedding of another symbol table keeps our initialisation, reported."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from speechtrain.config import load_config
from speechtrain.errors import CheckpointError
from speechtrain.models.importing import check_state_dict, import_for_init
from speechtrain.models.vits.importers import import_coqui, import_jaywalnut310
from speechtrain.recipes import build_task

pytestmark = pytest.mark.usefixtures("one_torch_thread")

ROOT = Path(__file__).resolve().parents[1]
LAYOUT = json.loads((ROOT / "tests" / "data" / "vits_jaywalnut310_layout.json").read_text())


def _random(shapes: dict[str, list[int]], device: str = "cpu") -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    if device == "meta":
        return {k: torch.empty(s, device="meta") for k, s in shapes.items()}
    return {k: 0.02 * torch.randn(s, generator=g) for k, s in shapes.items()}


@pytest.mark.slow
def test_ljs_checkpoint_loads_into_the_vits_recipe(tmp_path: Path) -> None:
    """Full size (83M values written to G_/D_ files, read back through train.init_from's reader)."""
    ref = LAYOUT["ljs"]
    gen, disc = _random(ref["generator"]), _random(ref["discriminator"])
    torch.save({"model": gen, "iteration": 100, "learning_rate": 2e-4}, tmp_path / "G_100.pth")
    torch.save({"model": disc, "iteration": 100}, tmp_path / "D_100.pth")
    imported = import_for_init([str(tmp_path / "G_100.pth"), str(tmp_path / "D_100.pth")])
    report = imported.report
    # every reference tensor is mapped (the two plain decoder convs become g and v: one more each)
    assert len(report.mapped) == len(gen) + len(disc) + 2
    assert {k for k, _ in report.skipped} == {"iteration", "learning_rate", "D.iteration"}
    task = build_task(load_config(ROOT / "recipes" / "vits.yaml"))
    assert sorted(imported.load_into(task)) == ["discriminator", "generator"]
    filled = dict(report.filled)
    assert set(filled) == {"generator.enc_p.emb.weight"}  # conv_post has no bias on either side: nothing made up
    assert "[178, 192] vs ours [76, 192]" in filled["generator.enc_p.emb.weight"]
    g = task.generator
    # renamed lists, plain -> weight norm with the same weight, weight norm by the legacy names
    assert torch.equal(g.enc_p.encoder.attn[0].conv_q.weight, gen["enc_p.encoder.attn_layers.0.conv_q.weight"])
    assert torch.allclose(g.dec.conv_pre.weight, gen["dec.conv_pre.weight"], atol=1e-6)
    assert torch.allclose(g.dec.conv_post.weight, gen["dec.conv_post.weight"], atol=1e-6)
    assert g.dec.conv_post.bias is None
    assert torch.equal(g.dec.ups[0].parametrizations.weight.original0, gen["dec.ups.0.weight_g"])
    d0 = task.modules()["discriminator"].state_dict()
    assert torch.equal(
        d0["discriminators.1.convs.0.parametrizations.weight.original1"], disc["discriminators.1.convs.0.weight_v"]
    )


def test_vctk_layout_maps_key_for_key_onto_a_multi_speaker_model() -> None:
    ref = LAYOUT["vctk"]
    imported = import_jaywalnut310(
        {"model": _random(ref["generator"], "meta")}, {"model": _random(ref["discriminator"], "meta")}
    )
    with torch.device("meta"):
        task = build_task(load_config(ROOT / "recipes" / "vits.yaml", ["model.n_speakers=109"]))
    sd = dict(imported.state_dicts["generator"])
    sd["enc_p.emb.weight"] = task.generator.state_dict()["enc_p.emb.weight"]  # the symbol table differs, as above
    check_state_dict(task.generator, sd, "vctk generator")
    check_state_dict(task.modules()["discriminator"], imported.state_dicts["discriminator"], "vctk discriminator")
    assert any(m.source.endswith("enc.cond_layer.weight_v") for m in imported.report.mapped)


def test_errors_say_what_was_found() -> None:
    with pytest.raises(CheckpointError, match="expected {'model'"):
        import_jaywalnut310({"generator": {}})
    with pytest.raises(CheckpointError, match="not a VITS generator"):
        import_jaywalnut310({"model": {"conv.weight": torch.zeros(1)}})
    disc = _random(LAYOUT["ljs"]["discriminator"], "meta")
    with pytest.raises(CheckpointError, match="give the G_N.pth first"):
        import_jaywalnut310({"model": {"enc_p.x": torch.zeros(1), "dec.y": torch.zeros(1), **disc}})
    with torch.device("meta"):
        ljs = build_task(load_config(ROOT / "recipes" / "vits.yaml", ["model.n_speakers=4"]))
    imported = import_jaywalnut310({"model": _random(LAYOUT["ljs"]["generator"], "meta")})
    with pytest.raises(CheckpointError, match="missing"):
        imported.load_into(ljs, strict=False)  # a multi-speaker model has conditioning layers the file lacks


COQUI = json.loads((ROOT / "tests" / "data" / "vits_coqui_layout.json").read_text())


@pytest.mark.parametrize(("layout", "speakers"), [("single", 0), ("multi", 109)])
def test_coqui_layout_maps_key_for_key(layout: str, speakers: int) -> None:
    """Coqui TTS's Vits (text_encoder, posterior_encoder, flow without Flip modules, duration_predictor with
    log_scale/translation, waveform_decoder, disc.nets): every tensor lands on ours, shapes equal but the
    symbol table."""
    sd = _random(COQUI[layout], "meta")
    imported = import_coqui({"model": sd, "config": {"model": "vits"}})
    report = imported.report
    assert len(report.mapped) == len(sd) + 2  # the two plain decoder convs become g and v
    assert [k for k, _ in report.skipped] == ["config"]
    with torch.device("meta"):
        task = build_task(load_config(ROOT / "recipes" / "vits.yaml", [f"model.n_speakers={speakers}"]))
    gen = dict(imported.state_dicts["generator"])
    assert list(gen["enc_p.emb.weight"].shape) == [178, 192]
    gen["enc_p.emb.weight"] = task.generator.state_dict()["enc_p.emb.weight"]  # another symbol table
    check_state_dict(task.generator, gen, f"coqui {layout} generator")
    check_state_dict(task.modules()["discriminator"], imported.state_dicts["discriminator"], "coqui discriminator")
    targets = {m.source: m.target for m in report.mapped}
    assert targets["flow.flows.3.pre.weight"] == "generator.flow.flows.6.pre.weight"
    assert targets["duration_predictor.flows.0.log_scale"] == "generator.dp.flows.0.logs"
    assert targets["duration_predictor.post_flows.4.proj.bias"] == "generator.dp.post_flows.7.proj.bias"
    assert targets["text_encoder.encoder.ffn_layers.5.conv_2.bias"] == "generator.enc_p.encoder.ffn.5.conv_2.bias"
    assert targets["disc.nets.0.conv_post.bias"] == "discriminator.discriminators.0.conv_post.bias"


def test_init_from_reads_a_coqui_file(tmp_path: Path) -> None:
    model = {"text_encoder.emb.weight": torch.zeros(3, 2), "waveform_decoder.conv_pre.weight": torch.ones(4, 2, 7)}
    torch.save({"model": model, "config": {"run_name": "x"}, "step": 5}, tmp_path / "model.pth")
    imported = import_for_init([str(tmp_path / "model.pth")])
    assert imported.report.layout == "coqui-ai/TTS VITS" and imported.report.source == str(tmp_path / "model.pth")
    assert set(imported.state_dicts["generator"]) == {
        "enc_p.emb.weight",
        "dec.conv_pre.parametrizations.weight.original0",
        "dec.conv_pre.parametrizations.weight.original1",
    }
    with pytest.raises(CheckpointError, match="holds its discriminator"):
        import_for_init([str(tmp_path / "model.pth"), str(tmp_path / "model.pth")])
