"""The VITS peer: Piper's trainer (``piper.train.vits``, Lightning) against speechtrain's VITS task on the same corpus
at the same size.

Model: Piper's own architecture at its defaults where it hard-codes them (posterior encoder 16 WaveNet layers, flow
4 couplings x 4 layers, stochastic duration predictor 4 flows as wide as the hidden size, multi-period discriminator
with periods 2, 3, 5, 7, 11 plus one scale discriminator at full width) and its "medium"-style decoder (resblock 2,
kernels 3/5/7, upsampling 8x8x4 from 256 channels); hidden 192, 6 encoder layers; 256 phoneme ids. ``--size tiny``:
the tiny recipe's sizes where Piper's ``VitsModel`` takes them (hidden 32, 1 encoder layer, a 32-channel decoder,
2048-sample slices), the hard-coded parts as they are. Corpus: speechtrain's English demo corpus (64 utterances,
22050 Hz) or, with ``--language LANG``, that language's sentences spoken by espeak-ng (``make-dataset --language``'s
corpus); espeak-ng phonemes on both sides (Piper's bridge in the corpus's espeak-ng voice; speechtrain's
``data.phonemizer: espeak`` with ``data.language``). Silence trimming (Piper's Silero VAD) is off so both sides
train on the same audio. Optimizer: AdamW lr 2e-4, betas (0.8, 0.99), eps 1e-9, torch's weight decay 0.01, for both
networks (Piper's discriminator defaults differ, lr 1e-4 and betas (0.5, 0.9); speechtrain has one optimizer section
for both), the per-epoch exponential decay 0.999875.

Piper's wheel ships neither the source nor a build of its monotonic alignment search; ``--piper-source DIR`` (a
clone or a git dir of OHF-Voice/piper1-gpl) gives ``core.pyx``, which the runner compiles with Cython as Piper's
``build_monotonic_align.sh`` does, into the bench's work folder.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from common import (
    SEED,
    PeerDefinition,
    PeerOptions,
    QualityPlan,
    corpus_ids,
    held_out,
    missing_source,
    recipe_raw,
    source_dir,
    speech_corpus,
)

KEY = "vits"
RECIPE = "recipes/vits.yaml"
UTTERANCES = 64
BATCH, SEGMENT = 4, 8192
LR, BETAS, EPS, WD, GAMMA = 2.0e-4, (0.8, 0.99), 1.0e-9, 0.01, 0.999875
SIZES = {
    "hidden_channels": 192,
    "inter_channels": 192,
    "filter_channels": 768,
    "n_heads": 2,
    "n_layers": 6,
    "kernel_size": 3,
    "p_dropout": 0.1,
    "resblock": "2",
    "resblock_kernel_sizes": [3, 5, 7],
    "resblock_dilation_sizes": [[1, 2], [2, 6], [3, 12]],
    "upsample_rates": [8, 8, 4],
    "upsample_initial_channel": 256,
    "upsample_kernel_sizes": [16, 16, 8],
}
#: ``--size tiny``: the tiny recipe's sizes where Piper's VitsModel takes them (its decoder as resblock 2, the
#: block Piper's configs use, with the tiny recipe's kernel and two dilations); the parts Piper hard-codes stay
#: (posterior 16 WaveNet layers, flow 4 x 4, stochastic duration predictor 4 flows (its width: hidden, as in the
#: paper's code, whose 192 argument is overwritten), the full-width discriminators), matched on our side
TINY_SIZES = {
    "hidden_channels": 32,
    "inter_channels": 16,
    "filter_channels": 64,
    "n_heads": 2,
    "n_layers": 1,
    "kernel_size": 3,
    "p_dropout": 0.1,
    "resblock": "2",
    "resblock_kernel_sizes": [3],
    "resblock_dilation_sizes": [[1, 3]],
    "upsample_rates": [8, 8, 4],
    "upsample_initial_channel": 32,
    "upsample_kernel_sizes": [16, 16, 8],
}
TINY_SEGMENT = 2048
SYMBOLS = 256
TITLE = "VITS (Piper's architecture, medium-style decoder)"
ENV = "SPEECHTRAIN_PIPER_SOURCE"
QUALITY = QualityPlan(
    kind="tts",
    metrics=("mcd_dtw", "dnsmos_ovrl"),
    what="synthesis of the held-out sentences (each side's own phonemes of the text; noise scales 0.667 / 0.8, a "
    "fixed noise seed) against their recordings",
)
PYX = "src/piper/train/vits/monotonic_align/core.pyx"


def needs() -> str | None:
    return missing_source(
        ENV,
        "--piper-source",
        "needs Piper's monotonic_align/core.pyx (the wheel ships no source or build of it): --piper-source DIR "
        "(a clone or a git dir of OHF-Voice/piper1-gpl)",
    )


def extract_pyx(src: Path, work: Path) -> Path:
    """``core.pyx`` at Piper's installed version's tag when the repository has it, else at HEAD."""
    from importlib.metadata import version

    git = ["git", "-C", str(src)] if (src / ".git").exists() else ["git", f"--git-dir={src}"]
    tag = f"v{version('piper-tts')}"
    has_tag = subprocess.run([*git, "rev-parse", "--verify", "-q", tag], capture_output=True).returncode == 0
    ref = tag if has_tag else "HEAD"
    text = subprocess.run([*git, "show", f"{ref}:{PYX}"], capture_output=True, text=True, check=True).stdout
    out = work / "core.pyx"
    out.write_text(text)
    return out


def prepare(work: Path, options: PeerOptions = PeerOptions()) -> dict[str, Any]:
    """The corpus (the English demo one, or with ``options.language`` an espeak-ng one), Piper's csv without the
    held-out sentences and its alignment search's source, into ``work``; ``options.size``: Piper's sizes or tiny."""
    if options.size not in ("peer", "tiny"):
        raise ValueError(f"the vits peer's sizes are peer or tiny, not {options.size!r}")
    corpus, words = speech_corpus(work, options, UTTERANCES, demo_folder="corpus_en")
    src = source_dir(ENV)
    assert src is not None
    held = held_out(corpus, QUALITY.items)
    train_csv = work / f"metadata_train_{corpus.name}.csv"  # Piper reads one csv: the corpus's without the held-out
    lines = (corpus / "metadata.csv").read_text(encoding="utf-8").splitlines()
    train_csv.write_text("\n".join(ln for ln in lines if ln.strip() and ln.split("|")[0] not in held) + "\n")
    language = options.language or "en"
    if options.language:
        from speechtrain.data.speak import voice_of

        voice = voice_of(options.language)  # the espeak-ng voice the corpus was spoken in (Piper phonemizes with it)
    else:
        voice = "en-us"
    tiny = options.size == "tiny"
    return {
        "corpus": str(corpus),
        "work": str(work),
        "mas_source": str(extract_pyx(src, work)),
        "held_out": held,
        "train_csv": str(train_csv),
        "language": language,
        "espeak_voice": voice,
        "size": options.size,
        "settings": settings_text(words, tiny),
        "title": "VITS (Piper's architecture at the tiny recipe's sizes)" if tiny else TITLE,
    }


def sizes(ctx: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """The model sizes both sides set, and the slice length, for the context's ``size``."""
    return (TINY_SIZES, TINY_SEGMENT) if ctx.get("size") == "tiny" else (SIZES, SEGMENT)


def peer_raw(ctx: dict[str, Any]) -> dict[str, Any]:
    size, segment = sizes(ctx)
    model = {
        **size,
        "batch_size": BATCH,
        "sample_rate": 22050,
        "num_symbols": SYMBOLS,
        "num_speakers": 1,
        "filter_length": 1024,
        "hop_length": 256,
        "win_length": 1024,
        "mel_channels": 80,
        "segment_size": segment,
        "use_sdp": True,
        "learning_rate": LR,
        "learning_rate_d": LR,
        "betas": BETAS,
        "betas_d": BETAS,
        "eps": EPS,
        "lr_decay": GAMMA,
        "lr_decay_d": GAMMA,
        "c_mel": 45,
        "c_kl": 1.0,
        "mos_metric": None,
    }
    data = {
        "espeak_voice": ctx.get("espeak_voice", "en-us"),
        "voice_name": "bench",
        "sample_rate": 22050,
        "batch_size": BATCH,
        "validation_split": 0.0,
        "num_test_examples": 0,
        "num_workers": 0,
        "trim_silence": False,
        "segment_size": segment,
    }
    texts = dict(corpus_ids(ctx["corpus"])) if ctx.get("held_out") else {}
    held = [{"id": i, "text": texts[i]} for i in ctx.get("held_out", [])]
    return {**ctx, "model": model, "data": data, "precision": "32-true", "seed": SEED, "held_out": held}


def ours_raw(ctx: dict[str, Any], autopilot: bool, recommendation: dict[str, Any]) -> dict[str, Any]:
    size, segment = sizes(ctx)
    over: dict[str, Any] = {
        "data.manifest": ctx["corpus"],
        "data.eval_utterances": len(ctx.get("held_out", [])),  # the same held-out sentences (the same rule)
        "train.seed": SEED,
        "data.language": ctx.get("language", "en"),
        "data.phonemizer": "espeak",
        "data.batch_size": BATCH,
        "data.max_batch_size": BATCH,
        **{f"model.{k}": v for k, v in size.items()},
        "model.n_vocab": SYMBOLS,
        "model.posterior_layers": 16,
        "model.flow_couplings": 4,
        "model.flow_wn_layers": 4,
        "model.use_sdp": True,
        "model.sdp_flows": 4,
        "model.mpd_periods": [2, 3, 5, 7, 11],
        "model.disc_width": 1.0,
        "model.segment_size": segment,
        "model.c_mel": 45.0,
        "model.c_kl": 1.0,
        "optim.name": "adamw",
        "optim.lr": LR,
        "optim.betas": list(BETAS),
        "optim.eps": EPS,
        "optim.weight_decay": WD,
        "optim.grad_clip": None,
        "optim.scheduler": "exponential",
        "optim.gamma": GAMMA,
        "optim.scheduler_interval": "epoch",
    }
    if autopilot:  # duration buckets in the peer's batch budget (4 x the longest utterance), as the ladder's rung
        over.update({"data.max_frames": None, "data.bucket_batch_sizes": None, "data.bucket_boundaries": None})
    return recipe_raw(RECIPE, over, autopilot, recommendation)


def settings_text(corpus: str, tiny: bool) -> str:
    """The comparison's settings in words (``corpus``: the corpus in words)."""
    if tiny:
        model = (
            "Piper's VITS at the tiny recipe's sizes where it takes them: hidden 32, inter 16, filter 64, 1 encoder "
            "layer, decoder resblock 2 (3; 1,3) upsampling 8x8x4 from 32; as Piper hard-codes them: posterior 16 "
            "layers, flow 4x4, SDP 4 flows, MPD 2/3/5/7/11 + one scale discriminator at full width"
        )
    else:
        model = (
            "Piper's VITS: hidden 192, 6 encoder layers, posterior 16 layers, flow 4x4, SDP 4 flows, decoder "
            "resblock 2 (3/5/7) upsampling 8x8x4 from 256, MPD 2/3/5/7/11 + one scale discriminator at full width"
        )
    segment = TINY_SEGMENT if tiny else SEGMENT
    return (
        f"{model}, {SYMBOLS} phoneme ids; {corpus} at 22050 Hz, espeak-ng phonemes, no silence trimming; batch "
        f"{BATCH}, {segment}-sample slices; fp32; AdamW lr {LR:g} betas {BETAS} eps {EPS:g} weight decay {WD:g} for "
        f"both networks, exponential decay {GAMMA} per epoch; losses 45 x mel L1 + KL + duration + adversarial + "
        "feature matching"
    )


DEFINITION = PeerDefinition(
    key=KEY,
    title=TITLE,
    peer_label="Piper piper.train.vits (piper-tts 1.8, Lightning)",
    runner="piper_vits.py",
    recipe=RECIPE,
    prepare=prepare,
    peer_raw=peer_raw,
    ours_raw=ours_raw,
    loss_keys={"peer": "mel_l1", "same": "mel_l1", "autopilot": "mel_l1"},
    needs=needs,
    quality=QUALITY,
    settings=settings_text(f"{UTTERANCES} English demo utterances", tiny=False),
    options=("language", "utterances", "size"),
    shims=[
        "monotonic_align: Piper's core.pyx (from its repository at the installed version's tag) compiled with "
        "Cython into the bench's work folder, as Piper's build_monotonic_align.sh does (the wheel ships no build)",
    ],
    notes=[
        "Piper's discriminator optimizer defaults (lr 1e-4, betas (0.5, 0.9)) are set to the generator's on the "
        "peer row: speechtrain has one optimizer section for both networks",
        "phoneme ids differ (Piper's espeak id map vs speechtrain's learned phoneme symbols); the text embedding "
        f"has {SYMBOLS} rows on both sides",
        "the loss compared is the raw mel L1 (Piper's train_mel, speechtrain's mel_l1; both VITS's log-mel)",
    ],
)
