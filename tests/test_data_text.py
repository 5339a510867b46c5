"""The text front end and tokenizer: ascii set, round trip, normalisation, languages, learned symbols."""

from __future__ import annotations

import logging
import unicodedata

import pytest

from speechtrain.data.text import SYMBOLS, VOCAB_SIZE, TextFrontEnd, TextSettings, Tokenizer, amharic, normalize_text
from speechtrain.errors import UserError


def test_fixed_vocabulary_and_special_ids() -> None:
    tok = Tokenizer()
    assert tok.vocab_size == VOCAB_SIZE == len(SYMBOLS) == len(set(SYMBOLS))
    assert (tok.pad_id, tok.unk_id, tok.bos_id, tok.eos_id) == (0, 1, 2, 3)
    ids = tok.encode('Hello, world! 42 "it\'s" a-b: c; d?')
    assert all(0 <= i < VOCAB_SIZE for i in ids) and tok.unk_id not in ids and tok.pad_id not in ids


def test_round_trip_and_bos_eos() -> None:
    tok = Tokenizer()
    text = "the quick brown fox, 12 jumps! isn't it?"
    assert tok.decode(tok.encode(text)) == text
    wrapped = tok.encode(text, add_bos_eos=True)
    assert wrapped[0] == tok.bos_id and wrapped[-1] == tok.eos_id and tok.decode(wrapped) == text


def test_normalisation_and_unknown_symbols() -> None:
    tok = Tokenizer()
    # accents are kept by default now; strip_accents=True is the normalisation of the ascii-set runs
    assert (
        normalize_text("  Caf\u00e9\u2019s   \u201cbest\u201d \u2014 ok ", strip_accents=True) == 'cafe\'s "best" - ok'
    )
    ids = tok.encode("a\u4e2db")
    assert ids[1] == tok.unk_id and tok.decode(ids) == "a_b"


def test_lowercase_switch_changes_ids() -> None:
    assert Tokenizer(lowercase=True).encode("AbC") == Tokenizer().encode("abc")
    upper = Tokenizer(lowercase=False)
    assert upper.encode("AbC") != upper.encode("abc") and upper.decode(upper.encode("AbC")) == "AbC"
    state = upper.state_dict()
    restored = Tokenizer()
    restored.load_state_dict(state)
    assert restored.lowercase is False


# ---------------------------------------------------------------------------- languages (issue 13)
def test_nfc_and_accents_kept_by_default() -> None:
    assert normalize_text("Cafe\u0301 na\u00efve") == "caf\u00e9 na\u00efve"  # combining accent -> one letter
    assert normalize_text("Cafe\u0301", strip_accents=True) == "cafe"


def test_uzbek_apostrophes_are_one_symbol_each() -> None:
    forms = ["O\u02bbzbek", "O'zbek", "O\u2018zbek", "O\u2019zbek", "O`zbek", "O\u02bczbek", "O\u00b4zbek"]
    assert {normalize_text(f, language="uz") for f in forms} == {"o\u02bbzbek"}
    assert {normalize_text(f, language="uz") for f in ["ma'no", "ma\u02bcno", "ma\u2019no"]} == {"ma\u02bcno"}
    assert normalize_text("g'alaba", language="uz-Latn") == "g\u02bbalaba"
    # a quote is not an apostrophe: 'salom' keeps its quote marks
    assert normalize_text("'salom'", language="uz") == "'salom'"
    assert normalize_text("\u0441\u044a\u0435\u0437\u0434", language="uz-Cyrl") == "\u0441\u044a\u0435\u0437\u0434"


def test_uzbek_cyrillic_to_latin() -> None:
    text = "Ўзбекистон қишлоқ, ғалаба ҳаёт. Ер"
    assert normalize_text(text, language="uz-Cyrl", transliterate=True) == (
        "o\u02bbzbekiston qishloq, g\u02bbalaba hayot. yer"
    )
    with pytest.raises(UserError, match="transliterat"):
        TextFrontEnd(TextSettings(language="am", transliterate=True))


def test_amharic_punctuation_and_numbers() -> None:
    assert amharic.ethiopic_number_value("\u1372\u1371\u137b\u137a\u136d") == 1995  # ፲፱፻፺፭
    assert amharic.ethiopic_number_value("\u137b\u137c") == 1_000_000
    assert amharic.number_words(2015) == "ሁለት ሺህ አስራ አምስት"
    out = normalize_text("ሰላም፡ነህ። ፲፱፻፺፭ ቤት፣ 25 ብር፧", language="am")
    assert out == "ሰላም ነህ. አንድ ሺህ ዘጠኝ መቶ ዘጠና አምስት ቤት, ሃያ አምስት ብር?"
    assert normalize_text("ሰላም:: ነህ", language="am") == "ሰላም. ነህ"


def test_amharic_g2p_decomposes_syllables_with_labialised_forms() -> None:
    fe = TextFrontEnd(TextSettings(language="am", phonemizer="rules"))
    assert fe("ሰ ሱ ሲ ሳ ሴ ስ ሶ") == "sə su si sa se s so"
    assert fe("ሏ ቋ ኳ ጓ ኰ ቈ") == "lʷa kʼʷa kʷa gʷa kʷə kʼʷə"
    assert fe("ጠ ጨ ጰ ጸ ፀ") == "tʼə tʃʼə pʼə tsʼə tsʼə"
    assert set(fe("ሀ ሐ ኀ").split()) == {"hə"} and fe("አ ዐ") == "ʔə ʔə"
    # every assigned syllable of the main block becomes phones (no Ethiopic letter left)
    syllables = "".join(c for c in map(chr, range(0x1200, 0x135B)) if unicodedata.category(c) == "Lo")
    assert not any(0x1200 <= ord(c) <= 0x137F for c in fe(syllables))
    with pytest.raises(UserError, match="no rule-based G2P"):
        TextFrontEnd(TextSettings(language="uz", phonemizer="rules"))


def test_unmappable_characters_are_removed_and_counted() -> None:
    p = TextFrontEnd().process("a\x07b\ue000c\ufffd d\u200b")
    # the zero-width space is removed too, and reported (a format character, not an unknown one)
    assert p.symbols == "abc d" and p.unmapped == {"\x07": 1, "\ue000": 1, "\ufffd": 1, "\u200b": 1}


def test_learned_symbols_round_trip_and_state() -> None:
    settings = TextSettings(language="am")
    symbols = sorted(set("ሰላም እንዴት ነህ.?"))
    tok = Tokenizer(symbols, settings)
    assert tok.vocab_size == 4 + len(symbols)
    a, b = tok.encode("ሰላም ነህ።"), tok.encode("ሰላም እንዴት?")
    assert a != b and tok.unk_id not in a + b and tok.decode(a) == "ሰላም ነህ."
    again = Tokenizer()
    again.load_state_dict(tok.state_dict())
    assert again.symbols == tok.symbols and again.settings == settings and again.encode("ሰላም") == tok.encode("ሰላም")


def test_old_tokenizer_state_is_the_ascii_set() -> None:
    old = {"lowercase": True, "vocab_size": VOCAB_SIZE, "symbols": list(SYMBOLS)}
    tok = Tokenizer(["x"])
    tok.load_state_dict(old)
    assert tok.name == "ascii" and tok.vocab_size == VOCAB_SIZE and tok.encode("Café") == Tokenizer().encode("cafe")


def test_inference_warns_about_characters_the_model_never_saw(caplog: pytest.LogCaptureFixture) -> None:
    tok = Tokenizer(list(" abc"))
    with caplog.at_level(logging.WARNING):
        ids = tok.encode("abc xyz\x07", warn=True)
    assert ids.count(tok.unk_id) == 3
    assert "never saw" in caplog.text and "'x'" in caplog.text and "'\\x07'" in caplog.text
