"""Random-weights XTTS checkpoint folders in Coqui's layout, at any size (no weights can be downloaded here).

``write_random_checkpoint(out, "xtts_v2")`` writes what Coqui's XTTS-v2 folder holds (``model.pth`` as
``{"model": state_dict}`` of Coqui's ``Xtts`` with its key names and order, ``dvae.pth``, ``mel_stats.pth``,
``vocab.json``, ``config.json``) with random tensors; ``"tiny"`` writes a CPU-sized model of the same shape.
The vocabulary is synthetic: Coqui's special tokens and language tags at XTTS's ids ([STOP]=0, [UNK]=1,
[SPACE]=2, [en]=259, [START]=261 ...), a Latin alphabet, and generated BPE merges up to the size asked
(6681 ids for XTTS-v2). Weight norm is saved with torch's older names (``weight_g``/``weight_v``, as the
XTTS-v2 release was) unless ``weight_norm_names="parametrizations"``.
"""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch

from speechtrain.logs import get_logger
from speechtrain.models.xtts.config import XttsArch, arch_preset
from speechtrain.models.xtts.dvae import DiscreteVAE

if TYPE_CHECKING:
    from speechtrain.models.xtts.config import XttsConfig

log = get_logger(__name__)

#: XTTS-v2's languages (config.json ``languages``)
XTTS_LANGUAGES = (
    "en",
    "es",
    "fr",
    "de",
    "it",
    "pt",
    "pl",
    "tr",
    "ru",
    "nl",
    "cs",
    "ar",
    "zh-cn",
    "hu",
    "ko",
    "ja",
    "hi",
)
# ids of the tags in Coqui's XTTS vocabularies; the last three sit at the end of XTTS-v2's 6681 ids
_TAG_IDS = {"en": 259, "de": 260, "fr": 262, "ru": 267, "es": 284, "it": 285, "pt": 286, "cs": 293, "pl": 294}
_TAG_IDS.update({"tr": 295, "nl": 297, "ar": 5022, "zh-cn": 5023, "ja": 5412})
_LATE_TAGS = ("hu", "ko", "hi")
_ALPHABET = (
    list("!'(),-./:;?") + list("abcdefghijklmnopqrstuvwxyz") + list("0123456789") + list("àáâãäçèéêëìíîïñòóôõöùúûüßœ")
)


def synthetic_vocab(num_tokens: int) -> str:
    """A ``tokenizers`` BPE vocabulary in Coqui's layout with ids 0 .. num_tokens - 1 (JSON text)."""
    vocab: dict[str, int] = {"[STOP]": 0, "[UNK]": 1, "[SPACE]": 2}
    specials = ["[STOP]", "[UNK]", "[SPACE]"]
    if num_tokens >= 6681:
        tags = {**{f"[{k}]": v for k, v in _TAG_IDS.items()}, "[START]": 261}
        tags.update({f"[{t}]": num_tokens - len(_LATE_TAGS) + i for i, t in enumerate(_LATE_TAGS)})
    else:  # a small vocabulary: the tags right after the alphabet
        base = 3 + len(_ALPHABET)
        names = ["[START]", *(f"[{t}]" for t in XTTS_LANGUAGES)]
        tags = {name: base + i for i, name in enumerate(names)}
    vocab.update(tags)
    specials += list(tags)
    taken = set(vocab.values())
    free = (i for i in itertools.count(3) if i not in taken)
    for c in _ALPHABET:
        vocab[c] = next(free)
    merges: list[str] = []
    letters = "etaoinshrdlucmfwypvbgkjqxz"
    bigrams = list(itertools.product(letters, letters))
    pairs = itertools.chain(bigrams, ((a + b, c) for a, b in bigrams for c in letters))  # 676 + 17576 merges
    for a, b in pairs:
        if len(vocab) >= num_tokens:
            break
        vocab[a + b] = next(free)
        merges.append(f"{a} {b}")
    data = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {
                "id": vocab[s],
                "special": True,
                "content": s,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
            }
            for s in specials
        ],
        "normalizer": None,
        "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": None,
        "decoder": None,
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": "[UNK]",
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "vocab": dict(sorted(vocab.items(), key=lambda kv: kv[1])),
            "merges": merges,
        },
    }
    return json.dumps(data, ensure_ascii=False, indent=2)


def coqui_config(arch: XttsArch, languages: list[str] | tuple[str, ...] = XTTS_LANGUAGES) -> dict[str, Any]:
    """A config.json in the shape of XTTS-v2's published one (model_args from ``arch``, the text start/stop ids
    left to the vocabulary as there; inference settings as published); sizes Coqui hard-codes go to
    ``speechtrain_arch`` when they are not XTTS-v2's."""
    model_args: dict[str, Any] = {
        "gpt_batch_size": 1,
        "enable_redaction": False,
        "kv_cache": True,
        "gpt_checkpoint": None,
        "clvp_checkpoint": None,
        "decoder_checkpoint": None,
        "num_chars": 255,
        "tokenizer_file": "",
        **arch.coqui_model_args(),
        "gpt_start_text_token": None,
        "gpt_stop_text_token": None,
        "gpt_use_masking_gt_prompt_approach": True,
        "duration_const": 102400,
    }
    config: dict[str, Any] = {
        "model": "xtts",
        "model_args": model_args,
        "audio": {"sample_rate": arch.input_sample_rate, "output_sample_rate": arch.output_sample_rate},
        "model_dir": None,
        "languages": list(languages),
        "temperature": 0.75,
        "length_penalty": 1.0,
        "repetition_penalty": 5.0,
        "top_k": 50,
        "top_p": 0.85,
        "num_gpt_outputs": 1,
        "gpt_cond_len": 30,
        "gpt_cond_chunk_len": 4,
        "max_ref_len": 30,
        "sound_norm_refs": False,
    }
    extras = arch.speechtrain_extras()
    if extras:
        config["speechtrain_arch"] = extras
    return config


def _legacy_weight_norm(key: str) -> str:
    return key.replace(".parametrizations.weight.original0", ".weight_g").replace(
        ".parametrizations.weight.original1", ".weight_v"
    )


def checkpoint_folder(model: XttsConfig) -> Path | None:
    """``model.checkpoint_dir``, written first with random weights when ``model.random_checkpoint`` asks and it
    has no ``model.pth`` (on the first build only: a run's ``config.yaml`` has ``model.arch``, and a run loaded
    from another working directory does not write a random folder there). None without a checkpoint_dir."""
    folder = Path(model.checkpoint_dir) if model.checkpoint_dir else None
    first_build = model.arch is None
    if first_build and folder is not None and model.random_checkpoint != "off" and not (folder / "model.pth").is_file():
        log.info("writing a random-weights %s XTTS checkpoint to %s", model.random_checkpoint, folder)
        write_random_checkpoint(folder, model.random_checkpoint, seed=model.random_seed)
    return folder


def write_random_checkpoint(
    out_dir: str | Path,
    size: str | XttsArch = "tiny",
    seed: int = 0,
    weight_norm_names: Literal["legacy", "parametrizations"] = "legacy",
    num_text_tokens: int | None = None,
) -> Path:
    """Write a random-weights Coqui XTTS folder of ``size`` (a preset name or sizes) to ``out_dir``.

    ``num_text_tokens``: vocabulary size (default: 6681 for XTTS-v2 sizes, ~120 for tiny ones).
    The global RNG is left as it was."""
    from speechtrain.models.xtts.checkpoint import build_modules

    arch = arch_preset(size) if isinstance(size, str) else size
    rows = num_text_tokens or (6681 if arch.gpt_n_model_channels >= 1024 else 0)
    vocab_json = synthetic_vocab(rows or 3 + len(_ALPHABET) + 1 + len(XTTS_LANGUAGES) + 40)
    vocab = json.loads(vocab_json)["model"]["vocab"]
    arch = arch.model_copy(
        update={
            "gpt_number_text_tokens": max(vocab.values()) + 1,
            "gpt_start_text_token": vocab["[START]"],
            "gpt_stop_text_token": vocab["[STOP]"],
        }
    )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        mods = build_modules(arch)
        mel_stats = torch.rand(arch.n_mels) * 4 + 1  # per-band log-mel scales, positive
        calibrate_codebook(mods.dvae, mel_stats, arch)
    model: dict[str, torch.Tensor] = {"mel_stats": mel_stats}
    for prefix, module in (("gpt.", mods.gpt), ("hifigan_decoder.", mods.hifigan_decoder)):
        for key, tensor in module.state_dict().items():
            name = prefix + key
            model[_legacy_weight_norm(name) if weight_norm_names == "legacy" else name] = tensor
    # each file is written beside its final name and moved in place, model.pth last (its presence is what
    # says "a checkpoint is here"), so that a reader never sees a half-written folder
    config_json = json.dumps(coqui_config(arch), indent=4) + "\n"
    writes: list[tuple[str, Any]] = [
        ("dvae.pth", lambda f: torch.save(mods.dvae.state_dict(), f)),
        ("mel_stats.pth", lambda f: torch.save(mel_stats.clone(), f)),
        ("vocab.json", lambda f: Path(f).write_text(vocab_json, encoding="utf-8")),
        ("config.json", lambda f: Path(f).write_text(config_json, encoding="utf-8")),
        ("model.pth", lambda f: torch.save({"model": model}, f)),
    ]
    for name, write in writes:
        tmp = out / f".{name}.tmp{os.getpid()}"
        write(tmp)
        os.replace(tmp, out / name)
    return out


@torch.no_grad()
def calibrate_codebook(dvae: DiscreteVAE, mel_stats: torch.Tensor, arch: XttsArch, seconds: float = 12.0) -> None:
    """Make a random DVAE's codebook look trained: its entries become encoder outputs of speech-like audio
    (the demo voice, :func:`speechtrain.data.demo.synthesize_text`), drawn with replacement and jittered, so
    that speech maps onto many codes rather than the few a random codebook catches. EMA buffers follow."""
    from speechtrain.data.demo import plan_demo_corpus, synthesize_text
    from speechtrain.models.xtts.audio import dvae_mel

    pieces, total = [], 0
    for utt in plan_demo_corpus(64, seed=1):
        pieces.append(synthesize_text(utt.text).astype(np.float32) / 32767.0)
        total += pieces[-1].size
        if total >= seconds * arch.input_sample_rate:
            break
    audio = torch.from_numpy(np.concatenate(pieces))[None, None]  # (1, 1, T_samples)
    mel = dvae_mel(arch.n_mels, arch.input_sample_rate)(audio, mel_stats)  # (1, n_mels, T_frames)
    latents = dvae.encoder(mel)[0].T  # (T_codes, codebook_dim)
    pick = torch.randint(0, latents.shape[0], (arch.num_codes,))
    entries = latents[pick] + 0.05 * latents.std() * torch.randn(arch.num_codes, latents.shape[1])
    book = dvae.codebook
    book.embed.copy_(entries.T)  # (codebook_dim, n_codes)
    book.embed_avg.copy_(book.embed)
    book.cluster_size.fill_(1.0)
