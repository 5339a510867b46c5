"""Numbers, amounts of money and dates before espeak-ng (``data.phonemizer=espeak``).

espeak-ng's own number rules are thin in many voices: Welsh ``£5.99.`` loses the pound sign and the point,
Swahili ``5,000/=`` and ``12/03/2024`` are read with an English "slash". Where ``num2words`` (the ``xtts`` and
``dev`` extras) has the language, amounts (``£5.99`` -> "pump punt, ...") and numbers (``5,000``, ``3,5``) are
written out in it; what is left (every number of a language num2words lacks, dates, the East African ``/=``) is
*reported* with the utterance, never passed on in silence: :func:`expand_numbers` returns the notes.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

#: currency signs -> ISO codes (num2words's ``currency=``)
CURRENCY = {
    "£": "GBP",
    "$": "USD",
    "€": "EUR",
    "¥": "JPY",
    "₦": "NGN",
    "₹": "INR",
    "₽": "RUB",
    "₺": "TRY",
    "₩": "KRW",
    "₪": "ILS",
    "₴": "UAH",
    "₸": "KZT",
}
#: a data.language (primary subtag) -> num2words's code where they differ
NUM2WORDS_CODE = {"kk": "kz", "nb": "no", "nn": "no"}
_DATE = re.compile(r"\b\d{1,4}([/.\-])\d{1,2}\1\d{1,4}\b")
_MONEY = re.compile(r"([" + re.escape("".join(CURRENCY)) + r"])\s?(\d[\d.,]*\d|\d)")
_NUMBER = re.compile(r"\d[\d.,]*\d|\d")
_SHILLING = re.compile(r"\d[\d.,]*\s?/=")
_GROUPED = re.compile(r"\d{1,3}([.,\u00a0 ])\d{3}(\1\d{3})*")


def num2words_code(language: str) -> str | None:
    """num2words's code for ``language`` (a primary subtag), or None when it has no such language."""
    try:
        from num2words import CONVERTER_CLASSES
    except ImportError:
        return None
    code = NUM2WORDS_CODE.get(language, language)
    return code if code in CONVERTER_CLASSES else None


def _value(written: str) -> Decimal | None:
    """``5,000`` -> 5000, ``5.99`` -> 5.99, ``3,5`` -> 3.5 (a separator before exactly three digits groups)."""
    written = written.rstrip(".,")
    if _GROUPED.fullmatch(written):
        return Decimal(re.sub(r"\D", "", written))
    if written.count(".") + written.count(",") > 1:
        return None
    try:
        return Decimal(written.replace(",", "."))
    except InvalidOperation:
        return None


def _words(value: Decimal, code: str, **kwargs: str) -> str | None:
    """num2words's reading (its commas dropped: they are no pause), None where it has none. An amount is given
    as a float (an int is read as cents) and a whole amount loses its "zero cents"; a year is read as one."""
    from num2words import num2words

    whole = value == value.to_integral_value()
    number: int | float = int(value) if whole and "currency" not in kwargs.values() else float(value)
    if whole and not kwargs and 1000 <= value < 2100:
        kwargs = {"to": "year"}
    try:
        said = str(num2words(number, lang=code, **kwargs))
        if whole and kwargs.get("to") == "currency" and "," in said:
            head, tail = said.rsplit(",", 1)
            said = head if tail.split()[:1] == [str(num2words(0, lang=code))] else said
    except (NotImplementedError, KeyError, ValueError, TypeError, AttributeError, OverflowError):
        if kwargs.get("to") == "year":
            return _words(value, code)
        return None
    return said.replace(",", "")


def expand_numbers(text: str, language: str) -> tuple[str, list[str]]:
    """``text`` with its amounts and numbers written as words in ``language`` where num2words has it, and a note
    for each thing left for espeak-ng to read on its own (dates, ``/=``, every number without num2words)."""
    if not any(c.isdigit() or c in CURRENCY for c in text):
        return text, []
    notes = [f"a date ({m.group(0)}): write it as it is said" for m in _DATE.finditer(text)]
    notes += [f"the amount notation {m.group(0)!r}: write it as it is said" for m in _SHILLING.finditer(text)]
    code = num2words_code(language)
    if code is None:
        found = [m.group(0) for m in _NUMBER.finditer(text)]
        if found:
            notes.append(
                f"numbers ({', '.join(found[:3])}) left to espeak-ng's own rules: data.language={language} has no "
                "number normaliser (num2words); write them as words"
            )
        return text, notes
    dated = {m.span() for m in _DATE.finditer(text)}

    def money(m: re.Match[str]) -> str:
        value = _value(m.group(2))
        said = _words(value, code, to="currency", currency=CURRENCY[m.group(1)]) if value is not None else None
        if said is None:
            notes.append(f"the amount {m.group(0)!r}: num2words has no {CURRENCY[m.group(1)]} in {code}")
            return m.group(0)
        return said + m.group(0)[len(m.group(0).rstrip(".,")) :]

    def number(m: re.Match[str]) -> str:
        if any(a <= m.start() < b for a, b in dated):
            return m.group(0)
        value = _value(m.group(0))
        said = _words(value, code) if value is not None else None
        if said is None:
            notes.append(f"the number {m.group(0)!r}: num2words could not read it in {code}")
            return m.group(0)
        return said + m.group(0)[len(m.group(0).rstrip(".,")) :]

    text = _MONEY.sub(money, text)
    dated = {m.span() for m in _DATE.finditer(text)}
    return _NUMBER.sub(number, text), notes
