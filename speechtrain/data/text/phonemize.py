"""Phonemes through espeak-ng (``data.phonemizer=espeak``), for every language espeak-ng has.

The library and its voice data come from the ``espeakng-loader`` package (no system install), driven
by ``phonemizer``; both are in the ``phonemes`` extra (``pip install 'speechtrain[phonemes]'``) and
in ``dev``. Without ``espeakng-loader`` a system espeak-ng is used when phonemizer finds one.

The voice is chosen from ``data.language``: ``en`` -> ``en-us``, ``uz``/``uz-Latn``/``uz-Cyrl`` -> ``uz``,
otherwise the code itself (``pt-BR`` -> ``pt-br``) or its language part (``am-ET`` -> ``am``). Output:
IPA with stress marks and the punctuation kept. espeak-ng marks where it switched to another language's
reading (``(en)`` ... ``(ja)``: the English names of letters it has no rules for, "Chinese letter" for
kanji, "Hebrew qamats" for niqqud, "slash" for ``/``): :func:`read` returns those spans beside the
phonemes (the flags themselves are removed) so that prepare can report the utterance.
Uzbek is given to espeak in Latin with ``'`` for ʻ and ʼ, the only forms its voice reads.

espeak-ng keeps only the marks ``; : , . ! ? ¡ ¿ — … " « » “ ” ( ) { } [ ]``: the punctuation of other
scripts (:data:`SCRIPT_PUNCTUATION`: Arabic, Urdu, Devanagari, CJK, Armenian, Ethiopic, Myanmar,
Khmer ...) is given to it as the mark that means the same, so that questions and sentence ends are not
lost; Armenian's ՞, written over the stressed vowel, moves to the end of its word.
:func:`punctuation_lost` counts what espeak-ng still dropped (prepare reports it).
"""

from __future__ import annotations

import re
import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from speechtrain.errors import UserError
from speechtrain.logs import get_logger

log = get_logger(__name__)

INSTALL_HINT = "pip install 'speechtrain[phonemes]'  (phonemizer + espeakng-loader: espeak-ng and its voices)"
VOICE_OF = {"en": "en-us", "uz": "uz", "uz-latn": "uz", "uz-cyrl": "uz", "zh": "cmn", "zh-cn": "cmn"}
#: the marks espeak-ng keeps (phonemizer's preserve_punctuation set)
KEPT_MARKS = frozenset(';:,.!?¡¿—…"«»“”(){}[]')
#: punctuation of scripts espeak-ng drops -> the kept mark that means the same
SCRIPT_PUNCTUATION = {
    "\u060c": ",",  # ، Arabic comma
    "\u061b": ";",  # ؛ Arabic semicolon
    "\u061f": "?",  # ؟ Arabic question mark
    "\u06d4": ".",  # ۔ Urdu full stop
    "\u0964": ".",  # । danda
    "\u0965": ".",  # ॥ double danda
    "\u0589": ".",  # ։ Armenian full stop
    "\u055d": ",",  # ՝ Armenian comma
    "\u055c": "!",  # ՜ Armenian exclamation
    "\u055e": "?",  # ՞ Armenian question mark (moved to the word's end)
    "\u3002": ".",  # 。
    "\u3001": ",",  # 、
    "\uff0c": ",",  # ，
    "\uff0e": ".",
    "\uff1f": "?",  # ？
    "\uff01": "!",  # ！
    "\uff1a": ":",  # ：
    "\uff1b": ";",  # ；
    "\u1362": ".",  # ። Ethiopic full stop
    "\u1363": ",",  # ፣
    "\u1364": ";",  # ፤
    "\u1365": ":",  # ፥
    "\u1366": ":",  # ፦
    "\u1367": "?",  # ፧
    "\u1368": ".",  # ፨
    "\u1361": " ",  # ፡ word space
    "\u104a": ",",  # ၊ Myanmar
    "\u104b": ".",  # ။
    "\u17d4": ".",  # ។ Khmer
    "\u17d5": ".",  # ៕
    "\u0387": ";",  # · Greek ano teleia
    "\u037e": "?",  # ; Greek question mark (NFC makes it ';', see espeak_input)
    "\u05c3": ".",  # ׃ Hebrew sof pasuq
    "\u0f0d": ".",  # ། Tibetan shad
    "\u0e5a": ".",  # ๚ Thai
    "\u203c": "!",  # ‼
    "\u2047": "?",  # ⁇
    "\u2048": "?",  # ⁈
    "\u2049": "!",  # ⁉
    "\u203d": "?",  # ‽
}
_SCRIPT_PUNCT = str.maketrans(SCRIPT_PUNCTUATION)
_ARMENIAN_QUESTION = re.compile("(\\w*)\u055e(\\w*)")

_backends: dict[str, Any] = {}
_lock = threading.Lock()


def _phonemizer() -> Any:
    """The phonemizer package with espeak-ng set up (the packaged library when installed)."""
    try:
        from phonemizer.backend import EspeakBackend
        from phonemizer.backend.espeak.wrapper import EspeakWrapper
    except ImportError:
        raise UserError(f"data.phonemizer=espeak needs the phonemizer package: {INSTALL_HINT}") from None
    try:
        import espeakng_loader
    except ImportError:
        espeakng_loader = None
    if espeakng_loader is not None:
        EspeakWrapper.set_library(espeakng_loader.get_library_path())
        EspeakWrapper.set_data_path(espeakng_loader.get_data_path())
    return EspeakBackend


def espeak_voices() -> dict[str, str]:
    """espeak-ng's language codes -> names (UserError when espeak-ng cannot be loaded)."""
    backend = _phonemizer()
    try:
        return dict(backend.supported_languages())
    except RuntimeError as exc:
        raise UserError(f"espeak-ng could not be loaded ({exc}); {INSTALL_HINT}") from None


def espeak_voice(language: str) -> str:
    """The espeak-ng voice of a BCP-47 code (UserError naming close voices when there is none)."""
    code = language.lower().replace("_", "-")
    if code in ("", "und"):
        raise UserError("data.phonemizer=espeak needs data.language (a BCP-47 code such as en, uz, am)")
    voices = espeak_voices()
    for candidate in (VOICE_OF.get(code), code, VOICE_OF.get(code.split("-")[0]), code.split("-")[0]):
        if candidate and candidate in voices:
            return candidate
    import difflib

    close = difflib.get_close_matches(code, list(voices), n=5, cutoff=0.4)
    raise UserError(
        f"espeak-ng has no voice for data.language={language!r}"
        + (f" (close: {', '.join(close)})" if close else "")
        + "; set data.phonemizer=none to train on characters"
    )


def _backend(voice: str) -> Any:
    with _lock:
        if voice not in _backends:
            backend_cls = _phonemizer()
            try:
                _backends[voice] = backend_cls(
                    voice,
                    preserve_punctuation=True,
                    with_stress=True,
                    language_switch="keep-flags",
                    words_mismatch="ignore",
                    logger=log,
                )
            except RuntimeError as exc:
                raise UserError(f"espeak-ng could not start voice {voice!r} ({exc}); {INSTALL_HINT}") from None
        return _backends[voice]


def espeak_input(texts: Sequence[str], voice: str) -> list[str]:
    """Texts as the voice reads them: script punctuation as the marks espeak-ng keeps (Armenian ՞ at the
    end of its word); Greek ``;`` (the NFC form of its question mark) as ``?``; Uzbek in Latin script
    with ``'`` for ʻ and ʼ."""
    out = []
    for t in texts:
        if "\u055e" in t:
            t = _ARMENIAN_QUESTION.sub(lambda m: m.group(1) + m.group(2) + "?", t)
        t = t.translate(_SCRIPT_PUNCT)
        if voice == "el":
            t = t.replace(";", "?")
        if voice == "uz":
            from speechtrain.data.text.uzbek import OKINA, TUTUQ, cyrillic_to_latin, has_cyrillic

            if has_cyrillic(t):
                t = cyrillic_to_latin(t)
            t = t.replace(OKINA, "'").replace(TUTUQ, "'")
        out.append(t)
    return out


def punctuation_lost(text: str, phonemes: str, language: str) -> Counter[str]:
    """The marks of ``text`` (as given to espeak-ng's voice for ``language``, script punctuation mapped)
    missing from its phonemes."""
    voice = VOICE_OF.get(language.lower(), language.lower().split("-")[0])
    given = Counter(c for c in "".join(espeak_input([text], voice)) if c in KEPT_MARKS)
    if not given:
        return Counter()
    kept = Counter(c for c in phonemes if c in KEPT_MARKS)
    return given - kept


_FLAG = re.compile(r"\(([a-z]{2,3}(?:-[a-z0-9]+)*)\)")
#: espeak-ng's "letter" (said before the code point of a character it has no rule for, and in "Chinese letter"),
#: as the voices say it: lˈetə, lˈe̞tə, ɭˈetə, lˈetʌ (English's own word "letter", lˈɛɾɚ, is not matched)
LETTER_WORD = re.compile("[lɭ]ˈe\u031e?t[əʌ]")


@dataclass
class Reading:
    """espeak-ng's reading of one text: the phonemes, and the spans it read in another language's voice."""

    phonemes: str
    switched: list[tuple[str, str]] = field(default_factory=list)  # (language flag, phonemes read in it)

    @property
    def letter_names(self) -> int:
        """How often espeak-ng said "letter" (a character read by its name or code point, not as a sound)."""
        return len(LETTER_WORD.findall(self.phonemes))

    @property
    def failed(self) -> bool:
        """A reading that is not the text's sound: nothing, a language switch, or letter names."""
        return not self.phonemes or bool(self.switched) or self.letter_names > 0


def parse_flags(raw: str, voice: str) -> Reading:
    """Phonemes with espeak-ng's language-switch flags removed, and the spans read in another language."""
    own = voice.split("-")[0]
    parts = _FLAG.split(raw)
    phonemes, switched = [parts[0]], []
    for flag, span in zip(parts[1::2], parts[2::2]):
        phonemes.append(span)
        if flag.split("-")[0] != own and span.strip():
            switched.append((flag, span.strip()))
    return Reading(" ".join("".join(phonemes).split()), switched)


def _raw_phonemes(backend: Any, texts: list[str]) -> list[str]:
    """One espeak-ng output per text. phonemizer can return more lines than it was given (a clause break inside
    ``5.99.``): then each text goes alone and its lines are joined, so no reading lands on the next text."""
    out = backend.phonemize(texts, strip=True, njobs=1)
    if len(out) == len(texts):
        return list(out)
    return [" ".join(backend.phonemize([t], strip=True, njobs=1)) for t in texts]


def read(texts: Sequence[str], language: str) -> list[Reading]:
    """espeak-ng's reading of each text (one call for all: espeak-ng starts once)."""
    if not texts:
        return []
    voice = espeak_voice(language)
    backend = _backend(voice)
    with _lock:  # one espeak-ng instance per voice; it is not re-entrant
        out = _raw_phonemes(backend, espeak_input(texts, voice))
    return [parse_flags(p, voice) for p in out]


def phonemize(texts: Sequence[str], language: str) -> list[str]:
    """IPA phonemes of each text (language-switch flags removed)."""
    return [r.phonemes for r in read(texts, language)]
