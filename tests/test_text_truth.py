"""What prepare reports is what the model learns (issue 29, the text front end): invisible and non-speech
characters, compatibility forms, text decoded twice, a wrong encoding, punctuation espeak-ng drops,
case before the phonemizer, Uzbek word-final apostrophes, the language hint, Amharic phone numbers.
Each case on text made here; the end-to-end ones on a corpus written in the test."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from speechtrain.config import DataConfig
from speechtrain.data.demo import make_demo_corpus
from speechtrain.data.prepare import prepare_dataset
from speechtrain.data.text import TextFrontEnd, TextSettings, normalize_text
from speechtrain.data.text.amharic import clean as amharic_clean
from speechtrain.data.text.inventory import TextItem, learn_symbols, text_report
from speechtrain.errors import DataError

# one clean paragraph per language of the held-out trial: each must give no warning at all
CLEAN = {
    "uz": "Oʻzbekiston Markaziy Osiyodagi davlat. Toshkent uning poytaxti, togʻlari baland! Bogʻda olma bor?",
    "uz-Cyrl": "Ўзбекистон Марказий Осиёдаги давлат. Тошкент унинг пойтахти, тоғлари баланд! Боғда олма бор?",
    "am": "ኢትዮጵያ በአፍሪካ ቀንድ የምትገኝ ሀገር ናት። አዲስ አበባ ዋና ከተማዋ ናት፣ ትልቅ ከተማ ናት።",
    "kk": "Қазақстан Орталық Азиядағы мемлекет. Астана оның астанасы, үлкен және әдемі қала!",
    "ka": "საქართველო კავკასიაში მდებარე ქვეყანაა. თბილისი მისი დედაქალაქია, ლამაზი ქალაქი!",
    "hi": "भारत दक्षिण एशिया का एक देश है। नई दिल्ली इसकी राजधानी है, क्या आप जानते हैं?",
    "ar": "مصر دولة في شمال أفريقيا. القاهرة هي عاصمتها، أليس كذلك؟",
    "ta": "இந்தியா தெற்காசியாவில் உள்ள ஒரு நாடு. சென்னை தமிழ்நாட்டின் தலைநகரம், தெரியுமா?",
    "vi": "Việt Nam là một quốc gia ở Đông Nam Á. Hà Nội là thủ đô, bạn có biết không?",
    "el": "Η Ελλάδα είναι χώρα της νότιας Ευρώπης. Η Αθήνα είναι η πρωτεύουσά της, το ξέρεις;",
    "ko": "대한민국은 동아시아에 있는 나라입니다. 서울은 수도입니다, 알고 있나요?",
}


def _report(texts: dict[str, str], language: str, phonemizer: str = "none", **settings: object):  # noqa: ANN202
    front = TextFrontEnd(TextSettings(language=language, phonemizer=phonemizer, **settings))  # type: ignore[arg-type]
    items = []
    for uid, text in texts.items():
        p = front.process(text)
        items.append(TextItem(uid, p.symbols, "".join(p.unmapped.elements()), text))
    return text_report(
        items,
        learn_symbols(items),
        source="learned",
        language=language,
        phonemizer=phonemizer,
        settings=front.settings,
    )


@pytest.mark.parametrize("language", list(CLEAN))
def test_a_clean_corpus_in_each_language_gives_no_warning(language: str) -> None:
    sentences = {f"{language}_{i}": s.strip() + "." for i, s in enumerate(CLEAN[language].split("."))}
    report = _report(sentences, language)
    assert report.warnings() == [], report.warnings()
    assert report.unknown_count == 0 and not report.removed and not report.mojibake
    assert report.classes.get("letters of the declared script", 0) > 0
    assert "letters of other scripts" not in report.classes


def test_invisible_and_non_speech_characters_are_removed_and_reported() -> None:
    texts = {
        "zwj": "a\u200db family",  # zero-width joiner
        "rlm": "hello\u200f world\u200e",  # direction marks
        "emoji": "great day 😀👍\ufe0f",
        "tatweel": "مـــرحبا",
    }
    report = _report(texts, "und")
    symbols = {s for s, _ in report.symbols}
    assert not symbols & {"\u200d", "\u200f", "\u200e", "😀", "👍", "\ufe0f", "\u0640"}
    removed = {u.char: u for u in report.removed}
    assert removed["\u200d"].ids == ["zwj"] and "format/invisible" in removed["\u200d"].reason
    assert "emoji" in removed["😀"].reason and removed["\u0640"].count == 3
    # emoji are a warning (with the example); format characters are only listed
    assert any("😀" in w for w in report.warnings())
    assert not any("\u200f" in w for w in report.warnings())


def test_compatibility_forms_are_mapped_and_listed() -> None:
    report = _report({"a": "ﬁne ＡＢＣ ① x²", "b": "١٢ ﻙ"}, "und")
    symbols = {s for s, _ in report.symbols}
    assert not symbols & set("ﬁＡＢＣ①²ﻙ")
    assert {"f", "i", "a", "b", "c", "1", "2", "ك"} <= symbols
    mapped = {a: b for a, b, _ in report.mapped}
    assert mapped["ﬁ"] == "fi" and mapped["Ａ"] == "A" and mapped["①"] == "1" and mapped["ﻙ"] == "ك"
    assert "mapped    " in "\n".join(report.summary_lines())


def test_non_speech_symbols_kept_are_a_warning() -> None:
    report = _report({"a": "© 2024 acme™ at 5° north"}, "en")
    # ™ is a compatibility form (-> TM); © and ° are learned symbols that are not speech: warned
    warning = " ".join(report.warnings())
    assert "'©'" in warning and "'°'" in warning and "not speech" in warning


def test_text_decoded_twice_is_a_warning_naming_what_it_meant() -> None:
    report = _report({"ok": "Élodie est là", "bad": "Ã‰lodie est lÃ "}, "fr")
    assert report.mojibake and report.mojibake[0][:2] == ("bad", "Ã‰lodie")
    assert any("'Élodie'" in w and "mojibake" in w for w in report.warnings())


def test_a_declared_language_without_one_letter_of_its_script_is_a_warning() -> None:
    # Russian saved as cp1251, read with data.encoding=latin-1: every letter turns Latin-1
    wrong = "Привет, как дела? Всё хорошо.".encode("cp1251").decode("latin-1")
    report = _report({"a": wrong}, "ru")
    warning = report._script_warning()
    assert warning and "Cyrillic" in warning and "data.encoding=cp1251" in warning
    assert _report({"a": "Привет, как дела? Всё хорошо."}, "ru").warnings() == []


def test_kazakh_is_not_told_to_be_uzbek() -> None:
    hint = _report({"a": CLEAN["kk"]}, "und").language_hint()
    assert hint and "data.language=kk" in hint and "uz-Cyrl" not in hint
    hint = _report({"a": CLEAN["uz-Cyrl"]}, "und").language_hint()
    assert hint and "data.language=uz-Cyrl" in hint


@pytest.mark.parametrize(
    ("language", "text", "marks"),
    [
        ("ar", "مصر دولة، أليس كذلك؟", ",?"),
        ("hi", "भारत एक देश है। क्या?", ".?"),
        ("ur", "کیا حال ہے؟ ٹھیک ہے۔", "?."),
        ("hy", "Բարեւ։ Ինչպե՞ս ես", ".?"),
        ("fa", "حالت چطور است؟ خوبم.", "?."),
    ],
)
def test_script_punctuation_survives_espeak(language: str, text: str, marks: str) -> None:
    pytest.importorskip("espeakng_loader")
    p = TextFrontEnd(TextSettings(language=language, phonemizer="espeak")).process(text)
    assert [c for c in p.symbols if c in ",.?;:!"] == list(marks), p.symbols
    assert not p.unmapped


def test_case_is_left_to_espeak_and_turkish_i_is_kept() -> None:
    pytest.importorskip("espeakng_loader")
    fe = TextFrontEnd(TextSettings(language="en", phonemizer="espeak"))
    assert fe("The US is big.") != fe("the us is big.")  # "US" is spelled, "us" is a word
    assert normalize_text("IŞIK", language="tr") == "ışık"
    assert normalize_text("İstanbul", language="tr") == "istanbul"
    assert normalize_text("İstanbul", language="en") == "istanbul"  # no stray U+0307
    # a cache or run made before (front end 1) keeps lower case before espeak-ng, as it was trained
    old = TextSettings.from_dict({"language": "en", "phonemizer": "espeak", "lowercase": True})
    assert old.front_end == 1 and TextFrontEnd(old)("The US") == TextFrontEnd(old)("the us")


def test_uzbek_word_final_okina() -> None:
    for form in ("tog‘", "tog'", "tog’", "togʻ"):
        assert normalize_text(form, language="uz") == "togʻ", form
    assert normalize_text("bog' va tog'.", language="uz") == "bogʻ va togʻ."
    assert normalize_text("'tog'", language="uz") == "'tog'"  # a quoted word keeps its quotes


def test_amharic_phone_number_keeps_its_leading_zero() -> None:
    spoken = amharic_clean("0911234567")
    assert spoken.split()[:3] == ["ዜሮ", "ዘጠኝ", "አንድ"] and len(spoken.split()) == 10
    assert amharic_clean("2015").split() == ["ሁለት", "ሺህ", "አስራ", "አምስት"]


def _rewrite_metadata(root: Path, texts: list[str], encoding: str = "utf-8") -> None:
    rows = list(csv.reader((root / "metadata.csv").open(encoding="utf-8"), delimiter="|", quoting=csv.QUOTE_NONE))
    with (root / "metadata.csv").open("w", encoding=encoding, newline="") as f:
        for row, text in zip(rows, texts * len(rows)):
            f.write(f"{row[0]}|{text}|{text}\n")


def test_messy_corpus_report_names_every_class_and_strict_fails(tmp_path: Path) -> None:
    root = make_demo_corpus(tmp_path / "messy", utterances=8, seed=0)
    _rewrite_metadata(
        root,
        [
            "hello there 😀 friend",
            "a\u200db joined",
            "Ã‰lodie came home",
            "© acme said so",
            "plain words here",
        ],
    )
    data = DataConfig(manifest=str(root), cache_dir=str(tmp_path / "cache"), language="en", eval_utterances=1)
    report = prepare_dataset(data)
    summary = report.summary()
    assert "WARNING" in summary
    for needle in ("😀", "'Ã‰lodie'", "'©'", "format/invisible"):
        assert needle in summary, needle
    with pytest.raises(DataError, match="--strict: .*"):
        prepare_dataset(data, strict=True)


def test_wrong_encoding_is_caught_end_to_end(tmp_path: Path) -> None:
    root = make_demo_corpus(tmp_path / "ru", utterances=6, seed=0)
    _rewrite_metadata(root, ["Привет, как дела?", "Всё хорошо, спасибо."], encoding="cp1251")
    data = DataConfig(
        manifest=str(root), cache_dir=str(tmp_path / "cache"), language="ru", encoding="latin-1", eval_utterances=1
    )
    report = prepare_dataset(data)
    assert "data.encoding=cp1251" in report.summary()
    with pytest.raises(DataError, match="data.encoding=cp1251"):
        prepare_dataset(data, strict=True)
    fixed = DataConfig(
        manifest=str(root), cache_dir=str(tmp_path / "cache"), language="ru", encoding="cp1251", eval_utterances=1
    )
    assert prepare_dataset(fixed, strict=True).text.warnings() == []  # type: ignore[union-attr]
