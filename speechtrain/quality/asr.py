"""The user's local ASR model, which transcribes a TTS model's synthesis for the character error rate (``cer``).

No ASR weights ship with speechtrain: ``train.quality_asr`` (``speechtrain eval --asr``) names the folder of a
Hugging Face model saved with ``save_pretrained`` (Whisper, or a CTC model such as wav2vec2). It is read from that
folder only (``local_files_only``, ``HF_HUB_OFFLINE``: never a download), with transformers' own classes only
(``trust_remote_code=False``: no code of the folder is imported) and safetensors weights only
(``use_safetensors=True``: no pickle is loaded). :func:`check_folder` says what is wrong with a folder before
anything is imported; :class:`Transcriber` imports transformers and loads the model when first asked (or
:meth:`Transcriber.load`), and resamples each clip with soxr to the model's own rate (its feature extractor's
``sampling_rate``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from speechtrain.errors import UserError
from speechtrain.logs import get_logger

log = get_logger(__name__)

#: the config key that names the model (what every error of this module names)
KEY = "train.quality_asr"
_WHAT = "the folder of a local Hugging Face ASR model (Whisper or a CTC model such as wav2vec2, safetensors weights)"
_PICKLED = ("pytorch_model.bin", "pytorch_model.bin.index.json", "model.pt", "model.ckpt")


def check_folder(path: str | os.PathLike[str], key: str = KEY) -> Path:
    """``path`` when it looks like a Hugging Face ASR model folder with safetensors weights, else a one-line
    UserError naming ``key`` and the fix (reads only the folder's listing and its config.json)."""
    folder = Path(path).expanduser()
    named = _named(key, path)
    if not folder.is_dir():
        why = "is a file" if folder.exists() else "does not exist"
        raise UserError(f"{named} {why}: give {_WHAT}, or leave {key} unset (no ASR weights ship with speechtrain)")
    if not (folder / "config.json").is_file():
        raise UserError(
            f"{named} has no config.json: give {_WHAT}, as save_pretrained writes it (config.json, model.safetensors, "
            "the tokenizer and preprocessor files)"
        )
    if not any(folder.glob("*.safetensors")):
        pickled = [name for name in _PICKLED if (folder / name).is_file()] + [p.name for p in folder.glob("*.bin")]
        if pickled:
            raise UserError(
                f"{named} holds pickled weights only ({sorted(set(pickled))[0]}): speechtrain loads safetensors "
                "only (a pickle can run code); convert it once where you trust it (model.save_pretrained(FOLDER, "
                "safe_serialization=True)) and name that folder"
            )
        raise UserError(f"{named} has no *.safetensors weights: give {_WHAT}")
    kind = _asr_kind(folder, named)
    if kind is None:
        raise UserError(f"{named} is not a speech recognition model (config.json's architectures): give {_WHAT}")
    return folder


def _named(key: str, path: Any) -> str:
    """How an error names the value: ``train.quality_asr=PATH``, ``--asr PATH``."""
    return f"{key} {path}" if key.startswith("--") else f"{key}={path}"


def _asr_kind(folder: Path, named: str) -> str | None:
    """``seq2seq`` (Whisper and other encoder-decoders), ``ctc``, or None (not an ASR model) from config.json."""
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UserError(f"{named}: its config.json is not readable JSON ({exc})") from None
    if not isinstance(config, dict):
        raise UserError(f"{named}: its config.json is not a JSON object")
    names = [str(a) for a in config.get("architectures") or []]
    if any(a.endswith("ForCTC") for a in names):
        return "ctc"
    if config.get("model_type") == "whisper" or any(a.endswith("ForSpeechSeq2Seq") for a in names):
        return "seq2seq"
    if not names and config.get("model_type") in ("wav2vec2", "hubert", "wavlm", "data2vec-audio", "wav2vec2-bert"):
        return "ctc"
    return None


class Transcriber:
    """Transcribes 1-D audio with the ASR model of ``folder`` on ``device`` (``language``: Whisper's language,
    e.g. ``en``; None: Whisper detects it; a CTC model has none to take). The folder is checked at once
    (:func:`check_folder`); transformers is imported and the model loaded on the first call or :meth:`load`."""

    def __init__(
        self, folder: str | os.PathLike[str], language: str | None = None, device: str = "cpu", key: str = KEY
    ) -> None:
        self.key, self.folder = key, check_folder(folder, key)
        self.kind = _asr_kind(self.folder, _named(key, folder))
        self.language, self.device = language, str(device)
        self.rate = 0  # the model's sampling rate, known once loaded
        self._pipe: Any = None
        if language and self.kind == "ctc":
            log.warning(f"{key}_language={language} is not used: {folder} is a CTC model, which takes no language")

    def load(self) -> Transcriber:
        """Import transformers and load the model, tokenizer and feature extractor from the folder alone; a
        UserError naming the key when transformers cannot read them."""
        if self._pipe is not None:
            return self
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing of this process downloads from the Hub
        import torch

        # torch lists the tensor constructors a device context redirects once, at the first call made inside one;
        # transformers 5 loads under such a context with torch.linspace swapped for a wrapper, and a first call
        # there would list the wrapper: every later `with torch.device("meta")` (XTTS's strict load) would then
        # make linspace on the CPU. A call here lists torch's own functions first.
        with torch.device("cpu"):
            torch.empty(0)
        import transformers as tf

        tf.utils.logging.disable_progress_bar()  # its "Loading weights" bars in the run's log say nothing of use
        local = {"local_files_only": True, "trust_remote_code": False}
        model_class = tf.AutoModelForSpeechSeq2Seq if self.kind == "seq2seq" else tf.AutoModelForCTC
        try:
            model = model_class.from_pretrained(str(self.folder), use_safetensors=True, **local)
            tokenizer = tf.AutoTokenizer.from_pretrained(str(self.folder), **local)
            features = tf.AutoFeatureExtractor.from_pretrained(str(self.folder), **local)
            self._pipe = tf.pipeline(
                "automatic-speech-recognition",
                model=model,
                tokenizer=tokenizer,
                feature_extractor=features,
                device=self.device,
            )
        except Exception as exc:  # noqa: BLE001 - whatever the folder's files made transformers raise, in one line
            first = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
            why = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
            named = _named(self.key, self.folder)
            raise UserError(f"{named}: transformers could not load it as an ASR model ({why})") from None
        self.rate = int(features.sampling_rate)
        if self.kind == "seq2seq" and self.language:
            self._check_language(model)
        return self

    def _check_language(self, model: Any) -> None:
        """A UserError naming ``train.quality_asr_language`` (``--asr-language``) when the Whisper model does not
        know the language (its generation config's ``lang_to_id``; a code such as ``en`` or a name: ``english``)."""
        from transformers.models.whisper.tokenization_whisper import TO_LANGUAGE_CODE

        known = getattr(model.generation_config, "lang_to_id", None) or {}
        asked = str(self.language).lower()
        code = TO_LANGUAGE_CODE.get(asked, asked)
        if known and f"<|{code}|>" not in known:
            codes = ", ".join(sorted(t.strip("<|>") for t in known))
            key = "--asr-language" if self.key.startswith("--") else f"{self.key}_language"
            named = _named(key, self.language)
            raise UserError(f"{named}: not a language of the Whisper model {self.folder} ({codes})")

    def __call__(self, audio: np.ndarray, rate: int) -> str:
        """The transcript of ``audio`` (1-D, at ``rate``), resampled to the model's rate."""
        from speechtrain.quality.metrics import resample

        self.load()
        x = resample(np.clip(np.asarray(audio, dtype=np.float32).reshape(-1), -1.0, 1.0), int(rate), self.rate)
        kwargs: dict[str, Any] = {}
        if self.kind == "seq2seq" and self.language:
            kwargs["generate_kwargs"] = {"language": self.language, "task": "transcribe"}
        out = self._pipe({"raw": x, "sampling_rate": self.rate}, **kwargs)
        return str(out.get("text", "") if isinstance(out, dict) else out)
