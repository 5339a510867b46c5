"""Text read as the language reads it, round two (issue 41): no fold or removal that changes what espeak-ng
says, a report that catches letter names, foreign-script readings and numbers left to espeak-ng, lost
characters, encoding advice and language hints from data.language. Each case on a small corpus made here."""

from __future__ import annotations

import dataclasses
import re
import unicodedata
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from speechtrain.config import DataConfig
from speechtrain.data.prepare import prepare_dataset
from speechtrain.data.text import TextFrontEnd, TextSettings, normalize_text
from speechtrain.data.text.frontend import compat_fold
from speechtrain.data.text.inventory import TextItem, learn_symbols, text_report
from speechtrain.data.text.scripts import script_of
from speechtrain.errors import DataError

SR = 22050
needs_espeak = pytest.mark.skipif(
    not all(__import__("importlib").util.find_spec(m) for m in ("espeakng_loader", "phonemizer")),
    reason="espeak-ng (phonemizer + espeakng-loader) not installed",
)


def _corpus(root: Path, texts: dict[str, str], encoding: str = "utf-8", errors: str = "strict") -> Path:
    """An LJSpeech corpus: one short tone per utterance, ``id|text`` lines in ``encoding``."""
    (root / "wavs").mkdir(parents=True, exist_ok=True)
    t = np.arange(int(0.6 * SR)) / SR
    for i, uid in enumerate(texts):
        sf.write(root / "wavs" / f"{uid}.wav", (0.1 * np.sin(2 * np.pi * (180 + 20 * i) * t)).astype(np.float32), SR)
    body = "".join(f"{uid}|{text}\n" for uid, text in texts.items())
    (root / "metadata.csv").write_bytes(body.encode(encoding, errors=errors))
    return root


def _data(root: Path, tmp_path: Path, language: str, phonemizer: str = "none", **extra: object) -> DataConfig:
    return DataConfig(
        manifest=str(root),
        cache_dir=str(tmp_path / "cache"),
        language=language,
        phonemizer=phonemizer,  # type: ignore[arg-type]
        eval_utterances=0,
        **extra,  # type: ignore[arg-type]
    )


def _reading(p: object) -> list[str]:
    return list(getattr(p, "reading", []))  # the notes on a text's reading (none before they existed)


def _report(texts: dict[str, str], language: str, phonemizer: str = "none"):  # noqa: ANN202
    front = TextFrontEnd(TextSettings(language=language, phonemizer=phonemizer))
    items = []
    for uid, p in zip(texts, front.process_many(list(texts.values()))):
        item = TextItem(uid, p.symbols, "".join(p.unmapped.elements()), texts[uid])
        items.append(dataclasses.replace(item, reading="\n".join(_reading(p))) if _reading(p) else item)
    return text_report(
        items, learn_symbols(items), source="learned", language=language, phonemizer=phonemizer, settings=front.settings
    )


# ---------------------------------------------------------------------------- 1. folds that keep the reading
#: script -> (espeak-ng voice, a word frame for one character): every compatibility fold of the script is
#: checked against espeak-ng's reading of the original
FOLD_VOICES = {
    "Thai": ("th", "ท{}"),
    "Arabic": ("ar", "{}"),
    "Hangul": ("ko", "{}"),
    "Katakana": ("ja", "{}"),
    "Greek": ("el", "κα{}λα"),
    "Cyrillic": ("ru", "ка{}ла"),
    "Georgian": ("ka", "{}"),
}


#: espeak-ng's "letter" as its voices say it (before a code point, in "Chinese letter"): a reading that failed
LETTER = re.compile("[lɭ]ˈe\u031e?t[əʌ]")


def _failed(phonemes: str) -> bool:
    return not phonemes or LETTER.search(phonemes) is not None


@needs_espeak
@pytest.mark.parametrize("script", list(FOLD_VOICES))
def test_every_compatibility_fold_keeps_or_mends_espeaks_reading(script: str) -> None:
    from speechtrain.data.text import frontend
    from speechtrain.data.text.phonemize import phonemize

    voice, frame = FOLD_VOICES[script]
    chars = [
        chr(cp)
        for cp in range(0x80, 0x30000)
        if unicodedata.decomposition(chr(cp)).startswith("<") and script_of(chr(cp)) == script
    ]
    originals = [frame.format(c) for c in chars]
    folded = [compat_fold(t) for t in originals]
    before, after = phonemize(originals, voice), phonemize(folded, voice)
    worse = [
        (c, b, a)
        for c, o, f, b, a in zip(chars, originals, folded, before, after)
        if o != f and not _failed(b) and (_failed(a) or a != b)
    ]
    assert worse == [], worse  # a fold may only mend a reading that failed ("letter" said, nothing said)
    kept = sorted(getattr(frontend, "KEEP_COMPAT", {}).get(script, ()))
    if kept:  # a script's characters kept unfolded are kept for a reason: NFKC's form reads differently
        as_is = phonemize([frame.format(c) for c in kept], voice)
        nfkc = phonemize([frame.format(unicodedata.normalize("NFKC", c)) for c in kept], voice)
        assert any(a != b for a, b in zip(as_is, nfkc))


@needs_espeak
def test_thai_sara_am_reaches_espeak_unfolded(tmp_path: Path) -> None:
    from speechtrain.data.text.phonemize import phonemize

    texts = {f"th{i:02d}": t for i, t in enumerate(["แม่ทำอาหารอร่อย", "น้ำเย็นมาก", "เขาทำงานทุกวัน", "ฉันไปตลาด"])}
    report = prepare_dataset(_data(_corpus(tmp_path / "th", texts), tmp_path, "th", "espeak"), strict=True)
    assert report.text is not None and not any("ำ" == a for a, _, _ in report.text.mapped)
    expected = phonemize(list(texts.values()), "th")  # espeak-ng on the text as written
    from speechtrain.data.dataset import SpeechDataset

    ds = SpeechDataset.from_config(_data(tmp_path / "th", tmp_path, "th", "espeak"), "train")
    tokens = {uid: ds.tokenizer.encode_symbols(p) for uid, p in zip(texts, expected)}
    assert {uid: list(ds[i]["tokens"]) for i, uid in enumerate(ds.ids)} == tokens
    assert "tˈaɪlˈetə" not in "".join(expected)  # the NFKC form's English letter names


@needs_espeak
def test_persian_zwnj_is_kept_where_the_script_uses_it() -> None:
    fa = TextFrontEnd(TextSettings(language="fa", phonemizer="espeak"))
    assert fa("خانه\u200cام") == "xˈɑneːˈam"  # not xˈɑnhɑm, the reading without the ZWNJ
    assert normalize_text("خانه\u200cام", language="fa") == "خانه\u200cام"
    assert normalize_text("a\u200cb", language="en") == "ab"  # elsewhere it is still removed and reported


@needs_espeak
def test_a_run_trained_with_front_end_2_reads_its_text_as_it_was_trained() -> None:
    old = TextSettings.from_dict({"language": "th", "phonemizer": "espeak", "front_end": 2})
    assert "tˈaɪlˈetə" in TextFrontEnd(old)("แม่ทำอาหาร")  # the NFKC fold it learned from, kept for that run
    assert "tˈaɪlˈetə" not in TextFrontEnd(TextSettings(language="th", phonemizer="espeak"))("แม่ทำอาหาร")
    fa_old = TextSettings.from_dict({"language": "fa", "front_end": 2})
    assert TextFrontEnd(fa_old)("خانه\u200cام كتاب") == "خانهام كتاب"


def test_arabic_and_persian_letter_forms_are_mapped_to_the_declared_language_and_reported() -> None:
    report = _report({"fa1": "كتاب يك مرد", "fa2": "این کتاب خوب است"}, "fa")
    symbols = {s for s, _ in report.symbols}
    assert not symbols & {"ك", "ي"} and {"ک", "ی"} <= symbols
    assert {(a, b) for a, b, _ in report.mapped} >= {("ك", "ک"), ("ي", "ی")}
    arabic = _report({"ar1": "کتاب کبیر", "ar2": "هذا كتاب"}, "ar")
    assert not {s for s, _ in arabic.symbols} & {"ک", "ی"}
    assert ("ی", "ي") in {(a, b) for a, b, _ in arabic.mapped}


# ------------------------------------------------------------------------------ 2. the phoneme-level check
@needs_espeak
def test_kanji_read_as_chinese_letter_fails_strict_naming_the_utterance(tmp_path: Path) -> None:
    texts = {"ja01": "東京に住んでいます。", "ja02": "わたしはがくせいです。", "ja03": "きょうはいいてんきです。"}
    root = _corpus(tmp_path / "ja", texts)
    summary = prepare_dataset(_data(root, tmp_path, "ja", "espeak")).summary()
    assert "(ja01): espeak-ng switched" in summary and "ja02" not in summary and "ja03" not in summary
    with pytest.raises(DataError, match="--strict: .*ja01.*switched to another language.*kana"):
        prepare_dataset(_data(root, tmp_path, "ja", "espeak"), strict=True)


@needs_espeak
def test_pointed_hebrew_and_gershayim_are_reported(tmp_path: Path) -> None:
    texts = {"he01": "שָׁלוֹם", "he02": "הוא שירת בצה״ל", "he03": "מה שלומך היום"}
    root = _corpus(tmp_path / "he", texts)
    with pytest.raises(DataError) as caught:
        prepare_dataset(_data(root, tmp_path, "he", "espeak"), strict=True)
    message = str(caught.value)
    assert "he01" in message and "niqqud" in message
    assert "he02" in message and "gershayim" in message and "he03" not in message


@needs_espeak
def test_welsh_money_is_said_in_welsh_and_the_next_text_keeps_its_own_phonemes() -> None:
    cy = TextFrontEnd(TextSettings(language="cy", phonemizer="espeak"))
    alone = cy("Mae hi yn braf.")
    money, after = cy.process_many(["£5.99.", "Mae hi yn braf."])
    assert after.symbols == alone  # before, espeak-ng's second line of '£5.99.' became this text's reading
    assert money.symbols.startswith("pˈømp pˈønt") and "kˈəɪnjɔɡ" in money.symbols and not _reading(money)
    from speechtrain.data.text.numbers import num2words_code

    assert num2words_code("cy") == "cy" and num2words_code("sw") is None


@needs_espeak
def test_a_welsh_corpus_with_money_prepares_strict_with_the_amount_said(tmp_path: Path) -> None:
    texts = {"cy01": "Costiodd y llyfr £5.99.", "cy02": "Mae hi yn braf heddiw.", "cy03": "Rydw i'n mynd i'r dref."}
    data = _data(_corpus(tmp_path / "cy", texts), tmp_path, "cy", "espeak")
    report = prepare_dataset(data, strict=True)
    assert report.text is not None and report.text.warnings() == [] and not report.text.removed  # no '.' lost
    from speechtrain.data.dataset import SpeechDataset

    ds = SpeechDataset.from_config(data, "train").with_fields(["tokens"])
    said = {ds.ids[i]: ds.tokenizer.decode(ds[i]["tokens"]) for i in range(len(ds))}
    assert "pˈønt" in said["cy01"] and "kˈəɪnjɔɡ" in said["cy01"]  # "punt ... ceiniog": the pound and the pence


@needs_espeak
def test_swahili_amounts_and_dates_without_a_normaliser_fail_strict(tmp_path: Path) -> None:
    texts = {"sw01": "Bei ni 5,000/= tu.", "sw02": "Tarehe 12/03/2024 tulisafiri.", "sw03": "Habari za asubuhi."}
    root = _corpus(tmp_path / "sw", texts)
    with pytest.raises(DataError) as caught:
        prepare_dataset(_data(root, tmp_path, "sw", "espeak"), strict=True)
    message = str(caught.value)
    assert "sw01" in message and "amount_notation '5,000/='" in message  # front end 4 names the class
    assert "sw02" in message and "date '12/03/2024'" in message and "sw03" not in message
    from speechtrain.data.text.numbers import expand_numbers

    assert expand_numbers("Habari za asubuhi.", "sw") == ("Habari za asubuhi.", [])


@needs_espeak
def test_symbols_espeak_says_nothing_for_are_reported() -> None:
    ru = TextFrontEnd(TextSettings(language="ru", phonemizer="espeak")).process("Сегодня 20° тепла.")
    ar = TextFrontEnd(TextSettings(language="ar", phonemizer="espeak")).process("خصم 50% اليوم")
    assert any("'°'" in why and "skips" in why for why in _reading(ru)), ru
    assert any("'%'" in why and "skips" in why for why in _reading(ar)), ar
    en = TextFrontEnd(TextSettings(language="en", phonemizer="espeak")).process("It is 20° and 50% off.")
    assert not _reading(en) and "pɚsˈɛnt" in en.symbols  # the English voice says "degrees" and "percent"


def test_a_phoneme_string_far_from_the_corpus_median_is_reported() -> None:
    items = [TextItem(f"u{i}", "abcdefgh", "", "abcdefgh") for i in range(6)]
    items.append(TextItem("long", "x" * 40, "", "abcdefgh"))  # 5x the phonemes per letter of the others
    items.append(TextItem("digits", "x" * 40, "", "abc 1999"))  # numbers written out: judged by the number notes
    report = text_report(items, learn_symbols(items), source="learned", language="xx", phonemizer="espeak")
    far = [w for w in report.warnings() if "far from the corpus median" in w]
    assert len(far) == 1 and "1 utterance(s)" in far[0] and "long (5.0x)" in far[0] and "digits" not in far[0]


# ---------------------------------------------------------------------------------- 4. encodings and hints
def test_question_marks_for_letters_a_code_page_lacked_are_lost_characters(tmp_path: Path) -> None:
    texts = {
        "mn01": "Өнөөдөр цаг агаар сайхан байна.",
        "mn02": "Би үүнийг мэдэхгүй байна.",
        "mn03": "Монгол улсын нийслэл Улаанбаатар хот.",
        "mn04": "Түүний өвөө малчин хүн.",
    }
    root = _corpus(tmp_path / "mn", texts, encoding="cp1251", errors="replace")  # ө ү -> '?'
    summary = prepare_dataset(_data(root, tmp_path, "mn", encoding="cp1251")).summary()
    lost = sum(t.lower().count("ө") + t.lower().count("ү") for t in texts.values())
    assert lost == 13 and "13 character(s) lost" in summary and "'?н??д?р' in mn01" in summary
    with pytest.raises(DataError, match="--strict: 13 character\\(s\\) lost .*mn01.*cp1251"):
        prepare_dataset(_data(root, tmp_path, "mn", encoding="cp1251"), strict=True)


@pytest.mark.parametrize(
    ("language", "text", "page"),
    [
        ("he", "שלום עולם, מה שלומך", "cp1255"),
        ("fa", "سلام دنيا، حال شما چطور است", "cp1256"),
        ("th", "สวัสดีครับ", "cp874"),
    ],
)
def test_the_not_utf8_advice_names_the_languages_code_page(tmp_path: Path, language: str, text: str, page: str) -> None:
    root = _corpus(tmp_path / language, {"a1": text, "a2": text}, encoding=page)
    with pytest.raises(DataError) as caught:
        prepare_dataset(_data(root, tmp_path, language))
    message = str(caught.value)
    assert f"data.encoding={page}" in message and text[:4] in message
    assert "latin1" not in message and "latin-1" not in message


def test_the_hint_names_every_language_with_the_letters_found() -> None:
    hint = _report({"a": "Өнөөдөр цаг агаар сайхан байна. Би үүнийг мэдэхгүй."}, "und").language_hint()
    assert hint and "data.language=mn" in hint and "data.language=kk" in hint


@pytest.mark.parametrize(
    ("declared", "texts", "instead"),
    [
        ("ru", {"a": "Өнөөдөр цаг агаар сайхан байна. Би үүнийг мэдэхгүй. Түүний өвөө малчин хүн."}, "mn"),
        ("mn", {"a": "Сегодня хорошая погода. Я этого не знаю. Его дедушка был пастухом."}, "ru"),
        ("ar", {"a": "من می‌خواهم به پژوهشگاه بروم. گچ و چای و پنیر بخرم. این کتاب خوب است."}, "fa"),
        ("fa", {"a": "ذهبت إلى المدرسة في الصباح. كانت الحديقة جميلة جدا. هذه مدينة كبيرة."}, "ar"),
        ("yo", {"a": "The weather is lovely today and the children are playing outside in the park."}, "en"),
        ("cy", {"a": "The weather is quite lovely today and the kids are playing in the park next to the zoo."}, "en"),
    ],
)
def test_a_same_script_language_mismatch_is_a_warning(declared: str, texts: dict[str, str], instead: str) -> None:
    texts = {f"{uid}{i}": t for uid, t in texts.items() for i in range(4)}  # 200+ letters: enough to judge
    warnings = [w for w in _report(texts, declared).warnings() if "do not look like it" in w]
    assert len(warnings) == 1 and f"data.language={declared}" in warnings[0] and f"Is it {instead}" in warnings[0]


@pytest.mark.parametrize(
    ("language", "text"),
    [
        ("mn", "Өнөөдөр цаг агаар сайхан байна. Би үүнийг мэдэхгүй. Түүний өвөө малчин хүн."),
        ("fa", "من می‌خواهم به پژوهشگاه بروم. گچ و چای و پنیر بخرم. این کتاب خوب است."),
        ("yo", "Ọjọ́ ọ̀la yóò dára. Àwọn ọmọdé ń ṣeré ní ọgbà. Mo fẹ́ lọ sí ọjà."),
        ("cy", "Mae hi'n braf heddiw ac rydw i'n mynd i'r dref gyda fy ffrindiau yn y bore."),
        ("ru", "Сегодня хорошая погода. Я этого не знаю. Его дедушка был пастухом."),
        ("ar", "ذهبت إلى المدرسة في الصباح. كانت الحديقة جميلة جدا. هذه مدينة كبيرة."),
    ],
)
def test_the_right_language_gives_no_mismatch_warning(language: str, text: str) -> None:
    report = _report({f"a{i}": text for i in range(4)}, language)
    assert report.warnings() == [], report.warnings()
