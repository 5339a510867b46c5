"""SingingVocoders' fast task in speechtrain: FastMPD and FastMRD against their layout (and their own classes when a
copy of their repository is at hand, ``SPEECHTRAIN_SINGINGVOCODERS``), their disc-loss weighting, the import of a
fast-task Lightning checkpoint (every tensor accounted for, or a refusal naming the config), freezing a
discriminator for a short fine-tune, and the config keys of their exported ``config.json``."""

from __future__ import annotations

import logging
import math

import pytest
import torch

from speechtrain.config import ConfigError, load_config
from speechtrain.errors import CheckpointError
from speechtrain.models.common import count_parameters
from speechtrain.models.hifigan.losses import discriminator_loss
from speechtrain.models.nsf_hifigan.importers import config_overrides, import_singingvocoders, read_exported_config
from speechtrain.recipes import build_task
from tests.singingvocoders_ref import (
    fast_mpd_layout,
    fast_mrd_layout,
    jitter,
    ref_fast_pd,
    ref_fast_specd,
    sub,
    their_module,
)
from tests.test_models_nsf_hifigan import HOP, RECIPES, _crop_batch, _reference, _train_once

pytestmark = pytest.mark.usefixtures("one_torch_thread")

PERIODS = [2, 3]
MRD = [(128, 16, 128), (256, 32, 256)]
FAST = [
    "model.upsample_initial_channel=16",
    "model.resblock_kernel_sizes=[3,5]",
    "model.resblock_dilation_sizes=[[1,3,5],[1,3,5]]",
    "data.crop_frames=8",
    "model.period_discriminator=fast",
    f"model.periods={PERIODS}",
    "model.fast_mpd_strides=[2,2,2]",
    "model.fast_mpd_kernel_size=5",
    "model.fast_mpd_init_channel=4",
    "model.scale_discriminator=fast_mrd",
    "model.fast_mrd_init_channel=4",
    f"model.fast_mrd_fft_sizes={[r[0] for r in MRD]}",
    f"model.fast_mrd_hop_sizes={[r[1] for r in MRD]}",
    f"model.fast_mrd_win_lengths={[r[2] for r in MRD]}",
]


def _fast_task(*extra: str):  # noqa: ANN202
    torch.manual_seed(0)
    return build_task(load_config(RECIPES / "vocoder_nsf_hifigan_tiny.yaml", [*FAST, *extra]))


def _fast_checkpoint() -> dict:
    """A fast-task Lightning checkpoint in their layout: generator + discriminator.{mpd, mrd} (random weights)."""
    torch.manual_seed(2)
    mpd = jitter(fast_mpd_layout(PERIODS, 4, (2, 2, 2), 5), seed=1)
    mrd = jitter(fast_mrd_layout(MRD, 4, (4, 2, 2)), seed=2)
    state = {f"generator.{k}": v for k, v in _reference(False).state_dict().items()}
    state |= {f"discriminator.mpd.{k}": v for k, v in mpd.state_dict().items()}
    state |= {f"discriminator.mrd.{k}": v for k, v in mrd.state_dict().items()}
    trainer = {"epoch": 3, "global_step": 2000, "pytorch-lightning_version": "2.1.0", "optimizer_states": [{}, {}]}
    return {"state_dict": state, **trainer, "lr_schedulers": [], "loops": {}, "callbacks": {}}


# --- config ---------------------------------------------------------------------------------------------------
def test_fast_discriminators_are_config_keys_with_their_sizes() -> None:
    cfg = load_config(RECIPES / "vocoder_nsf_hifigan.yaml", ["model.periods=[2,3,5,7,11,17,23]"])
    m = cfg.model.model_copy(update={"period_discriminator": "fast", "scale_discriminator": "fast_mrd"})
    assert list(m.fast_mpd_strides) == [4, 4, 4] and m.fast_mpd_kernel_size == 11 and m.fast_mpd_init_channel == 8
    from speechtrain.models.hifigan.task import build_discriminators

    with torch.device("meta"):
        discs = build_discriminators(m)
    assert list(discs) == ["fast_mpd", "fast_mrd"]
    assert round(count_parameters(discs["fast_mpd"]) / 1e6, 2) == 9.95  # their ~9.9M for 7 periods
    assert round(count_parameters(discs["fast_mrd"]) / 1e6, 2) == 1.23  # their ~1.2M
    with pytest.raises(ConfigError, match="odd"):
        load_config(RECIPES / "vocoder_nsf_hifigan.yaml", ["model.fast_mpd_kernel_size=10"])
    with pytest.raises(ConfigError, match="same length"):
        load_config(RECIPES / "vocoder_nsf_hifigan.yaml", ["model.fast_mrd_hop_sizes=[64]"])
    with pytest.raises(ConfigError, match="fast_mpd_strides"):
        load_config(RECIPES / "vocoder_nsf_hifigan.yaml", ["model.fast_mpd_stride=[4,4,4]"])  # the closest key named


def test_exported_config_keeps_fast_keys_and_says_what_it_cannot_carry(caplog: pytest.LogCaptureFixture) -> None:
    """Their export_ckpt.py writes model_args (fast_mpd_* included) + features + pc_aug into config.json."""
    config_json = {
        "sampling_rate": 44100,
        "num_mels": 128,
        "hop_size": 512,
        "mini_nsf": True,
        "noise_sigma": 0.01,
        "discriminator_periods": [2, 3, 5, 7, 11, 17, 23],
        "fast_mpd_strides": [4, 4, 4],
        "fast_mpd_kernel_size": 11,
        "pc_aug": True,
        "resblock": "1",
    }
    with caplog.at_level(logging.WARNING, logger="speechtrain"):
        over = config_overrides(config_json)
    assert "model.fast_mpd_strides=[4,4,4]" in over and "model.fast_mpd_kernel_size=11" in over
    assert 'model.period_discriminator="fast"' in over and 'model.scale_discriminator="fast_mrd"' in over
    assert "model.noise_sigma=0.01" in over and 'model.resblock="1"' in over
    assert any("pc_aug" in r.getMessage() for r in caplog.records)  # not dropped in silence
    read = read_exported_config(config_json)
    assert read.overrides == over
    assert [k for k, _ in read.not_carried] == ["pc_aug"]
    cfg = load_config(RECIPES / "vocoder_nsf_hifigan.yaml", over)
    assert cfg.model.period_discriminator == "fast" and list(cfg.model.fast_mpd_strides) == [4, 4, 4]
    plain = read_exported_config({"mini_nsf": False, "pc_aug": False, "batch_size": 16})
    assert plain.not_carried == [("batch_size", "not a model or feature setting (training of theirs)")]


# --- parity -----------------------------------------------------------------------------------------------------
def test_fast_discriminators_give_their_layout_outputs_for_the_same_weights() -> None:
    """Their FastMPD / FastMRD tensors imported into ours: same logits and feature maps as their forward."""
    ckpt = _fast_checkpoint()
    imported = import_singingvocoders(ckpt)
    task = _fast_task()
    imported.load_into(task)
    torch.manual_seed(5)
    y = 0.3 * torch.randn(2, 1, 8 * HOP)
    state = ckpt["state_dict"]
    # gradients too (ours keeps two tensors per soft-sign GLU for its backward; the reference is plain autograd)
    for i, p in enumerate(PERIODS):
        a, b = y.clone().requires_grad_(), y.clone().requires_grad_()
        (ref_fast_pd(sub(state, f"discriminator.mpd.discriminators.{i}."), a, p, (2, 2, 2), 5)[0] ** 2).sum().backward()
        (task.discriminators["fast_mpd"].discriminators[i](b)[0] ** 2).sum().backward()
        assert a.grad is not None and b.grad is not None and a.grad.abs().max() > 0
        assert (a.grad - b.grad).abs().max() < 1e-5 * a.grad.abs().max()
    with torch.no_grad():
        ours = task.discriminators["fast_mpd"].discriminators
        for i, p in enumerate(PERIODS):
            want, want_maps = ref_fast_pd(sub(state, f"discriminator.mpd.discriminators.{i}."), y, p, (2, 2, 2), 5)
            got, got_maps = ours[i](y)
            assert got.shape == want.shape and (got - want).abs().max() < 1e-5
            assert len(got_maps) == len(want_maps) == 2
            assert all((a - b).abs().max() < 1e-5 for a, b in zip(got_maps, want_maps))
        ours = task.discriminators["fast_mrd"].discriminators
        for i, (n_fft, hop, win) in enumerate(MRD):
            ref_sd = sub(state, f"discriminator.mrd.discriminators.{i}.")
            want, want_maps = ref_fast_specd(ref_sd, y, n_fft, hop, win, (4, 2, 2))
            got, got_maps = ours[i](y)
            assert got.shape == want.shape and (got - want).abs().max() < 1e-5
            assert all((a - b).abs().max() < 1e-5 for a, b in zip(got_maps, want_maps))


def test_fast_disc_loss_is_half_the_lsgan_sum_as_their_fast_task() -> None:
    """Their D2loss: real and fake in one batch with targets 1 and 0, mean squared error per item, mean over
    items, summed over sub-discriminators: 0.5 x HiFi-GAN's loss. Ours weighs the fast discriminators so."""
    task = _fast_task()
    assert task.disc_weights == {"fast_mpd": 0.5, "fast_mrd": 0.5}
    batch = _crop_batch(task)
    torch.manual_seed(3)
    y_hat = 0.2 * torch.randn_like(batch["audio"])
    with torch.no_grad():
        ours = task._disc_step(batch, y_hat)["loss"]
        theirs = torch.zeros(())
        for disc in task.discriminators.values():
            for d in disc.discriminators:
                out = torch.cat([d(y_hat)[0], d(batch["audio"])[0]])  # fake then real, as their D2forward
                target = torch.cat([torch.zeros(2), torch.ones(2)])
                theirs = theirs + ((out - target[:, None]) ** 2).mean(dim=1).mean()
        lsgan = sum(discriminator_loss(*disc(batch["audio"], y_hat)[:2]) for disc in task.discriminators.values())
    assert torch.allclose(ours, theirs, rtol=1e-5) and torch.allclose(ours, 0.5 * lsgan, rtol=1e-5)
    assert _fast_task("model.disc_loss_weight=1.0").disc_weights == {"fast_mpd": 1.0, "fast_mrd": 1.0}


@pytest.mark.skipif(their_module("modules/fast_D/discriminator.py") is None, reason="no SingingVocoders copy")
def test_against_their_own_classes_at_their_published_sizes() -> None:
    """SPEECHTRAIN_SINGINGVOCODERS set: their FastMPD (7 periods, strides 4,4,4, kernel 11), FastMRD (the fast
    task's resolutions) and mini-NSF Generator (1024 channels), random weights, saved as a fast-task checkpoint:
    it imports with every tensor accounted for, and ours give their outputs. Max differences are printed."""
    fd = their_module("modules/fast_D/discriminator.py")
    gm = their_module("models/nsf_HiFigan/models.py")
    assert fd is not None and gm is not None
    torch.manual_seed(0)
    h = gm.AttrDict(
        sampling_rate=44100, num_mels=128, hop_size=512, mini_nsf=True, noise_sigma=0.0, resblock="1",
        upsample_rates=[8, 8, 2, 2, 2], upsample_kernel_sizes=[16, 16, 4, 4, 4], upsample_initial_channel=1024,
        resblock_kernel_sizes=[3, 7, 11], resblock_dilation_sizes=[[1, 3, 5]] * 3,
    )  # fmt: skip
    periods = [2, 3, 5, 7, 11, 17, 23]
    gen = jitter(gm.Generator(h), 0.01, seed=3).eval()
    disc = torch.nn.ModuleDict({"mrd": fd.FastMRD(8, [4, 2, 2], [512, 1024, 2048], [64, 128, 256], [512, 1024, 2048])})
    disc["mpd"] = fd.FastMPD(periods, 8, [4, 4, 4], 11)
    jitter(disc, 0.02, seed=4)
    state = {f"generator.{k}": v for k, v in gen.state_dict().items()}
    state |= {f"discriminator.{k}": v for k, v in disc.state_dict().items()}
    imported = import_singingvocoders({"state_dict": state, "global_step": 10})
    r = imported.report
    assert len(r.mapped) + len(r.skipped) == len(state) + 1 and not r.filled
    assert {why for _, why in r.skipped} <= {"trainer state: fine-tuning starts a fresh optimizer"} | {
        "an STFT window / frequency-bin position buffer: recomputed from the config"
    }
    cfg = load_config(
        RECIPES / "vocoder_nsf_hifigan.yaml",
        ["model.noise_sigma=0.0", "model.period_discriminator=fast", "model.scale_discriminator=fast_mrd"],
    )
    assert list(cfg.model.periods) == periods and cfg.model.upsample_initial_channel == 1024 and cfg.model.mini_nsf
    task = build_task(cfg)
    imported.load_into(task)
    torch.manual_seed(1)
    y = 0.3 * torch.randn(2, 1, 48 * 512)
    diffs = {}
    with torch.no_grad():
        for ours, theirs, name in ((task.discriminators["fast_mpd"], disc["mpd"], "FastMPD"),
                                   (task.discriminators["fast_mrd"], disc["mrd"], "FastMRD")):  # fmt: skip
            want, want_maps = theirs(y)
            assert all(w.std() > 1e-3 for w in want)
            got_real, _, got_maps, _ = ours(y, y)
            diffs[name] = max((a.reshape(a.shape[0], -1) - b).abs().max().item() for a, b in zip(want, got_real))
            fm = [
                (a - b.reshape(a.shape)).abs().max().item() for w, g in zip(want_maps, got_maps) for a, b in zip(w, g)
            ]
            diffs[name + " feature maps"] = max(fm)
        mel, f0 = torch.randn(1, 128, 20), torch.linspace(150, 450, 20)[None]
        diffs["Generator (mini_nsf, 1024 ch)"] = (gen(mel, f0) - task.generator.eval()(mel, f0)).abs().max().item()
    x = y.clone().requires_grad_()
    (sum(o.pow(2).sum() for o in disc["mpd"](x)[0]) + sum(o.pow(2).sum() for o in disc["mrd"](x)[0])).backward()
    x2 = y.clone().requires_grad_()
    ours_out = [task.discriminators[n](x2.detach(), x2)[1] for n in ("fast_mpd", "fast_mrd")]  # the fake half
    sum(o.pow(2).sum() for outs in ours_out for o in outs).backward()
    assert x.grad is not None and x2.grad is not None
    diffs["input gradient (relative)"] = ((x.grad - x2.grad).abs().max() / x.grad.abs().max()).item()
    print("max |ours - theirs|:", diffs)
    assert all(v < 1e-4 for v in diffs.values()), diffs


# --- import ------------------------------------------------------------------------------------------------------
def test_fast_task_checkpoint_imports_every_tensor_and_training_continues() -> None:
    ckpt = _fast_checkpoint()
    imported = import_singingvocoders(ckpt)
    r = imported.report
    state = ckpt["state_dict"]
    buffers = {k for k in state if k.endswith((".window", ".freq_coords"))}
    assert len(buffers) == 2 * len(MRD)
    assert {m.source for m in r.mapped} == set(state) - buffers  # every weight mapped ...
    skipped = dict(r.skipped)
    assert set(skipped) == buffers | (set(ckpt) - {"state_dict"})  # ... every other entry skipped, with why
    assert all("recomputed" in skipped[k] for k in buffers)
    assert sorted(imported.state_dicts) == ["fast_mpd", "fast_mrd", "generator"]
    prefix = {"generator.": "generator.", "discriminator.mpd.": "fast_mpd.", "discriminator.mrd.": "fast_mrd."}
    for m in r.mapped:  # each tensor goes to the module of its kind, never to a look-alike
        src = next(p for p in prefix if m.source.startswith(p))
        assert m.target.startswith(prefix[src]), m
    assert any(m.source.endswith("residual_layers.1.net.5.weight") and m.target.endswith("blocks.1.fc2.weight")
               for m in r.mapped)  # fmt: skip

    task = _fast_task()
    assert imported.load_into(task) == ["generator", "fast_mpd", "fast_mrd"]
    w = task.discriminators["fast_mpd"].discriminators[1].blocks[2].proj.weight
    assert torch.equal(w, state["discriminator.mpd.discriminators.1.residual_layers.2.net.7.weight"])
    before = {n: next(m.parameters()).detach().clone() for n, m in task.modules().items()}
    losses = _train_once(task, _crop_batch(task))
    assert all(math.isfinite(v) for v in losses.values()), losses
    assert all(not torch.equal(before[n], next(m.parameters())) for n, m in task.modules().items())


def test_fast_checkpoint_into_other_discriminators_is_refused_with_the_config_to_use() -> None:
    """Before: FastMPD's pre/residual_layers were 'mapped' onto our MPD names, then the load failed with a hint
    (model.scale_discriminator) that led to a second failure."""
    imported = import_singingvocoders(_fast_checkpoint())
    classic = build_task(load_config(RECIPES / "vocoder_nsf_hifigan_tiny.yaml", FAST[:4]))
    with pytest.raises(CheckpointError) as err:
        imported.load_into(classic, strict=False)
    msg = str(err.value)
    assert (
        "fast_mpd" in msg and "model.period_discriminator=fast" in msg and "model.scale_discriminator=fast_mrd" in msg
    )
    assert "model.fast_mpd_strides=[2,2,2]" in msg and "model.fast_mpd_kernel_size=5" in msg
    assert "model.fast_mrd_fft_sizes=[128,256]" in msg and "2 periods" in msg
    # the right kind of discriminator but other strides: the shapes differ, and the hint gives the checkpoint's
    with pytest.raises(CheckpointError, match=r"fast_mpd_strides=\[2,2,2\]"):
        imported.load_into(_fast_task("model.fast_mpd_strides=[4,2,2]"))


def test_tensors_of_no_known_layout_are_refused_by_name() -> None:
    ckpt = _fast_checkpoint()
    ckpt["state_dict"]["discriminator.mpd.discriminators.0.extra.weight"] = torch.zeros(2)
    with pytest.raises(CheckpointError, match=r"discriminator\.mpd\.discriminators\.0\.extra\.weight"):
        import_singingvocoders(ckpt)
    ckpt = _fast_checkpoint()
    ckpt["state_dict"] = {
        k.replace("discriminator.mrd.", "discriminator.xyz."): v for k, v in ckpt["state_dict"].items()
    }
    with pytest.raises(CheckpointError, match="'xyz'"):
        import_singingvocoders(ckpt)


# --- freezing -----------------------------------------------------------------------------------------------------
def test_a_frozen_discriminator_judges_but_never_learns() -> None:
    """model.freeze_discriminators=[fast_mpd]: SingingVocoders' advice for a short fine-tune on little data."""
    imported = import_singingvocoders(_fast_checkpoint())
    task = _fast_task("model.freeze_discriminators=[fast_mpd]")
    imported.load_into(task)
    specs = {s.name: s.modules for s in task.optimizer_specs()}
    assert specs == {"disc": ["fast_mrd"], "gen": ["generator"]}
    assert not any(p.requires_grad for p in task.discriminators["fast_mpd"].parameters())
    mpd0 = {k: v.clone() for k, v in task.discriminators["fast_mpd"].state_dict().items()}
    mrd0 = [p.detach().clone() for p in task.discriminators["fast_mrd"].parameters()]
    batch = _crop_batch(task)
    # the generator is still judged by the frozen discriminator (its adversarial loss counts both)
    from speechtrain.models.hifigan.losses import generator_adversarial_loss

    with torch.no_grad():
        y_hat = task._generate(batch)
        gen = task._gen_step(batch, y_hat)
        both = sum(generator_adversarial_loss(d(batch["audio"], y_hat)[1]) for d in task.discriminators.values())
    assert torch.allclose(gen["adv"], both)
    _train_once(task, batch)
    _train_once(task, batch)
    assert all(torch.equal(v, task.discriminators["fast_mpd"].state_dict()[k]) for k, v in mpd0.items())
    assert any(not torch.equal(a, b) for a, b in zip(mrd0, task.discriminators["fast_mrd"].parameters()))
    assert all(p.requires_grad for p in task.discriminators["fast_mrd"].parameters())  # unfrozen after each stage
    assert math.isfinite(float(gen["loss"]))
    with pytest.raises(ConfigError, match="every discriminator"):
        _fast_task("model.freeze_discriminators=[fast_mpd,fast_mrd]")
    with pytest.raises(ConfigError, match=r"\['mpd'\] are not discriminators"):
        _fast_task("model.freeze_discriminators=[mpd]")


@pytest.mark.slow
def test_init_from_a_fast_task_checkpoint_trains_on_with_muon_and_a_frozen_mpd(tmp_path) -> None:  # noqa: ANN001
    """train.init_from=<their fast-task checkpoint> through the Trainer: their Muon_AdamW rule, FastMPD frozen
    (their README's short fine-tune), every tensor in init_report.txt; the frozen weights stay as loaded."""
    from speechtrain.data.demo_singing import make_singing_corpus
    from speechtrain.recipes.inference import load_task
    from speechtrain.recipes.train import train_from_config

    ckpt = _fast_checkpoint()
    torch.save(ckpt, tmp_path / "last.ckpt")
    corpus = make_singing_corpus(tmp_path / "corpus", utterances=6, seed=1)
    over = [
        *FAST,
        f"data.manifest={corpus}",
        f"data.cache_dir={tmp_path / 'cache'}",
        "data.eval_utterances=2",
        "data.volume_aug_prob=0.5",
        "optim.name=muon",
        "optim.muon_variant=singingvocoders",
        "optim.lr=3e-4",
        "optim.muon_lr=3e-4",
        "model.freeze_discriminators=[fast_mpd]",
        f"train.init_from={tmp_path / 'last.ckpt'}",
        "train.init_trust_pickle=true",
        "train.max_steps=3",
        "train.eval_every=3",
        "train.save_every=3",
        "train.eval_audio_samples=0",
        f"train.output_dir={tmp_path / 'run'}",
    ]
    run_dir, summary = train_from_config(load_config(RECIPES / "vocoder_nsf_hifigan_tiny.yaml", over))
    assert summary["steps"] == 3
    report = (run_dir / "init_report.txt").read_text().splitlines()
    mapped = [line for line in report if " -> " in line]
    assert len(mapped) == len(ckpt["state_dict"]) - 2 * len(MRD)  # every weight; the 2 buffers per FastMRD skipped
    assert not any("made up" in line for line in report[1:])
    _, task = load_task(run_dir, device="cpu", which="last")
    state = ckpt["state_dict"]
    frozen = task.discriminators["fast_mpd"].discriminators[0].blocks[1].fc1.weight
    assert torch.equal(frozen, state["discriminator.mpd.discriminators.0.residual_layers.1.net.3.weight"])
    learned = task.discriminators["fast_mrd"].discriminators[0].blocks[0].proj.weight
    assert not torch.equal(learned, state["discriminator.mrd.discriminators.0.layers.0.net.4.weight"])
