"""The text front end: a transcript -> the string of symbols a model reads (one symbol per code point).

Steps, in order:

1. Unicode NFC (a letter and its combining accent become the one precomposed letter), then the
   compatibility forms of NFKC: full-width and half-width letters, ligatures (``ﬁ`` -> ``fi``), circled and
   super-/subscript digits, Arabic presentation forms, no-break spaces, fractions. Left alone: Hangul
   compatibility jamo, the ordinal indicators ª º and the micro sign µ (NFKC would change their reading).
2. Characters that are not speech are removed and *reported* (:attr:`Processed.unmapped`; the report
   says which class each one is): format and invisible characters (ZWJ, ZWNJ, LRM/RLM, soft hyphen,
   zero-width space, byte-order mark), emoji with their joiners and variation selectors, the Arabic
   tatweel (it stretches a letter, it is not a sound), control, private-use and unassigned code points,
   U+FFFD from a decoding accident.
3. The language's cleaners (``data.language``, a BCP-47 code):
   ``uz`` / ``uz-Latn`` / ``uz-Cyrl``: apostrophes of oʻ gʻ and the tutuq belgisi as one symbol each
   (word-final oʻ gʻ too); with ``data.transliterate`` Cyrillic to Latin. ``am``: Ethiopic punctuation,
   numbers as words. Any other code (``und`` included): the generic rules only.
4. Generic rules: typographic quotes and dashes to ``' " -``, ``…`` to ``...``, runs of white space
   to one space; with ``data.strip_accents`` accents removed (``café`` -> ``cafe``); with
   ``data.lowercase`` lower case (Turkish and Azerbaijani dotted/dotless i kept apart; ``İ`` is ``i``
   elsewhere). With ``data.phonemizer=espeak`` case is left to espeak-ng (its phonemes have no case,
   and "US" is read differently from "us"). Nothing else is changed: Ethiopic syllables, Cyrillic
   letters and ʻ ʼ are symbols like any other.
5. ``data.phonemizer``: ``none`` (the characters), ``espeak`` (IPA from espeak-ng; the punctuation of
   scripts espeak-ng drops, such as Arabic ``، ؟``, Devanagari ``।``, Urdu ``۔``, CJK ``，。？`` and Armenian
   ``։ ՞``, is given to it as ``, ? . ? :`` so questions and sentence ends survive; a mark it still drops
   is reported), ``rules`` (the language's own G2P: ``am``) or ``piper`` (Piper's own espeak-ng phonemes and
   id layout, from the text as typed: steps 1-4 are skipped, as Piper's runtime does none of them;
   :mod:`speechtrain.data.text.piper_text`).
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any

from speechtrain.data.text import amharic, uzbek
from speechtrain.data.text.scripts import EMOJI_JOINERS, is_emoji
from speechtrain.errors import UserError

if TYPE_CHECKING:
    from speechtrain.config import DataConfig

PHONEMIZERS = ("none", "espeak", "rules", "piper")
FRONT_END_VERSION = 2
RULE_G2P = {"am": amharic.g2p}  # language -> its rule-based G2P (data.phonemizer=rules)

_TRANSLATE = str.maketrans(
    {
        "\u2018": "'",
        "\u2019": "'",
        "\u201a": "'",
        "\u2032": "'",
        "`": "'",
        "\u201c": '"',
        "\u201d": '"',
        "\u201e": '"',
        "\u00ab": '"',
        "\u00bb": '"',
        "\u2013": "-",
        "\u2014": "-",
        "\u2212": "-",
        "\u2026": "...",
    }
)
_SPACES = re.compile(r"\s+")
_REMOVED_CATEGORIES = ("Cc", "Co", "Cn", "Cs", "Cf")
TATWEEL = "\u0640"
#: compatibility characters NFKC would change in a way that changes the reading
_KEEP_COMPAT = {"\u00aa", "\u00ba", "\u00b5"} | {chr(c) for c in range(0x3130, 0x3190)}
_AFTER_COMPAT = str.maketrans({"\u2044": "/"})  # the fraction slash of 1⁄2


def compat_fold(text: str) -> str:
    """Step 1's compatibility forms (NFKC on the characters that have a compatibility decomposition)."""
    if text.isascii():
        return text
    out = []
    changed = False
    for c in text:
        if ord(c) > 0x7F and c not in _KEEP_COMPAT and unicodedata.decomposition(c).startswith("<"):
            folded = unicodedata.normalize("NFKC", c)
            if len(folded) > 1 and folded[0] == " ":  # a spacing accent (´ ¨ ˜): a space + a combining mark
                out.append(c)
                continue
            out.append(folded)
            changed = True
        else:
            out.append(c)
    return unicodedata.normalize("NFC", "".join(out)).translate(_AFTER_COMPAT) if changed else text


def removable(c: str) -> bool:
    """Step 2: a character that cannot stand for speech."""
    if c.isascii():
        return c != " " and not c.isprintable() and not c.isspace()
    if c.isspace():
        return False
    return (
        unicodedata.category(c) in _REMOVED_CATEGORIES
        or c == "\ufffd"
        or c == TATWEEL
        or is_emoji(c)
        or c in EMOJI_JOINERS
    )


def lower(text: str, language: str) -> str:
    """Lower case for ``language`` (primary subtag): Turkish/Azerbaijani I -> ı, İ -> i; elsewhere İ -> i
    (``str.lower`` would give i + U+0307)."""
    if language in ("tr", "az"):
        text = text.replace("I", "\u0131").replace("\u0130", "i")
    return text.replace("\u0130", "i").lower()


def primary_language(language: str) -> str:
    """``uz`` of ``uz-Cyrl``; lower case."""
    return language.replace("_", "-").split("-")[0].lower()


@dataclass(frozen=True)
class TextSettings:
    """What turns a transcript into symbols (recorded with the cache and the run)."""

    language: str = "und"
    phonemizer: str = "none"
    lowercase: bool = True
    strip_accents: bool = False
    transliterate: bool = False
    #: the front end's rules: 2 (this module); 1 for caches and runs made before compatibility forms,
    #: removals and case after espeak-ng (read as 1, and then lower case goes before espeak-ng as it did)
    front_end: int = FRONT_END_VERSION

    @classmethod
    def from_data(cls, data: DataConfig) -> TextSettings:
        return cls(data.language, data.phonemizer, data.lowercase, data.strip_accents, data.transliterate)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> TextSettings:
        return cls(**{"front_end": 1, **{f.name: raw[f.name] for f in fields(cls) if f.name in raw}})

    def check(self) -> None:
        """UserError for settings that cannot work (before any data or GPU work)."""
        lang = primary_language(self.language)
        if self.phonemizer not in PHONEMIZERS:
            raise UserError(f"data.phonemizer={self.phonemizer!r}: valid are {', '.join(PHONEMIZERS)}")
        if self.phonemizer == "rules" and lang not in RULE_G2P:
            raise UserError(
                f"data.phonemizer=rules: there is no rule-based G2P for data.language={self.language!r} "
                f"(languages with one: {', '.join(sorted(RULE_G2P))}); use data.phonemizer=espeak or none"
            )
        if self.transliterate and lang != "uz":
            raise UserError(
                f"data.transliterate: only Uzbek (uz, uz-Cyrl) has a transliteration, not {self.language!r}"
            )


@dataclass
class Processed:
    """One transcript through the front end: the symbols, and what could not be mapped."""

    symbols: str
    unmapped: Counter[str] = field(default_factory=Counter)


def legacy_normalize(text: str, lowercase: bool = True) -> str:
    """The normalisation of runs from before learned symbols (quotes/dashes to ASCII, accents
    stripped with NFKD, spaces collapsed)."""
    text = text.translate(_TRANSLATE)
    text = "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))
    text = _SPACES.sub(" ", text).strip()
    return text.lower() if lowercase else text


class TextFrontEnd:
    """Transcripts -> symbol strings for one :class:`TextSettings` (see the module doc)."""

    def __init__(self, settings: TextSettings | None = None) -> None:
        self.settings = settings or TextSettings()
        self.settings.check()
        self.language = primary_language(self.settings.language)

    def normalize(self, text: str) -> Processed:
        """Steps 1-4 (no phonemes); none for ``piper``, whose runtime gives the text to espeak-ng as typed."""
        s = self.settings
        if s.phonemizer == "piper":
            return Processed(text)
        text = compat_fold(unicodedata.normalize("NFC", text))
        unmapped: Counter[str] = Counter()
        if not text.isascii() or not text.isprintable():
            kept = []
            for c in text:
                if removable(c):
                    unmapped[c] += 1
                else:
                    kept.append(c)
            text = "".join(kept)
        if self.language == "uz":
            text = uzbek.unify_apostrophes(text)
            if s.transliterate:
                text = uzbek.cyrillic_to_latin(text)
        elif self.language == "am":
            text = amharic.clean(text)
        text = text.translate(_TRANSLATE)
        if s.strip_accents:
            text = "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))
        text = _SPACES.sub(" ", text).strip()
        if s.lowercase and (s.phonemizer != "espeak" or s.front_end < 2):
            text = lower(text, self.language)
        return Processed(text, unmapped)

    def process_many(self, texts: list[str]) -> list[Processed]:
        """Every step for each text; phonemizers run once over all of them."""
        out = [self.normalize(t) for t in texts]
        if self.settings.phonemizer == "rules":
            g2p = RULE_G2P[self.language]
            for p in out:
                p.symbols = g2p(p.symbols)
        elif self.settings.phonemizer == "piper":
            from speechtrain.data.text.piper_text import piper_symbols

            for p in out:
                p.symbols = piper_symbols(p.symbols, self.settings.language)
        elif self.settings.phonemizer == "espeak":
            from speechtrain.data.text.phonemize import phonemize, punctuation_lost

            todo = [i for i, p in enumerate(out) if p.symbols]
            phones = phonemize([out[i].symbols for i in todo], self.settings.language)
            for i, ph in zip(todo, phones):
                out[i].unmapped.update(punctuation_lost(out[i].symbols, ph, self.settings.language))
                out[i].symbols = ph
        return out

    def process(self, text: str) -> Processed:
        """Every step for one text."""
        return self.process_many([text])[0]

    def __call__(self, text: str) -> str:
        """The symbol string of ``text``."""
        return self.process(text).symbols


def normalize_text(
    text: str, lowercase: bool = True, language: str = "und", strip_accents: bool = False, transliterate: bool = False
) -> str:
    """``text`` after steps 1-4 of the front end (see the module doc)."""
    settings = TextSettings(language, "none", lowercase, strip_accents, transliterate)
    return TextFrontEnd(settings).normalize(text).symbols
