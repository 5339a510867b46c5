"""A wrong declared language caught (issue 49): letters and encodings that ``data.language`` does not use warn,
naming the likely language or encoding, and fail ``prepare --strict``."""

from __future__ import annotations

from pathlib import Path

import pytest

from speechtrain.data.prepare import prepare_dataset
from speechtrain.data.text.scripts import zawgyi
from speechtrain.errors import DataError
from tests.test_text_reading import _corpus, _data, _report

YORUBA = "Ẹ kú àárọ̀. Ṣé dáadáa ni? Ọmọ náà ń lọ sí ilé ìwé lónìí. Ọjọ́ ọ̀la yóò dára."
WELSH = "Mae'r tŷ ar lan y môr yn fawr iawn. Mae dŵr yn yr afon heddiw. Rydw i'n hoffi'r tŷ gwyn."
ENGLISH = "The weather is lovely today and the children are playing outside near the café in the park."
MONGOLIAN = "Өнөөдөр цаг агаар сайхан байна. Би үүнийг мэдэхгүй. Түүний өвөө малчин хүн."
KAZAKH = "Қазақстан Орталық Азияда орналасқан мемлекет. Оның астанасы Астана қаласы. Біз қазақ тілінде сөйлейміз."
HEBREW = "שלום עולם, מה שלומך היום? אני הולך לבית הספר בבוקר. הספר הזה טוב מאוד ואני אוהב אותו."
YIDDISH = "איך גיי אַהיים. דער טאַטע איז געווען אַ גוטער מענטש. מיר רעדן ייִדיש אין דער היים מיט די קינדער."
BURMESE = "မြန်မာနိုင်ငံ ကျောင်း သွားမယ်။"
ZAWGYI = "ျမန္မာႏိုင္ငံ ေက်ာင္း သြားမယ္။"


def _look(text: str, declared: str) -> list[str]:
    texts = {f"a{i}": text for i in range(4)}  # 200+ letters: enough to judge
    return [w for w in _report(texts, declared).warnings() if "do not look like it" in w]


@pytest.mark.parametrize(
    ("declared", "text", "likely"),
    [("en", YORUBA, "yo (Yoruba)"), ("en", WELSH, "cy (Welsh)"), ("kk", MONGOLIAN, "mn or ru"), ("yi", HEBREW, "he")],
)
def test_letters_the_declared_language_does_not_use_name_the_likely_one(declared: str, text: str, likely: str) -> None:
    (warning,) = _look(text, declared)
    assert f"data.language={declared}" in warning and f"Is it {likely}?" in warning


@pytest.mark.parametrize(
    ("declared", "text"), [("en", ENGLISH), ("kk", KAZAKH), ("yi", YIDDISH), ("he", HEBREW), ("yo", YORUBA)]
)
def test_a_corpus_in_its_declared_language_does_not_warn(declared: str, text: str) -> None:
    assert _look(text, declared) == []


def test_a_yoruba_corpus_declared_english_fails_strict(tmp_path: Path) -> None:
    root = _corpus(tmp_path / "yo", {f"yo{i}": YORUBA for i in range(4)})
    with pytest.raises(DataError, match="data.language=en, but the transcripts do not look like it.*yo \\(Yoruba\\)"):
        prepare_dataset(_data(root, tmp_path, "en"), strict=True)


def test_zawgyi_burmese_is_named_and_fails_strict(tmp_path: Path) -> None:
    assert zawgyi(ZAWGYI) is not None and zawgyi(BURMESE) is None
    warnings = [w for w in _report({"my1": ZAWGYI, "my2": BURMESE}, "my").warnings() if "Zawgyi" in w]
    assert len(warnings) == 1 and "my1" in warnings[0] and "my2" not in warnings[0] and "Unicode" in warnings[0]
    root = _corpus(tmp_path / "my", {"my1": ZAWGYI, "my2": BURMESE})
    with pytest.raises(DataError, match="Zawgyi"):
        prepare_dataset(_data(root, tmp_path, "my"), strict=True)
