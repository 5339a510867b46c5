"""XTTS's text side: a pluggable front end, then Coqui's ``VoiceBpeTokenizer`` scheme over ``vocab.json``.

Encoding (as Coqui's ``VoiceBpeTokenizer.encode``): the language code loses its region (``pt-br`` -> ``pt``),
``zh`` becomes ``zh-cn``, the text becomes ``[lang]text`` with every space written ``[SPACE]``, and the
``tokenizers`` BPE model of ``vocab.json`` gives the ids. ``[STOP]`` (0), ``[UNK]`` (1), ``[SPACE]`` (2) and
``[START]`` are special tokens of the vocabulary.

Front ends (``model.text_front_end``) turn a transcript into the text the BPE sees:

- ``multilingual`` (the default): Coqui's ``multilingual_cleaners`` for the language (numbers, currency,
  ordinals, abbreviations and symbols in words, with num2words) after Unicode NFC, so that training, our
  synthesis and Coqui's inference on an export give the BPE the same text
  (:mod:`speechtrain.models.xtts.normalize`); a language without rules gets NFC, lower case and white space;
- ``basic``: Unicode NFC, lowercase, double quotes removed, whitespace collapsed (no language rules: the
  front end of runs from before ``multilingual``);
- ``none``: NFC and whitespace only;
- ``package.module:function``: ``function(text, language) -> str``, e.g. a grapheme-to-phoneme converter
  (then add its symbols with ``model.extra_tokens`` or let ``add_transcript_chars`` collect them).

A new language gets its tag (``[am]``) and the characters its transcripts need as new tokens
(:meth:`XttsTokenizer.extended`); the extended ``vocab.json`` travels in the run's checkpoints and in exports.
"""

from __future__ import annotations

import importlib
import inspect
import json
import re
import unicodedata
from collections.abc import Callable, Iterable
from typing import Any

from speechtrain.errors import UserError

SPECIALS = ("[STOP]", "[UNK]", "[SPACE]", "[START]")
_TAG = re.compile(r"^\[([a-z]{2,3}(?:-[a-z]+)?)\]$")
_RANGE = re.compile(r"^U\+([0-9A-Fa-f]{4,6})\.\.U\+([0-9A-Fa-f]{4,6})$")
_SPACES = re.compile(r"\s+")

FrontEnd = Callable[[str, str], str]


def require_tokenizers() -> Any:
    """The ``tokenizers`` module, or a UserError with the install command."""
    try:
        import tokenizers
    except ImportError:
        raise UserError(
            "the xtts family reads vocab.json with the `tokenizers` library, which is not installed: "
            "pip install 'speechtrain[xtts]' (or: pip install tokenizers)"
        ) from None
    return tokenizers


def language_tag(language: str) -> str:
    """Coqui's tag for a language code: region dropped, ``zh`` -> ``zh-cn``."""
    lang = language.split("-")[0].lower()
    return "zh-cn" if lang == "zh" else lang


def expand_tokens(specs: Iterable[str]) -> list[str]:
    """Tokens as ``model.extra_tokens`` lists them: a token as it is, or ``U+XXXX..U+YYYY``, every assigned
    character of that code-point range (e.g. ``U+1200..U+137C``: the Ethiopic syllables, marks,
    punctuation and digits), in code-point order."""
    out: list[str] = []
    for spec in specs:
        m = _RANGE.match(spec.strip())
        if m is None:
            out.append(spec)
            continue
        first, last = int(m.group(1), 16), int(m.group(2), 16)
        if first > last:
            raise UserError(f"model.extra_tokens: '{spec}' runs backwards (write U+first..U+last)")
        out += [chr(c) for c in range(first, last + 1) if unicodedata.category(chr(c)) != "Cn"]
    return out


# ------------------------------------------------------------------------------------------ front ends
def basic_front_end(text: str, language: str) -> str:
    """NFC, lowercase, no double quotes, one space between words."""
    text = unicodedata.normalize("NFC", text).replace('"', "").lower()
    return _SPACES.sub(" ", text).strip()


def plain_front_end(text: str, language: str) -> str:
    """NFC and one space between words."""
    return _SPACES.sub(" ", unicodedata.normalize("NFC", text)).strip()


def load_front_end(spec: str) -> FrontEnd:
    """``multilingual``, ``basic``, ``none`` or ``package.module:function`` -> a callable (text, language) -> text."""
    if spec == "multilingual":
        from speechtrain.models.xtts.normalize import normalize, require_num2words

        require_num2words()
        return normalize
    if spec == "basic":
        return basic_front_end
    if spec == "none":
        return plain_front_end
    if ":" not in spec:
        raise UserError(f"model.text_front_end: '{spec}' is not multilingual, basic, none or package.module:function")
    module, func = spec.split(":", 1)
    try:
        fn = getattr(importlib.import_module(module), func)
    except (ImportError, AttributeError) as exc:
        raise UserError(f"model.text_front_end: cannot load '{spec}': {exc}") from None
    if not callable(fn):
        raise UserError(f"model.text_front_end: '{spec}' is not callable")
    return _user_front_end(fn, spec)


def _user_front_end(fn: Callable[..., Any], spec: str) -> FrontEnd:
    """A user's function as a front end: ``fn(text, language)``, or ``fn(text)`` for a function of one
    argument (the built-in cleaners and G2Ps: ``speechtrain.data.text.amharic:clean``, ``...:g2p``); what
    it raises or a result that is not text is a UserError naming the function and the text."""
    try:
        params = [
            p
            for p in inspect.signature(fn).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
        ]
        takes_language = len(params) >= 2 or any(
            p.kind == p.VAR_POSITIONAL for p in inspect.signature(fn).parameters.values()
        )
    except (TypeError, ValueError):  # builtins without a signature: assume (text, language)
        takes_language = True

    def front_end(text: str, language: str) -> str:
        try:
            out = fn(text, language) if takes_language else fn(text)
        except Exception as exc:  # noqa: BLE001 - a user's function may raise anything
            raise UserError(
                f"model.text_front_end={spec} failed on {text[:60]!r}: {type(exc).__name__}: {exc}"
            ) from None
        if not isinstance(out, str):
            raise UserError(f"model.text_front_end={spec} returned {type(out).__name__}, not text, for {text[:60]!r}")
        return out

    return front_end


# ------------------------------------------------------------------------------------------ tokenizer
class XttsTokenizer:
    """The BPE vocabulary of an XTTS checkpoint (``vocab.json`` text) and Coqui's encoding around it."""

    def __init__(self, vocab_json: str, source: str = "vocab.json") -> None:
        tokenizers = require_tokenizers()
        try:
            self._data = json.loads(vocab_json)
            self._tok = tokenizers.Tokenizer.from_str(vocab_json)
        except Exception as exc:  # noqa: BLE001 - json and tokenizers raise several types
            raise UserError(f"{source}: not a `tokenizers` vocabulary file ({str(exc).splitlines()[0]})") from None
        self.json = vocab_json
        self.source = source
        vocab = self._tok.get_vocab(with_added_tokens=True)
        missing = [s for s in SPECIALS if s not in vocab]
        if missing:
            raise UserError(f"{source}: not an XTTS vocabulary: no {', '.join(missing)} token")
        self.vocab = vocab
        self.stop_id, self.unk_id, self.space_id, self.start_id = (vocab[s] for s in SPECIALS)

    @classmethod
    def from_file(cls, path: Any) -> XttsTokenizer:
        from pathlib import Path

        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise UserError(f"{path}: cannot read the vocabulary ({exc})") from None
        return cls(text, str(path))

    @property
    def num_tokens(self) -> int:
        """Rows of the text embedding: the largest id + 1 (Coqui's ``get_number_tokens``)."""
        return max(self.vocab.values()) + 1

    @property
    def languages(self) -> list[str]:
        """Language tags the vocabulary holds (``en``, ``zh-cn``, ...), in id order."""
        tags = [(i, m.group(1)) for t, i in self.vocab.items() if (m := _TAG.match(t)) and t not in SPECIALS]
        return [t for _, t in sorted(tags)]

    def has_language(self, language: str) -> bool:
        return f"[{language_tag(language)}]" in self.vocab

    def encode(self, text: str, language: str) -> list[int]:
        """Ids of front-end text, language tag first (no start/stop: the model adds them)."""
        tag = language_tag(language)
        return self._tok.encode(f"[{tag}]{text}".replace(" ", "[SPACE]")).ids

    def decode(self, ids: Iterable[int]) -> str:
        """Text of ids (Coqui's decode: [SPACE] -> space, [STOP]/[UNK] dropped)."""
        text = self._tok.decode([int(i) for i in ids], skip_special_tokens=False).replace(" ", "")
        return text.replace("[SPACE]", " ").replace("[STOP]", "").replace("[UNK]", "")

    def unknown_chars(self, text: str) -> set[str]:
        """Characters of ``text`` the vocabulary cannot encode (each would become [UNK])."""
        out = set()
        for c in set(text) - {" "}:
            if self.unk_id in self._tok.encode(c.replace(" ", "[SPACE]")).ids:
                out.add(c)
        return out

    def extended(self, languages: Iterable[str] = (), tokens: Iterable[str] = ()) -> tuple[XttsTokenizer, list[str]]:
        """A copy with more language tags and tokens (new ids after the largest), and what was added.

        Single characters join the BPE alphabet (``model.vocab``); longer tokens and language tags become
        added tokens (tags special, as Coqui's are), matched before the BPE runs."""
        data = json.loads(self.json)
        vocab = data["model"]["vocab"]
        added = data.setdefault("added_tokens", [])
        next_id = self.num_tokens
        new: list[str] = []
        for tag in (f"[{language_tag(lang)}]" for lang in languages):
            if tag in self.vocab or tag in new:
                continue
            vocab[tag] = next_id
            added.append(_added_token(next_id, tag, special=True))
            new.append(tag)
            next_id += 1
        for token in tokens:
            if not token or token in self.vocab or token in new:
                continue
            vocab[token] = next_id
            if len(token) > 1:
                added.append(_added_token(next_id, token, special=False))
            new.append(token)
            next_id += 1
        if not new:
            return self, []
        text = json.dumps(data, ensure_ascii=False, indent=2)
        return XttsTokenizer(text, self.source), new


def _added_token(token_id: int, content: str, special: bool) -> dict[str, Any]:
    return {
        "id": token_id,
        "content": content,
        "single_word": False,
        "lstrip": False,
        "rstrip": False,
        "normalized": False,
        "special": special,
    }
