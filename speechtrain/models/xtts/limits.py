"""What an XTTS model can take of one utterance, checked where the data is prepared and again where it is used.

- Text: at most ``min(model.max_text_tokens, gpt_max_text_tokens)`` BPE tokens with the language tag (Coqui's
  ``max_text_length`` in training; the text position table's size beyond it: a longer transcript is an
  ``IndexError`` inside the GPT); and, without ``model.add_transcript_chars``, only characters the vocabulary
  encodes.
- Audio: ``ceil(samples / gpt_code_stride_len) + 3 <= gpt_max_audio_tokens`` (start, stop and the code the
  DVAE's centred frames add must fit the audio position table).

:func:`item_limits` is the family's hook (:mod:`speechtrain.data.limits`): ``prepare`` skips the items of the
training and the eval set that break a limit and counts them in its report (Coqui's trainer drops them too),
or refuses them with ``--strict``. The task keeps the same checks: at set-up for the training set, and in
evaluation, where an item beyond them (data prepared without the model's folder) is left out of the batch
with a warning instead of stopping the run.
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from speechtrain.data.derived import file_digest
from speechtrain.data.limits import CheckItems, ItemLimits, LimitItem, Verdict
from speechtrain.errors import UserError

if TYPE_CHECKING:
    from speechtrain.config import DataConfig
    from speechtrain.models.xtts.config import XttsArch, XttsConfig
    from speechtrain.models.xtts.tokenizer import XttsTokenizer

LIMITS_VERSION = 2  # bump when a check or the text rules change (every corpus is then checked again)


@dataclass(frozen=True)
class XttsLimits:
    """The limits of one model on one utterance (see the module doc)."""

    max_text_tokens: int
    max_codes: int  # audio codes, without start, stop and the extra code
    code_stride: int  # samples per code
    model_max_text_tokens: int  # model.max_text_tokens, for messages
    position_text_tokens: int  # the checkpoint's gpt_max_text_tokens, for messages

    @classmethod
    def of(cls, model: XttsConfig, arch: XttsArch) -> XttsLimits:
        return cls(
            min(model.max_text_tokens, arch.gpt_max_text_tokens),
            arch.gpt_max_audio_tokens - 3,
            arch.gpt_code_stride_len,
            model.max_text_tokens,
            arch.gpt_max_text_tokens,
        )

    def text_problem(self, tokens: int) -> str | None:
        if tokens <= self.max_text_tokens:
            return None
        return (
            f"{tokens} BPE tokens, more than {self.max_text_tokens} (model.max_text_tokens="
            f"{self.model_max_text_tokens}, the checkpoint's gpt_max_text_tokens={self.position_text_tokens})"
        )

    def codes(self, samples: int) -> int:
        return math.ceil(samples / self.code_stride)

    def audio_problem(self, samples: int, sample_rate: int) -> str | None:
        codes = self.codes(samples)
        if codes <= self.max_codes:
            return None
        seconds = self.max_codes * self.code_stride / sample_rate
        return (
            f"{codes} audio codes ({samples / sample_rate:.1f} s), more than the checkpoint's gpt_max_audio_tokens "
            f"- 3 = {self.max_codes} (lower data.max_duration to <= {seconds:.1f} s to skip such audio earlier)"
        )

    def problem(
        self, tokens: list[int], samples: int, sample_rate: int, unk_id: int, unknown: Callable[[], str] | None
    ) -> str | None:
        """What makes an utterance unusable (None: it fits). ``unknown``: the characters the vocabulary cannot
        encode, asked only when [UNK] is among ``tokens``; None when they are allowed."""
        found = self.text_problem(len(tokens)) or self.audio_problem(samples, sample_rate)
        if found is None and unknown is not None and unk_id in tokens:
            found = (
                f"characters the vocabulary cannot encode: {unknown()} (model.add_transcript_chars=false; add them "
                "with model.extra_tokens)"
            )
        return found


class CheckXttsItems:
    """``prepare``'s check: the vocabulary of the checkpoint folder extended as the task will extend it (the
    language tag, ``model.extra_tokens``, and with ``add_transcript_chars`` the characters the transcripts
    need), the task's front end, its limits."""

    def __init__(self, model: XttsConfig, data: DataConfig, language: str, tokenizer: XttsTokenizer) -> None:
        from speechtrain.models.xtts.tokenizer import expand_tokens, load_front_end

        self.model, self.language, self.sample_rate = model, language, data.sample_rate
        self.front_end = load_front_end(model.text_front_end)
        self.base, _ = tokenizer.extended([language], expand_tokens(model.extra_tokens))
        assert model.arch is not None
        self.limits = XttsLimits.of(model, model.arch)

    def __call__(self, items: Sequence[LimitItem]) -> list[str | Verdict | None]:
        texts = [self.front_end(it.text, self.language) for it in items]
        refused = [speech_problem(it.text) for it in items]
        tok = self.base
        if self.model.add_transcript_chars:  # each new character is one token, as after the task's set-up
            usable = [t for t, r in zip(texts, refused) if r is None]
            need = sorted(set().union(*(tok.unknown_chars(t) for t in usable))) if usable else []
            tok, _ = tok.extended((), need)
        out: list[str | Verdict | None] = []
        for it, text, refusal in zip(items, texts, refused):
            if refusal is not None:
                out.append(refusal)
                continue
            ids = tok.encode(text, self.language)
            unknown = None if self.model.add_transcript_chars else _unknown_of(tok, text)
            found = self.limits.problem(ids, it.samples, self.sample_rate, tok.unk_id, unknown)
            out.append(found if found is not None else self._digits(text))
        return out

    def _digits(self, text: str) -> Verdict | None:
        """Digits the front end left as digits (a language without number words: Hindi, or ``basic``/``none``):
        the BPE learns them as written, and Coqui's own cleaner fails on them. Kept and reported."""
        digits = "".join(ch for ch in text if unicodedata.category(ch) == "Nd")
        if not digits:
            return None
        return Verdict(
            "unspoken_digits",
            f"digits {digits!r} stay digits after model.text_front_end={self.model.text_front_end} for "
            f"'{self.language}' (no number words for it; Coqui's own cleaner fails on them): {text[:60]!r}; write "
            "the numbers in words, or plug a front end that does (model.text_front_end=package.module:function)",
            keep=True,
        )


#: what is not speech in a transcript: emoji, pictographs and other symbols, and what joins or styles them
_NON_SPEECH_CATEGORIES = ("So", "Sk", "Co", "Cn", "Cs")


def _non_speech(ch: str) -> bool:
    cp = ord(ch)
    joiner = cp == 0x200D or 0xFE00 <= cp <= 0xFE0F or cp == 0x20E3 or 0xE0020 <= cp <= 0xE007F
    return joiner or unicodedata.category(ch) in _NON_SPEECH_CATEGORIES


def speech_problem(text: str) -> Verdict | None:
    """Why an XTTS model cannot learn from ``text`` as Coqui reads the data: an empty or blank transcript (its
    dataset raises on it and drops the row), or one mostly of emoji and other symbols, more of them than letters
    and digits, or with no letter or digit at all (its BPE has no token for them: an [UNK], and Coqui drops the
    row; our front end would keep the little text left and train the whole recording on it)."""
    if not text.strip():
        return Verdict("empty_text", "empty transcript: XTTS learns speech from its text (Coqui drops such rows)")
    other = sum(1 for ch in text if _non_speech(ch))
    speech = sum(1 for ch in text if unicodedata.category(ch)[0] in "LMN" and not _non_speech(ch))
    if speech and other <= speech:
        return None
    return Verdict(
        "non_speech_text",
        f"{other} emoji/symbol character(s) and {speech} letter(s)/digit(s) in {text[:60]!r}: mostly not speech "
        "(Coqui drops such rows: its vocabulary has no token for them); write what is said, or leave the row out",
    )


def _unknown_of(tok: XttsTokenizer, text: str) -> Callable[[], str]:
    return lambda: " ".join(sorted(tok.unknown_chars(text)))


def item_limits(model: XttsConfig, data: DataConfig) -> list[ItemLimits]:
    """The family's hook: the text and audio limits of the checkpoint folder's model (written first with random
    weights when ``model.random_checkpoint`` asks, as the task would). None without a folder (a run's
    config.yaml away from it): the task's own checks then guard training and evaluation."""
    from speechtrain.models.xtts.build import checkpoint_folder
    from speechtrain.models.xtts.checkpoint import read_config_and_vocab
    from speechtrain.models.xtts.config import transcript_language

    folder = checkpoint_folder(model)
    if folder is None or (model.arch is not None and not folder.is_dir()):
        return []
    files = read_config_and_vocab(folder)  # UserError for an incomplete or foreign folder
    try:
        language = transcript_language(model, data.language)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    arch = files.arch
    checked = model.model_copy(update={"arch": arch})
    limits = XttsLimits.of(checked, arch)
    settings = {
        "version": LIMITS_VERSION,
        "vocab.json": file_digest(str(folder / "vocab.json")),
        "language": language,
        "text_front_end": model.text_front_end,
        "extra_tokens": list(model.extra_tokens),
        "add_transcript_chars": model.add_transcript_chars,
        "max_text_tokens": limits.max_text_tokens,
        "max_codes": limits.max_codes,
        "code_stride": limits.code_stride,
    }
    if model.text_front_end == "multilingual":
        from speechtrain.models.xtts.normalize import rules_note

        notes: tuple[str, ...] = (rules_note(language),)
    elif model.text_front_end in ("basic", "none"):
        notes = (f"xtts text: model.text_front_end={model.text_front_end}: no language rules (numbers stay digits)",)
    else:
        notes = (f"xtts text: model.text_front_end={model.text_front_end} (your front end)",)
    tokenizer = files.tokenizer

    def load() -> CheckItems:
        return CheckXttsItems(checked, data, language, tokenizer)

    return [ItemLimits("xtts", settings, load, description="XTTS text and audio limits", notes=notes)]
