"""XTTS's DVAE codes as a derived feature of the feature cache: computed once by ``prepare``, reused by every run.

:func:`derived_features` is the family's hook (:mod:`speechtrain.data.derived`): with ``model.codes=utterance``
(the rule: each utterance's codes from its own audio), ``model.cache_codes`` and a checkpoint folder, ``prepare``
computes every utterance's codes from its stored audio, alone (unpadded), on the CPU in fp32 with autocast
off, and stores them as int16 (T_codes,) ``<key>.codes.npy`` files. Their key
is the audio's (path, size, mtime, sample rate, hop) with everything else they depend on: the content of
``dvae.pth`` and ``mel_stats.pth`` (sha1), the DVAE sizes from ``config.json`` and the DVAE mel's settings
(:func:`speechtrain.models.xtts.audio.dvae_mel_settings`). New weights recompute the codes and nothing else.

:func:`utterance_codes` is the one computation: ``prepare`` calls it, and so does the task when a batch comes
without codes (``data.noise_snr_db``, ``--fake-data``, a run's config without its checkpoint folder), one
utterance at a time, so both give the same numbers on the same device (tested bit for bit on the CPU; a
GPU's fp32 convolutions may use TF32, whose rounding can move a near-tie to the neighbouring code).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from speechtrain.data.derived import Compute, DerivedFeature, file_digest
from speechtrain.errors import UserError
from speechtrain.models.xtts.audio import DVAE_STFT, XttsMel, dvae_mel, dvae_mel_settings
from speechtrain.models.xtts.dvae import DiscreteVAE

if TYPE_CHECKING:
    from speechtrain.config import DataConfig
    from speechtrain.models.xtts.config import XttsArch, XttsConfig

CODES_VERSION = 1  # bump when the computation changes (every cached code is then recomputed)
DVAE_ARCH_KEYS = (
    "n_mels",
    "input_sample_rate",
    "gpt_num_audio_tokens",
    "dvae_hidden_dim",
    "dvae_codebook_dim",
    "dvae_num_layers",
    "dvae_num_resnet_blocks",
    "dvae_kernel_size",
)


def code_dtype(arch: XttsArch) -> torch.dtype:
    """int16 while the codebook fits (XTTS-v2: 1024 codes)."""
    return torch.int16 if arch.num_codes <= torch.iinfo(torch.int16).max else torch.int32


@torch.no_grad()
def utterance_codes(dvae: DiscreteVAE, mel: XttsMel, norms: torch.Tensor, audio: torch.Tensor) -> torch.Tensor:
    """DVAE codes (T_codes,) of one utterance's audio (1, 1, T_samples), unpadded: the DVAE mel (fp32, autocast
    off) -> the DVAE encoder and nearest code (fp32, autocast off). T_codes = ceil((T_samples // 256 + 1) / 4)."""
    return dvae.codes(mel(audio, norms))[0]


def code_count(samples: int, arch: XttsArch) -> int:
    """Codes of ``samples`` of audio: centred STFT frames, then halved ``dvae_num_layers`` times (rounding up)."""
    frames = samples // DVAE_STFT["hop_length"] + 1
    return -(-frames // 2**arch.dvae_num_layers)


class CodesOfAudio:
    """``prepare``'s compute function: float32 audio (T_samples,) -> int16 codes (T_codes,), on the CPU."""

    def __init__(self, folder: Path, arch: XttsArch) -> None:
        from speechtrain.models.xtts.checkpoint import load_dvae

        self.dvae, self.norms = load_dvae(folder, arch)
        self.mel = dvae_mel(arch.n_mels, arch.input_sample_rate)
        self.dtype = code_dtype(arch)

    def __call__(self, audio: np.ndarray) -> np.ndarray:
        wav = torch.from_numpy(np.ascontiguousarray(audio, dtype=np.float32))[None, None]  # (1, 1, T_samples)
        return utterance_codes(self.dvae, self.mel, self.norms, wav).to(self.dtype).numpy()  # (T_codes,)


def derived_features(model: XttsConfig, data: DataConfig) -> list[DerivedFeature]:
    """The family's hook: the DVAE codes, with ``model.stores_codes`` (codes=utterance, cache_codes) and a
    checkpoint folder (written first with random weights when ``model.random_checkpoint`` asks, as the task
    would). None without a folder (a run's config.yaml away from it): the task then computes them on the
    device."""
    from speechtrain.models.xtts.build import checkpoint_folder
    from speechtrain.models.xtts.checkpoint import read_config_and_vocab

    if not model.stores_codes:
        return []
    folder = checkpoint_folder(model)
    if folder is None or (model.arch is not None and not folder.is_dir()):
        return []
    arch = read_config_and_vocab(folder).arch  # UserError for an incomplete or foreign folder
    if data.sample_rate != arch.input_sample_rate:
        raise UserError(
            f"data.sample_rate={data.sample_rate}, but XTTS's DVAE reads {arch.input_sample_rate} Hz audio: set "
            f"data.sample_rate={arch.input_sample_rate}"
        )
    settings = {
        "version": CODES_VERSION,
        "dvae.pth": file_digest(str(folder / "dvae.pth")),
        "mel_stats.pth": file_digest(str(folder / "mel_stats.pth")),
        "dvae": {k: getattr(arch, k) for k in DVAE_ARCH_KEYS},
        "mel": dvae_mel_settings(arch.n_mels, arch.input_sample_rate),
    }

    where = folder

    def load() -> Compute:
        return CodesOfAudio(where, arch)

    return [DerivedFeature("codes", settings, load, description="DVAE codes")]
