"""Numbers and symbols as each language says them (issue 49): the reading of each held-out class equals
espeak-ng's reading of the words a native speaker writes out; what nothing reads is reported with its class and
fails ``prepare --strict``; where a voice reads a class right on its own, the front end leaves it to the voice."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from speechtrain.data.text import TextFrontEnd, TextSettings
from speechtrain.data.text.spoken import VOICE_READS, find, locale_of, spoken
from speechtrain.testing.reading_cases import CASES, ReadingCase

needs_espeak = pytest.mark.skipif(
    not all(importlib.util.find_spec(m) for m in ("espeakng_loader", "phonemizer")),
    reason="espeak-ng (phonemizer + espeakng-loader) not installed",
)
needs_libraries = pytest.mark.skipif(
    not all(importlib.util.find_spec(m) for m in ("num2words", "unicode_rbnf", "babel")),
    reason="num2words, unicode-rbnf and babel (the phonemes extra) not installed",
)
WRITTEN = [c for c in CASES if c.written is not None]
REPORTED = [c for c in CASES if c.written is None]


def _id(c: ReadingCase) -> str:
    return f"{c.language}-{c.kind}-{CASES.index(c)}"


def _phonemes(text: str, language: str) -> str:
    """espeak-ng's phonemes of ``text`` (stress kept; word spaces aside: espeak-ng joins some words)."""
    from speechtrain.data.text.phonemize import read

    return read([text], language)[0].phonemes.replace(" ", "")


def _ours(text: str, language: str) -> TextFrontEnd:
    return TextFrontEnd(TextSettings(language=language, phonemizer="espeak")).process(text)


def _voice_reads(c: ReadingCase) -> bool:
    return c.kind in VOICE_READS.get(c.language.split("-")[0].lower(), frozenset())


@needs_espeak
@needs_libraries
@pytest.mark.parametrize("case", WRITTEN, ids=_id)
def test_each_class_is_read_as_a_native_speaker_writes_it_out(case: ReadingCase) -> None:
    p = _ours(case.raw, case.language)
    assert p.symbols.replace(" ", "") == _phonemes(case.written or "", case.language), (case, p.symbols)
    assert not p.reading, p.reading


@needs_espeak
@needs_libraries
@pytest.mark.parametrize("case", WRITTEN, ids=_id)
def test_voice_reads_is_measured(case: ReadingCase) -> None:
    """VOICE_READS holds a class exactly where the voice's reading of the raw text equals the written-out words'."""
    right = _phonemes(case.raw, case.language) == _phonemes(case.written or "", case.language)
    assert right == _voice_reads(case), f"{case}: espeak-ng alone reads it {'right' if right else 'wrong'}"


@needs_espeak
@needs_libraries
@pytest.mark.parametrize("case", [c for c in WRITTEN if _voice_reads(c)], ids=_id)
def test_a_class_the_voice_reads_right_is_left_to_it(case: ReadingCase) -> None:
    """The normaliser never makes a right reading wrong: the front end's output is the voice's own reading."""
    assert _ours(case.raw, case.language).symbols.replace(" ", "") == _phonemes(case.raw, case.language)


@needs_espeak
@needs_libraries
@pytest.mark.parametrize("case", REPORTED, ids=_id)
def test_what_nothing_reads_is_reported_with_its_class(case: ReadingCase) -> None:
    notes = _ours(case.raw, case.language).reading
    assert any(n.startswith(f"{case.kind} ") and "write it out" in n for n in notes), notes


@needs_espeak
@needs_libraries
def test_strict_prepare_names_the_utterance_and_the_class(tmp_path: Path) -> None:
    from speechtrain.data.prepare import prepare_dataset
    from speechtrain.errors import DataError
    from tests.test_text_reading import _corpus, _data  # the small LJSpeech corpus those tests make

    texts = {"cs01": "Byl to jeho 5. pokus.", "cs02": "Dnes je hezky.", "cs03": "Bydlím v Praze."}
    with pytest.raises(DataError) as caught:
        prepare_dataset(_data(_corpus(tmp_path / "cs", texts), tmp_path, "cs", "espeak"), strict=True)
    message = str(caught.value)
    assert "cs01" in message and "ordinal '5.'" in message and "write it out" in message and "cs02" not in message


# ----------------------------------------------------------------------- parsing by the locale (no espeak-ng)
def _kinds(text: str, language: str) -> list[tuple[str, str]]:
    return [(f.kind, f.written) for f in find(text, language)]


@needs_libraries
def test_separators_are_the_locales() -> None:
    # a comma before three digits groups in English, and is the decimal point in German
    assert spoken("3,500 people", "en", keep=frozenset())[0] == "three thousand five hundred people"
    assert spoken("3,500 Liter", "de", keep=frozenset())[0].startswith("drei Komma fünf")
    assert spoken("10.000 Menschen", "de", keep=frozenset())[0] == "zehntausend Menschen"
    for space in (" ", "\u00a0", "\u202f"):
        assert _kinds(f"10{space}000 euros", "fr-FR") == [("grouped", f"10{space}000")]
    assert _kinds("۱۰٬۰۰۰ نفر", "fa") == [("grouped", "۱۰٬۰۰۰")]
    assert locale_of("de").decimal == ","


@needs_libraries
def test_times_minus_signs_and_leading_zeros() -> None:
    assert _kinds("14.30", "tr") == [("time", "14.30")]  # the point is no decimal point in Turkish
    assert _kinds("14.30", "en") == [("number", "14.30")]  # ... and is one in English
    assert _kinds("um 14:30", "de") == [("time", "14:30")]
    assert _kinds("\u22125 und -3", "de") == [("minus", "\u22125"), ("minus", "-3")]
    assert _kinds("COVID-19 und 10-20", "de") == [("number", "19"), ("number", "10"), ("number", "20")]
    assert _kinds("Ruf 030 1234567 an", "de") == [("phone_number", "030 1234567")]
    assert _kinds("0,5 Liter", "de") == [("number", "0,5")]  # a decimal, not a phone number


@needs_libraries
def test_ordinal_markers_are_each_languages() -> None:
    assert _kinds("Ich habe 3. Dann", "tr") == [("number", "3")]  # a capital after the point: a sentence end
    assert _kinds("am 3. Mai", "de") == [("ordinal", "3.")]  # German nouns are capitals
    assert spoken("la 1re fois", "fr-FR", keep=frozenset())[0] == "la première fois"
    assert spoken("den 3:e maj", "sv")[0] == "den tredje maj"
    assert spoken("5-ci", "az")[0] == "beşinci"
    assert spoken("3-án", "hu", keep=frozenset())[0] == "harmadikán"


@needs_libraries
def test_a_kept_class_is_left_as_written_and_reported_classes_are_noted_once() -> None:
    assert spoken("He came 1st.", "en") == ("He came 1st.", [])  # the English voice reads ordinals itself
    assert spoken("He came 1st.", "en", keep=frozenset()) == ("He came first.", [])
    text, notes = spoken("Siehe www.a.de und www.a.de.", "de")
    assert text == "Siehe www.a.de und www.a.de." and len(notes) == 1 and notes[0].startswith("url ")


@needs_espeak
def test_front_end_3_keeps_its_number_reading() -> None:
    """A run trained with front end 3 reads its numbers as it was trained (one rule for all)."""
    old = TextFrontEnd(TextSettings(language="en", phonemizer="espeak", front_end=3))
    assert "wˈʌnst" in old("He came 1st.")  # 3 wrote "onest" for 1st
    assert "fˈɜːst" in TextFrontEnd(TextSettings(language="en", phonemizer="espeak"))("He came 1st.")


@needs_libraries
def test_piper_reports_what_its_voice_misreads_with_the_words_to_write() -> None:
    """Piper's runtime reads the text as typed: a class its voice misreads is reported (the transcript must say it),
    one the voice reads right is not."""
    pytest.importorskip("piper")
    de = TextFrontEnd(TextSettings(language="de", phonemizer="piper")).process("Er wurde der 3. Sieger bei -5 Grad.")
    assert any(n.startswith("ordinal '3.'") and "'dritte'" in n for n in de.reading), de.reading
    assert not any(n.startswith("minus") for n in de.reading)  # the German voice says "minus fünf"


@needs_libraries
def test_a_negative_year_keeps_its_minus_and_a_year_is_its_own_class() -> None:
    assert _kinds("-1990 und 1990", "de") == [("minus", "-1990"), ("year", "1990")]
