"""The HiFi-GAN peer: jik876/hifi-gan's own training step (their ``train.py``'s, from their ``models.py`` and
``meldataset.py``) against speechtrain's HiFi-GAN task, at one small size on both sides.

Model: the tiny recipe's generator (32 initial channels, upsampling 8x8x2x2, one MRF block (kernel 3, dilations 1,
3, 5)) with their discriminators as their ``models.py`` builds them, full width: the multi-period one with periods
2, 3, 5, 7, 11 and the multi-scale one (3 scales, spectral norm on the first), ``model.disc_width: 1.0`` and
``scale_discriminator: msd`` on our side. Losses: LSGAN, feature matching x2, L1 log-mel x45 over the full band.
Optimizer: their AdamW (lr 2e-4, betas 0.8/0.99, torch's default weight decay 0.01) for both networks, the learning
rate x0.999 per epoch. Corpus: speechtrain's demo corpus (40 utterances, 22050 Hz, 16-bit PCM as their ``load_wav``
reads) or, with ``--language LANG``, that language's sentences spoken by espeak-ng (``make-dataset --language``'s
corpus, also 22050 Hz 16-bit PCM), 80 mels at hop 256, 0-8000 Hz; crops of 4096 samples (16 frames), batch 4, fp32.

Their code is not a package: ``--jik876 DIR`` (a clone, or a bare git dir such as a mirror) is read with ``git
archive`` into the bench's work folder at bench time; it is never part of this repository.
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
    speech_corpus,
)

KEY = "hifigan"
RECIPE = "recipes/vocoder_hifigan_tiny.yaml"
UTTERANCES = 40
HOP = 256
BATCH, CROP, WORKERS = 4, 16, 0  # CROP frames: their segment_size is CROP * HOP samples
LR, BETAS, WEIGHT_DECAY, LR_DECAY = 2.0e-4, (0.8, 0.99), 0.01, 0.999  # their config_v1 (AdamW's default decay)
GENERATOR = {
    "upsample_initial_channel": 32,
    "upsample_rates": [8, 8, 2, 2],
    "upsample_kernel_sizes": [16, 16, 4, 4],
    "resblock_kernel_sizes": [3],
    "resblock_dilation_sizes": [[1, 3, 5]],  # their ResBlock1 takes exactly three dilations
    "resblock": "1",
}
PERIODS = [2, 3, 5, 7, 11]  # their MultiPeriodDiscriminator's, hard-coded
ENV = "SPEECHTRAIN_JIK876"  # as tests/jik876_ref.py reads it
QUALITY = QualityPlan(
    kind="vocoder",
    metrics=("mcd", "pesq", "stoi"),
    what="resynthesis of held-out recordings, each row from its own mel of them (theirs: their inference.py's "
    "mel_spectrogram, weight norm removed)",
)


SETTINGS = (  # <corpus>: the corpus in words (prepare's options choose it)
    f"generator 32 channels, upsampling 8x8x2x2, MRF (3; 1,3,5); MPD periods {PERIODS} + HiFi-GAN MSD at full "
    f"width; <corpus> at 22050 Hz, hop {HOP}, 80 mels 0-8000 Hz; {CROP * HOP}-sample "
    f"({CROP}-frame) crops, batch {BATCH}; fp32; AdamW lr {LR:g} betas {BETAS} weight decay {WEIGHT_DECAY:g} for "
    f"both networks, no clipping, x{LR_DECAY:g} per epoch; losses LSGAN + 2 x feature matching + 45 x mel L1 "
    f"(full band); {WORKERS} loader workers"
)


def needs() -> str | None:
    return missing_source(ENV, "--jik876", "needs jik876/hifi-gan's code: --jik876 DIR (a clone or a git dir of it)")


def extract(src: Path, work: Path) -> Path:
    """Their tree at HEAD, read out of ``src`` (a clone or a git dir) into ``work/hifi-gan-<commit>``."""
    out = git_tree(src, work, "hifi-gan")
    if not (out / "models.py").is_file() or not (out / "meldataset.py").is_file():
        raise RuntimeError(f"{src}: no models.py/meldataset.py at HEAD (not a checkout of jik876/hifi-gan?)")
    return out


def prepare(work: Path, options: PeerOptions = PeerOptions()) -> dict[str, Any]:
    """The corpus (the demo one, or with ``options.language`` an espeak-ng one) and their code, into ``work``."""
    if options.size != "peer":
        raise ValueError("the hifigan peer has one size (the tiny generator): --size does not apply")
    corpus, words = speech_corpus(work, options, UTTERANCES)
    src = source_dir(ENV)
    assert src is not None
    return {
        "corpus": str(corpus),
        "settings": SETTINGS.replace("<corpus>", words),
        "source": str(extract(src, work)),
        "work": str(work),
        "held_out": held_out(corpus, QUALITY.items),
    }


def peer_raw(ctx: dict[str, Any]) -> dict[str, Any]:
    """Their row: keys of their ``config_v1.json`` to override (``h``), the corpus's wavs split into their train
    file list (every utterance but the held-out ones) and the held-out wavs they resynthesise after the steps."""
    config = {
        **GENERATOR,
        "batch_size": BATCH,
        "learning_rate": LR,
        "adam_b1": BETAS[0],
        "adam_b2": BETAS[1],
        "lr_decay": LR_DECAY,
        "seed": SEED,
        "segment_size": CROP * HOP,
        "num_mels": 80,
        "n_fft": 1024,
        "hop_size": HOP,
        "win_size": 1024,
        "sampling_rate": 22050,
        "fmin": 0,
        "fmax": 8000,
        "fmax_for_loss": None,
        "num_workers": WORKERS,
        "num_gpus": 0,
    }
    wavs = Path(ctx["corpus"]) / "wavs"
    held = [str(wavs / f"{i}.wav") for i in ctx.get("held_out", [])]
    return {"source": ctx["source"], "corpus": ctx["corpus"], "config": config, "held_out": held}


def seeded(raw: dict[str, Any], seed: int) -> dict[str, Any]:
    """Their row with another seed (their config's ``seed``: ``torch.manual_seed``)."""
    return {**raw, "config": {**raw["config"], "seed": seed}}


def ours_raw(ctx: dict[str, Any], autopilot: bool, recommendation: dict[str, Any]) -> dict[str, Any]:
    over: dict[str, Any] = {
        "data.manifest": ctx["corpus"],
        "data.eval_utterances": len(ctx.get("held_out", [])),  # the same held-out utterances (the same rule)
        "train.seed": SEED,
        "data.crop_frames": CROP,
        "data.batch_size": BATCH,
        "data.fmin": 0.0,
        "data.fmax": 8000.0,
        **{f"model.{k}": v for k, v in GENERATOR.items()},
        "model.periods": PERIODS,
        "model.use_spectral_norm": False,
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
        "optim.weight_decay": WEIGHT_DECAY,
        "optim.grad_clip": None,
        "optim.scheduler": "exponential",
        "optim.gamma": LR_DECAY,
        "optim.scheduler_interval": "epoch",
    }
    if not autopilot:
        over.update({"data.num_workers": WORKERS, "data.persistent_workers": False})
    return recipe_raw(RECIPE, over, autopilot, recommendation)


DEFINITION = PeerDefinition(
    key=KEY,
    title="HiFi-GAN vocoder (tiny generator, HiFi-GAN's full-width discriminators)",
    peer_label="jik876/hifi-gan train.py's step",
    runner="jik876_hifigan.py",
    recipe=RECIPE,
    prepare=prepare,
    peer_raw=peer_raw,
    ours_raw=ours_raw,
    loss_keys={"peer": "mel_l1", "same": "mel_l1", "autopilot": "mel_l1"},
    needs=needs,
    quality=QUALITY,
    seeded=seeded,
    settings=SETTINGS.replace("<corpus>", f"{UTTERANCES} English demo utterances"),
    options=("language", "utterances"),
    shims=[
        "their meldataset.mel_spectrogram on librosa >= 0.10 and torch 2.x: librosa.filters.mel called with "
        "keywords, torch.stft with return_complex=True viewed as real (their code, else unchanged)",
        "their train.py's device cuda:N: the CPU; their loop is the runner's copy of train.py's step",
    ],
    notes=[
        "the loss compared is the mel L1 of each side's own log-mel (theirs: their mel_spectrogram, librosa filters, "
        "log floor 1e-5, of peak-normalised audio x0.95; ours: the recipe's), over the last steps of each row; both "
        "train on the same utterances (the held-out ones left out of their file list and of our training split)",
        "their crops start at any sample, ours at a frame; their MelDataset draws them from python's random "
        "seeded 1234 in its constructor (the pass's seed sets torch's, as their train.py)",
        "their code is read from a git checkout at bench time (git archive of HEAD into the work folder)",
    ],
)
