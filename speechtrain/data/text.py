"""Character tokenizer with a fixed vocabulary, so a model config knows ``VOCAB_SIZE`` without data.

Ids: ``pad=0``, ``unk=1``, ``bos=2``, ``eos=3``, ``space=4``, then ``a-z``, ``A-Z``, digits and the
punctuation ``,.!?'-:;"``. Text is normalised first: Unicode quotes and dashes become their ASCII
forms, accents are stripped (``café`` -> ``cafe``), runs of whitespace become one space, and (with
``lowercase``, the default) letters are lowercased. Anything else maps to ``unk``.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

PAD, UNK, BOS, EOS = "<pad>", "<unk>", "<bos>", "<eos>"
LETTERS = "abcdefghijklmnopqrstuvwxyz"
DIGITS = "0123456789"
PUNCTUATION = ",.!?'-:;\""
SYMBOLS: tuple[str, ...] = (PAD, UNK, BOS, EOS, " ", *LETTERS, *LETTERS.upper(), *DIGITS, *PUNCTUATION)
VOCAB_SIZE = len(SYMBOLS)

_TRANSLATE = str.maketrans(
    {
        "\u2018": "'",
        "\u2019": "'",
        "\u201a": "'",
        "\u2032": "'",
        "`": "'",
        "\u201c": '"',
        "\u201d": '"',
        "\u201e": '"',
        "\u00ab": '"',
        "\u00bb": '"',
        "\u2013": "-",
        "\u2014": "-",
        "\u2212": "-",
        "\u2026": "...",
    }
)
_SPACES = re.compile(r"\s+")


def normalize_text(text: str, lowercase: bool = True) -> str:
    """The text as the tokenizer sees it (quotes/dashes to ASCII, accents stripped, spaces collapsed)."""
    text = text.translate(_TRANSLATE)
    text = "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))
    text = _SPACES.sub(" ", text).strip()
    return text.lower() if lowercase else text


class Tokenizer:
    """Fixed character vocabulary; ``encode(text) -> list[int]`` and ``decode(ids) -> str``."""

    pad_id = 0
    unk_id = 1
    bos_id = 2
    eos_id = 3
    space_id = 4
    vocab_size = VOCAB_SIZE

    def __init__(self, lowercase: bool = True) -> None:
        self.lowercase = lowercase
        self._ids = {s: i for i, s in enumerate(SYMBOLS) if len(s) == 1}

    def encode(self, text: str, add_bos_eos: bool = False) -> list[int]:
        """Token ids of ``text`` (normalised first); ``add_bos_eos`` wraps them in bos ... eos."""
        ids = [self._ids.get(c, self.unk_id) for c in normalize_text(text, self.lowercase)]
        return [self.bos_id, *ids, self.eos_id] if add_bos_eos else ids

    def decode(self, ids: Iterable[int]) -> str:
        """Text of ``ids``; pad/bos/eos are dropped, unknown symbols shown as ``_``."""
        out = []
        for i in ids:
            i = int(i)
            if i in (self.pad_id, self.bos_id, self.eos_id):
                continue
            out.append(SYMBOLS[i] if self.space_id <= i < VOCAB_SIZE else "_")
        return "".join(out)

    def state_dict(self) -> dict[str, object]:
        """Settings that change the ids (saved with a run so inference tokenizes the same way)."""
        return {"lowercase": self.lowercase, "vocab_size": VOCAB_SIZE, "symbols": list(SYMBOLS)}

    def load_state_dict(self, state: dict[str, object]) -> None:
        """Restore settings; a different vocabulary is an error, not a silent mismatch."""
        symbols = state.get("symbols", SYMBOLS)
        if not isinstance(symbols, (list, tuple, str)) or list(symbols) != list(SYMBOLS):
            raise ValueError("tokenizer vocabulary differs from this speechtrain version (retrain or pin it)")
        self.lowercase = bool(state.get("lowercase", True))

    def __repr__(self) -> str:
        return f"Tokenizer(vocab_size={VOCAB_SIZE}, lowercase={self.lowercase})"
