"""Small corpora of real (robotic) speech in any language espeak-ng speaks, for tests and rehearsals.

``make_language_corpus(out, "uz")`` writes sentences of the language, spoken by espeak-ng (22050 Hz,
16-bit PCM), in a dataset layout people have: ``ljspeech`` (``metadata.csv`` + ``wavs/``) or ``xtts``
(``train.csv`` + ``eval.csv`` with the header ``audio_file|text|speaker_name``, voices as speakers).
:data:`SENTENCES` holds a dozen sentences each for ``en``, ``uz`` (Latin, with every apostrophe form
people type for oʻ gʻ and the tutuq belgisi), ``uz-Cyrl``, ``am`` (with Ethiopic punctuation and
numerals) and ``ru``; pass your own for any other voice.

espeak-ng comes from the ``espeakng-loader`` package (extra ``phonemes``); no system install.
"""

from __future__ import annotations

import ctypes
import os
import threading
import wave
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from speechtrain.errors import UserError

SAMPLE_RATE = 22050  # espeak-ng's own rate
_AUDIO_OUTPUT_SYNCHRONOUS = 2
_CHARS_UTF8 = 1

SENTENCES: dict[str, tuple[str, ...]] = {
    "en": (
        "The birch canoe slid on the smooth planks.",
        "Glue the sheet to the dark blue background.",
        "It is easy to tell the depth of a well.",
        "These days a chicken leg is a rare dish.",
        "Rice is often served in round bowls.",
        "The juice of lemons makes fine punch.",
        "The box was thrown beside the parked truck.",
        "Four hours of steady work faced us.",
        "A large size in stockings is hard to sell.",
        "What time does the train leave?",
        "The boy was there when the sun rose.",
        "Kick the ball straight and follow through!",
    ),
    "uz": (
        "Oʻzbekiston Markaziy Osiyodagi mustaqil davlat.",
        "Bugun havo juda issiq, lekin kechqurun salqin bo'ladi.",
        "Men har kuni ertalab choy ichaman.",
        "Bolalar maktabga piyoda borishadi.",
        "G‘alaba uchun hamma birga harakat qildi.",
        "Toshkent shahri katta va chiroyli.",
        "Maʼno va mazmun bir narsa emas.",
        "Qishloqda odamlar erta turishadi.",
        "Kitob o’qish foydali odat.",
        "Soat nechada uchrashamiz?",
        "Daryo bo`yida baland daraxtlar oʻsadi.",
        "Bu yil hosil juda mo'l bo'ldi!",
        "San'at va madaniyat xalqning boyligi.",
        "Men oʻzbek tilini oʻrganyapman.",
    ),
    "uz-Cyrl": (
        "Ўзбекистон Марказий Осиёдаги мустақил давлат.",
        "Бугун ҳаво жуда иссиқ, лекин кечқурун салқин бўлади.",
        "Мен ҳар куни эрталаб чой ичаман.",
        "Болалар мактабга пиёда боришади.",
        "Ғалаба учун ҳамма бирга ҳаракат қилди.",
        "Тошкент шаҳри катта ва чиройли.",
        "Маъно ва мазмун бир нарса эмас.",
        "Қишлоқда одамлар эрта туришади.",
        "Китоб ўқиш фойдали одат.",
        "Соат нечада учрашамиз?",
        "Дарё бўйида баланд дарахтлар ўсади.",
        "Бу йил ҳосил жуда мўл бўлди!",
    ),
    "am": (
        "ሰላም፡ እንዴት ነህ፧",
        "ኢትዮጵያ በምሥራቅ አፍሪካ የምትገኝ አገር ናት።",
        "ዛሬ አየሩ በጣም ጥሩ ነው።",
        "ልጆቹ ወደ ትምህርት ቤት ሄዱ።",
        "አዲስ አበባ የኢትዮጵያ ዋና ከተማ ናት።",
        "ቡና መጠጣት እወዳለሁ።",
        "በ፲፱፻፺፭ ዓመት ተወለደ።",
        "መጽሐፍ ማንበብ ጠቃሚ ልማድ ነው።",
        "ጓደኛዬ ነገ ይመጣል፣ ከዚያም አብረን እንሄዳለን።",
        "ቋንቋ የሕዝብ ሀብት ነው።",
        "ገበሬዎቹ በማለዳ ወደ እርሻ ይሄዳሉ።",
        "ዋጋው 25 ብር ነው።",
    ),
    "ru": (
        "Сегодня хорошая погода.",
        "Дети идут в школу пешком.",
        "Москва большой и красивый город.",
        "Я люблю читать книги по вечерам.",
        "Который час?",
        "Река течёт медленно и спокойно.",
        "Мы встретимся завтра утром.",
        "Этот дом построили давно.",
    ),
}

_lock = threading.Lock()
_lib: Any = None
_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.c_void_p)
_chunks: list[np.ndarray] = []


@_CALLBACK
def _collect(wav: Any, n: int, events: Any) -> int:
    if n > 0:
        _chunks.append(np.ctypeslib.as_array(wav, shape=(n,)).copy())
    return 0


def _espeak() -> Any:
    """espeak-ng from espeakng-loader, started once for synchronous synthesis."""
    global _lib
    if _lib is None:
        try:
            import espeakng_loader
        except ImportError:
            from speechtrain.data.text.phonemize import INSTALL_HINT

            raise UserError(f"speaking a corpus needs espeak-ng: {INSTALL_HINT}") from None
        lib = ctypes.CDLL(espeakng_loader.get_library_path())
        rate = lib.espeak_Initialize(_AUDIO_OUTPUT_SYNCHRONOUS, 0, espeakng_loader.get_data_path().encode(), 0)
        if rate != SAMPLE_RATE:
            raise UserError(f"espeak-ng did not start (espeak_Initialize returned {rate})")
        lib.espeak_SetSynthCallback(_collect)
        _lib = lib
    return _lib


def say(text: str, voice: str) -> np.ndarray:
    """``text`` spoken by espeak-ng's ``voice`` (``uz``, ``am``, ``en-us``, ``uz+f3`` for a variant):
    int16 samples at 22050 Hz."""
    with _lock:
        lib = _espeak()
        if lib.espeak_SetVoiceByName(voice.encode()) != 0:
            raise UserError(f"espeak-ng has no voice {voice!r}")
        _chunks.clear()
        raw = text.encode() + b"\0"
        lib.espeak_Synth(raw, len(raw), 0, 0, 0, _CHARS_UTF8, None, None)
        lib.espeak_Synchronize()
        audio = np.concatenate(_chunks) if _chunks else np.zeros(0, dtype=np.int16)
        _chunks.clear()
    return audio.astype(np.int16)


def _write_wav(path: Path, pcm: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(SAMPLE_RATE)
        w.writeframes(np.ascontiguousarray(pcm, dtype="<i2").tobytes())


def _spoken_form(text: str, language: str) -> str:
    """What espeak-ng is given: its Uzbek voice reads Latin with ``'``."""
    from speechtrain.data.text.phonemize import espeak_input

    return espeak_input([text], "uz")[0] if language.lower().startswith("uz") else text


def make_language_corpus(
    out: str | os.PathLike[str],
    language: str,
    sentences: Sequence[str] | None = None,
    *,
    layout: str = "ljspeech",
    voices: Sequence[str] = ("",),
    eval_count: int = 2,
) -> Path:
    """Write ``sentences`` (default :data:`SENTENCES` of ``language``) spoken by espeak-ng to ``out``.

    ``voices``: espeak variants, one speaker each (``""`` the plain voice, ``"+f3"`` a female one);
    the sentences go round the voices. ``layout``: ``ljspeech`` or ``xtts`` (the last ``eval_count``
    sentences in ``eval.csv``). Returns ``out``."""
    from speechtrain.data.text.phonemize import espeak_voice

    if sentences is None:
        if language not in SENTENCES:
            raise UserError(f"no built-in sentences for {language!r} (have {', '.join(SENTENCES)}); pass sentences")
        sentences = SENTENCES[language]
    if layout not in ("ljspeech", "xtts"):
        raise ValueError(f"layout must be ljspeech or xtts, got {layout!r}")
    out = Path(out)
    voice = espeak_voice(language)
    rows: list[tuple[str, str, str]] = []  # (id, text, speaker)
    for i, text in enumerate(sentences):
        variant = voices[i % len(voices)]
        uid = f"{language.replace('-', '_')}_{i + 1:04d}"
        _write_wav(out / "wavs" / f"{uid}.wav", say(_spoken_form(text, language), voice + variant))
        rows.append((uid, text, f"spk{voices.index(variant)}"))
    if layout == "ljspeech":
        lines = [f"{uid}|{text}|{text}\n" for uid, text, _ in rows]
        (out / "metadata.csv").write_text("".join(lines), encoding="utf-8")
    else:
        header = "audio_file|text|speaker_name\n"
        split = len(rows) - eval_count
        for name, part in (("train.csv", rows[:split]), ("eval.csv", rows[split:])):
            body = "".join(f"wavs/{uid}.wav|{text}|{spk}\n" for uid, text, spk in part)
            (out / name).write_text(header + body, encoding="utf-8")
    return out
