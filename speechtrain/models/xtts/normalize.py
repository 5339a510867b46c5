"""XTTS's text normalisation per language: what Coqui's XTTS tokenizer does to a transcript before BPE.

The ``multilingual`` front end (the default ``model.text_front_end``) gives the BPE the text Coqui's
``VoiceBpeTokenizer`` gives it, so that the tokens of training, of our synthesis and of Coqui's inference on
an export are the same. For a language of Coqui's ``multilingual_cleaners`` (ar cs de en es fr hi hu it nl
pl pt ru tr), in Coqui's order:

1. Unicode NFC (ours: Coqui skips it, so a decomposed ``é`` would reach its BPE as two symbols);
2. double quotes removed; Turkish ``İ Ö Ü`` lowered by hand; lower case;
3. numbers, with num2words (the library Coqui calls): thousands separators dropped (``1,000`` in en and ru,
   ``1.000`` elsewhere); amounts in pounds, dollars and euros (``$5.50`` -> "five dollars, fifty cents",
   the cents left out of whole amounts); decimals (``3,14`` -> "drei Komma eins vier"; not in Turkish);
   ordinals by the language's suffixes (``3rd``, ``1º``, ``3.`` before a space in German, ``5-й``); then every
   other run of digits as a cardinal;
4. abbreviations (``Dr.`` -> "doctor", ``Sra.`` -> "señora", ``д-р`` -> "доктор");
5. symbols (``&``, ``@``, ``%``, ``#``, ``$``, ``£``, ``°``) as words, spaced;
6. white space collapsed and stripped.

Coqui's quirks are kept, since the point is to give its BPE the same text: num2words's capitals stay
("fünf Euro und fünfzig Cent": the text was lowered before), a failing currency conversion leaves the later
currencies unexpanded, and its German/Spanish thousands pattern takes any character between digit groups.

Languages Coqui has no cleaner for: numbers and symbols by the rules of the data front end
(:mod:`speechtrain.data.text.spoken`: the locale's separators, ordinal markers, times, minus signs, leading
zeros, currency signs, written out by num2words or unicode-rbnf; ``10 000`` in Kazakh "он мың", ``5-ci`` in
Azerbaijani "beşinci"), before lower case (``R$``, ``Rp``); no abbreviation rules; otherwise NFC, lower case,
no double quotes and one space only. Amharic numbers (Arabic digits and the Ethiopic numerals ፩ ... ፼: ``2015``
-> "ሁለት ሺህ አስራ አምስት"), ordinals (``3ኛ`` "ሶስተኛ"), ``50%`` ("ሃምሳ በመቶ") and ``ዓ.ም.`` are written by
:mod:`speechtrain.data.text.amharic` (num2words 0.5.14's Amharic fails on 1995).
Coqui romanises Chinese, Japanese and Korean (pypinyin, cutlet, hangul romanisation) before its BPE; that is
not done here. :func:`rules_note` says which case a language is in (``prepare``'s report prints it).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from speechtrain.data.text import amharic
from speechtrain.errors import UserError

_SPACES = re.compile(r"\s+")

# ------------------------------------------------------------------------------------------------- tables
#: abbreviation -> words, per language (Coqui's tables); a trailing full stop is part of the abbreviation
#: except in Russian, whose abbreviations are hyphenated words
ABBREVIATIONS: dict[str, tuple[tuple[str, str], ...]] = {
    "en": (
        ("mrs", "misess"),
        ("mr", "mister"),
        ("dr", "doctor"),
        ("st", "saint"),
        ("co", "company"),
        ("jr", "junior"),
        ("maj", "major"),
        ("gen", "general"),
        ("drs", "doctors"),
        ("rev", "reverend"),
        ("lt", "lieutenant"),
        ("hon", "honorable"),
        ("sgt", "sergeant"),
        ("capt", "captain"),
        ("esq", "esquire"),
        ("ltd", "limited"),
        ("col", "colonel"),
        ("ft", "fort"),
    ),
    "es": (
        ("sra", "señora"),
        ("sr", "señor"),
        ("dr", "doctor"),
        ("dra", "doctora"),
        ("st", "santo"),
        ("co", "compañía"),
        ("jr", "junior"),
        ("ltd", "limitada"),
    ),
    "fr": (
        ("mme", "madame"),
        ("mr", "monsieur"),
        ("dr", "docteur"),
        ("st", "saint"),
        ("co", "compagnie"),
        ("jr", "junior"),
        ("ltd", "limitée"),
    ),
    "de": (("fr", "frau"), ("dr", "doktor"), ("st", "sankt"), ("co", "firma"), ("jr", "junior")),
    "pt": (
        ("sra", "senhora"),
        ("sr", "senhor"),
        ("dr", "doutor"),
        ("dra", "doutora"),
        ("st", "santo"),
        ("co", "companhia"),
        ("jr", "júnior"),
        ("ltd", "limitada"),
    ),
    "it": (
        ("sig", "signore"),
        ("dr", "dottore"),
        ("st", "santo"),
        ("co", "compagnia"),
        ("jr", "junior"),
        ("ltd", "limitata"),
    ),
    "pl": (("p", "pani"), ("m", "pan"), ("dr", "doktor"), ("sw", "święty"), ("jr", "junior")),
    "ar": (),
    "cs": (("dr", "doktor"), ("ing", "inženýr"), ("p", "pan")),
    "ru": (("г-жа", "госпожа"), ("г-н", "господин"), ("д-р", "доктор")),
    "nl": (("dhr", "de heer"), ("mevr", "mevrouw"), ("dr", "dokter"), ("jhr", "jonkheer")),
    "tr": (("b", "bay"), ("byk", "büyük"), ("dr", "doktor")),
    "hu": (("dr", "doktor"), ("b", "bácsi"), ("nőv", "nővér")),
    "hi": (),
}

#: the words of & @ % # $ £ ° per language (Coqui's tables, in that order)
SYMBOL_WORDS: dict[str, tuple[str, ...]] = {
    "en": ("and", "at", "percent", "hash", "dollar", "pound", "degree"),
    "es": ("y", "arroba", "por ciento", "numeral", "dolar", "libra", "grados"),
    "fr": ("et", "arobase", "pour cent", "dièse", "dollar", "livre", "degrés"),
    "de": ("und", "at", "prozent", "raute", "dollar", "pfund", "grad"),
    "pt": ("e", "arroba", "por cento", "cardinal", "dólar", "libra", "graus"),
    "it": ("e", "chiocciola", "per cento", "cancelletto", "dollaro", "sterlina", "gradi"),
    "pl": ("i", "małpa", "procent", "krzyżyk", "dolar", "funt", "stopnie"),
    "ar": ("و", "على", "في المئة", "رقم", "دولار", "جنيه", "درجة"),
    "cs": ("a", "na", "procento", "křížek", "dolar", "libra", "stupně"),
    "ru": ("и", "собака", "процентов", "номер", "доллар", "фунт", "градус"),
    "nl": ("en", "bij", "procent", "hekje", "dollar", "pond", "graden"),
    "tr": ("ve", "at", "yüzde", "diyez", "dolar", "sterlin", "derece"),
    "hu": ("és", "kukac", "százalék", "kettőskereszt", "dollár", "font", "fok"),
    "hi": ("और", "ऐट दी रेट", "प्रतिशत", "हैश", "डॉलर", "पाउंड", "डिग्री"),
}
SYMBOLS = ("&", "@", "%", "#", "$", "£", "°")

#: ordinal suffixes after the digits, per language (Coqui's patterns)
ORDINAL_SUFFIXES: dict[str, str] = {
    "en": r"(st|nd|rd|th)",
    "es": r"(º|ª|er|o|a|os|as)",
    "fr": r"(º|ª|er|re|e|ème)",
    "de": r"(st|nd|rd|th|º|ª|\.(?=\s|$))",
    "pt": r"(º|ª|o|a|os|as)",
    "it": r"(º|°|ª|o|a|i|e)",
    "pl": r"(º|ª|st|nd|rd|th)",
    "ar": r"(ون|ين|ث|ر|ى)",
    "cs": r"\.(?=\s|$)",
    "ru": r"(-й|-я|-е|-ое|-ье|-го)",
    "nl": r"(de|ste|e)",
    "tr": r"(\.|inci|nci|uncu|üncü|\.)",
    "hu": r"(\.|adik|edik|odik|edik|ödik|ödike|ik)",
    "hi": r"(st|nd|rd|th)",
}

#: what joins the whole and the cents in num2words's amounts (cut off a whole amount), per language
CURRENCY_AND: dict[str, str] = {
    "en": ", ",
    "es": " con ",
    "fr": " et ",
    "de": " und ",
    "pt": " e ",
    "it": " e ",
    "pl": ", ",
    "cs": ", ",
    "ru": ", ",
    "nl": ", ",
    "ar": ", ",
    "tr": ", ",
    "hu": ", ",
    "hi": ", ",
}

#: languages whose numbers speechtrain writes in words itself: num2words 0.5.14's Amharic fails on 1995 and
#: 12345, loops on 1234567 and writes "አንድ mሚሊዮን" for a million
OWN_NUMBERS: dict[str, Callable[[str], str]] = {"am": amharic.numbers_to_words}

#: Coqui's languages whose text it romanises with other libraries first (not reproduced here)
ROMANISED = {"zh": "pypinyin", "ja": "cutlet", "ko": "hangul romanisation"}

_NUMBER = re.compile(r"[0-9]+")
_DECIMAL = re.compile(r"([0-9]+[.,][0-9]+)")
_COMMA_GROUPS = re.compile(r"\b\d{1,3}(,\d{3})*(\.\d+)?\b")
_DOT_GROUPS = re.compile(r"\b\d{1,3}(.\d{3})*(\,\d+)?\b")  # "." unescaped, as Coqui's: any character
_CURRENCIES = (  # Coqui's order: pounds, dollars, euros; the sign before or after the amount, no space
    ("GBP", re.compile(r"((£[0-9\.\,]*[0-9]+)|([0-9\.\,]*[0-9]+£))")),
    ("USD", re.compile(r"((\$[0-9\.\,]*[0-9]+)|([0-9\.\,]*[0-9]+\$))")),
    ("EUR", re.compile(r"(([0-9\.\,]*[0-9]+€)|((€[0-9\.\,]*[0-9]+)))")),
)


# ------------------------------------------------------------------------------------------------- rules
@dataclass(frozen=True)
class LanguageRules:
    """How one language is normalised: Coqui's cleaner, numbers only, or nothing language-specific."""

    language: str  # primary subtag (pt of pt-br, zh of zh-cn)
    coqui: bool  # Coqui's multilingual cleaner (numbers, currency, ordinals, abbreviations, symbols)
    numbers: bool  # num2words knows the language
    abbreviations: tuple[tuple[re.Pattern[str], str], ...] = ()
    symbols: tuple[tuple[re.Pattern[str], str], ...] = ()
    ordinal: re.Pattern[str] | None = None

    @property
    def note(self) -> str:
        """One line for reports: what this language's text goes through."""
        lang = self.language
        if lang in ROMANISED:
            return (
                f"xtts text: '{lang}': Coqui romanises it ({ROMANISED[lang]}) before its BPE, which is not done "
                "here: only NFC, lower case and white space (plug a front end: model.text_front_end=package.module:"
                "function)"
            )
        if self.coqui and self.numbers:
            return f"xtts text: '{lang}': Coqui's rules (numbers, currency, ordinals, abbreviations, symbols; NFC)"
        if self.coqui:
            return (
                f"xtts text: '{lang}': Coqui's abbreviation and symbol rules; num2words has no '{lang}', so digits "
                "stay digits (Coqui's own cleaner fails on them)"
            )
        if self.numbers:
            by = "speechtrain's own number words" if lang in OWN_NUMBERS else "num2words, unicode-rbnf"
            return (
                f"xtts text: '{lang}' has no Coqui rules: numbers, ordinals, times and amounts in words by the "
                f"language's conventions ({by}), no abbreviation rules; NFC, lower case"
            )
        return (
            f"xtts text: '{lang}' has no normalisation rules (neither Coqui's nor num2words's): numbers, symbols "
            "and abbreviations stay as written; NFC, lower case and white space only"
        )


def primary(language: str) -> str:
    """``pt`` of ``pt-br``, ``zh`` of ``zh-cn``: the part Coqui's rules are chosen by."""
    return language.replace("_", "-").split("-")[0].lower()


def require_num2words() -> Any:
    """The ``num2words`` function, or a UserError with the install command."""
    try:
        from num2words import num2words
    except ImportError:
        raise UserError(
            "the xtts text front end writes numbers in words with `num2words`, which is not installed: "
            "pip install 'speechtrain[xtts]' (or: pip install num2words)"
        ) from None
    return num2words


def _num2words_knows(language: str) -> bool:
    from num2words import CONVERTER_CLASSES

    return language in CONVERTER_CLASSES


@lru_cache(maxsize=64)
def rules_for(language: str) -> LanguageRules:
    """The rules of a language code (``en``, ``pt-br``, ``am``, ...)."""
    lang = primary(language)
    require_num2words()
    numbers = lang in OWN_NUMBERS or (lang not in ROMANISED and _num2words_knows(lang))
    if lang in ROMANISED or lang not in SYMBOL_WORDS:
        if lang not in ROMANISED and lang not in OWN_NUMBERS:
            from speechtrain.data.text.spoken import locale_of

            numbers = locale_of(language).reads_numbers
        return LanguageRules(lang, coqui=False, numbers=numbers)
    if lang == "ru":
        abbreviations = tuple((re.compile(rf"\b{a}\b", re.IGNORECASE), w) for a, w in ABBREVIATIONS[lang])
    else:
        abbreviations = tuple((re.compile(rf"\b{a}\.", re.IGNORECASE), w) for a, w in ABBREVIATIONS[lang])
    symbols = tuple((re.compile(re.escape(s), re.IGNORECASE), f" {w} ") for s, w in zip(SYMBOLS, SYMBOL_WORDS[lang]))
    ordinal = re.compile(r"([0-9]+)" + ORDINAL_SUFFIXES[lang])
    return LanguageRules(lang, True, numbers, abbreviations, symbols, ordinal)


def rules_note(language: str) -> str:
    """What :func:`normalize` does to text of ``language`` (one line)."""
    return rules_for(language).note


# ------------------------------------------------------------------------------------------------- steps
def _amount(text: str, lang: str, currency: str) -> str:
    """An amount with its currency sign in words; a whole amount loses num2words's "and zero cents"."""
    num2words = require_num2words()
    amount = float(re.sub(r"[^\d.]", "", text.replace(",", ".")))
    words = str(num2words(amount, to="currency", currency=currency, lang=lang))
    if amount.is_integer():
        cut = words.rfind(CURRENCY_AND[lang])
        if cut != -1:
            words = words[:cut]
    return words


def _amount_of(lang: str, currency: str) -> Callable[[re.Match[str]], str]:
    return lambda m: _amount(m.group(0), lang, currency)


def _numbers(text: str, rules: LanguageRules) -> str:
    num2words = require_num2words()
    lang = rules.language

    def words(value: float | int, **kwargs: Any) -> str:
        return str(num2words(value, lang=lang, **kwargs))

    if lang in ("en", "ru") or not rules.coqui:
        text = _COMMA_GROUPS.sub(lambda m: m.group(0).replace(",", ""), text)
    else:
        text = _DOT_GROUPS.sub(lambda m: m.group(0).replace(".", ""), text)
    if rules.coqui:
        try:  # as Coqui: the first currency num2words cannot say stops the currencies after it too
            for code, pattern in _CURRENCIES:
                text = pattern.sub(_amount_of(lang, code), text)
        except Exception:  # noqa: BLE001 - num2words raises several types for what it lacks
            pass
    if lang != "tr":
        text = _DECIMAL.sub(lambda m: words(float(m.group(1).replace(",", "."))), text)
    if rules.ordinal is not None:
        text = rules.ordinal.sub(lambda m: words(int(m.group(1)), ordinal=True), text)
    return _NUMBER.sub(lambda m: words(int(m.group(0))), text)


def _symbols(text: str, rules: LanguageRules) -> str:
    for pattern, spoken in rules.symbols:
        text = pattern.sub(spoken, text).replace("  ", " ")
    return text.strip()


def normalize(text: str, language: str) -> str:
    """``text`` as the BPE of an XTTS model in ``language`` should see it (see the module doc)."""
    rules = rules_for(language)
    text = unicodedata.normalize("NFC", text).replace('"', "")
    if rules.numbers and not rules.coqui and rules.language not in OWN_NUMBERS:
        from speechtrain.data.text import spoken as numbers

        text = numbers.spoken(text, language, keep=frozenset())[0]  # before lower case: R$, Rp
    if rules.language == "tr":
        text = text.replace("İ", "i").replace("Ö", "ö").replace("Ü", "ü")
    text = text.lower()
    if rules.language in OWN_NUMBERS:
        text = OWN_NUMBERS[rules.language](text)
    elif rules.numbers and rules.coqui:
        text = _numbers(text, rules)
    for pattern, spoken in rules.abbreviations:
        text = pattern.sub(spoken, text)
    if rules.coqui:
        text = _symbols(text, rules)
    return _SPACES.sub(" ", text).strip()


multilingual_front_end: Callable[[str, str], str] = normalize
