"""Uzbek: one symbol for every way people type the apostrophes, and Cyrillic to Latin on request.

Uzbek Latin writes oʻ and gʻ with U+02BB (ʻ) and the tutuq belgisi (glottal stop) with U+02BC (ʼ);
keyboards give ``'``, ``’``, ``‘``, ````` ``, ``´`` or ``ʹ`` instead. An apostrophe of any form between
two letters becomes ʻ after o/g and ʼ after any other Latin letter, so ``o'zbek``, ``o‘zbek`` and
``oʻzbek`` are one word to the model. Between Cyrillic letters it becomes ъ (the Cyrillic tutuq).
At the end of a word after o or g (``tog‘``, ``bog'``) it is the ʻ of oʻ/gʻ too, unless the word opened
with an apostrophe (then the two are quote marks: ``'tog'``). Any other apostrophe is a quote mark and
is left to the generic rules.

:func:`cyrillic_to_latin` follows the 1995 Latin alphabet: ў oʻ, ғ gʻ, қ q, ҳ h, ш sh, ч ch, ъ ʼ,
е ye at the start of a word and after a vowel (else e), ё yo, ю yu, я ya, ц ts, ь dropped.
"""

from __future__ import annotations

OKINA = "\u02bb"  # ʻ  (oʻ, gʻ)
TUTUQ = "\u02bc"  # ʼ  (tutuq belgisi)
APOSTROPHES = "'`\u00b4\u2018\u2019\u02bb\u02bc\u02b9\u2032\u201b"

_CYR_VOWELS = set("аеёиоуўэюяАЕЁИОУЎЭЮЯ")
_CYR = {
    "а": "a",
    "б": "b",
    "в": "v",
    "г": "g",
    "д": "d",
    "е": "e",
    "ё": "yo",
    "ж": "j",
    "з": "z",
    "и": "i",
    "й": "y",
    "к": "k",
    "л": "l",
    "м": "m",
    "н": "n",
    "о": "o",
    "п": "p",
    "р": "r",
    "с": "s",
    "т": "t",
    "у": "u",
    "ф": "f",
    "х": "x",
    "ц": "ts",
    "ч": "ch",
    "ш": "sh",
    "щ": "sh",
    "ъ": TUTUQ,
    "ы": "i",
    "ь": "",
    "э": "e",
    "ю": "yu",
    "я": "ya",
    "ў": "o" + OKINA,
    "қ": "q",
    "ғ": "g" + OKINA,
    "ҳ": "h",
}


def _is_cyrillic(c: str) -> bool:
    return "\u0400" <= c <= "\u04ff"


def unify_apostrophes(text: str) -> str:
    """Every apostrophe between two letters as the one symbol of its letter (see the module doc)."""
    if not any(c in APOSTROPHES for c in text):
        return text
    out = list(text)
    for i in range(1, len(text)):
        c, before = text[i], text[i - 1]
        after = text[i + 1] if i + 1 < len(text) else ""
        if c in APOSTROPHES and before in "oOgG" and not after.isalpha() and _word_final_okina(text, i):
            out[i] = OKINA
            continue
        if c not in APOSTROPHES or not (before.isalpha() and after.isalpha()):
            continue
        if before in APOSTROPHES or after in APOSTROPHES:
            continue
        if _is_cyrillic(before):
            out[i] = "ъ"
        else:
            out[i] = OKINA if before in "oOgG" else TUTUQ
    return "".join(out)


def _word_final_okina(text: str, i: int) -> bool:
    """Whether the apostrophe at ``i`` (after o/g, at a word's end) is oʻ/gʻ: the word before it has at
    least two Latin letters and did not open with an apostrophe (a quote)."""
    start = i - 1
    while start > 0 and (text[start - 1].isalpha() or text[start - 1] in APOSTROPHES):
        start -= 1
    word = text[start:i]
    if word[:1] in APOSTROPHES or word[:1] in '"\u201c\u00ab':
        return False
    letters = "".join(ch for ch in word if ch not in APOSTROPHES)
    return len(letters) >= 2 and letters.isalpha() and not any(_is_cyrillic(ch) for ch in letters)


def cyrillic_to_latin(text: str) -> str:
    """Uzbek Cyrillic in the Latin alphabet (other characters unchanged)."""
    out = []
    for i, c in enumerate(text):
        low = c.lower()
        if low not in _CYR:
            out.append(c)
            continue
        prev = text[i - 1] if i > 0 else " "
        latin = _CYR[low]
        if low == "е":
            latin = "ye" if (not prev.isalpha() or prev in _CYR_VOWELS or prev.lower() in "ъь") else "e"
        if c != low and latin:  # upper case: Sh, or SH inside an upper-case word
            nxt = text[i + 1] if i + 1 < len(text) else ""
            latin = latin.upper() if nxt.isupper() else latin[0].upper() + latin[1:]
        out.append(latin)
    return "".join(out)


def has_cyrillic(text: str) -> bool:
    return any(_is_cyrillic(c) for c in text)
