"""Speech corpora spoken by espeak-ng, in any of its languages (Amharic ``am`` for the XTTS rehearsal).

espeak-ng is a formant synthesiser: robotic, but real phonetics of the language, from its own text in its
own script, with no model weights to download. ``make_espeak_corpus(out, "am")`` writes an LJSpeech-layout
corpus (``metadata.csv`` + ``wavs/*.wav``, 22050 Hz 16-bit) of seeded sentences drawn from a small word
list of the language (Amharic built in; other languages take ``sentences=``), spoken at varied rates and
pitches. The library comes from the ``espeakng-loader`` wheel (``pip install 'speechtrain[espeak]'``),
driven through ctypes in synchronous mode.
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from speechtrain.errors import UserError

SAMPLE_RATE = 22050  # espeak-ng's output rate

# a small Amharic lexicon (Ge'ez script): subjects, objects/places, modifiers and verbs; sentences end in ።
AMHARIC_WORDS: dict[str, tuple[str, ...]] = {
    "subject": ("እኔ", "አንተ", "እሷ", "እሱ", "እኛ", "ልጁ", "እናቴ", "አባቴ", "ወንድሜ", "እህቴ", "መምህሩ", "ገበሬው"),
    "object": (
        "ቡና",
        "ውሃ",
        "ዳቦ",
        "ምግብ",
        "መጽሐፍ",
        "ደብዳቤ",
        "ቤቱን",
        "ገበያ",
        "ትምህርት ቤት",
        "አዲስ አበባ",
        "ከተማውን",
        "ወንዙን",
        "ተራራውን",
        "አበባውን",
        "ዛፉን",
    ),
    "modifier": ("ዛሬ", "ነገ", "ትላንት", "በጣም", "ቶሎ", "ቀስ ብሎ", "ጠዋት", "ማታ", "ሁልጊዜ", "አሁን", "በደስታ"),
    "verb": ("ሄደ", "መጣ", "በላ", "ጠጣ", "አየ", "ወደደ", "ጻፈ", "አነበበ", "ገዛ", "ሰራ", "ተመለሰ", "ተኛ"),
    "adjective": ("ትልቅ", "ትንሽ", "አዲስ", "አሮጌ", "ቆንጆ", "ጥሩ", "ሞቃት", "ቀዝቃዛ"),
}

_lock = threading.Lock()
_state: dict[str, Any] = {}


def require_espeak() -> tuple[str, str]:
    """Paths of the espeak-ng library and its data (UserError with the install command when absent)."""
    try:
        import espeakng_loader
    except ImportError:
        raise UserError(
            "espeak-ng corpora need the espeak-ng library from the `espeakng-loader` wheel: "
            "pip install 'speechtrain[espeak]' (or: pip install espeakng-loader)"
        ) from None
    return str(espeakng_loader.get_library_path()), str(espeakng_loader.get_data_path())


def _engine() -> Any:
    """The library, initialised once for synchronous synthesis into a Python buffer."""
    if "lib" in _state:
        return _state["lib"]
    lib_path, data_path = require_espeak()
    lib = ctypes.CDLL(lib_path)
    callback_type = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.c_void_p)

    def on_audio(wav: Any, count: int, events: Any) -> int:
        if count > 0:
            _state["chunks"].append(np.ctypeslib.as_array(wav, shape=(count,)).copy())
        return 0  # go on

    callback = callback_type(on_audio)
    lib.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
    rate = lib.espeak_Initialize(2, 0, data_path.encode(), 0)  # AUDIO_OUTPUT_SYNCHRONOUS
    if rate <= 0:
        raise UserError(f"espeak-ng did not start (data folder {data_path})")
    lib.espeak_SetSynthCallback(callback)
    lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
    lib.espeak_SetParameter.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int]
    lib.espeak_Synth.argtypes = [
        ctypes.c_char_p,
        ctypes.c_size_t,
        ctypes.c_uint,
        ctypes.c_int,
        ctypes.c_uint,
        ctypes.c_uint,
        ctypes.c_void_p,
        ctypes.c_void_p,
    ]
    _state.update(lib=lib, callback=callback, rate=rate, chunks=[], voice=None)  # the callback must stay alive
    return lib


def espeak_voices_dir() -> Path:
    """The espeak-ng data folder (its ``lang/`` holds the voices)."""
    return Path(require_espeak()[1])


def has_voice(language: str) -> bool:
    """Whether espeak-ng has a voice for ``language`` (e.g. ``am``)."""
    lang = espeak_voices_dir() / "lang"
    return any(p.name == language for p in lang.rglob("*") if p.is_file())


def speak(text: str, language: str, rate_wpm: int = 160, pitch: int = 50) -> np.ndarray:
    """``text`` spoken by espeak-ng in ``language``: int16 samples at 22050 Hz."""
    with _lock:
        lib = _engine()
        if _state["voice"] != language:
            if lib.espeak_SetVoiceByName(language.encode()) != 0:
                raise UserError(f"espeak-ng has no voice '{language}' (voices: {espeak_voices_dir() / 'lang'})")
            _state["voice"] = language
        lib.espeak_SetParameter(1, int(rate_wpm), 0)  # espeakRATE, absolute
        lib.espeak_SetParameter(3, int(pitch), 0)  # espeakPITCH, absolute
        _state["chunks"] = []
        data = text.encode("utf-8") + b"\0"
        flags = 0x1 | 0x1000  # espeakCHARS_UTF8 | espeakENDPAUSE
        if lib.espeak_Synth(data, len(data), 0, 0, 0, flags, None, None) != 0:
            raise UserError(f"espeak-ng could not speak {text!r}")
        lib.espeak_Synchronize()
        chunks = _state["chunks"]
    return np.concatenate(chunks).astype(np.int16) if chunks else np.zeros(0, dtype=np.int16)


def amharic_sentences(count: int, seed: int = 0) -> list[str]:
    """``count`` seeded Amharic sentences from :data:`AMHARIC_WORDS` (subject, modifier, [adjective] object,
    verb; some joined by ``፣`` and ``እና``), each ending in ``።``."""
    rng = np.random.default_rng(seed)
    w = AMHARIC_WORDS

    def pick(kind: str) -> str:
        return str(w[kind][int(rng.integers(len(w[kind])))])

    def clause() -> str:
        words = [pick("subject"), pick("modifier")]
        if rng.random() < 0.4:
            words.append(pick("adjective"))
        words += [pick("object"), pick("verb")]
        return " ".join(words)

    out = []
    for _ in range(count):
        text = clause()
        if rng.random() < 0.35:
            text += "፣ " + ("እና " if rng.random() < 0.5 else "") + clause()
        out.append(text + "።")
    return out


def make_espeak_corpus(
    out: str | os.PathLike[str],
    language: str = "am",
    utterances: int = 40,
    seed: int = 0,
    sentences: Sequence[str] | None = None,
) -> Path:
    """Write an LJSpeech-layout corpus spoken by espeak-ng to ``out`` (ids ``ES<lang>-0001`` ...).

    ``sentences``: the texts (default: :func:`amharic_sentences` for ``am``; other languages must pass them).
    Rate (140-190 wpm) and pitch (35-65) vary per utterance, seeded. Returns ``out``."""
    import soundfile as sf

    if sentences is None:
        if language != "am":
            raise UserError(f"make_espeak_corpus: pass sentences= for language '{language}' (built in: am)")
        sentences = amharic_sentences(utterances, seed)
    if not sentences:
        raise UserError("make_espeak_corpus: no sentences")
    out = Path(out)
    wavs = out / "wavs"
    wavs.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng([seed, 7])
    lines = []
    for i, text in enumerate(sentences):
        uid = f"ES{language}-{i + 1:04d}"
        pcm = speak(text, language, int(rng.integers(140, 191)), int(rng.integers(35, 66)))
        if pcm.size == 0:
            raise UserError(f"espeak-ng produced no audio for {text!r} ({language})")
        tmp = wavs / f"{uid}.wav.tmp"
        sf.write(tmp, pcm, SAMPLE_RATE, subtype="PCM_16", format="WAV")
        os.replace(tmp, wavs / f"{uid}.wav")
        lines.append(f"{uid}|{text}|{text}\n")
    (out / "metadata.csv").write_text("".join(lines), encoding="utf-8")
    return out
