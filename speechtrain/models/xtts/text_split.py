"""Long text for synthesis, cut into pieces a model can take: sentences first, then clauses, then words.

:func:`split_text` keeps whole sentences together while they fit (``fits(piece)``: the model's token limit),
a sentence too long alone is cut at its clause marks (commas, semicolons, colons), a clause too long at word
boundaries, and a word too long (no spaces: a run of CJK or Ethiopic text) at character boundaries. Sentence
ends are ``. ! ? …`` before white space and ``。 ！ ？ ። ፧ ؟`` anywhere; line breaks end a sentence too.
The pieces keep the text's own characters (white space between them excepted): joined with spaces they give
the text back, up to white space.
"""

from __future__ import annotations

import re
from collections.abc import Callable

_SENTENCES = re.compile(r"(?:(?<=[.!?…])|(?<=[.!?…][\"'”’»)\]]))\s+|(?<=[。！？።፧؟])\s*|\s*\n\s*")
_NO_SPACE_AFTER = "。！？、，；"  # scripts written without spaces: joined as written
_CLAUSES = re.compile(r"(?<=[,;:،、，；፣፤፥])\s*")


def _pieces(parts: list[str], fits: Callable[[str], bool], joiner: str) -> list[str]:
    """Consecutive ``parts`` joined greedily while the join fits; a part that does not fit alone stays alone."""
    out: list[str] = []
    for part in parts:
        glue = "" if out and out[-1][-1] in _NO_SPACE_AFTER else joiner
        if out and fits(out[-1] + glue + part):
            out[-1] = out[-1] + glue + part
        else:
            out.append(part)
    return out


def _cut(text: str, fits: Callable[[str], bool], level: int) -> list[str]:
    """``text`` in pieces that fit, cut at the coarsest level that works (clauses, words, characters)."""
    if fits(text) or level > 2:
        return [text]
    if level == 0:
        parts, joiner = [p for p in _CLAUSES.split(text) if p], " "
    elif level == 1:
        parts, joiner = text.split(), " "
    else:
        parts, joiner = list(text), ""
    if len(parts) < 2:
        return _cut(text, fits, level + 1)
    out: list[str] = []
    for piece in _pieces(parts, fits, joiner):
        out += _cut(piece, fits, level + 1) if not fits(piece) else [piece]
    return out


def split_text(text: str, fits: Callable[[str], bool]) -> list[str]:
    """``text`` as pieces for which ``fits`` holds (see the module doc); one piece when it fits whole."""
    text = text.strip()
    if not text or fits(text):
        return [text] if text else []
    sentences = [s.strip() for s in _SENTENCES.split(text) if s and s.strip()]
    out: list[str] = []
    for piece in _pieces(sentences, fits, " "):
        out += _cut(piece, fits, 0)
    return out
