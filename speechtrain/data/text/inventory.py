"""What the text front end did to a corpus: the symbol inventory and what it could not map.

``prepare`` learns the symbols of a run from the corpus's transcripts (:func:`learn_symbols`; train
and eval manifests) and reports, in :class:`TextReport`: every symbol with its count, the characters
it could not map (removed by the front end, or missing from a pinned symbol set) with counts and
example utterance ids, and their share of all symbols. Above :data:`UNKNOWN_WARN_SHARE` it warns;
``prepare --strict`` fails. Learned symbols that only the eval transcripts have are listed apart
(:attr:`TextReport.eval_only`: in the set, but no training item teaches them).

Beside the unknown characters the report tells what the front end did, by class
(:mod:`speechtrain.data.text.scripts`): the learned symbols counted as letters of the declared script,
letters of other scripts, combining marks, digits, punctuation, symbols; what it *removed* (format and
invisible characters, emoji, the Arabic tatweel, marks espeak-ng dropped) and what it *mapped*
(compatibility forms such as ``ﬁ`` -> ``fi``, typographic quotes, the language's cleaners). It checks
the letters of the raw transcripts against the scripts of ``data.language`` and looks for text decoded
twice (mojibake). Each suspicious class gives a warning with examples (:meth:`TextReport.warnings`);
``prepare --strict`` fails on any of them.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from speechtrain.data.text import scripts as sc

if TYPE_CHECKING:
    from speechtrain.data.text.frontend import TextSettings

UNKNOWN_WARN_SHARE = 0.01  # above this share of unknown symbols prepare warns (and --strict fails)
#: above this share of a pinned set's unknown symbols training refuses: the set came from another front end
PINNED_REFUSE_SHARE = 0.05
OTHER_SCRIPT_WARN_SHARE = 0.02  # above this share of letters not in data.language's scripts it warns
RARE_COUNT = 3  # symbols seen fewer times than this are listed as rare
EXAMPLES = 5  # example utterance ids per unknown character
RATIO_FAR = 2.5  # phonemes per letter this many times the corpus median (or 1/this) is a failed reading
RATIO_MIN_ITEMS = 5  # fewer phonemized utterances than this: no median to compare with
_QUESTION_RUN = re.compile(r"\?+")
_NOT_PHONES = set("ˈˌːˑ")

REASON_UNMAPPED = "cannot stand for speech (control, private-use or unassigned character, U+FFFD)"
REASON_NOT_IN_SET = "not in the pinned symbol set (data.symbols)"
REASON_NOT_IN_TRAINING = "in the eval manifest but not in the training transcripts"
#: why the front end removed a character, by its class
REMOVED_REASONS = {
    sc.FORMAT: "format/invisible character (ZWJ, ZWNJ, direction marks, soft hyphen...): not a sound",
    sc.EMOJI: "emoji: not speech",
    "tatweel": "Arabic tatweel (stretches a letter in writing): not a sound",
    sc.PUNCTUATION: "punctuation espeak-ng dropped from the phonemes",
}


@dataclass(frozen=True)
class PinnedMismatch:
    """How much of the transcripts a pinned symbol set (``data.symbols``) cannot encode."""

    total: int  # symbols the front end made of the transcripts
    unknown: list[tuple[str, int]]  # (symbol outside the set, count), most frequent first

    @property
    def unknown_share(self) -> float:
        return sum(n for _, n in self.unknown) / self.total if self.total else 0.0

    @property
    def refused(self) -> bool:
        return self.unknown_share > PINNED_REFUSE_SHARE


def pinned_mismatch(readings: Iterable[str], symbols: Sequence[str]) -> PinnedMismatch:
    """Count the symbols of ``readings`` (what the run's front end made of each transcript) outside ``symbols``."""
    counts = Counter(c for reading in readings for c in reading)
    known = set(symbols)
    unknown = sorted(((c, n) for c, n in counts.items() if c not in known), key=lambda cn: (-cn[1], cn[0]))
    return PinnedMismatch(sum(counts.values()), unknown)


@dataclass(frozen=True)
class TextItem:
    """One transcript after the front end: its id, symbols and the characters it removed."""

    id: str
    symbols: str
    unmapped: str = ""  # the characters the front end removed
    text: str = ""  # the transcript as listed (for the script and encoding checks)
    reading: str = ""  # why the phonemizer's reading is suspect, one reason a line


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
    #: the learned symbols' occurrences by class (letters of the declared script, digits, ...)
    classes: dict[str, int] = field(default_factory=dict)
    #: characters the front end removed on purpose (format, emoji, tatweel, dropped by espeak-ng)
    removed: list[UnknownChar] = field(default_factory=list)
    #: (character as listed, what the front end made of it, count), most frequent first
    mapped: list[tuple[str, str, int]] = field(default_factory=list)
    #: letters of the raw transcripts by script
    scripts: dict[str, int] = field(default_factory=dict)
    #: the scripts data.language is written in (None: not known, no check)
    declared_scripts: tuple[str, ...] | None = None
    #: (id, word, what it was meant to say) of transcripts that read as UTF-8 decoded twice
    mojibake: list[tuple[str, str, str]] = field(default_factory=list)
    #: class -> (symbol, count) examples of learned symbols, for the warnings
    class_examples: dict[str, list[tuple[str, int]]] = field(default_factory=dict)
    #: (id, why) of the utterances whose phonemizer reading is suspect (language switches, numbers left ...)
    readings: list[tuple[str, str]] = field(default_factory=list)
    #: (id, phonemes per letter / the corpus median) of readings far longer or shorter than the others
    ratio_outliers: list[tuple[str, float]] = field(default_factory=list)
    #: (id, word, characters lost) of transcripts with in-word '?' or U+FFFD (lost when the file was saved)
    lost: list[tuple[str, str, int]] = field(default_factory=list)
    #: the warning when the letters do not look like data.language's (a same-script mismatch)
    look: str | None = None
    #: (id, word) of transcripts in Burmese's Zawgyi font encoding, not Unicode
    zawgyi: list[tuple[str, str]] = field(default_factory=list)

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
            "classes": dict(self.classes),
            "removed": [u.to_dict() for u in self.removed],
            "mapped": [{"from": a, "to": b, "count": n} for a, b, n in self.mapped],
            "scripts": dict(self.scripts),
            "declared_scripts": list(self.declared_scripts) if self.declared_scripts else None,
            "mojibake": [{"id": i, "word": w, "meant": m} for i, w, m in self.mojibake],
            "readings": [{"id": i, "why": w} for i, w in self.readings],
            "ratio_outliers": [{"id": i, "ratio_to_median": r} for i, r in self.ratio_outliers],
            "lost": [{"id": i, "word": w, "count": n} for i, w, n in self.lost],
            "zawgyi": [{"id": i, "word": w} for i, w in self.zawgyi],
            "warnings": self.warnings(),
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
        if self.classes:
            lines.append("classes   " + ", ".join(f"{k} {n}" for k, n in self.classes.items()))
        if self.scripts:
            declared = f" (data.language: {'/'.join(self.declared_scripts)})" if self.declared_scripts else ""
            lines.append("scripts   " + ", ".join(f"{k} {n}" for k, n in self.scripts.items()) + declared)
        for u in self.removed[:max_listed]:
            lines.append(f"removed   {u}")
        if self.mapped:
            shown_map = ", ".join(f"{a!r}->{b!r} x{n}" for a, b, n in self.mapped[:max_listed])
            more = f" ... {len(self.mapped) - max_listed} more" if len(self.mapped) > max_listed else ""
            lines.append(f"mapped    {shown_map}{more}")
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
        """A hint when ``data.language`` is unset (``und``) but the letters show the language: Ethiopic script
        (``am``), or Cyrillic letters beyond Russian's, naming every language written with them (ө ү: mn, kk,
        ky, tt, ba; ў ҳ: uz-Cyrl)."""
        if self.language.lower() not in ("und", ""):
            return None
        chars = {s for s, _ in self.symbols}
        if any(0x1200 <= ord(c) <= 0x139F for c in chars):
            return (
                "the transcripts are in Ethiopic script: for Amharic set data.language=am (its punctuation and "
                "numerals; data.phonemizer=rules or espeak for phonemes)"
            )
        found, languages = sc.languages_of_letters(chars)
        if not languages:
            return None
        which = " or ".join(f"data.language={code}" for code in languages)
        extra = (
            "; uz-Cyrl: one symbol per apostrophe form, data.transliterate=true for Latin"
            if "uz-Cyrl" in languages
            else ""
        )
        return (
            f"the transcripts have the Cyrillic letters {' '.join(found)}, written in {', '.join(languages)}: set "
            f"{which}, whichever it is (the script check, the number normaliser and the espeak-ng voice follow "
            f"it){extra}"
        )

    def warning(self) -> str | None:
        """The unknown-share warning (None when at most 1% of the symbols are unknown)."""
        if not self.too_many_unknown:
            return None
        chars = ", ".join(f"{u.char!r} x{u.count}" for u in self.unknown[:8])
        return (
            f"{100 * self.unknown_share:.1f}% of the transcripts' symbols are unknown ({chars}): check "
            f"data.language / data.symbols / the manifest's encoding (prepare --strict fails on this)"
        )

    def warnings(self) -> list[str]:
        """Every suspicious class, each with examples (``prepare --strict`` fails on any)."""
        checks = (
            self.warning(),
            self._script_warning(),
            self._mojibake_warning(),
            self._lost_warning(),
            self.look,
            self._zawgyi_warning(),
        )
        out = [w for w in checks if w]
        out += self._reading_warnings()
        for u in self.removed:
            if u.reason in (REMOVED_REASONS[sc.EMOJI], REMOVED_REASONS[sc.PUNCTUATION]):
                out.append(f"removed {u}")
        odd = self.class_examples.get(sc.OTHER_SYMBOLS, [])
        if odd:
            shown = ", ".join(f"{c!r} (U+{ord(c):04X}) x{n}" for c, n in odd[:8])
            out.append(
                f"symbols that are not speech are learned as symbols: {shown}; write them as words in the "
                "transcripts (or remove them)"
            )
        return out

    def _script_warning(self) -> str | None:
        letters = sum(self.scripts.values())
        if not self.declared_scripts or not letters:
            return None
        declared = sum(n for k, n in self.scripts.items() if k in self.declared_scripts or k == "Common")
        others = {k: n for k, n in self.scripts.items() if k not in self.declared_scripts and k != "Common"}
        written = "/".join(self.declared_scripts)
        mix = ", ".join(f"{k} {n}" for k, n in sorted(others.items(), key=lambda kv: -kv[1]))
        if declared == 0:
            fix = "check data.language"
            code_page = sc.code_page(self.language)
            if code_page and self.class_examples.get("latin1_letters"):
                fix = (
                    f"a {self.declared_scripts[0]} file read with the wrong data.encoding looks like this "
                    f"(try data.encoding={code_page}), or check data.language"
                )
            return (
                f"data.language={self.language} is written in {written}, but not one of the transcripts' "
                f"{letters} letters is ({mix}): {fix}"
            )
        share = (letters - declared) / letters
        if share > OTHER_SCRIPT_WARN_SHARE:
            examples = ", ".join(repr(c) for c, _ in self.class_examples.get(sc.OTHER_SCRIPTS, [])[:8])
            return (
                f"{100 * share:.1f}% of the letters are not {written} ({mix}; e.g. {examples}): a wrong "
                "data.language, or words in another script the model must learn to read"
            )
        return None

    def _lost_warning(self) -> str | None:
        if not self.lost:
            return None
        total = sum(n for _, _, n in self.lost)
        shown = ", ".join(f"{w!r} in {i}" for i, w, _ in self.lost[:EXAMPLES])
        code_page = sc.code_page(self.language)
        advice = f" (for data.language={self.language}: {code_page})" if code_page else ""
        return (
            f"{total} character(s) lost before the manifest was read, in {len(self.lost)} transcript(s) (an in-word "
            f"'?' or U+FFFD where a letter was: {shown}): the file was saved in a code page without those letters"
            f"{advice}; recover the transcripts from the original"
        )

    def _reading_warnings(self) -> list[str]:
        """The phonemizer's suspect readings, one warning per reason with example utterances."""
        by_reason: dict[str, list[str]] = {}
        for uid, why in self.readings:
            by_reason.setdefault(why, []).append(uid)
        out = [
            f"{len(ids)} utterance(s) misread by the phonemizer ({', '.join(ids[:EXAMPLES])}): {why}"
            for why, ids in by_reason.items()
        ]
        if self.ratio_outliers:
            shown = ", ".join(f"{i} ({r:.1f}x)" for i, r in self.ratio_outliers[:EXAMPLES])
            out.append(
                f"{len(self.ratio_outliers)} utterance(s) with phonemes per letter far from the corpus median: "
                f"{shown}: a failed reading (letter names, skipped characters); check their text"
            )
        return out

    def _zawgyi_warning(self) -> str | None:
        if not self.zawgyi:
            return None
        shown = ", ".join(f"{w!r} in {i}" for i, w in self.zawgyi[:EXAMPLES])
        return (
            f"{len(self.zawgyi)} transcript(s) are Burmese in the Zawgyi font encoding, not Unicode ({shown}): "
            "convert them to Unicode (a Zawgyi-to-Unicode converter such as Rabbit or myanmar-tools) before "
            "training; espeak-ng and the symbols read Unicode"
        )

    def _mojibake_warning(self) -> str | None:
        if not self.mojibake:
            return None
        i, word, meant = self.mojibake[0]
        return (
            f"{len(self.mojibake)} transcript(s) read as UTF-8 that was decoded twice (mojibake), e.g. {word!r} in "
            f"{i} is {meant!r}: re-save the manifest as UTF-8 from the original, or set data.encoding to the "
            "encoding it was written in"
        )


def text_report(
    train: Sequence[TextItem],
    symbols: Sequence[str],
    *,
    source: str,
    language: str,
    phonemizer: str,
    eval_items: Sequence[TextItem] = (),
    settings: TextSettings | None = None,
) -> TextReport:
    """The report of the training (and eval) transcripts against the run's ``symbols``. ``settings``:
    the front end's (for the list of what it mapped; without them nothing is listed as mapped)."""
    known = set(symbols)
    in_training = {c for it in train for c in it.symbols}
    counts: Counter[str] = Counter()
    unknown: dict[tuple[str, str], UnknownChar] = {}
    removed: dict[tuple[str, str], UnknownChar] = {}
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
            total += sum(here.values())
            for c, n in Counter(it.unmapped).items():
                reason = _removed_reason(c)
                if reason is None:
                    total += n
                    note(c, n, it.id, REASON_UNMAPPED)
                else:
                    note(c, n, it.id, reason, removed)
            for c, n in here.items():
                if c in known:
                    counts[c] += n
                    if missing_reason == REASON_NOT_IN_TRAINING and c not in in_training:
                        note(c, n, it.id, REASON_NOT_IN_TRAINING, eval_only)
                else:
                    note(c, n, it.id, REASON_NOT_IN_SET if source != "learned" else missing_reason)
    report = TextReport(
        language=language,
        phonemizer=phonemizer,
        source=source,
        symbols=counts.most_common(),
        unknown=sorted(unknown.values(), key=lambda u: -u.count),
        removed=sorted(removed.values(), key=lambda u: -u.count),
        eval_only=sorted(eval_only.values(), key=lambda u: -u.count),
        total=total,
        utterances=sum(1 for it in train if it.symbols or it.unmapped) + sum(1 for it in eval_items if it.symbols),
        declared_scripts=sc.scripts_of_language(language),
    )
    everything = [*train, *eval_items]
    _audit(report, everything, counts, settings)
    report.readings = [(it.id, why) for it in everything for why in it.reading.splitlines() if why]
    if phonemizer == "espeak":
        report.ratio_outliers = _ratio_outliers(everything)
    report.lost = [found for it in everything if (found := _lost(it))]
    report.look = _look(language, [it.text for it in everything])
    if "Myanmar" in (report.declared_scripts or ()) or any(
        "\u1000" <= c <= "\u109f" for it in everything for c in it.text
    ):
        report.zawgyi = _zawgyi(everything)
    return report


def _ratio_outliers(items: Sequence[TextItem]) -> list[tuple[str, float]]:
    """Utterances whose phonemes per letter are :data:`RATIO_FAR` times the corpus median or more (or less):
    a reading of letter names is several times longer than the words, a skipped script much shorter. Texts
    with digits are left out (their numbers are written out first; the number notes judge them)."""
    ratios = {}
    for it in items:
        letters = sum(1 for c in it.text if c.isalpha())
        if letters >= 3 and it.symbols and not any(c.isdigit() for c in it.text):
            ratios[it.id] = sum(1 for c in it.symbols if c.isalpha() and c not in _NOT_PHONES) / letters
    if len(ratios) < RATIO_MIN_ITEMS:
        return []
    values = sorted(ratios.values())
    median = values[len(values) // 2]
    if median <= 0:
        return []
    far = [(uid, r / median) for uid, r in ratios.items() if r / median >= RATIO_FAR or r / median <= 1 / RATIO_FAR]
    return sorted(far, key=lambda x: -abs(x[1] - 1))


def _lost(item: TextItem) -> tuple[str, str, int] | None:
    """(id, the first such word, how many) of a transcript with characters lost in encoding: U+FFFD, and '?'
    where a letter was (before a letter, or after one with the sentence going on in lower case: ``?в?? малчин``;
    a question mark ends a sentence)."""
    text = item.text
    count = text.count("\ufffd")
    for m in _QUESTION_RUN.finditer(text):
        after = text[m.end() : m.end() + 1]
        rest = text[m.end() :].lstrip()
        before = text[m.start() - 1 : m.start()]
        if after.isalpha() or (before.isalpha() and after.isspace() and rest[:1].islower()):
            count += len(m.group(0))
    if not count:
        return None
    word = next(w for w in text.split() if "?" in w or "\ufffd" in w)
    return item.id, word, count


def _look(language: str, texts: Sequence[str]) -> str | None:
    """A warning when the transcripts' letters do not look like ``language``'s (:data:`scripts.PROFILES`)."""
    profile = sc.PROFILES.get(language.replace("_", "-").split("-")[0].lower())
    if profile is None:
        return None
    import unicodedata

    letters = Counter(c for t in texts for c in unicodedata.normalize("NFC", t) if c.isalpha())
    total = sum(letters.values())
    if total < sc.MIN_PROFILE_LETTERS:
        return None
    often = sum(n for c, n in letters.items() if c in profile.often) / total
    rare = sum(n for c, n in letters.items() if c in profile.rare) / total
    signs = []
    if profile.often and often < profile.min_share and total >= sc.MIN_OFTEN_LETTERS:
        shown = " ".join(sorted({c.lower() for c in profile.often}))
        signs.append(
            f"{shown} are {100 * often:.1f}% of its letters ({language} text has {100 * profile.min_share:g}% or more)"
        )
    if profile.rare and rare > profile.max_share:
        shown = " ".join(sorted(c for c in {c.lower() for c in letters} if c in {r.lower() for r in profile.rare}))
        signs.append(f"{shown} are {100 * rare:.1f}% of its letters ({language} has almost none)")
    if not signs:
        return None
    named = Counter(
        {sc.LIKELY_LANGUAGE[c]: n for c, n in letters.items() if c in profile.rare and c in sc.LIKELY_LANGUAGE}
    )
    instead = named.most_common(1)[0][0] if named else profile.instead
    return (
        f"data.language={language}, but the transcripts do not look like it: {'; '.join(signs)}. Is it "
        f"{instead}? Check data.language (the espeak-ng voice, the number normaliser and the checks follow it)"
    )


def _zawgyi(items: Sequence[TextItem]) -> list[tuple[str, str]]:
    """(id, word) of the transcripts that read as Burmese in the Zawgyi encoding."""
    return [(it.id, word) for it in items if it.text and (word := sc.zawgyi(it.text))]


def _removed_reason(c: str) -> str | None:
    """Why the front end removed ``c`` on purpose (None: it cannot stand for speech at all: unknown)."""
    if c == "\u0640":
        return REMOVED_REASONS["tatweel"]
    cls = sc.char_class(c)
    return REMOVED_REASONS.get(cls)


def _audit(report: TextReport, items: Sequence[TextItem], counts: Counter[str], settings: Any) -> None:
    """The class counts, the scripts of the raw letters, what was mapped and the mojibake check."""
    phonemes = report.phonemizer != "none"
    classes: Counter[str] = Counter()
    examples: dict[str, Counter[str]] = {}
    for c, n in counts.items():
        cls = sc.char_class(c, None if phonemes else report.declared_scripts)
        classes[cls] += n
        examples.setdefault(cls, Counter())[c] += n
    raw: Counter[str] = Counter()
    for it in items:
        raw.update(it.text)
        found = sc.mojibake(it.text) if it.text else None
        if found:
            report.mojibake.append((it.id, *found))
    from speechtrain.data.text.frontend import compat_fold, removable

    letters: Counter[str] = Counter()  # the transcripts' letters after compatibility forms and removals
    for c, n in raw.items():
        for f in compat_fold(c) if not c.isascii() else c:
            if f.isalpha() and not removable(f):
                letters[f] += n
    scripts: Counter[str] = Counter()
    latin1 = 0
    for c, n in letters.items():
        scripts[sc.script_of(c)] += n
        latin1 += n if 0xC0 <= ord(c) <= 0xFF else 0
    report.classes = dict(classes.most_common())
    report.class_examples = {k: v.most_common(EXAMPLES * 2) for k, v in examples.items()}
    if phonemes:  # phoneme symbols (IPA, espeak's markers) are no script's letters: judge the transcripts
        report.class_examples.pop(sc.OTHER_SCRIPTS, None)
        report.class_examples.pop(sc.OTHER_SYMBOLS, None)
    if report.declared_scripts:
        others = Counter(
            {
                c: n
                for c, n in raw.items()
                if c.isalpha() and sc.char_class(c, report.declared_scripts) == sc.OTHER_SCRIPTS
            }
        )
        report.class_examples[sc.OTHER_SCRIPTS] = others.most_common(EXAMPLES * 2)
    if latin1 and latin1 >= 0.5 * sum(scripts.values()):
        report.class_examples["latin1_letters"] = [("", latin1)]
    report.scripts = dict(scripts.most_common())
    if settings is not None:
        report.mapped = _mapped(raw, settings)


def _mapped(raw: Counter[str], settings: Any) -> list[tuple[str, str, int]]:
    """Each distinct character of the transcripts that the front end changed (case aside), with what it
    became, by itself (steps 1-4; context rules such as the Uzbek apostrophes are judged per character)."""
    from dataclasses import replace

    from speechtrain.data.text.frontend import ESPEAK_KEEP_COMPAT, TextFrontEnd, removable

    front = TextFrontEnd(replace(settings, phonemizer="none", lowercase=False))
    kept = ESPEAK_KEEP_COMPAT if settings.phonemizer == "espeak" else frozenset()
    out = []
    for c, n in raw.items():
        if c.isspace() or c.isascii() and c.isalnum() or removable(c, front.language) or c in kept:
            continue
        became = front.normalize(c).symbols
        if became != c and became.lower() != c.lower():
            out.append((c, became, n))
    return sorted(out, key=lambda m: -m[2])
