"""Which writing system a character belongs to, which ones a language is written in, and the character
classes the text report counts (letters of the declared script, other scripts, digits, punctuation,
symbols, emoji, format characters).

The script table covers the blocks of the writing systems people train speech models in; a letter in
none of them is ``Other``. Modifier letters such as Uzbek ʻ and ʼ (U+02B0-U+02FF) are ``Common``: they
belong to whichever script surrounds them. :func:`mojibake` finds text that was decoded twice (UTF-8
read as cp1252/Latin-1 and saved again as UTF-8: ``Ã‰lodie`` for ``Élodie``).
"""

from __future__ import annotations

import bisect
import re
import unicodedata
from dataclasses import dataclass

# (first, last, script), sorted by first code point
_RANGES: list[tuple[int, int, str]] = sorted(
    [
        (0x0041, 0x024F, "Latin"),
        (0x0250, 0x02AF, "Latin"),  # IPA extensions
        (0x02B0, 0x02FF, "Common"),  # modifier letters (ʻ ʼ ˈ ː)
        (0x1D00, 0x1DBF, "Latin"),
        (0x1E00, 0x1EFF, "Latin"),
        (0x2C60, 0x2C7F, "Latin"),
        (0xA720, 0xA7FF, "Latin"),
        (0xAB30, 0xAB6F, "Latin"),
        (0xFF21, 0xFF5A, "Latin"),
        (0x0370, 0x03FF, "Greek"),
        (0x1F00, 0x1FFF, "Greek"),
        (0x0400, 0x052F, "Cyrillic"),
        (0x1C80, 0x1C8F, "Cyrillic"),
        (0x2DE0, 0x2DFF, "Cyrillic"),
        (0xA640, 0xA69F, "Cyrillic"),
        (0x0530, 0x058F, "Armenian"),
        (0x0590, 0x05FF, "Hebrew"),
        (0x0600, 0x06FF, "Arabic"),
        (0x0700, 0x074F, "Syriac"),
        (0x0750, 0x077F, "Arabic"),
        (0x0780, 0x07BF, "Thaana"),
        (0x0870, 0x08FF, "Arabic"),
        (0xFB50, 0xFDFF, "Arabic"),
        (0xFE70, 0xFEFF, "Arabic"),
        (0x0900, 0x097F, "Devanagari"),
        (0xA8E0, 0xA8FF, "Devanagari"),
        (0x0980, 0x09FF, "Bengali"),
        (0x0A00, 0x0A7F, "Gurmukhi"),
        (0x0A80, 0x0AFF, "Gujarati"),
        (0x0B00, 0x0B7F, "Oriya"),
        (0x0B80, 0x0BFF, "Tamil"),
        (0x0C00, 0x0C7F, "Telugu"),
        (0x0C80, 0x0CFF, "Kannada"),
        (0x0D00, 0x0D7F, "Malayalam"),
        (0x0D80, 0x0DFF, "Sinhala"),
        (0x0E00, 0x0E7F, "Thai"),
        (0x0E80, 0x0EFF, "Lao"),
        (0x0F00, 0x0FFF, "Tibetan"),
        (0x1000, 0x109F, "Myanmar"),
        (0x10A0, 0x10FF, "Georgian"),
        (0x1C90, 0x1CBF, "Georgian"),
        (0x2D00, 0x2D2F, "Georgian"),
        (0x1100, 0x11FF, "Hangul"),
        (0x3130, 0x318F, "Hangul"),
        (0xA960, 0xA97F, "Hangul"),
        (0xAC00, 0xD7FF, "Hangul"),
        (0x1200, 0x139F, "Ethiopic"),
        (0x2D80, 0x2DDF, "Ethiopic"),
        (0xAB00, 0xAB2F, "Ethiopic"),
        (0x13A0, 0x13FF, "Cherokee"),
        (0x1780, 0x17FF, "Khmer"),
        (0x1800, 0x18AF, "Mongolian"),
        (0x3040, 0x309F, "Hiragana"),
        (0x30A0, 0x30FF, "Katakana"),
        (0x31F0, 0x31FF, "Katakana"),
        (0xFF66, 0xFF9F, "Katakana"),
        (0x3400, 0x4DBF, "Han"),
        (0x4E00, 0x9FFF, "Han"),
        (0xF900, 0xFAFF, "Han"),
        (0x20000, 0x2FA1F, "Han"),
        (0x3100, 0x312F, "Bopomofo"),
    ]
)
_FIRSTS = [r[0] for r in _RANGES]

_LATIN = ("Latin",)
_CYRILLIC = ("Cyrillic",)
_ARABIC = ("Arabic",)
_DEVANAGARI = ("Devanagari",)
#: a language (primary subtag) -> the scripts it is written in
LANGUAGE_SCRIPTS: dict[str, tuple[str, ...]] = {
    **{
        code: _LATIN
        for code in (
            "af az bs ca cs cy da de en eo es et eu fi fil fo fr ga gl ha hr ht hu id ig is it jv lb lt lv mg mi "
            "ms mt nl nb nn no oc pl pt qu ro rw sk sl sm sn so sq su sv sw tk tl tn tr uz vi wo xh yo zu"
        ).split()
    },
    **{code: _CYRILLIC for code in "ba be bg ce cv kk ky mk mn os ru tg tt uk".split()},
    **{code: _ARABIC for code in "ar fa ps sd ug ur ckb".split()},
    **{code: _DEVANAGARI for code in "hi mr ne sa mai bho".split()},
    "sr": ("Cyrillic", "Latin"),
    "el": ("Greek",),
    "hy": ("Armenian",),
    "ka": ("Georgian",),
    "he": ("Hebrew",),
    "yi": ("Hebrew",),
    "bn": ("Bengali",),
    "as": ("Bengali",),
    "pa": ("Gurmukhi",),
    "gu": ("Gujarati",),
    "or": ("Oriya",),
    "ta": ("Tamil",),
    "te": ("Telugu",),
    "kn": ("Kannada",),
    "ml": ("Malayalam",),
    "si": ("Sinhala",),
    "th": ("Thai",),
    "lo": ("Lao",),
    "my": ("Myanmar",),
    "km": ("Khmer",),
    "bo": ("Tibetan",),
    "dv": ("Thaana",),
    "am": ("Ethiopic",),
    "ti": ("Ethiopic",),
    "ko": ("Hangul",),
    "ja": ("Han", "Hiragana", "Katakana"),
    "zh": ("Han", "Bopomofo"),
    "yue": ("Han",),
}
#: BCP-47 script subtags we read (``uz-Cyrl``, ``sr-Latn``)
SCRIPT_SUBTAGS = {
    "latn": "Latin",
    "cyrl": "Cyrillic",
    "arab": "Arabic",
    "grek": "Greek",
    "deva": "Devanagari",
    "hans": "Han",
    "hant": "Han",
    "ethi": "Ethiopic",
    "geor": "Georgian",
    "armn": "Armenian",
    "hebr": "Hebrew",
}
#: the legacy 8-bit code page of each script: what a file in that script was probably saved in
CODE_PAGES = {
    "Cyrillic": "cp1251",
    "Greek": "cp1253",
    "Arabic": "cp1256",
    "Hebrew": "cp1255",
    "Latin": "cp1252",
    "Thai": "cp874",
    "Han": "gb18030",
    "Hangul": "cp949",
}
#: languages whose legacy code page is not their script's (Windows code pages by region)
LANGUAGE_CODE_PAGES = {
    **{code: "cp1250" for code in "bs cs hr hu pl ro sk sl sq".split()},
    **{code: "cp1257" for code in "et lt lv".split()},
    "tr": "cp1254",
    "az": "cp1254",
    "vi": "cp1258",
    "ja": "cp932",
    "zh": "gb18030",
    "yue": "big5",
}


def code_page(language: str) -> str | None:
    """The legacy code page a file in ``language`` (BCP-47) was probably saved in (None: not known)."""
    primary = language.replace("_", "-").split("-")[0].lower()
    if primary in LANGUAGE_CODE_PAGES:
        return LANGUAGE_CODE_PAGES[primary]
    written = scripts_of_language(language)
    return CODE_PAGES.get(written[0]) if written else None


def script_of(c: str) -> str:
    """The script of one character (``Common`` for modifier letters, ``Other`` when not in the table)."""
    cp = ord(c)
    i = bisect.bisect_right(_FIRSTS, cp) - 1
    if i >= 0 and _RANGES[i][0] <= cp <= _RANGES[i][1]:
        return _RANGES[i][2]
    return "Other"


def scripts_of_language(language: str) -> tuple[str, ...] | None:
    """The scripts ``language`` (BCP-47) is written in, or None when we do not know it (``und``)."""
    parts = language.replace("_", "-").lower().split("-")
    for sub in parts[1:]:
        if sub in SCRIPT_SUBTAGS:
            return (SCRIPT_SUBTAGS[sub],)
    return LANGUAGE_SCRIPTS.get(parts[0])


# ------------------------------------------------------------------------------------- character classes
LETTERS_DECLARED = "letters of the declared script"
LETTERS = "letters"
OTHER_SCRIPTS = "letters of other scripts"
MARKS = "combining marks"
DIGITS = "digits"
PUNCTUATION = "punctuation"
SYMBOLS = "symbols (currency, maths)"
OTHER_SYMBOLS = "other symbols"
EMOJI = "emoji"
FORMAT = "format/invisible"
SPACE = "space"
CONTROL = "control/unassigned"

_EMOJI_RANGES = ((0x1F000, 0x1FAFF), (0x2600, 0x27BF), (0x2B00, 0x2BFF), (0x1F1E6, 0x1F1FF), (0xE0020, 0xE007F))
EMOJI_JOINERS = {"\u200d", "\ufe0f", "\ufe0e", "\u20e3"}  # ZWJ, variation selectors, keycap


def is_emoji(c: str) -> bool:
    cp = ord(c)
    return any(a <= cp <= b for a, b in _EMOJI_RANGES) or (0x1F3FB <= cp <= 0x1F3FF)


def char_class(c: str, scripts: tuple[str, ...] | None = None) -> str:
    """The report's class of one character; ``scripts``: the declared language's scripts, if known."""
    if c.isspace():
        return SPACE
    if is_emoji(c):
        return EMOJI
    cat = unicodedata.category(c)
    if cat in ("Cc", "Co", "Cn", "Cs") or c == "\ufffd":
        return CONTROL
    if cat == "Cf" or c in EMOJI_JOINERS:
        return FORMAT
    if cat.startswith("L"):
        script = script_of(c)
        if scripts is None or script == "Common":
            return LETTERS if scripts is None else LETTERS_DECLARED
        return LETTERS_DECLARED if script in scripts else OTHER_SCRIPTS
    if cat.startswith("M"):
        return MARKS
    if cat == "Nd":
        return DIGITS
    if cat.startswith("N"):
        return OTHER_SYMBOLS
    if cat.startswith("P"):
        return PUNCTUATION
    if cat in ("Sc", "Sm"):
        return SYMBOLS
    return OTHER_SYMBOLS  # So, Sk


# ----------------------------------------------------------------------------------------------- Zawgyi
#: Burmese typed in the Zawgyi font encoding, not Unicode: a vowel sign ေ or the medial ျ before its consonant
#: (Unicode stores them after it), the stacking sign ္ before no consonant (Zawgyi's asat), or Zawgyi's
#: stacked-consonant glyphs at U+1060-U+1097 (Mon, Shan and Karen letters in Unicode)
_ZAWGYI = re.compile("(?:^|[^\u1000-\u109f])[\u1031\u103b]|\u1039(?![\u1000-\u1021])|[\u1060-\u1097]")


def zawgyi(text: str) -> str | None:
    """The first word of ``text`` that reads as Zawgyi-encoded Burmese, or None."""
    m = _ZAWGYI.search(text)
    if m is None:
        return None
    return next((w for w in text.split() if _ZAWGYI.search(w)), m.group(0).strip())


# ---------------------------------------------------------------------------------------------- mojibake
_SUSPECT = re.compile(
    "[\u00c2-\u00f4][\u0080-\u00bf\u0152\u0153\u0160\u0161\u0178\u017d\u017e\u0192\u02c6\u02dc\u2013-\u203a\u20ac\u2122]"
)


def mojibake(text: str) -> tuple[str, str] | None:
    """(the first word that reads as UTF-8 decoded twice, what it was meant to say), or None.

    A word is taken as mojibake only when re-encoding it as cp1252 (or Latin-1) gives valid UTF-8 with
    at least one character beyond ASCII: ``café`` is left alone, ``cafÃ©`` is ``café``."""
    if not _SUSPECT.search(text):
        return None
    for word in text.split():
        if not _SUSPECT.search(word):
            continue
        for codec in ("cp1252", "latin-1"):
            try:
                fixed = word.encode(codec).decode("utf-8")
            except (UnicodeEncodeError, UnicodeDecodeError):
                continue
            if fixed != word and any(ord(ch) > 127 for ch in fixed):
                return word, fixed
    return None


# ------------------------------------------------------------------------------- letters of languages
#: Cyrillic letters beyond Russian's -> the languages written with them (the language hint names them all)
CYRILLIC_LETTERS: dict[str, tuple[str, ...]] = {
    "ө": ("mn", "kk", "ky", "tt", "ba"),
    "ү": ("mn", "kk", "ky", "tt", "ba"),
    "ң": ("kk", "ky", "tt", "ba"),
    "ә": ("kk", "tt", "ba"),
    "һ": ("kk", "tt", "ba"),
    "ұ": ("kk",),
    "і": ("kk", "uk", "be"),
    "ғ": ("kk", "uz-Cyrl", "tg", "ba"),
    "қ": ("kk", "uz-Cyrl", "tg"),
    "ў": ("uz-Cyrl", "be"),
    "ҳ": ("uz-Cyrl", "tg"),
    "ҷ": ("tg",),
    "ӣ": ("tg",),
    "ӯ": ("tg",),
    "җ": ("tt",),
    "ҙ": ("ba",),
    "ҫ": ("ba", "cv"),
    "ӑ": ("cv",),
    "ӗ": ("cv",),
    "ӳ": ("cv",),
    "ї": ("uk",),
    "є": ("uk",),
    "ґ": ("uk",),
    "ђ": ("sr",),
    "ћ": ("sr",),
    "ѓ": ("mk",),
    "ќ": ("mk",),
    "ѕ": ("mk",),
}


def languages_of_letters(letters: set[str]) -> tuple[list[str], list[str]]:
    """(the distinctive letters found, every language written with all of them), from :data:`CYRILLIC_LETTERS`;
    when no language has them all, those that have the most."""
    found = sorted(c for c in {c.lower() for c in letters} if c in CYRILLIC_LETTERS)
    if not found:
        return [], []
    order = list(dict.fromkeys(code for c in found for code in CYRILLIC_LETTERS[c]))
    hits = {code: sum(code in CYRILLIC_LETTERS[c] for c in found) for code in order}
    best = max(hits.values())
    return found, [code for code in order if hits[code] == best]


@dataclass(frozen=True)
class LetterProfile:
    """What a language's text looks like by its letters: letters it uses often (``often``, at least ``min_share``
    of all letters), letters it has almost never (``rare``, at most ``max_share``), and the language in the same
    script that a corpus without that look probably is."""

    often: frozenset[str]
    min_share: float
    rare: frozenset[str]
    max_share: float
    instead: str


_YORUBA_OFTEN = frozenset("ẹọṣàáèéìíòóùúńǹḿẸỌṢÀÁÈÉÌÍÒÓÙÚ")
#: a declared language -> its look (a same-script mismatch is a warning: mn read as ru, fa as ar, yo/cy as en)
PROFILES: dict[str, LetterProfile] = {
    "mn": LetterProfile(frozenset("өүӨҮ"), 0.01, frozenset("әіңғұқһӘІҢҒҰҚҺ"), 0.002, "ru"),
    # Mongolian has ө ү too: Kazakh is told by the letters Mongolian lacks
    "kk": LetterProfile(frozenset("әіңғұқһӘІҢҒҰҚҺ"), 0.02, frozenset(), 1.0, "mn or ru"),
    "uk": LetterProfile(frozenset("іїєґІЇЄҐ"), 0.02, frozenset("ыэъёЫЭЪЁ"), 0.002, "ru"),
    "fa": LetterProfile(frozenset("پچژگ"), 0.005, frozenset("ة"), 0.002, "ar"),
    "ur": LetterProfile(frozenset("ٹڈڑںےھ"), 0.01, frozenset("ة"), 0.002, "ar"),
    "ar": LetterProfile(frozenset(), 0.0, frozenset("پچژگ"), 0.003, "fa"),
    "ru": LetterProfile(frozenset(), 0.0, frozenset(CYRILLIC_LETTERS), 0.002, "mn/kk/uk/..."),
    "yo": LetterProfile(_YORUBA_OFTEN, 0.03, frozenset("cqvxzCQVXZ"), 0.01, "en"),
    "cy": LetterProfile(frozenset("wyWYŵŷ"), 0.08, frozenset("kqvxzjKQVXZJ"), 0.01, "en"),
    # English has none of Yoruba's dotted letters and syllabic nasals, nor Welsh's ŵ ŷ (a name now and then)
    "en": LetterProfile(frozenset(), 0.0, frozenset("ẹọṣǹḿẸỌṢǸḾŵŷŴŶ"), 0.0005, "another language"),
    # Yiddish writes its vowels: ע and the ligatures ײ װ ױ are far more of its letters than of Hebrew's
    "yi": LetterProfile(frozenset("עײװױ"), 0.05, frozenset(), 1.0, "he"),
    "he": LetterProfile(frozenset(), 0.0, frozenset("ײװױ"), 0.002, "yi"),
}
#: letters that name the language a text is probably in, when a profile finds them where they do not belong
LIKELY_LANGUAGE = {
    **{c: "yo (Yoruba)" for c in "ẹọṣǹḿẸỌṢǸḾ"},
    **{c: "cy (Welsh)" for c in "ŵŷŴŶ"},
    **{c: "yi (Yiddish)" for c in "ײװױ"},
    **{c: "kk (Kazakh)" for c in "әіңғұқһӘІҢҒҰҚҺ"},
}
MIN_PROFILE_LETTERS = 40  # fewer letters than this: too few to judge a language by letters it should not have
MIN_OFTEN_LETTERS = 200  # ... and by the share of letters it uses often (گ پ چ are ~3% of Persian's letters)
