"""The XTTS peer: Coqui's ``GPTTrainer`` against speechtrain's XTTS task on the same model and corpus.

Model: a random-weights Coqui XTTS-v2 folder in the ``tiny_coqui`` layout (GPT 2 x 64, 64 audio codes, DVAE
16 wide; the HiFi-GAN decoder at XTTS-v2 size, frozen on both sides), written by speechtrain
(``model.random_checkpoint``), so nothing is downloaded; both sides load the same files and train the same GPT
(with its conditioning encoder and perceiver; Coqui's and ours equal to 1e-6, ``scripts/check_coqui_parity.py``).
Corpus: speechtrain's English demo corpus (``make_demo_corpus``, 64 utterances, 22050 Hz, LJSpeech layout), which
Coqui's English tokenizer reads without extending the vocabulary (Coqui's trainer cannot add tokens).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from common import PeerDefinition, PeerOptions, recipe_raw

KEY = "xtts"
RECIPE = "recipes/xtts_finetune_tiny.yaml"
UTTERANCES = 64
BATCH = 8
LR, BETAS, EPS = 2.0e-3, (0.9, 0.96), 1.0e-8
COND = (22050, 44100)  # conditioning clip length in samples (the tiny recipe's)


def prepare(work: Path, options: PeerOptions = PeerOptions()) -> dict[str, Any]:
    """The corpus and the checkpoint folder, written once into ``work``."""
    from speechtrain.data.demo import make_demo_corpus
    from speechtrain.models.xtts.build import write_random_checkpoint

    corpus = work / "corpus_en"
    if not (corpus / "metadata.csv").is_file():
        make_demo_corpus(corpus, utterances=UTTERANCES, seed=0)
    ckpt = work / "xtts_tiny_coqui"
    if not (ckpt / "model.pth").is_file():
        write_random_checkpoint(ckpt, "tiny_coqui", seed=0)
    return {"corpus": str(corpus), "checkpoint_dir": str(ckpt)}


def peer_raw(ctx: dict[str, Any]) -> dict[str, Any]:
    """The settings of the Coqui row (what ``coqui_xtts.py`` reads)."""
    return {
        "checkpoint_dir": ctx["checkpoint_dir"],
        "corpus": ctx["corpus"],
        "language": "en",
        "batch_size": BATCH,
        "num_loader_workers": 0,
        "precision": "fp32",
        "lr": LR,
        "betas": list(BETAS),
        "eps": EPS,
        "weight_decay": 0.0,
        "min_conditioning_length": COND[0],
        "max_conditioning_length": COND[1],
        "max_wav_length": 255995,
        "max_text_length": 200,
        "seed": 1,
    }


def ours_raw(ctx: dict[str, Any], autopilot: bool, recommendation: dict[str, Any]) -> dict[str, Any]:
    """speechtrain's config: the tiny recipe on the same folder and corpus, with Coqui's settings (fixed batches
    of 8, fp32, no workers, the same AdamW) or, with ``autopilot``, duration buckets within the same batch budget
    (8 x the longest utterance, at most 8 items) plus the hardware recommendation. The optimizer, losses and
    conditioning are Coqui's in both."""
    over = {
        "data.manifest": ctx["corpus"],
        "data.eval_utterances": 0,  # Coqui trains on every utterance
        "model.checkpoint_dir": ctx["checkpoint_dir"],
        "model.random_checkpoint": "tiny_coqui",
        "model.language": "en",
        "model.extra_tokens": [],
        "model.min_conditioning_length": COND[0],
        "model.max_conditioning_length": COND[1],
        "model.text_loss_weight": 0.01,
        "model.audio_loss_weight": 1.0,
        "optim.lr": LR,
        "optim.betas": list(BETAS),
        "optim.eps": EPS,
        "optim.weight_decay": 0.0,
        "optim.grad_clip": None,
        "optim.scheduler": "none",
        "train.seed": 1,
    }
    over.update({"data.batch_size": BATCH, "data.max_batch_size": BATCH})
    if autopilot:  # duration buckets in the peer's batch budget (8 x the longest utterance), as the ladder's rung
        over.update({"data.max_frames": None, "data.bucket_batch_sizes": None, "data.bucket_boundaries": None})
    return recipe_raw(RECIPE, over, autopilot, recommendation)


DEFINITION = PeerDefinition(
    key=KEY,
    title="XTTS-v2 GPT fine-tuning (tiny_coqui layout)",
    peer_label="Coqui GPTTrainer (coqui-tts 0.28, trainer 0.4)",
    runner="coqui_xtts.py",
    recipe=RECIPE,
    prepare=prepare,
    peer_raw=peer_raw,
    ours_raw=ours_raw,
    loss_keys={"peer": "loss", "same": "loss", "autopilot": "loss"},
    quality_note=(
        "not scored: both sides fine-tune only the GPT of a random-weights XTTS-v2 (tiny_coqui layout), whose DVAE "
        "and HiFi-GAN decoder are random and stay untrained, so the audio of every row after these steps is the "
        "random decoder's noise whatever the GPT learned; the loss after equal steps (the GPT's own) is the "
        "comparison here. Scoring needs a trained XTTS-v2 checkpoint on both sides (owed)"
    ),
    settings=(
        f"random-weights XTTS-v2 folder, tiny_coqui layout (the same files on both sides); {UTTERANCES} English "
        f"demo utterances at 22050 Hz; batch {BATCH}, random batches, no loader workers; fp32; AdamW lr {LR:g}, "
        f"betas {BETAS}, eps {EPS:g}, no weight decay, no clipping, constant rate; conditioning clips "
        f"{COND[0]}-{COND[1]} samples from the utterance; loss 0.01 x text CE + audio CE"
    ),
    shims=[
        "torchaudio (none matches torch 2.13 on this CPU): load via soundfile, MelSpectrogram via speechtrain's "
        "torch-only equal, resample only where the rates agree (they do: the corpus is 22050 Hz)",
        "torchcodec: an empty package for coqui-tts's import check (training reads no audio through it)",
        "GPTTrainer builds its DVAE with XTTS-v2's hard-coded sizes: the bench builds it with the checkpoint's "
        "(tiny_coqui) sizes so that its dvae.pth loads",
    ],
    notes=[
        "Coqui computes the DVAE codes of every batch on the device (format_batch_on_device); speechtrain reads "
        "them from its feature cache (computed once by `prepare`, outside the timed window) in both of its rows",
        "Coqui's XTTS dataset module sets torch.set_num_threads(1) when imported; the runner sets the row's "
        "thread count back after its imports, so every row runs at the same threads",
    ],
)
