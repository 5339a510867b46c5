"""``data.phonemizer=piper``: the phoneme ids a Piper voice will read at inference, made by Piper's own code.

Piper's runtime (``piper-tts``: ``PiperVoice.phonemize`` -> ``EspeakPhonemizer.phonemize`` and
``phoneme_ids.phonemes_to_ids``) gives espeak-ng the text as typed, splits it into sentences at espeak's
sentence ends, decomposes each sentence's phonemes into NFD code points and reads each sentence as
``^ _ p1 _ p2 _ ... pn _ $``; its trainer concatenates the sentences of one transcript. This front end writes
that very sequence as the symbol string (one code point each, markers included), so that a run trains on
the ids Piper computes from the same text: its VITS reads the string as it is (``model.add_blank=false``: the
``_`` are Piper's blanks) and the export's ``phoneme_id_map`` is the run's symbol table. None of speechtrain's
own normalisations run (Piper does none): a tutuq written U+02BC is read by espeak-ng as Piper reads it.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Container
from contextlib import AbstractContextManager
from typing import Any

from speechtrain.errors import UserError

PAD, BOS, EOS = "_", "^", "$"  # piper/const.py
INSTALL_HINT = "pip install 'speechtrain[export]'  (piper-tts: Piper's espeak-ng phonemizer)"
_lock = threading.Lock()
_phonemizer: list[Any] = []


def piper_voice(language: str) -> str:
    """The espeak-ng voice Piper's config names for ``data.language`` (``uz-Latn`` -> ``uz``, ``en`` -> ``en-us``)."""
    from speechtrain.data.text.phonemize import VOICE_OF

    code = language.lower().replace("_", "-")
    return VOICE_OF.get(code, code if code in ("pt-br", "en-gb", "es-419") else code.split("-")[0])


class _Started:
    """``espeakbridge.initialize`` once espeak-ng runs in Piper's bridge: starting it again does nothing.

    espeak-ng 1.52 (statically linked in ``piper/espeakbridge.so``) frees its phoneme tables when it is initialized
    again, but the voice set before keeps pointing into the freed block: setting that voice again and phonemizing
    reads freed memory (valgrind: invalid reads in ``TranslateRules``, ``SetWordStress``), which gives garbage
    phonemes, or SIGSEGV in ``ReInterpretPhoneme`` once something else has written there. ``EspeakPhonemizer()``
    initializes every time it is constructed, and piper-tts constructs one in ``PiperVoice`` and in its trainer's
    data module (tests and benches construct their own): the first start is kept and every later one skipped.
    """

    def __init__(self, data_dir: str) -> None:
        self.data_dir = data_dir

    def __call__(self, data_dir: str) -> None:
        if data_dir != self.data_dir:
            raise RuntimeError(
                f"Piper's espeak-ng runs with the data in {self.data_dir}; restarting it with {data_dir} would free "
                "the phoneme tables its voices point into (one espeak-ng data folder per process)"
            )


def _start_once(bridge: Any, data_dir: str) -> None:
    """espeak-ng in Piper's bridge started unless it runs already (a ``PiperVoice`` or an ``EspeakPhonemizer``
    started it: its sample rate is set then), and never again in the process."""
    import ctypes

    if isinstance(bridge.initialize, _Started):
        return
    if ctypes.CDLL(bridge.__file__).espeak_ng_GetSampleRate() <= 0:  # the loaded bridge itself: 0 until started
        bridge.initialize(data_dir)
    bridge.initialize = _Started(data_dir)


def piper_espeak() -> Any:
    """Piper's ``EspeakPhonemizer``, one per process, espeak-ng started once (see :func:`_start_once`): call its
    ``phonemize`` under :func:`espeak_lock`."""
    try:
        from piper import espeakbridge
        from piper.phonemize_espeak import ESPEAK_DATA_DIR, EspeakPhonemizer
    except ImportError:
        raise UserError(f"data.phonemizer=piper needs the piper-tts package: {INSTALL_HINT}") from None
    with espeak_lock():
        if not _phonemizer:
            _start_once(espeakbridge, str(ESPEAK_DATA_DIR))
            _phonemizer.append(EspeakPhonemizer())
        return _phonemizer[0]


def espeak_lock() -> AbstractContextManager[Any]:
    """The lock ``PiperVoice.phonemize`` holds around espeak-ng (``set_voice`` then ``get_phonemes`` must not
    interleave across threads); ours where piper-tts has none."""
    from piper import voice

    return getattr(voice, "_ESPEAK_PHONEMIZER_LOCK", _lock)


def piper_phonemes(text: str, voice: str) -> list[list[str]]:
    """Piper's phonemes of ``text``, one list per sentence (``EspeakPhonemizer.phonemize``, no vowel clusters)."""
    phonemizer = piper_espeak()
    with espeak_lock():
        try:
            return [s for s in phonemizer.phonemize(voice, text) if s]
        except RuntimeError as exc:  # espeakbridge: "Failed to set voice: xx"
            raise UserError(
                f"data.phonemizer=piper: Piper's espeak-ng cannot read voice {voice!r} ({exc}); set data.language to "
                "a language espeak-ng has (en, uz, am, ru, pt-BR, ...)"
            ) from None


def piper_sequence(sentences: list[list[str]]) -> str:
    """The symbols Piper's ``phonemes_to_ids`` reads, sentence after sentence: ``^ _ p1 _ ... pn _ $``."""
    return "".join(BOS + PAD + "".join(p + PAD for p in sentence) + EOS for sentence in sentences)


def piper_symbols(text: str, language: str) -> str:
    """``text`` as the symbol string of Piper's ids (see the module doc)."""
    return piper_sequence(piper_phonemes(text, piper_voice(language)))


def runtime_sentences(symbols: str, known: Container[str]) -> tuple[list[str], Counter[str]]:
    """A symbol string of this front end as Piper's runtime reads it: one ``^ _ p1 _ ... pn _ $`` string per sentence
    (Piper speaks each sentence apart, and so does sherpa-onnx), each phoneme its id map lacks (not ``known``)
    dropped with the pad after it, as ``phonemes_to_ids`` skips it; and the dropped phonemes with counts."""
    sentences, dropped = [], Counter[str]()
    for chunk in symbols.split(EOS):
        if not chunk:
            continue
        body = chunk[2:] if chunk.startswith(BOS + PAD) else chunk
        pairs = [(body[i], body[i + 1 : i + 2]) for i in range(0, len(body), 2)]
        kept = []
        for phoneme, pad in pairs:
            if phoneme in known and pad == PAD:
                kept.append(phoneme)
            else:
                dropped[phoneme] += 1
        sentences.append(BOS + PAD + "".join(p + PAD for p in kept) + EOS)
    return sentences, dropped
