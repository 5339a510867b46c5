"""The text front end: a transcript -> the string of symbols a model reads (one symbol per code point).

Steps, in order:

1. Unicode NFC (a letter and its combining accent become the one precomposed letter).
2. Invisible characters (soft hyphen, zero-width space, byte-order mark, word joiner) are removed;
   characters that cannot stand for speech (control characters, private use, unassigned code
   points, U+FFFD from a decoding accident) are removed and *reported* (:attr:`Processed.unmapped`).
3. The language's cleaners (``data.language``, a BCP-47 code):
   ``uz`` / ``uz-Latn`` / ``uz-Cyrl``: apostrophes of oʻ gʻ and the tutuq belgisi as one symbol each;
   with ``data.transliterate`` Cyrillic to Latin. ``am``: Ethiopic punctuation, numbers as words.
   Any other code (``und`` included): the generic rules only.
4. Generic rules: typographic quotes and dashes to ``' " -``, ``…`` to ``...``, runs of white space
   to one space; with ``data.strip_accents`` accents removed (``café`` -> ``cafe``); with
   ``data.lowercase`` lower case. Nothing else is changed: Ethiopic syllables, Cyrillic letters and
   ʻ ʼ are symbols like any other.
5. ``data.phonemizer``: ``none`` (the characters), ``espeak`` (IPA from espeak-ng) or ``rules``
   (the language's own G2P: ``am``).
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any

from speechtrain.data.text import amharic, uzbek
from speechtrain.errors import UserError

if TYPE_CHECKING:
    from speechtrain.config import DataConfig

PHONEMIZERS = ("none", "espeak", "rules")
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
_INVISIBLE = dict.fromkeys(map(ord, "\u00ad\u200b\u2060\ufeff"))
_SPACES = re.compile(r"\s+")
_UNMAPPABLE_CATEGORIES = ("Cc", "Co", "Cn", "Cs")


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

    @classmethod
    def from_data(cls, data: DataConfig) -> TextSettings:
        return cls(data.language, data.phonemizer, data.lowercase, data.strip_accents, data.transliterate)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> TextSettings:
        return cls(**{f.name: raw[f.name] for f in fields(cls) if f.name in raw})

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
        """Steps 1-4 (no phonemes)."""
        s = self.settings
        text = unicodedata.normalize("NFC", text).translate(_INVISIBLE)
        unmapped: Counter[str] = Counter()
        if any(unicodedata.category(c) in _UNMAPPABLE_CATEGORIES or c == "\ufffd" for c in text):
            kept = []
            for c in text:
                if c.isspace() or not (unicodedata.category(c) in _UNMAPPABLE_CATEGORIES or c == "\ufffd"):
                    kept.append(c)
                else:
                    unmapped[c] += 1
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
        return Processed(text.lower() if s.lowercase else text, unmapped)

    def process_many(self, texts: list[str]) -> list[Processed]:
        """Every step for each text; phonemizers run once over all of them."""
        out = [self.normalize(t) for t in texts]
        if self.settings.phonemizer == "rules":
            g2p = RULE_G2P[self.language]
            for p in out:
                p.symbols = g2p(p.symbols)
        elif self.settings.phonemizer == "espeak":
            from speechtrain.data.text.phonemize import phonemize

            todo = [i for i, p in enumerate(out) if p.symbols]
            phones = phonemize([out[i].symbols for i in todo], self.settings.language)
            for i, ph in zip(todo, phones):
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
