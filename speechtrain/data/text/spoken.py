"""Numbers and symbols as each language says them, before espeak-ng (``data.phonemizer=espeak``, front end 4).

A number is parsed by the language's own conventions, never by one rule for all: the grouping and decimal
separators of its CLDR locale (Babel: ``10 000`` with a space, a no-break or a narrow no-break space in French,
``10.000`` in German and Turkish, ``۱۰٬۰۰۰`` with the Arabic separator in Persian), its ordinal markers (``1st``,
``1er``, ``3.``, ``1:a``, ``1.º``, ``5-ci``, ``15-én``), clock times (``14:30``, and ``14.30`` where the point is
not the decimal separator), a minus sign (``-`` or U+2212), leading zeros (``0301234``: a phone number, read digit
by digit), amounts with a currency sign (``R$``, ``Rp``, ``€``) and Korean native numerals before a counter
(``3시`` "세 시"). Each is then written out by a library:

- ``num2words`` for cardinals, years, negative numbers and amounts where it has the language;
- ``unicode-rbnf`` (CLDR's spell-out rules) for ordinals (with their gender and case: French ``1re``, German
  ``am 3.``), Korean native numerals, and cardinals of languages num2words lacks;
- Babel (CLDR) for the separators of each locale.

espeak-ng reads first: a class that the language's voice reads right on its own (:data:`VOICE_READS`, decided by
comparing its reading of the raw text with its reading of the written-out words: tests/test_text_spoken.py) is
left as written. What neither a library nor the voice reads (Czech ordinals, a URL, an e-mail address, a date) is
*reported* with its class, so that ``prepare --strict`` fails on it and the transcript writer can write it out.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from speechtrain.data.text.numbers import CURRENCY as OLD_CURRENCY
from speechtrain.data.text.scripts import scripts_of_language

#: per language (primary subtag), the classes its espeak-ng voice reads right on its own (left as written);
#: measured by tests/test_text_spoken.py::test_voice_reads_is_measured on speechtrain.testing.reading_cases
VOICE_READS: dict[str, frozenset[str]] = {
    "en": frozenset({"ordinal", "grouped", "minus", "percent", "phone_number"}),
    "fr": frozenset({"ordinal"}),
    "hu": frozenset({"ordinal"}),
    "de": frozenset({"minus"}),
    "pl": frozenset({"grouped"}),
    "te": frozenset({"number"}),
}
#: currency signs -> ISO 4217 codes: those the number pass of front end 3 knew, after the signs that end in one of
#: them (``R$`` and ``US$`` before ``$``: the alternation tries them in this order)
CURRENCY = {"R$": "BRL", "US$": "USD", "Rp": "IDR", **OLD_CURRENCY}
#: a data.language (BCP-47, lower case) -> num2words's code where they differ
NUM2WORDS_CODE = {"kk": "kz", "nb": "no", "nn": "no", "pt-br": "pt_BR", "fr-be": "fr_BE", "fr-ch": "fr_CH"}
#: languages whose cardinals come from CLDR's rules before num2words (num2words's Turkish joins the words:
#: "ondört", "bindokuzyüzdoksanbeş"; espeak-ng stresses them as one word)
RBNF_CARDINALS = frozenset({"tr"})
#: languages that say a year from 1100 to 1999 by its hundreds ("nineteen hundred seventy-one"), with the library's
#: words for both halves: Bengali ১৯৭১ "উনিশশো একাত্তর" (num2words says "এক হাজার নয়শত একাত্তর সাল", and the text
#: has its own সাল), Telugu "పంతొమ్మిది వందల డెబ్బై ఒకటి"
YEAR_BY_HUNDREDS = {"bn": "{h}শো {r}", "te": "{h} వందల {r}"}
#: languages that mark an ordinal with a point after the digits (``der 3. Sieger``, ``3. sınıf``)
POINT_ORDINALS = frozenset("de da nb nn no tr cs sk sl hr bs sr fi hu et lv is fo".split())
#: the ordinal markers written after the digits, per language: (pattern of the marker, rbnf ruleset or None)
SUFFIX_ORDINALS: dict[str, tuple[tuple[str, str | None], ...]] = {
    "en": ((r"st|nd|rd|th", "spellout-ordinal"),),
    "fr": ((r"re|ère|ʳᵉ", "spellout-ordinal-feminine"), (r"er|e|ème|eme|ᵉʳ|ᵉ", "spellout-ordinal-masculine")),
    "es": ((r"\.?ª", "spellout-ordinal-feminine"), (r"\.?º", "spellout-ordinal-masculine")),
    "pt": ((r"\.?ª", "spellout-ordinal-feminine"), (r"\.?º", "spellout-ordinal-masculine")),
    "it": ((r"\.?ª", "spellout-ordinal-feminine"), (r"\.?º", "spellout-ordinal-masculine")),
    "gl": ((r"\.?ª", "spellout-ordinal-feminine"), (r"\.?º", "spellout-ordinal-masculine")),
    "ca": ((r"\.?ª", "spellout-ordinal-feminine"), (r"\.?º", "spellout-ordinal-masculine")),
    "sv": ((r":[ae]", "spellout-ordinal-reale"),),
    "az": ((r"[-'’]?(?:[iıuü]?nc[iıuü]|c[iıuü])", "spellout-ordinal"),),
    "tr": ((r"['’-](?:[iıuü]?nc[iıuü])", "spellout-ordinal"),),
}
#: German ordinals after these words take the -n ending (am 3. Mai: "am dritten Mai")
GERMAN_N_ENDING = frozenset("am im vom zum beim dem den des zur".split())
#: Russian ordinal endings after the hyphen (5-й, 5-го, 5-м) -> CLDR's ruleset of that gender and case; "-м" is
#: locative after в/на/о/при ("в 5-м доме": "в пятом доме"), instrumental elsewhere
RUSSIAN_ENDINGS = {
    **dict.fromkeys(("й", "ый", "ий", "ой"), "spellout-ordinal-masculine"),
    **dict.fromkeys(("я", "ая", "яя"), "spellout-ordinal-feminine"),
    **dict.fromkeys(("ю", "ую"), "spellout-ordinal-feminine-accusative"),
    **dict.fromkeys(("е", "ое", "ее"), "spellout-ordinal-neuter"),
    **dict.fromkeys(("го", "ого", "его"), "spellout-ordinal-masculine-genitive"),
    **dict.fromkeys(("му", "ому", "ему"), "spellout-ordinal-masculine-dative"),
    **dict.fromkeys(("м", "ым", "ом", "ем"), "spellout-ordinal-masculine-ablative"),
    **dict.fromkeys(("х", "ых", "их"), "spellout-ordinal-plural-genitive"),
}
RUSSIAN_LOCATIVE = frozenset("в во на о об обо при".split())
#: Hungarian day suffixes written after an ordinal's hyphen (március 15-én: "tizenötödikén")
HUNGARIAN_DAY = r"[áé]n"
#: Korean counters read with native numerals (3시 "세 시", 2개 "두 개"); 1-99 only
KOREAN_COUNTERS = "시|개|명|마리|살|잔|권|병|장|그루|켤레|벌|송이|통|곳"

URL = re.compile(r"\b(?:https?://|www\.)\S+?(?=[.,;:!?)]*(?:\s|$))|\b[\w-]+\.(?:com|org|net|edu|gov|info|io)\b")
EMAIL = re.compile(r"\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+\b")
DATE = re.compile(r"\b\d{1,4}([/.\-])\d{1,2}\1\d{1,4}\b")
SHILLING = re.compile(r"\d[\d.,]*\s?/=")


@dataclass(frozen=True)
class Found:
    """One number or symbol of a text: where, its class, and what it is said as (None: nothing reads it)."""

    start: int
    end: int
    kind: str
    written: str
    said: str | None
    why: str = ""

    def note(self) -> str:
        """The report line of a span nothing reads (the class first, then the fix)."""
        return f"{self.kind} {self.written!r}: {self.why}; write it out as it is said"


@dataclass(frozen=True)
class Locale:
    """How one language writes numbers (Babel/CLDR) and which libraries say them."""

    language: str  # data.language, lower case (pt-br)
    primary: str  # its primary subtag (pt)
    group: str  # the characters that group thousands (regex class body)
    decimal: str  # the decimal separators (regex class body)
    num2words: str | None  # num2words's code, or None
    rbnf: Any  # unicode-rbnf's engine, or None

    @property
    def reads_numbers(self) -> bool:
        return self.num2words is not None or self.rbnf is not None


_SPACES = " \u00a0\u202f\u2009"


@functools.lru_cache(maxsize=64)
def locale_of(language: str) -> Locale:
    """The :class:`Locale` of a BCP-47 code (separators from Babel when installed, else ``,`` and ``.``)."""
    code = language.lower().replace("_", "-")
    primary = code.split("-")[0]
    groups, decimals = {","}, {"."}
    try:
        from babel import Locale as BabelLocale
        from babel.numbers import get_decimal_symbol, get_group_symbol

        tag = BabelLocale.parse(code.replace("-", "_"))
        groups, decimals = {get_group_symbol(tag)}, {get_decimal_symbol(tag)}
        for system in ("arab", "arabext") if "Arabic" in (scripts_of_language(code) or ()) else ():
            try:  # the Arabic-script separators ٬ ٫ beside the Latin ones
                groups.add(get_group_symbol(tag, numbering_system=system))
                decimals.add(get_decimal_symbol(tag, numbering_system=system))
            except Exception:  # noqa: BLE001 - the locale has no such numbering system
                pass
    except Exception:  # noqa: BLE001 - Babel absent or the locale unknown to CLDR: the common separators
        pass
    if groups & set(_SPACES):  # a space-grouping locale is typed with any of the spaces
        groups |= set(_SPACES)
    groups -= decimals
    return Locale(
        code, primary, re.escape("".join(sorted(groups))), re.escape("".join(sorted(decimals))), *_libraries(code)
    )


def _libraries(code: str) -> tuple[str | None, Any]:
    primary = code.split("-")[0]
    n2w = None
    try:
        from num2words import CONVERTER_CLASSES

        for candidate in (NUM2WORDS_CODE.get(code), NUM2WORDS_CODE.get(primary), primary):
            if candidate and candidate in CONVERTER_CLASSES:
                n2w = candidate
                break
    except ImportError:
        pass
    rbnf = None
    try:
        from unicode_rbnf import RbnfEngine

        rbnf = RbnfEngine.for_language(primary)
    except Exception:  # noqa: BLE001 - not installed, or CLDR has no rules for the language
        pass
    return n2w, rbnf


# ------------------------------------------------------------------------------------------ saying numbers
def _rbnf(loc: Locale, value: int, ruleset: str) -> str | None:
    if loc.rbnf is None or ruleset not in loc.rbnf.rulesets:
        return None
    try:
        return unicodedata.normalize("NFC", str(loc.rbnf.format_number(value, ruleset_names=[ruleset]).text))
    except Exception:  # noqa: BLE001 - the rules have no reading of this value
        return None


def _num2words(loc: Locale, value: int | float, **kwargs: Any) -> str | None:
    if loc.num2words is None:
        return None
    from num2words import num2words

    try:  # NFC: num2words's Telugu splits the vowel sign ై in two (ె + U+0C56), which espeak-ng reads apart
        said = str(num2words(value, lang=loc.num2words, **kwargs))
    except (NotImplementedError, KeyError, ValueError, TypeError, AttributeError, OverflowError, IndexError):
        return None
    return unicodedata.normalize("NFC", said).replace(",", "").strip()


def cardinal(loc: Locale, value: Decimal) -> str | None:
    """``value`` in words (num2words; unicode-rbnf's cardinal where num2words lacks the language); a whole
    number from 1000 to 2099 is read as a year where num2words has years."""
    whole = value == value.to_integral_value()
    if whole and value >= 0 and loc.primary in RBNF_CARDINALS:
        said = _rbnf(loc, int(value), "spellout-cardinal")
        if said:
            return said
    if whole and 1100 <= value < 2000 and value % 100 and loc.primary in YEAR_BY_HUNDREDS:
        h, r = _num2words(loc, int(value) // 100), _num2words(loc, int(value) % 100)
        if h and r:
            return YEAR_BY_HUNDREDS[loc.primary].format(h=h, r=r)
    if whole and 1000 <= value < 2100 and loc.primary not in YEAR_BY_HUNDREDS:
        said = _num2words(loc, int(value), to="year")
        if said:
            return said
    said = _num2words(loc, int(value) if whole else float(value))
    if said is None and loc.rbnf is not None:
        for ruleset in ("spellout-cardinal", "spellout-cardinal-masculine", "spellout-numbering"):
            said = _rbnf(loc, int(value), ruleset) if whole and value >= 0 else None
            if said:
                break
    return said


def ordinal(loc: Locale, value: int, ruleset: str | None = "spellout-ordinal") -> str | None:
    """The ordinal of ``value``: CLDR's ruleset (its gender and case forms) first, num2words's ordinal next."""
    said = _rbnf(loc, value, ruleset) if ruleset else None
    return said or _num2words(loc, value, to="ordinal")


def digits(loc: Locale, written: str) -> str | None:
    """A digit string read digit by digit (a phone number)."""
    words = [cardinal(loc, Decimal(int(d))) for d in written if d.isdigit()]
    return None if any(w is None for w in words) else " ".join(w for w in words if w)


def amount(loc: Locale, value: Decimal, currency: str) -> str | None:
    """An amount with its currency in words (num2words); a whole amount loses its "zero cents"."""
    whole = value == value.to_integral_value()
    number: int | float = int(value) if whole else float(value)
    said = _num2words(loc, number, to="currency", currency=currency)
    if said is None:  # num2words's pt_BR and id say only their own currency (no currency argument)
        own = {"pt_BR": "BRL", "id": "IDR"}.get(loc.num2words or "")
        said = _num2words(loc, number, to="currency") if own == currency else None
    if said and whole and loc.num2words:
        zero = _num2words(loc, 0) or "\0"
        for joint in (" and ", " und ", " et ", " e ", " y ", " i ", " va ", " ve ", " и ", " "):
            head, sep, tail = said.rpartition(joint)
            if sep and tail.split()[:1] == [zero]:
                return head
    return said


# ------------------------------------------------------------------------------------------ finding numbers
def _number_pattern(loc: Locale) -> str:
    """A number as the locale writes it: grouped thousands, then a decimal part (named groups whole/frac)."""
    return (
        rf"(?P<whole>\d{{1,3}}(?:[{loc.group}]\d{{3}})+(?!\d)|\d+)(?:[{loc.decimal}](?P<frac>\d+))?"
        if loc.group
        else rf"(?P<whole>\d+)(?:[{loc.decimal}](?P<frac>\d+))?"
    )


def _value(m: re.Match[str]) -> Decimal | None:
    whole = re.sub(r"\D", "", m.group("whole"))
    frac = m.groupdict().get("frac")
    try:
        value = Decimal(int(whole)) if not frac else Decimal(f"{int(whole)}.{''.join(str(int(d)) for d in frac)}")
    except (InvalidOperation, ValueError):
        return None
    return -value if m.groupdict().get("sign") else value


Rule = tuple[str, "re.Pattern[str]", Callable[[re.Match[str], Locale, str], tuple[str | None, str]]]


def _said_number(m: re.Match[str], loc: Locale, text: str) -> tuple[str | None, str]:
    value = _value(m)
    said = cardinal(loc, value) if value is not None else None
    return said, f"no number words for data.language={loc.language} (num2words, unicode-rbnf)"


def _said_ordinal(ruleset: str | None) -> Callable[[re.Match[str], Locale, str], tuple[str | None, str]]:
    def say(m: re.Match[str], loc: Locale, text: str) -> tuple[str | None, str]:
        rules = ruleset
        if loc.primary == "de":
            before = text[: m.start()].split()
            rules = "spellout-ordinal-n" if before and before[-1].lower() in GERMAN_N_ENDING else ruleset
        said = ordinal(loc, int(m.group("n")), rules)
        if said and loc.primary == "hu" and m.groupdict().get("day"):
            said += m.group("day")
        return said, f"neither num2words nor CLDR's rules (unicode-rbnf) have {loc.language} ordinals"

    return say


def _said_russian_ordinal(m: re.Match[str], loc: Locale, text: str) -> tuple[str | None, str]:
    ruleset = RUSSIAN_ENDINGS[m.group("end")]
    before = text[: m.start()].split()
    if ruleset.endswith("-ablative") and before and before[-1].lower() in RUSSIAN_LOCATIVE:
        ruleset = "spellout-ordinal-masculine-locative"
    return ordinal(loc, int(m.group("n")), ruleset), "CLDR's rules (unicode-rbnf) have no such ordinal form"


def _said_time(m: re.Match[str], loc: Locale, text: str) -> tuple[str | None, str]:
    hours, minutes = cardinal(loc, Decimal(int(m.group("h")))), cardinal(loc, Decimal(int(m.group("m"))))
    why = f"no number words for data.language={loc.language}"
    if hours is None or minutes is None:
        return None, why
    return (hours if int(m.group("m")) == 0 else f"{hours} {minutes}"), why


def _said_phone(m: re.Match[str], loc: Locale, text: str) -> tuple[str | None, str]:
    return digits(loc, m.group(0)), f"no digit words for data.language={loc.language}"


def _said_amount(m: re.Match[str], loc: Locale, text: str) -> tuple[str | None, str]:
    code = CURRENCY[m.group("cur")]
    value = _value(m)
    said = amount(loc, value, code) if value is not None else None
    return said, f"num2words has no {code} amounts in {loc.language}"


def _said_counter(m: re.Match[str], loc: Locale, text: str) -> tuple[str | None, str]:
    n = int(m.group("n"))
    said = _rbnf(loc, n, "spellout-cardinal-native-attributive") if 0 < n < 100 else None
    if said is None:
        return None, "a Korean counter after a number past 99 (read with Sino-Korean numerals)"
    return f"{said} {m.group('counter')}", ""


def _reported(why: str) -> Callable[[re.Match[str], Locale, str], tuple[str | None, str]]:
    return lambda m, loc, text: (None, why)


@functools.lru_cache(maxsize=64)
def rules_of(language: str) -> tuple[Rule, ...]:
    """The classes of ``language``, in the order they claim text (a URL before its digits, a time before a
    decimal, a phone number before grouped thousands)."""
    loc = locale_of(language)
    number = _number_pattern(loc)
    signs = "|".join(re.escape(s) for s in CURRENCY)
    rules: list[Rule] = [
        ("url", URL, _reported("espeak-ng reads its dots and slashes as pauses or spells it")),
        ("email", EMAIL, _reported("espeak-ng reads its dots and @ as pauses or spells it")),
        ("date", DATE, _reported("no library here reads dates by the locale's order")),
        ("amount_notation", SHILLING, _reported("the East African /= notation")),
    ]
    time_seps = ":" if "." in loc.decimal else ":."  # 14.30 is a time where the point is no decimal point
    hour = rf"(?<![\d.,:])(?P<h>[01]?\d|2[0-3])[{time_seps}](?P<m>[0-5]\d)(?!\d)(?![.,:]\d)"
    rules.append(("time", re.compile(hour), _said_time))
    phone = r"(?<![\d.,])(?<!\d\s)0\d+(?:[ \-/]\d+)*(?!\d)(?![.,]\d)"
    rules.append(("phone_number", re.compile(phone), _said_phone))
    rules.append(("currency", re.compile(rf"(?P<cur>{signs})\s?(?P<sign>[-\u2212])?{number}"), _said_amount))
    for marker, ruleset in SUFFIX_ORDINALS.get(loc.primary, ()):
        rules.append(("ordinal", re.compile(rf"(?<![\d.,])(?P<n>\d+)(?:{marker})(?!\w)"), _said_ordinal(ruleset)))
    if loc.primary == "ru":
        endings = "|".join(sorted(RUSSIAN_ENDINGS, key=len, reverse=True))
        russian = rf"(?<![\d.,])(?P<n>\d+)-(?P<end>{endings})(?!\w)"
        rules.append(("ordinal", re.compile(russian), _said_russian_ordinal))
    if loc.primary == "hu":
        day = rf"(?<![\d.,])(?P<n>\d+)-(?P<day>{HUNGARIAN_DAY})(?!\w)"
        rules.append(("ordinal", re.compile(day), _said_ordinal("spellout-ordinal")))
    if loc.primary in POINT_ORDINALS:  # a point, then a word: lower case but in German, whose nouns are capitals
        after = r"[^\W\d_]" if loc.primary == "de" else r"[a-zß-ÿā-ɏ\u0430-\u04ff]"
        point = rf"(?<![\d.,])(?P<n>\d+)\.(?=\s+{after})"
        rules.append(("ordinal", re.compile(point), _said_ordinal("spellout-ordinal")))
    if loc.primary == "ko":
        rules.append(("counter", re.compile(rf"(?P<n>\d+)\s?(?P<counter>{KOREAN_COUNTERS})"), _said_counter))
    minus = r"(?:(?<![\w.,])(?P<sign>[-\u2212])(?=\d))?"
    if loc.group:
        grouped = rf"(?<!\d){minus}(?=\d{{1,3}}[{loc.group}]\d{{3}}(?!\d)){number}"
        rules.append(("grouped", re.compile(grouped), _said_number))
    rules.append(("minus", re.compile(rf"(?<![\w.,])(?P<sign>[-\u2212]){number}"), _said_number))
    rules.append(("year", re.compile(r"(?<![\d.,])(?P<whole>(?:1\d|20)\d\d)(?!\d)(?![.,]\d)"), _said_number))
    rules.append(("number", re.compile(number), _said_number))
    return tuple(rules)


def find(text: str, language: str) -> list[Found]:
    """Every number and symbol span of ``text`` with its class and reading, in text order, none overlapping."""
    if not any(c.isdigit() or c in "@$£€¥₦₹₽₺₩₪₴₸/" for c in text) and "www." not in text:
        return []
    loc = locale_of(language)
    taken: list[Found] = []
    for kind, pattern, say in rules_of(language):
        for m in pattern.finditer(text):
            if any(m.start() < f.end and f.start < m.end() for f in taken):
                continue
            said, why = say(m, loc, text)
            taken.append(Found(m.start(), m.end(), kind, m.group(0), said, why))
    return sorted(taken, key=lambda f: f.start)


def spoken(text: str, language: str, keep: frozenset[str] | None = None) -> tuple[str, list[str]]:
    """``text`` with its numbers and symbols as words in ``language``, and a note per span nothing reads.

    ``keep``: the classes left as written for espeak-ng (default: those its voice reads right,
    :data:`VOICE_READS`)."""
    found = find(text, language)
    if not found:
        return text, []
    if keep is None:
        keep = VOICE_READS.get(language.lower().replace("_", "-").split("-")[0], frozenset())
    out, notes, at = [], [], 0
    for f in found:
        out.append(text[at : f.start])
        if f.kind in keep or f.said is None:
            out.append(f.written)
            if f.said is None and f.kind not in keep:
                notes.append(f.note())
        else:
            out.append(f.said)
        at = f.end
    out.append(text[at:])
    return "".join(out), list(dict.fromkeys(notes))
