"""What a task can do beyond training: the capability contracts, one typed Protocol each.

Training needs only the :class:`speechtrain.train.task.Task` methods. Everything else a family offers is one of
these Protocols, declared by name in its :class:`speechtrain.registry.Family` (``offers``) and checked against the
family's task class when the family registers (:func:`check_offers`: every member of every declared Protocol
must be there), so that the inference recipe, the command line, the web UI, ``rtf``, ``export`` and the docs'
matrix all ask the same question the same way: ``isinstance(task, Synthesizer)``, never ``hasattr``.

========================  ===========================================================================
``synthesize``            :class:`Synthesizer`: text -> audio (``speechtrain synthesize``, the UI's Synthesize, ``rtf``)
``vocode``                :class:`Vocoder`: log-mel -> audio (``speechtrain vocode``, the UI's Vocode, ``rtf``)
``vocode_f0``             :class:`PitchVocoder`: log-mel + f0 -> audio, and f0 measured from audio (NSF)
``classify``              :class:`Classifier`: audio -> label and class probabilities
``export``                :class:`Exporter`: the run written in its original published layout
``shared_setup``          :class:`SharedSetup` (a tune/train hook): what ``setup`` fitted made equal on every rank
``fsdp_forward_methods``  :class:`ShardedForwards`: methods other than ``forward`` that read sharded weights
``fold_for_inference``    :class:`FoldsForInference`: modules made cheaper once training is over
``text_vocabulary``       :class:`TextVocabulary`: the number of text ids a task reads (synthetic batches)
========================  ===========================================================================

This module imports no torch (the registry, which a config read uses, checks with it).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import numpy as np


@runtime_checkable
class Synthesizer(Protocol):
    """Text to speech. ``synthesize`` returns 1-D float32 audio at ``output_sample_rate``; ``synthesize_options``
    names the keywords it takes (the command line passes only the flags given, each family sees its own)."""

    synthesize_options: tuple[str, ...]

    @property
    def output_sample_rate(self) -> int: ...

    def synthesize(self, text: str, **options: Any) -> np.ndarray: ...


@runtime_checkable
class Vocoder(Protocol):
    """Log-mel (n_mels, T_frames), natural log, the run's data settings -> 1-D float32 audio at the run's rate."""

    def vocode(self, mel: Any) -> np.ndarray: ...


@runtime_checkable
class PitchVocoder(Protocol):
    """A vocoder that also needs f0 per mel frame (Hz, 0 = unvoiced): ``vocode(mel, f0)``; ``f0_from_audio``
    measures it from a waveform as ``prepare`` does (copy-synthesis, the UI's Vocode)."""

    def vocode(self, mel: Any, f0: Any = None) -> np.ndarray: ...

    def f0_from_audio(self, audio: Any) -> np.ndarray: ...


@runtime_checkable
class Classifier(Protocol):
    """One clip (a path, or mono samples at ``sample_rate``) -> (label, {label: probability})."""

    def classify(self, audio: Any, sample_rate: int | None = None) -> tuple[str, dict[str, float]]: ...


@runtime_checkable
class Exporter(Protocol):
    """The trained run in its original layout (``export_format`` says which) written to ``out_dir``."""

    export_format: str

    def export(self, out_dir: str | os.PathLike[str]) -> Path: ...


@runtime_checkable
class SharedSetup(Protocol):
    """A task whose ``setup`` fits something that must be identical on every rank (GPT-TTS's codebook: k-means
    sums are not bit-reproducible on GPUs). ``setup`` stays free of collectives (the estimate sets a fresh task up
    on one rank alone); the recipes call ``share_setup`` on every rank at the same point after it."""

    def share_setup(self) -> None: ...


@runtime_checkable
class ShardedForwards(Protocol):
    """Under FSDP2 a module's parameters are whole only inside its ``forward``; a task that calls other methods
    of a sharded module (XTTS's ``gpt.conditioning_latents`` before the forward, ``gpt.generate`` in its eval
    audio) names them, module by module, and the trainer registers them as forward methods."""

    def fsdp_forward_methods(self) -> dict[str, tuple[str, ...]]: ...


@runtime_checkable
class FoldsForInference(Protocol):
    """A task whose modules can be made cheaper once training is over (HiFi-GAN: weight norm folded into the
    weights: the same outputs without the per-call recompute). The inference recipe calls it before vocoding;
    the modules cannot be trained afterwards."""

    def fold_for_inference(self) -> None: ...


@runtime_checkable
class TextVocabulary(Protocol):
    """A task that reads text token ids from the batch: how many ids its text embedding takes (synthetic batches,
    the memory estimate's, draw their ids below it)."""

    @property
    def text_vocab_size(self) -> int: ...


@runtime_checkable
class SpeakerEmbedder(Protocol):
    """A task with a speaker encoder of its own (XTTS): ``speaker_embedding(audio, sample_rate)`` -> a vector, what
    the quality metric ``speaker_sim`` compares (synthesis vs recording). Asked with ``isinstance`` by the quality
    scorer; no command of its own, so not in :data:`CAPABILITIES`."""

    def speaker_embedding(self, audio: np.ndarray, sample_rate: int) -> np.ndarray: ...


#: capability name (as a family declares it) -> its Protocol
CAPABILITIES: dict[str, type] = {
    "synthesize": Synthesizer,
    "vocode": Vocoder,
    "vocode_f0": PitchVocoder,
    "classify": Classifier,
    "export": Exporter,
    "shared_setup": SharedSetup,
    "fsdp_forward_methods": ShardedForwards,
    "fold_for_inference": FoldsForInference,
    "text_vocabulary": TextVocabulary,
}

#: the inference verb (command and UI button) of each capability that has one
VERBS = {"synthesize": "synthesize", "vocode": "vocode", "vocode_f0": "vocode", "classify": "classify"}


def members(protocol: type) -> list[str]:
    """The attributes and methods a class must have to satisfy ``protocol``."""
    names = set(getattr(protocol, "__annotations__", {}))
    for name, value in vars(protocol).items():
        if not name.startswith("_") and (callable(value) or isinstance(value, property)):
            names.add(name)
    return sorted(names)


def missing(cls: type, protocol: type) -> list[str]:
    """The members of ``protocol`` that ``cls`` (a task class) lacks."""
    return [name for name in members(protocol) if getattr(cls, name, None) is None]


def offered(cls: type) -> list[str]:
    """The capability names ``cls`` satisfies (a user's task class, which no family entry declares)."""
    return [name for name, protocol in CAPABILITIES.items() if not missing(cls, protocol)]


def check_offers(family: str, cls: type, offers: tuple[str, ...]) -> None:
    """TypeError when ``cls`` (family ``family``'s task class) lacks a member of a capability it declares, or
    when a name is not a capability."""
    problems = []
    for name in offers:
        if name not in CAPABILITIES:
            problems.append(f"'{name}' is not a capability ({', '.join(CAPABILITIES)})")
            continue
        lacking = missing(cls, CAPABILITIES[name])
        if lacking:
            problems.append(f"it offers '{name}' but {cls.__name__} has no {', '.join(lacking)}")
    if problems:
        raise TypeError(f"model family '{family}': " + "; ".join(problems))
