"""Model limits: per-utterance checks a model family asks ``prepare`` to apply (XTTS: BPE tokens, audio codes).

A family declares them (``item_limits(model, data)`` next to its ``build_task``, asked through
``registry.item_limits``); the data layer applies them without importing any model code:

- ``prepare`` calls ``load()`` once when there are items to check and hands the returned ``check`` every
  item of a manifest that passed validation twice: before any feature work with ``samples=0`` (the text
  limits: such items get no features computed, and ``--strict`` fails there), and after it with the stored
  length. It skips each item the check names, as a ``model_limit`` problem with the family's detail
  (counted in the report; ``--strict`` makes them an error); the datasets of training, evaluation and
  tuning then never see them;
- the limits' name and settings digest join the index settings, so a change of limit (a larger
  ``model.max_text_tokens``, another vocabulary) re-checks the corpus at the next ``prepare`` and nothing else;
- ``notes`` are lines for prepare's report (XTTS: which text rules the language has).

A check may answer with a :class:`Verdict` instead of a detail: the item is then skipped under that reason
(XTTS: ``empty_text``, ``non_speech_text``), or kept and reported (``keep``: digits its front end leaves as
digits).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

REASON = "model_limit"
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


@dataclass(frozen=True)
class LimitItem:
    """One utterance as the checks see it: id, transcript (as in the manifest) and stored length (0 before the
    features are computed: a check of the audio's length then passes it)."""

    id: str
    text: str
    samples: int


@dataclass(frozen=True)
class Verdict:
    """A check's word on one item with a reason code of its own (one of ``speechtrain.data.manifest.REASONS``)
    instead of ``model_limit``; ``keep``: the item stays and is only reported (``prepare`` lists these under
    ``notes``, and ``--strict`` refuses them as it refuses skipped items)."""

    reason: str
    detail: str
    keep: bool = False


#: ``check(items)`` -> for each item, None when it fits, else the detail of the limit it breaks (or a Verdict)
CheckItems = Callable[[Sequence[LimitItem]], list[str | Verdict | None]]


@dataclass(frozen=True)
class ItemLimits:
    """Limits of a model that some utterances of a corpus may break; ``load`` is called once, and only when
    there are items to check (reading a vocabulary is the costly part)."""

    name: str
    settings: dict[str, Any]  # JSON-safe: everything the verdicts depend on besides the items
    load: Callable[[], CheckItems] = field(compare=False, repr=False)
    description: str = ""
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ValueError(f"item limits name {self.name!r}: lower-case letters/digits/_")

    def digest(self) -> str:
        """16 hex digits of the name and settings (in the index settings)."""
        blob = json.dumps([self.name, self.settings], sort_keys=True)
        return hashlib.sha1(blob.encode()).hexdigest()[:16]
