"""Symbols -> token ids, with the symbol set a run learned from its corpus (or a pinned one).

Ids: ``pad=0``, ``unk=1``, ``bos=2``, ``eos=3``, then the run's symbols in their order (one symbol
is one Unicode code point of the front end's output). ``prepare`` learns the symbols from the
training transcripts (sorted by code point); ``data.symbols`` pins a list instead (fine-tuning a
model trained elsewhere), or names ``ascii``: the fixed set of runs from before learned symbols
(space, a-z, A-Z, 0-9 and ``,.!?'-:;"``), which old runs load with.

A symbol the set does not have becomes ``unk`` and is counted (:meth:`Tokenizer.unknown`); at
inference ``encode(..., warn=True)`` logs a warning naming those characters.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from speechtrain.data.text.frontend import TextFrontEnd, TextSettings
from speechtrain.logs import get_logger

if TYPE_CHECKING:
    from speechtrain.config import DataConfig

log = get_logger(__name__)

PAD, UNK, BOS, EOS = "<pad>", "<unk>", "<bos>", "<eos>"
SPECIALS = (PAD, UNK, BOS, EOS)
LETTERS = "abcdefghijklmnopqrstuvwxyz"
DIGITS = "0123456789"
PUNCTUATION = ",.!?'-:;\""
#: the fixed symbol set of runs from before learned symbols (``data.symbols: ascii``)
ASCII_SYMBOLS: tuple[str, ...] = (" ", *LETTERS, *LETTERS.upper(), *DIGITS, *PUNCTUATION)
SYMBOLS: tuple[str, ...] = (*SPECIALS, *ASCII_SYMBOLS)  # ids of the ascii set, specials included
VOCAB_SIZE = len(SYMBOLS)  # of the ascii set
NAMED_SETS = {"ascii": ASCII_SYMBOLS}


def symbols_of(symbols: Sequence[str] | str | None) -> tuple[str, ...]:
    """A symbol list, or the named set (``ascii``); None is the ascii set."""
    if symbols is None:
        return ASCII_SYMBOLS
    if isinstance(symbols, str):
        if symbols not in NAMED_SETS:
            raise ValueError(f"unknown symbol set {symbols!r} (named sets: {', '.join(NAMED_SETS)})")
        return NAMED_SETS[symbols]
    return tuple(symbols)


class Tokenizer:
    """The front end (:class:`TextFrontEnd`) and a symbol set: ``encode(text) -> list[int]``, ``decode``.

    ``Tokenizer()`` is the ascii set with the default front end (synthetic data, tests);
    :meth:`from_data` the tokenizer of a data section.
    """

    pad_id = 0
    unk_id = 1
    bos_id = 2
    eos_id = 3

    def __init__(
        self,
        symbols: Sequence[str] | str | None = None,
        settings: TextSettings | None = None,
        *,
        lowercase: bool | None = None,
    ) -> None:
        if settings is None:
            settings = TextSettings()
        if lowercase is not None and lowercase != settings.lowercase:
            settings = TextSettings(**{**settings.to_dict(), "lowercase": lowercase})
        self.settings = settings
        self.front_end = TextFrontEnd(settings)
        self.name = symbols if isinstance(symbols, str) else ("ascii" if symbols is None else None)
        self.symbols: tuple[str, ...] = symbols_of(symbols)
        bad = [s for s in self.symbols if len(s) != 1]
        if bad or len(set(self.symbols)) != len(self.symbols):
            raise ValueError(f"symbols must be distinct single characters; got {bad or 'duplicates'}")
        self._ids = {s: i for i, s in enumerate(self.symbols, start=len(SPECIALS))}

    @classmethod
    def from_data(cls, data: DataConfig, learned: Sequence[str] | None = None) -> Tokenizer:
        """The tokenizer of a data section: ``data.symbols`` when set, else ``learned`` (the symbols
        ``prepare`` found), else the ascii set."""
        symbols = data.symbols if data.symbols is not None else learned
        return cls(symbols, TextSettings.from_data(data))

    # ------------------------------------------------------------------ properties
    @property
    def vocab_size(self) -> int:
        return len(SPECIALS) + len(self.symbols)

    @property
    def lowercase(self) -> bool:
        return self.settings.lowercase

    @property
    def space_id(self) -> int | None:
        return self._ids.get(" ")

    # ------------------------------------------------------------------ encoding
    def encode_symbols(self, symbols: str) -> list[int]:
        """Ids of an already processed symbol string (what ``prepare`` cached)."""
        ids = self._ids
        return [ids.get(c, self.unk_id) for c in symbols]

    def encode(self, text: str, add_bos_eos: bool = False, warn: bool = False) -> list[int]:
        """Token ids of ``text`` (through the front end); ``add_bos_eos`` wraps them in bos ... eos;
        ``warn`` logs the characters that have no symbol (they become unk)."""
        processed = self.front_end.process(text)
        if warn:
            self.warn_unknown(processed.symbols, processed.unmapped)
        ids = self.encode_symbols(processed.symbols)
        return [self.bos_id, *ids, self.eos_id] if add_bos_eos else ids

    def unknown(self, symbols: str) -> Counter[str]:
        """Characters of a processed symbol string that this set does not have, with counts."""
        return Counter(c for c in symbols if c not in self._ids)

    def warn_unknown(self, symbols: str, unmapped: Counter[str] | None = None) -> list[str]:
        """Log a warning naming the characters the model never saw; returns them."""
        missing = self.unknown(symbols)
        missing.update(unmapped or {})
        if missing:
            shown = ", ".join(f"{c!r} x{n}" for c, n in missing.most_common(12))
            log.warning(
                f"text has {sum(missing.values())} character(s) this model never saw, read as <unk> or dropped: "
                f"{shown} (the run's symbols are data.symbols in its config.yaml)"
            )
        return sorted(missing)

    def decode(self, ids: Iterable[int]) -> str:
        """Symbols of ``ids``; pad/bos/eos are dropped, unknown ones shown as ``_``."""
        out = []
        first = len(SPECIALS)
        for i in ids:
            i = int(i)
            if i in (self.pad_id, self.bos_id, self.eos_id):
                continue
            out.append(self.symbols[i - first] if first <= i < self.vocab_size else "_")
        return "".join(out)

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """What changes the ids (saved with a run so that inference tokenizes the same way)."""
        return {"version": 2, "symbols": list(self.symbols), "text": self.settings.to_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a saved tokenizer. A state from before learned symbols (``symbols`` with the
        specials, ``lowercase``) is the ascii set with accents stripped, as those runs read text."""
        if state.get("version") == 2:
            settings = TextSettings.from_dict(state["text"])
            symbols: Sequence[str] = state["symbols"]
        else:
            old = list(state.get("symbols", SYMBOLS))
            if old != list(SYMBOLS):
                raise ValueError("tokenizer state with an unknown fixed vocabulary (not this speechtrain's ascii set)")
            settings = TextSettings(lowercase=bool(state.get("lowercase", True)), strip_accents=True)
            symbols = "ascii"
        self.__init__(symbols, settings)  # type: ignore[misc]

    def __repr__(self) -> str:
        what = self.name or f"{len(self.symbols)} learned symbols"
        return f"Tokenizer({what}, vocab_size={self.vocab_size}, {self.settings})"


def require_same_symbols(model: Tokenizer, dataset: Any) -> None:
    """UserError when ``dataset``'s tokens were made with another symbol set than ``model`` reads (a
    task built before the run's symbols were resolved); datasets without a Tokenizer pass."""
    from speechtrain.errors import UserError

    theirs = getattr(dataset, "tokenizer", None)
    if not isinstance(theirs, Tokenizer) or theirs.symbols == model.symbols:
        return
    raise UserError(
        f"the model reads {len(model.symbols)} text symbols ({model.name or 'data.symbols'}) but the dataset's tokens "
        f"use {len(theirs.symbols)} ({theirs.name or 'learned by prepare'}): build the task from the data section "
        f"with the run's symbols (TrainRecipe resolves data.symbols before building it), or pin data.symbols"
    )
