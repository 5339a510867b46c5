"""The text front end: a transcript -> the string of symbols a model reads (one symbol per code point).

Steps, in order:

1. Unicode NFC (a letter and its combining accent become the one precomposed letter), then the
   compatibility forms of NFKC: full-width and half-width letters, ligatures (``ﬁ`` -> ``fi``), circled and
   super-/subscript digits, Arabic presentation forms, no-break spaces, fractions. Left alone, per script
   (:data:`KEEP_COMPAT`, each checked by phonemizing both forms with espeak-ng): Hangul compatibility jamo,
   the ordinal indicators ª º, the micro sign µ and Thai SARA AM ำ (NFKC's NIKHAHIT + SARA AA is read as
   English letter names); with ``data.phonemizer=espeak`` also the vulgar fractions (½ is "a half").
2. Characters that are not speech are removed and *reported* (:attr:`Processed.unmapped`; the report
   says which class each one is): format and invisible characters (ZWJ, ZWNJ, LRM/RLM, soft hyphen,
   zero-width space, byte-order mark), emoji with their joiners and variation selectors, the Arabic
   tatweel (it stretches a letter, it is not a sound), control, private-use and unassigned code points,
   U+FFFD from a decoding accident. ZWNJ is kept where the language writes it inside words
   (:data:`ZWNJ_LANGUAGES`: Persian خانه‌ام "my house" is read apart from خانهام).
3. The language's cleaners (``data.language``, a BCP-47 code): Arabic-script letter variants to the
   language's own forms (:data:`LETTER_FORMS`: Arabic ك ي in Persian or Urdu text -> ک ی; Persian ک ی in
   Arabic text -> ك ي; the report lists them as mapped);
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
   :mod:`speechtrain.data.text.piper_text`). Before espeak-ng, numbers and symbols are
   parsed by the language's conventions and written out where its voice reads them wrong (:mod:`.spoken`;
   front end 3: :mod:`.numbers`); each suspect reading is noted on
   its text (:attr:`Processed.reading`: a language switch, "letter" + a code point, a symbol the voice
   skips, a date, a number with no normaliser, a Hebrew abbreviation) and prepare reports it.
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
    from speechtrain.data.text.phonemize import Reading

PHONEMIZERS = ("none", "espeak", "rules", "piper")
FRONT_END_VERSION = 4
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
_DASH_PAUSE = re.compile(r"(?<=\s)-(?=\s)")
_REMOVED_CATEGORIES = ("Cc", "Co", "Cn", "Cs", "Cf")
TATWEEL = "\u0640"
#: per script, the compatibility characters NFKC would change in a way that changes the reading (checked by
#: phonemizing both forms with espeak-ng: tests/test_text_reading.py); every other fold reads the same or better
KEEP_COMPAT: dict[str, frozenset[str]] = {
    "Latin": frozenset("\u00aa\u00ba\u00b5"),  # ª º: ordinal indicators, not the letters a o; µ: micro, not mu
    "Hangul": frozenset(chr(c) for c in range(0x3130, 0x3190)),  # compatibility jamo: syllable parts
    # SARA AM is one vowel; NFKC's NIKHAHIT + SARA AA is read by espeak-ng as English letter names
    "Thai": frozenset("\u0e33"),
}
_KEEP_COMPAT = frozenset().union(*KEEP_COMPAT.values())
_KEEP_COMPAT_V2 = _KEEP_COMPAT - KEEP_COMPAT["Thai"]  # front end 2 folded SARA AM
#: kept for espeak-ng only: it reads the vulgar fractions as words (½ "a half"); NFKC's 1⁄2 reads "one slash two"
ESPEAK_KEEP_COMPAT = frozenset("\u00bc\u00bd\u00be\u2189") | frozenset(chr(c) for c in range(0x2150, 0x2160))
#: languages whose writing uses ZWNJ between the parts of a word (Persian خانه‌ام "my house" is read apart
#: from خانهام): kept as a symbol there, removed (reported) elsewhere
ZWNJ = "\u200c"
ZWNJ_LANGUAGES = frozenset({"fa", "ps", "ur", "ckb", "ku", "sd", "ug", "ks", "bal", "glk", "mzn", "prs"})
#: Arabic-script letter variants mapped to the declared language's own forms (keyboards of one language type the
#: other's: Arabic ك ي in Persian text); listed in the report as mapped
LETTER_FORMS: dict[str, dict[str, str]] = {
    "fa": {"\u0643": "\u06a9", "\u064a": "\u06cc", "\u0649": "\u06cc"},  # ك ي ى -> ک ی
    "ur": {"\u0643": "\u06a9", "\u064a": "\u06cc", "\u0649": "\u06cc"},
    "ckb": {"\u0643": "\u06a9", "\u064a": "\u06cc", "\u0649": "\u06cc"},
    "ps": {"\u0643": "\u06a9"},  # Pashto's ي is a letter of its own
    "ar": {"\u06a9": "\u0643", "\u06cc": "\u064a"},  # Persian ک ی -> ك ي
}
_LETTER_FORMS = {lang: str.maketrans(table) for lang, table in LETTER_FORMS.items()}
_AFTER_COMPAT = str.maketrans({"\u2044": "/"})  # the fraction slash of 1⁄2


def compat_fold(text: str, keep: frozenset[str] = _KEEP_COMPAT) -> str:
    """Step 1's compatibility forms (NFKC on the characters that have a compatibility decomposition, but
    ``keep``: :data:`KEEP_COMPAT`, whose fold would change the reading)."""
    if text.isascii():
        return text
    out = []
    changed = False
    for c in text:
        if ord(c) > 0x7F and c not in keep and unicodedata.decomposition(c).startswith("<"):
            folded = unicodedata.normalize("NFKC", c)
            if len(folded) > 1 and folded[0] == " ":  # a spacing accent (´ ¨ ˜): a space + a combining mark
                out.append(c)
                continue
            out.append(folded)
            changed = True
        else:
            out.append(c)
    return unicodedata.normalize("NFC", "".join(out)).translate(_AFTER_COMPAT) if changed else text


def removable(c: str, language: str = "und") -> bool:
    """Step 2: a character that cannot stand for speech (in ``language``: ZWNJ is part of Persian words)."""
    if c == ZWNJ and language in ZWNJ_LANGUAGES:
        return False
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
    #: the front end's rules: 4 (this module; numbers and symbols by each language's conventions, :mod:`.spoken`,
    #: espeak-ng's own reading kept where its voice reads a class right); 3 (folds checked against espeak-ng,
    #: Persian ZWNJ, letter forms, numbers by one rule for all, :mod:`.numbers`); a run trained with 2 keeps
    #: 2's reading: NFKC's Thai, ZWNJ removed, letter forms as written,
    #: digits to espeak-ng); 1 for caches and runs made before compatibility forms, removals and case after
    #: espeak-ng (read as 1, and then lower case goes before espeak-ng as it did)
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
    #: why the phonemizer's reading is suspect (a language switch, a number left to espeak-ng's rules ...)
    reading: list[str] = field(default_factory=list)


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
        #: version 3's rules (runs trained with 2 read their text as they were trained)
        self.v3 = self.settings.front_end >= 3
        #: version 4's numbers (runs trained with 3 keep :mod:`.numbers`'s reading)
        self.v4 = self.settings.front_end >= 4
        self.keep = _KEEP_COMPAT_V2
        if self.v3:
            self.keep = _KEEP_COMPAT | (ESPEAK_KEEP_COMPAT if self.settings.phonemizer == "espeak" else frozenset())

    def normalize(self, text: str) -> Processed:
        """Steps 1-4 (no phonemes); none for ``piper``, whose runtime gives the text to espeak-ng as typed."""
        s = self.settings
        if s.phonemizer == "piper":
            return Processed(text)
        text = compat_fold(unicodedata.normalize("NFC", text), self.keep)
        unmapped: Counter[str] = Counter()
        language = self.language if self.v3 else "und"  # ZWNJ removed everywhere before version 3
        if not text.isascii() or not text.isprintable():
            kept = []
            for c in text:
                if removable(c, language):
                    unmapped[c] += 1
                else:
                    kept.append(c)
            text = "".join(kept)
        if self.v3 and self.language in _LETTER_FORMS:
            text = text.translate(_LETTER_FORMS[self.language])
        if self.language == "uz":
            text = uzbek.unify_apostrophes(text)
            if s.transliterate:
                text = uzbek.cyrillic_to_latin(text)
        elif self.language == "am":
            text = amharic.clean(text, forms=self.v4)
        text = text.translate(_TRANSLATE)
        if self.v4 and s.phonemizer == "espeak":  # pauses as the marks espeak-ng keeps (it drops - and ·)
            text = _DASH_PAUSE.sub("\u2014", text)
            if self.language == "el":  # the ano teleia (a middle dot after NFC); ';' would be a question
                text = text.replace("\u00b7", ",")
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
                if self.v4:
                    p.reading += piper_notes(p.symbols, self.settings.language)
                p.symbols = piper_symbols(p.symbols, self.settings.language)
        elif self.settings.phonemizer == "espeak":
            self._espeak(out)
        return out

    def _espeak(self, out: list[Processed]) -> None:
        """Phonemes from espeak-ng, numbers written out first; each suspect reading noted on its text."""
        from speechtrain.data.text.phonemize import punctuation_lost, read

        todo = [i for i, p in enumerate(out) if p.symbols]
        given = []
        for i in todo:
            text, notes = self._numbers(out[i].symbols)
            out[i].reading += notes + abbreviation_notes(text)
            given.append(text)
        skipped = skipped_symbols(given, self.settings.language)
        for i, text in zip(todo, given):
            here = sorted({c for c in text if c in skipped})
            if here:
                shown = ", ".join(f"{c!r} (U+{ord(c):04X})" for c in here)
                out[i].reading.append(f"espeak-ng skips {shown}: write it as a word")
        for i, text, reading in zip(todo, given, read(given, self.settings.language)):
            out[i].unmapped.update(punctuation_lost(text, reading.phonemes, self.settings.language))
            note = reading_note(text, reading, self.language)
            if note:
                out[i].reading.append(note)
            out[i].symbols = reading.phonemes

    def _numbers(self, text: str) -> tuple[str, list[str]]:
        """Numbers and symbols written out for espeak-ng (by the version the run was trained with)."""
        if self.v4:
            from speechtrain.data.text.spoken import spoken

            return spoken(text, self.settings.language)
        if self.v3:
            from speechtrain.data.text.numbers import expand_numbers

            return expand_numbers(text, self.language)
        return text, []

    def process(self, text: str) -> Processed:
        """Every step for one text."""
        return self.process_many([text])[0]

    def __call__(self, text: str) -> str:
        """The symbol string of ``text``."""
        return self.process(text).symbols


def piper_notes(text: str, language: str) -> list[str]:
    """The numbers and symbols of ``text`` that Piper's voice for ``language`` misreads: Piper's runtime gives the
    text to espeak-ng as typed, so what the voice reads wrong (:data:`.spoken.VOICE_READS`) must be written out in
    the transcript itself (a pre-expansion here would train on other words than Piper reads at inference)."""
    from speechtrain.data.text.spoken import VOICE_READS, find

    keep = VOICE_READS.get(primary_language(language), frozenset())
    return [
        f"{f.kind} {f.written!r}: Piper reads the text as typed and its {language} voice misreads this; write it "
        + (f"out as it is said ({f.said!r})" if f.said else "out as it is said")
        for f in find(text, language)
        if f.kind not in keep
    ]


_SPOKEN_SIGNS = frozenset("%&@#*")  # ASCII punctuation that stands for a word (percent, and, at ...)


def skipped_symbols(texts: list[str], language: str) -> set[str]:
    """The symbols of ``texts`` (currency, maths, degrees, %, ...) that espeak-ng's voice for ``language``
    says nothing for: each read alone, the empty ones (a mark, an apostrophe or a hyphen is no candidate)."""
    from speechtrain.data.text.phonemize import read

    candidates = sorted(
        {c for t in texts for c in t if unicodedata.category(c)[0] == "S" or unicodedata.category(c) == "No"}
        | {c for t in texts for c in t if c in _SPOKEN_SIGNS}
    )
    return {c for c, r in zip(candidates, read(candidates, language)) if not r.phonemes}


_HEBREW_ABBREVIATION = re.compile("[\u05d0-\u05ea][\u05f3\u05f4\"'][\u05d0-\u05ea]")


def abbreviation_notes(text: str) -> list[str]:
    """Abbreviations espeak-ng spells letter by letter: Hebrew geresh/gershayim inside a word (צה״ל)."""
    found = [m.group(0) for m in _HEBREW_ABBREVIATION.finditer(text)]
    if not found:
        return []
    return [
        f"an abbreviation marked with geresh/gershayim ({', '.join(found[:3])}): espeak-ng reads its letters by "
        "their names; write it as it is said"
    ]


def reading_note(text: str, reading: Reading, language: str) -> str | None:
    """Why espeak-ng's reading of ``text`` is suspect (a language switch, "letter" said), with the fix where one
    is known; None when it is not."""
    if not reading.switched and not reading.letter_names:
        return None
    if reading.switched:
        spans = ", ".join(f"({flag}) {span!r}" for flag, span in reading.switched[:3])
        what = f"espeak-ng switched to another language's reading ({spans}; letter names or a foreign word)"
    else:
        what = f"espeak-ng said 'letter' {reading.letter_names} time(s) (characters it has no rule for, read by name)"
    fix = "write those words in the language's own letters, or as they are said"
    if any(0x0591 <= ord(c) <= 0x05C7 for c in text):
        fix = "remove the niqqud (vowel points: data.strip_accents=true), which it reads as English names of marks"
    elif language == "ja" and any(0x4E00 <= ord(c) <= 0x9FFF for c in text):
        fix = "espeak-ng has no kanji readings ('Chinese letter'): write the transcripts in kana"
    return f"{what}: {fix}"


def normalize_text(
    text: str, lowercase: bool = True, language: str = "und", strip_accents: bool = False, transliterate: bool = False
) -> str:
    """``text`` after steps 1-4 of the front end (see the module doc)."""
    settings = TextSettings(language, "none", lowercase, strip_accents, transliterate)
    return TextFrontEnd(settings).normalize(text).symbols
