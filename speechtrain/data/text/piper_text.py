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


def piper_phonemes(text: str, voice: str) -> list[list[str]]:
    """Piper's phonemes of ``text``, one list per sentence (``EspeakPhonemizer.phonemize``, no vowel clusters)."""
    try:
        from piper.phonemize_espeak import EspeakPhonemizer
    except ImportError:
        raise UserError(f"data.phonemizer=piper needs the piper-tts package: {INSTALL_HINT}") from None
    with _lock:  # one espeak-ng instance in the process; it is not re-entrant
        if not _phonemizer:
            _phonemizer.append(EspeakPhonemizer())
        try:
            return [s for s in _phonemizer[0].phonemize(voice, text) if s]
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
