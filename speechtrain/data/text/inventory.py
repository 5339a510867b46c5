"""What the text front end did to a corpus: the symbol inventory and what it could not map.

``prepare`` learns the symbols of a run from the corpus's transcripts (:func:`learn_symbols`; train
and eval manifests) and reports, in :class:`TextReport`: every symbol with its count, the characters
it could not map (removed by the front end, or missing from a pinned symbol set) with counts and
example utterance ids, and their share of all symbols. Above :data:`UNKNOWN_WARN_SHARE` it warns;
``prepare --strict`` fails. Learned symbols that only the eval transcripts have are listed apart
(:attr:`TextReport.eval_only`: in the set, but no training item teaches them).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

UNKNOWN_WARN_SHARE = 0.01  # above this share of unknown symbols prepare warns (and --strict fails)
RARE_COUNT = 3  # symbols seen fewer times than this are listed as rare
EXAMPLES = 5  # example utterance ids per unknown character

REASON_UNMAPPED = "cannot stand for speech (control, private-use or unassigned character, U+FFFD)"
REASON_NOT_IN_SET = "not in the pinned symbol set (data.symbols)"
REASON_NOT_IN_TRAINING = "in the eval manifest but not in the training transcripts"


@dataclass(frozen=True)
class TextItem:
    """One transcript after the front end: its id, symbols and the characters it removed."""

    id: str
    symbols: str
    unmapped: str = ""


def learn_symbols(items: Iterable[TextItem]) -> list[str]:
    """The symbol set of a corpus: every symbol of its transcripts, sorted by code point."""
    seen: set[str] = set()
    for it in items:
        seen.update(it.symbols)
    return sorted(seen)


@dataclass
class UnknownChar:
    """A character the front end could not map, how often, where, and why."""

    char: str
    count: int
    ids: list[str]
    reason: str

    @property
    def codepoint(self) -> str:
        return f"U+{ord(self.char):04X}"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "codepoint": self.codepoint}

    def __str__(self) -> str:
        ids = ", ".join(self.ids)
        return f"{self.char!r} ({self.codepoint}) x{self.count} in {ids}: {self.reason}"


@dataclass
class TextReport:
    """The text section of prepare's report."""

    language: str
    phonemizer: str
    source: str  # learned | pinned | ascii
    symbols: list[tuple[str, int]] = field(default_factory=list)  # (symbol, count), most frequent first
    unknown: list[UnknownChar] = field(default_factory=list)
    #: learned symbols that only the eval transcripts have (in the set, but no training item teaches them)
    eval_only: list[UnknownChar] = field(default_factory=list)
    total: int = 0  # symbols in all transcripts, unknown ones included
    utterances: int = 0

    @property
    def unknown_count(self) -> int:
        return sum(u.count for u in self.unknown)

    @property
    def unknown_share(self) -> float:
        return self.unknown_count / self.total if self.total else 0.0

    @property
    def rare(self) -> list[tuple[str, int]]:
        return [(s, n) for s, n in self.symbols if n < RARE_COUNT]

    @property
    def too_many_unknown(self) -> bool:
        return self.unknown_share > UNKNOWN_WARN_SHARE

    def to_dict(self) -> dict[str, Any]:
        return {
            "language": self.language,
            "phonemizer": self.phonemizer,
            "source": self.source,
            "utterances": self.utterances,
            "symbols_total": self.total,
            "inventory": [{"symbol": s, "count": n} for s, n in self.symbols],
            "unknown": [u.to_dict() for u in self.unknown],
            "eval_only": [u.to_dict() for u in self.eval_only],
            "unknown_count": self.unknown_count,
            "unknown_share": self.unknown_share,
            "rare": [{"symbol": s, "count": n} for s, n in self.rare],
            "language_hint": self.language_hint(),
        }

    def summary_lines(self, max_listed: int = 10) -> list[str]:
        shown = "".join(s for s, _ in sorted(self.symbols))
        lines = [
            f"text      {self.utterances} transcripts, language {self.language}, phonemizer {self.phonemizer}: "
            f"{len(self.symbols)} symbols ({self.source}): {shown!r}",
            f"unknown   {self.unknown_count} of {self.total} symbols ({100 * self.unknown_share:.2f}%)",
        ]
        for u in self.unknown[:max_listed]:
            lines.append(f"  - {u}")
        if len(self.unknown) > max_listed:
            lines.append(f"  ... {len(self.unknown) - max_listed} more (see --json)")
        hint = self.language_hint()
        if hint:
            lines.append(f"hint      {hint}")
        if self.eval_only:
            lines.append(
                f"eval-only {len(self.eval_only)} symbols only the eval transcripts have (untrained): "
                + ", ".join(f"{u.char!r} x{u.count}" for u in self.eval_only[:20])
            )
        if self.rare:
            lines.append("rare      " + ", ".join(f"{s!r} x{n}" for s, n in self.rare[:20]))
        return lines

    def language_hint(self) -> str | None:
        """A hint when ``data.language`` is unset (``und``) but the symbols show a language with its own
        cleaners (Ethiopic script: ``am``; Uzbek Cyrillic letters: ``uz-Cyrl``)."""
        if self.language.lower() not in ("und", ""):
            return None
        chars = {s for s, _ in self.symbols}
        if any(0x1200 <= ord(c) <= 0x139F for c in chars):
            return (
                "the transcripts are in Ethiopic script: for Amharic set data.language=am (its punctuation and "
                "numerals; data.phonemizer=rules or espeak for phonemes)"
            )
        if chars & set("ўқғҳ"):
            return (
                "the transcripts have Uzbek Cyrillic letters (ў қ ғ ҳ): set data.language=uz-Cyrl (one symbol per "
                "apostrophe form; data.transliterate=true for Latin)"
            )
        return None

    def warning(self) -> str | None:
        """The warning when more than 1% of the symbols are unknown (None otherwise)."""
        if not self.too_many_unknown:
            return None
        chars = ", ".join(f"{u.char!r} x{u.count}" for u in self.unknown[:8])
        return (
            f"{100 * self.unknown_share:.1f}% of the transcripts' symbols are unknown ({chars}): check "
            f"data.language / data.symbols / the manifest's encoding (prepare --strict fails on this)"
        )


def text_report(
    train: Sequence[TextItem],
    symbols: Sequence[str],
    *,
    source: str,
    language: str,
    phonemizer: str,
    eval_items: Sequence[TextItem] = (),
) -> TextReport:
    """The report of the training (and eval) transcripts against the run's ``symbols``."""
    known = set(symbols)
    in_training = {c for it in train for c in it.symbols}
    counts: Counter[str] = Counter()
    unknown: dict[tuple[str, str], UnknownChar] = {}
    eval_only: dict[tuple[str, str], UnknownChar] = {}
    total = 0

    def note(char: str, n: int, uid: str, reason: str, into: dict[tuple[str, str], UnknownChar] = unknown) -> None:
        u = into.setdefault((char, reason), UnknownChar(char, 0, [], reason))
        u.count += n
        if len(u.ids) < EXAMPLES and uid not in u.ids:
            u.ids.append(uid)

    for items, missing_reason in ((train, REASON_NOT_IN_SET), (eval_items, REASON_NOT_IN_TRAINING)):
        for it in items:
            here = Counter(it.symbols)
            total += sum(here.values()) + len(it.unmapped)
            for c, n in Counter(it.unmapped).items():
                note(c, n, it.id, REASON_UNMAPPED)
            for c, n in here.items():
                if c in known:
                    counts[c] += n
                    if missing_reason == REASON_NOT_IN_TRAINING and c not in in_training:
                        note(c, n, it.id, REASON_NOT_IN_TRAINING, eval_only)
                else:
                    note(c, n, it.id, REASON_NOT_IN_SET if source != "learned" else missing_reason)
    return TextReport(
        language=language,
        phonemizer=phonemizer,
        source=source,
        symbols=counts.most_common(),
        unknown=sorted(unknown.values(), key=lambda u: -u.count),
        eval_only=sorted(eval_only.values(), key=lambda u: -u.count),
        total=total,
        utterances=sum(1 for it in train if it.symbols or it.unmapped) + sum(1 for it in eval_items if it.symbols),
    )
