"""Amharic: Ethiopic punctuation, numbers read as Amharic words, and a rule-based G2P.

- Punctuation: ፡ (word space) is a space, ። a full stop (so is ``::``, as many people type it), ፣ a
  comma, ፤ a semicolon, ፥ and ፦ colons, ፧ a question mark, ፨ a full stop.
- Numbers: Ethiopic numerals (፩ ... ፼, e.g. ፲፱፻፺፭ = 1995) and Arabic digits (with ``,`` thousands
  separators and a ``.`` decimal point) become Amharic number words (2015 -> ሁለት ሺህ አስራ አምስት); a
  number written with a leading zero (``0911234567``, a phone number) is read digit by digit. An ordinal
  (``3ኛ``, ``፫ኛው``) is the number's ordinal word (ሶስተኛ: a final sixth-order syllable takes the first order,
  then ኛ), ``50%`` is "ሃምሳ በመቶ", and the era abbreviations ``ዓ.ም.`` / ``ዓ.ዓ.`` are said in full
  (front end 4; :data:`ABBREVIATIONS`).
- G2P (``data.phonemizer=rules``): each syllable of the Ethiopic syllabary is one consonant phone and
  one vowel phone. The seven orders are ə u i a e (none) o: the sixth order is the bare consonant.
  The labialised forms (the eighth order ሏ ሟ ቧ ..., the rows ቈ ኰ ጐ ኈ ዀ, and ᎀ ... ᎏ of the Ethiopic
  Supplement) carry ʷ: ሏ -> lʷa, ኳ -> kʷa, ጓ -> gʷa. Ejectives are marked with ʼ (ጠ -> tʼə); ሀ ሐ ኀ are
  all h, ሰ ሠ s, አ ዐ ʔ, ጸ ፀ tsʼ. Gemination marks become ː. Characters outside the syllabary pass
  through unchanged.
"""

from __future__ import annotations

import re
import unicodedata

PUNCTUATION = {
    "\u1361": " ",  # ፡ word space
    "\u1362": ".",  # ። full stop
    "\u1363": ",",  # ፣ comma
    "\u1364": ";",  # ፤ semicolon
    "\u1365": ":",  # ፥ colon
    "\u1366": ":",  # ፦ preface colon
    "\u1367": "?",  # ፧ question mark
    "\u1368": ".",  # ፨ paragraph separator
}
_PUNCT = str.maketrans(PUNCTUATION)

# --------------------------------------------------------------------------------------------- numbers
_ETHIOPIC_DIGITS = {chr(0x1369 + i): i + 1 for i in range(9)}  # ፩..፱ = 1..9
_ETHIOPIC_TENS = {chr(0x1372 + i): 10 * (i + 1) for i in range(9)}  # ፲..፺ = 10..90
_HUNDRED, _TEN_THOUSAND = "\u137b", "\u137c"  # ፻ ፼
_ETHIOPIC_NUMBER = re.compile("[\u1369-\u137c]+")
_ARABIC_NUMBER = re.compile(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?")
_SPACE_BEFORE_MARK = re.compile(r" +([,.;:?!])")

UNITS = ("", "አንድ", "ሁለት", "ሶስት", "አራት", "አምስት", "ስድስት", "ሰባት", "ስምንት", "ዘጠኝ")
TENS = ("", "አስር", "ሃያ", "ሰላሳ", "አርባ", "ሃምሳ", "ስልሳ", "ሰባ", "ሰማንያ", "ዘጠና")
TEEN = "አስራ"  # 11..19: አስራ + unit
ZERO, HUNDRED, POINT = "ዜሮ", "መቶ", "ነጥብ"
SCALES = ((10**9, "ቢሊዮን"), (10**6, "ሚሊዮን"), (1000, "ሺህ"))


def ethiopic_number_value(numeral: str) -> int:
    """The value of an Ethiopic numeral: tens and units add up, ፻ multiplies what is before it by
    100, ፼ multiplies everything before it by 10000 (፲፱፻፺፭ = 1995, ፻፼ = 1000000)."""
    total = block = part = 0
    for c in numeral:
        if c in _ETHIOPIC_DIGITS:
            part += _ETHIOPIC_DIGITS[c]
        elif c in _ETHIOPIC_TENS:
            part += _ETHIOPIC_TENS[c]
        elif c == _HUNDRED:
            block = (block + (part or 1)) * 100
            part = 0
        elif c == _TEN_THOUSAND:
            total = (total + block + part or 1) * 10000
            block = part = 0
    return total + block + part


def number_words(n: int) -> str:
    """An integer in Amharic words (digit by digit beyond 12 digits: a phone or account number)."""
    if n == 0:
        return ZERO
    if n >= 10**12:
        return " ".join(UNITS[int(d)] or ZERO for d in str(n))
    words: list[str] = []
    for value, name in SCALES:
        q, n = divmod(n, value)
        if q:
            words += [number_words(q), name]
    h, n = divmod(n, 100)
    if h:
        words += ([UNITS[h]] if h > 1 else []) + [HUNDRED]
    t, u = divmod(n, 10)
    if t == 1 and u:
        words.append(f"{TEEN} {UNITS[u]}")
    else:
        words += [w for w in (TENS[t], UNITS[u]) if w]
    return " ".join(words)


#: abbreviations said in full (the dots would be read as sentence ends): the Ethiopian eras
ABBREVIATIONS = {"ዓ.ም.": "ዓመተ ምሕረት", "ዓ.ም": "ዓመተ ምሕረት", "ዓ.ዓ.": "ዓመተ ዓለም", "ዓ.ዓ": "ዓመተ ዓለም"}
_ABBREVIATION = re.compile("|".join(re.escape(a) for a in sorted(ABBREVIATIONS, key=len, reverse=True)))
_ORDINAL = re.compile("(\\d+|[\u1369-\u137c]+) ?\u129b")  # 3ኛ, ፫ኛ
_PERCENT = re.compile(r"(\d+(?:\.\d+)?) ?[%\u066a]")
PERCENT = "በመቶ"
#: ordinals that do not follow the rule (ዘጠኝ -> ዘጠነኛ, ሺህ -> ሺኛ)
_ORDINAL_STEMS = {"ዘጠኝ": "ዘጠነ", "ሺህ": "ሺ"}


def ordinal_words(n: int) -> str:
    """The ordinal of ``n``: the last word's final sixth-order syllable takes the first order, then ኛ
    (ሶስት -> ሶስተኛ, አንድ -> አንደኛ, አስር -> አስረኛ; ሃያ -> ሃያኛ)."""
    words = number_words(n).split(" ")
    last = words[-1]
    if last in _ORDINAL_STEMS:
        last = _ORDINAL_STEMS[last]
    elif 0x1200 <= ord(last[-1]) <= 0x135A and (ord(last[-1]) - 0x1200) % 8 == 5:
        last = last[:-1] + chr(ord(last[-1]) - 5)
    return " ".join([*words[:-1], last + "\u129b"])


def _forms(text: str) -> str:
    """Ordinals, percentages and era abbreviations in words (before the plain numbers)."""
    text = _ABBREVIATION.sub(lambda m: ABBREVIATIONS[m.group(0)], text)

    def ordinal(m: re.Match[str]) -> str:
        n = m.group(1)
        return ordinal_words(int(n) if n.isascii() else ethiopic_number_value(n))

    text = _ORDINAL.sub(ordinal, text)
    return _PERCENT.sub(lambda m: f"{m.group(1)} {PERCENT}", text)


def _arabic(match: re.Match[str]) -> str:
    whole, _, frac = match.group(0).replace(",", "").partition(".")
    if len(whole) > 1 and whole.startswith("0"):  # 0911234567: a phone number, read digit by digit
        spoken = " ".join(UNITS[int(d)] or ZERO for d in whole)
    else:
        spoken = number_words(int(whole))
    if frac:
        spoken += f" {POINT} " + " ".join(UNITS[int(d)] or ZERO for d in frac)
    return spoken


def numbers_to_words(text: str, forms: bool = True) -> str:
    """Ethiopic numerals and Arabic digits as Amharic words (spaced from the words around them); ``forms``:
    ordinals, percentages and era abbreviations too (front end 4)."""
    if forms:
        text = _forms(text)
    text = _ETHIOPIC_NUMBER.sub(lambda m: f" {number_words(ethiopic_number_value(m.group(0)))} ", text)
    text = _ARABIC_NUMBER.sub(lambda m: f" {_arabic(m)} ", text)
    return _SPACE_BEFORE_MARK.sub(r"\1", text)


def clean(text: str, numbers: bool = True, forms: bool = True) -> str:
    """Ethiopic punctuation to its common marks (``::`` too), numbers to words (``forms``: see
    :func:`numbers_to_words`)."""
    if forms:  # before the punctuation: ዓ.ም. is one abbreviation, not two sentence ends
        text = _ABBREVIATION.sub(lambda m: ABBREVIATIONS[m.group(0)], text)
    text = text.replace("::", "\u1362").translate(_PUNCT)
    return numbers_to_words(text, forms) if numbers else text


# ----------------------------------------------------------------------------------------------- G2P
_VOWELS = ("ə", "u", "i", "a", "e", "", "o", "ʷa")  # the eight orders of a plain row
_LABIAL_VOWELS = ("ʷə", None, "ʷi", "ʷa", "ʷe", "ʷ", None, None)  # the rows ቈ ቘ ኈ ኰ ዀ ጐ
_ROWS = {  # first syllable of a row -> its consonant
    0x1200: "h",
    0x1208: "l",
    0x1210: "h",
    0x1218: "m",
    0x1220: "s",
    0x1228: "r",
    0x1230: "s",
    0x1238: "ʃ",
    0x1240: "kʼ",
    0x1250: "qʰ",
    0x1260: "b",
    0x1268: "v",
    0x1270: "t",
    0x1278: "tʃ",
    0x1280: "h",
    0x1290: "n",
    0x1298: "ɲ",
    0x12A0: "ʔ",
    0x12A8: "k",
    0x12B8: "x",
    0x12C8: "w",
    0x12D0: "ʔ",
    0x12D8: "z",
    0x12E0: "ʒ",
    0x12E8: "j",
    0x12F0: "d",
    0x12F8: "ɗ",
    0x1300: "dʒ",
    0x1308: "g",
    0x1318: "ŋ",
    0x1320: "tʼ",
    0x1328: "tʃʼ",
    0x1330: "pʼ",
    0x1338: "tsʼ",
    0x1340: "tsʼ",
    0x1348: "f",
    0x1350: "p",
}
_LABIAL_ROWS = {0x1248: "kʼ", 0x1258: "qʰ", 0x1288: "h", 0x12B0: "k", 0x12C0: "x", 0x1310: "g"}
_SUPPLEMENT = {0x1380: "m", 0x1384: "b", 0x1388: "f", 0x138C: "p"}  # ᎀ..ᎏ: ʷa ʷi ʷe ʷ
_SUPPLEMENT_VOWELS = ("ʷa", "ʷi", "ʷe", "ʷ")
_SPECIAL = {"\u12a7": "ʔə", "\u1358": "rʲa", "\u1359": "mʲa", "\u135a": "fʲa"}  # ኧ ፘ ፙ ፚ
_GEMINATION = {"\u135d": "ː", "\u135e": "ː", "\u135f": "ː"}


def _syllable_table() -> dict[str, str]:
    table: dict[str, str] = {}
    for base, consonant in _ROWS.items():
        for order, vowel in enumerate(_VOWELS):
            table[chr(base + order)] = consonant + vowel
    for base, consonant in _LABIAL_ROWS.items():
        for order, labial in enumerate(_LABIAL_VOWELS):
            if labial is not None:
                table[chr(base + order)] = consonant + labial
    for base, consonant in _SUPPLEMENT.items():
        for order, vowel in enumerate(_SUPPLEMENT_VOWELS):
            table[chr(base + order)] = consonant + vowel
    table.update(_SPECIAL)
    table.update(_GEMINATION)
    # only code points Unicode assigns (the rows have gaps)
    return {c: p for c, p in table.items() if unicodedata.category(c) in ("Lo", "Mn")}


SYLLABLES = _syllable_table()


def g2p(text: str) -> str:
    """Ethiopic syllables as consonant + vowel phones (IPA); everything else unchanged."""
    return "".join(SYLLABLES.get(c, c) for c in text)
