"""The NSF-HiFiGAN peer: openvpi/SingingVocoders' ``nsf_HiFigan`` Lightning task against speechtrain's NSF-HiFiGAN
task, at one small size on both sides.

Model: the tiny recipe's generator (32 initial channels, upsampling 8x8x2x2, one MRF block (kernel 3, dilations
1, 3, 5), the harmonic-plus-noise source at every stage; ours equals theirs to 6e-7) with their discriminators as
they build them: HiFi-GAN's multi-scale (full width, which their task hard-codes) and the multi-period one with
periods 2 and 3 (``model.disc_width: 1.0`` and ``scale_discriminator: msd`` on our side). Losses: LSGAN, feature
matching x2, L1 log-mel x45 over the full band, no STFT loss. Corpus: speechtrain's synthetic singing corpus (40
phrases, 22050 Hz), features at hop 256, 80 mels, 40-8000 Hz, Praat f0 on both sides (their ``pe:
parselmouth``), 16-frame crops.

Their code is not a package: ``--singingvocoders DIR`` (a clone, or a bare git dir such as a mirror) is read with
``git archive`` into the bench's work folder at bench time; it is never part of this repository.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from common import (
    SEED,
    PeerDefinition,
    PeerOptions,
    QualityPlan,
    git_tree,
    held_out,
    missing_source,
    recipe_raw,
    source_dir,
)

KEY = "nsf"
RECIPE = "recipes/vocoder_nsf_hifigan_tiny.yaml"
UTTERANCES = 40
BATCH, CROP, WORKERS = 4, 16, 1  # their DataLoader asks for persistent workers: at least one
LR, BETAS = 1.0e-3, (0.8, 0.99)
GENERATOR = {
    "upsample_initial_channel": 32,
    "upsample_rates": [8, 8, 2, 2],
    "upsample_kernel_sizes": [16, 16, 4, 4],
    "resblock_kernel_sizes": [3],
    "resblock_dilation_sizes": [[1, 3, 5]],  # their ResBlock1 takes exactly three dilations
    "resblock": "1",
}
PERIODS = [2, 3]
ENV = "SPEECHTRAIN_SINGINGVOCODERS"
QUALITY = QualityPlan(
    kind="vocoder",
    metrics=("mcd", "pesq", "stoi"),
    what="resynthesis of held-out recordings, each row from its own mel and f0 of them (theirs: their wav2spec)",
)


def needs() -> str | None:
    return missing_source(
        ENV,
        "--singingvocoders",
        "needs openvpi/SingingVocoders' code: --singingvocoders DIR (a clone or a git dir of it)",
    )


def extract(src: Path, work: Path) -> Path:
    """Their tree at HEAD, read out of ``src`` (a clone or a git dir) into ``work/SingingVocoders-<commit>``."""
    out = git_tree(src, work, "SingingVocoders")
    if not (out / "train.py").is_file():
        raise RuntimeError(f"{src}: no train.py at HEAD (not a checkout of openvpi/SingingVocoders?)")
    return out


def prepare(work: Path, options: PeerOptions = PeerOptions()) -> dict[str, Any]:
    from speechtrain.data.demo_singing import make_singing_corpus

    corpus = work / "corpus_singing"
    if not (corpus / "metadata.csv").is_file():
        make_singing_corpus(corpus, utterances=UTTERANCES, seed=0, sample_rate=22050, hop_length=256)
    src = source_dir(ENV)
    assert src is not None
    return {
        "corpus": str(corpus),
        "source": str(extract(src, work)),
        "work": str(work),
        "held_out": held_out(corpus, QUALITY.items),
    }


def peer_raw(ctx: dict[str, Any]) -> dict[str, Any]:
    adamw = {"optimizer_cls": "torch.optim.AdamW", "lr": LR, "beta1": BETAS[0], "beta2": BETAS[1], "weight_decay": 0.0}
    config = {
        "audio_sample_rate": 22050,
        "audio_num_mel_bins": 80,
        "hop_size": 256,
        "fft_size": 1024,
        "win_size": 1024,
        "fmin": 40,
        "fmax": 8000,
        "fmax_for_loss": None,
        "crop_mel_frames": CROP,
        "batch_size": BATCH,
        "pe": "parselmouth",
        "f0_min": 65,
        "f0_max": 1100,
        "volume_aug": False,
        "key_aug": False,
        "pc_aug": False,
        "use_stftloss": False,
        "lab_aux_melloss": 45,
        "model_args": {**GENERATOR, "mini_nsf": False, "noise_sigma": 0.0, "discriminator_periods": PERIODS},
        "generater_optimizer_args": dict(adamw),
        "discriminate_optimizer_args": dict(adamw),
        "clip_grad_norm": None,
        "ds_workers": WORKERS,
        "dataloader_prefetch_factor": 2,
        "pl_trainer_accelerator": "auto",  # their default: the GPU when there is one
        "pl_trainer_devices": 1,
        "pl_trainer_precision": "32-true",
        "val_check_interval": 10**9,
        "num_sanity_val_steps": 0,
        "max_updates": 10**9,
        "seed": SEED,
    }
    # the held-out phrases: out of their train index, resynthesised after the timed steps
    held = [str(Path(ctx["corpus"]) / "wavs" / f"{i}.wav") for i in ctx.get("held_out", [])]
    return {"source": ctx["source"], "corpus": ctx["corpus"], "work": ctx["work"], "config": config, "held_out": held}


def seeded(raw: dict[str, Any], seed: int) -> dict[str, Any]:
    """Their row with another seed (their config's ``seed``: Lightning's seed_everything)."""
    return {**raw, "config": {**raw["config"], "seed": seed}}


def ours_raw(ctx: dict[str, Any], autopilot: bool, recommendation: dict[str, Any]) -> dict[str, Any]:
    over: dict[str, Any] = {
        "data.manifest": ctx["corpus"],
        "data.eval_utterances": len(ctx.get("held_out", [])),  # the same held-out phrases (the same rule)
        "train.seed": SEED,
        "data.f0_method": "parselmouth",
        "data.f0_min": 65.0,
        "data.f0_max": 1100.0,
        "data.crop_frames": CROP,
        "data.batch_size": BATCH,
        **{f"model.{k}": v for k, v in GENERATOR.items()},
        "model.mini_nsf": False,
        "model.noise_sigma": 0.0,
        "model.periods": PERIODS,
        "model.scale_discriminator": "msd",
        "model.msd_scales": 3,
        "model.disc_width": 1.0,
        "model.mel_weight": 45.0,
        "model.fm_weight": 2.0,
        "model.adv_weight": 1.0,
        "model.fmax_for_loss": None,
        "model.stft_weight": 0.0,
        "optim.name": "adamw",
        "optim.lr": LR,
        "optim.betas": list(BETAS),
        "optim.weight_decay": 0.0,
        "optim.grad_clip": None,
        "optim.scheduler": "none",
    }
    if not autopilot:
        over.update({"data.num_workers": WORKERS, "data.persistent_workers": True, "data.prefetch_factor": 2})
    return recipe_raw(RECIPE, over, autopilot, recommendation)


DEFINITION = PeerDefinition(
    key=KEY,
    title="NSF-HiFiGAN singing vocoder (tiny generator, HiFi-GAN discriminators)",
    peer_label="SingingVocoders nsf_HiFigan (Lightning)",
    runner="singing_nsf.py",
    recipe=RECIPE,
    prepare=prepare,
    peer_raw=peer_raw,
    ours_raw=ours_raw,
    loss_keys={"peer": "mel_l1", "same": "mel_l1", "autopilot": "mel_l1"},
    needs=needs,
    quality=QUALITY,
    seeded=seeded,
    settings=(
        f"generator 32 channels, upsampling 8x8x2x2, MRF (3; 1,3,5), NSF source at every stage; MPD periods "
        f"{PERIODS} + HiFi-GAN MSD at full width; {UTTERANCES} synthetic singing phrases at 22050 Hz, hop 256, 80 "
        f"mels, Praat f0; {CROP}-frame crops, batch {BATCH}; fp32; AdamW lr {LR:g} betas {BETAS} for both "
        f"networks, no clipping, constant rate; losses LSGAN + 2 x feature matching + 45 x mel L1; {WORKERS} loader "
        "worker at the peer's settings (their DataLoader needs one)"
    ),
    shims=[
        "torchaudio (none matches torch 2.13 on this CPU): imported by their modules, unused by this training path "
        "(no key or speed augmentation); the bench's shim stands in",
    ],
    notes=[
        "the loss compared is the mel L1 of each side's own log-mel (theirs: librosa filters, log floor 1e-9; "
        "ours: the recipe's), over the last steps of each row; both train on the same phrases (the held-out ones "
        "left out of their index and of our training split)",
        "their code is read from a git checkout at bench time (git archive of HEAD into the work folder)",
    ],
)
