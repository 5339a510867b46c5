"""The character tokenizer: fixed vocabulary, round trip, normalisation, lowercase switch."""

from __future__ import annotations

from speechtrain.data.text import SYMBOLS, VOCAB_SIZE, Tokenizer, normalize_text


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
