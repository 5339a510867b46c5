"""The text front end and tokenizer: a language's own symbols, learned from the corpus.

- :mod:`.frontend`: :class:`TextSettings`, :class:`TextFrontEnd` (NFC, the language's cleaners, the
  generic rules, optional phonemes), :func:`normalize_text`.
- :mod:`.tokenizer`: :class:`Tokenizer` (symbols -> ids; learned, pinned or the old ``ascii`` set).
- :mod:`.inventory`: the symbol inventory and what could not be mapped (prepare's text report).
- :mod:`.uzbek`, :mod:`.amharic`: per-language cleaners (and the Amharic G2P); :mod:`.phonemize`:
  espeak-ng.
"""

from speechtrain.data.text.frontend import PHONEMIZERS, Processed, TextFrontEnd, TextSettings, normalize_text
from speechtrain.data.text.tokenizer import (
    ASCII_SYMBOLS,
    BOS,
    EOS,
    PAD,
    SPECIALS,
    SYMBOLS,
    UNK,
    VOCAB_SIZE,
    Tokenizer,
)

__all__ = [
    "ASCII_SYMBOLS",
    "BOS",
    "EOS",
    "PAD",
    "PHONEMIZERS",
    "SPECIALS",
    "SYMBOLS",
    "UNK",
    "VOCAB_SIZE",
    "Processed",
    "TextFrontEnd",
    "TextSettings",
    "Tokenizer",
    "normalize_text",
]
