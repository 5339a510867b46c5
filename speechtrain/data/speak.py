"""Speech corpora spoken by espeak-ng, in any language it has a voice for: for tests and rehearsals.

espeak-ng is a formant synthesiser: robotic, but the real phonetics of the language, read from its own
script, with no model weights to download. ``make_language_corpus(out, "uz")`` writes sentences of the
language (22050 Hz, 16-bit PCM) in a dataset layout people have: ``ljspeech`` (``metadata.csv`` +
``wavs/``) or ``xtts`` (``train.csv`` + ``eval.csv`` with the header ``audio_file|text|speaker_name``,
voices as speakers). Rate and pitch vary per utterance, seeded.

The texts: :data:`SENTENCES` holds a dozen hand-written sentences each for ``en``, ``uz`` (Latin, with
every apostrophe form people type for oʻ gʻ and the tutuq belgisi), ``uz-Cyrl``, ``am`` (with Ethiopic
punctuation and numerals) and ``ru``; ``utterances=N`` asks for N utterances instead (more than a
language has: for English and Uzbek different sentences drawn, seeded, from a word list by
:func:`drawn_sentences`, so that a recogniser or a voice is scored on texts it never trained on; for Amharic
from a small lexicon by :func:`amharic_sentences`; for the others the sentences again, each reading in
another voice, rate or pitch); pass your own ``sentences`` for any other voice.

espeak-ng comes from the ``espeakng-loader`` wheel (a dependency of the default install), driven through
ctypes in synchronous mode: no system install.
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
_RATE, _PITCH = 1, 3  # espeak_PARAMETER
INSTALL_HINT = "pip install espeakng-loader (a dependency of speechtrain: pip install -e . puts it back)"

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

# word lists for drawn sentences past the built-in dozen (:func:`drawn_sentences`): each template's {kind} is
# filled with a word of that kind; together they use every letter of the language's alphabet, so that a corpus of
# N utterances has N different texts and a recogniser trained on part of it is scored on texts it never heard
ENGLISH_WORDS: dict[str, tuple[str, ...]] = {
    "subject": (
        "the old man",
        "my sister",
        "a young girl",
        "the farmer",
        "our teacher",
        "the small dog",
        "his brother",
        "the driver",
        "a tall woman",
        "the children",
        "her father",
        "the cook",
        "my friend",
        "the sailor",
        "the quiet boy",
        "the judge",
        "a jolly baker",
        "the weaver",
    ),
    "verb": (
        "found",
        "painted",
        "carried",
        "bought",
        "opened",
        "cleaned",
        "fixed",
        "sold",
        "watched",
        "lifted",
        "dropped",
        "pushed",
        "moved",
        "washed",
        "kept",
        "took",
        "brought",
        "packed",
        "left",
        "hid",
    ),
    "object": (
        "a red box",
        "the wooden chair",
        "six green cups",
        "the heavy bag",
        "a bright lamp",
        "the blue jacket",
        "two fresh loaves",
        "the broken gate",
        "a warm quilt",
        "the zinc bucket",
        "a jar of jam",
        "the velvet hat",
        "five yellow pears",
        "the old map",
        "a sharp knife",
        "the copper kettle",
        "nine plums",
        "the wax candle",
    ),
    "place": (
        "near the river",
        "in the kitchen",
        "by the window",
        "at the market",
        "behind the barn",
        "under the bridge",
        "on the quiet street",
        "across the field",
        "inside the van",
        "at the station",
        "beside the fence",
        "in the garden",
    ),
    "time": (
        "this morning",
        "last night",
        "before lunch",
        "after the storm",
        "on Sunday",
        "every week",
        "at dawn",
        "in the evening",
        "just now",
        "yesterday",
        "in the spring",
        "at noon",
    ),
}
ENGLISH_TEMPLATES = (
    "{Subject} {verb} {object} {place}.",
    "{Time}, {subject} {verb} {object}.",
    "{Subject} {verb} {object} {place} {time}.",
    "Who {verb} {object} {place}?",
    "{Subject} {verb} {object} {time}.",
    "{Place}, {subject} {verb} {object}!",
)
# Uzbek (Latin): subject, time, place, object (accusative), verb (third person, past)
UZBEK_WORDS: dict[str, tuple[str, ...]] = {
    "subject": (
        "bola",
        "onam",
        "otam",
        "akam",
        "opam",
        "o'qituvchi",
        "dehqon",
        "do'stim",
        "qo'shnimiz",
        "shifokor",
        "haydovchi",
        "qiz",
        "bobom",
        "buvim",
        "talaba",
        "oshpaz",
    ),
    "time": (
        "bugun",
        "ertaga",
        "kecha",
        "ertalab",
        "kechqurun",
        "har kuni",
        "hozir",
        "tushda",
        "yozda",
        "qishda",
        "shanba kuni",
        "bir soatdan keyin",
    ),
    "place": (
        "uyda",
        "bozorda",
        "maktabda",
        "dalada",
        "shaharda",
        "daryo bo'yida",
        "bog'da",
        "ko'chada",
        "oshxonada",
        "qishloqda",
        "vokzalda",
        "javon yonida",
    ),
    "object": (
        "kitobni",
        "nonni",
        "suvni",
        "xatni",
        "olmani",
        "choyni",
        "gazetani",
        "eshikni",
        "daftarni",
        "go'shtni",
        "gullarni",
        "mashinani",
        "qog'ozni",
        "sabzini",
        "yangi ko'ylakni",
        "ruchkani",
        "vazani",
        "jo'jalarni",
        "zaytunni",
        "shapkani",
    ),
    "verb": (
        "o'qidi",
        "oldi",
        "yozdi",
        "ko'rdi",
        "ochdi",
        "yopdi",
        "tozaladi",
        "sotdi",
        "olib keldi",
        "yuvdi",
        "pishirdi",
        "qidirdi",
        "berdi",
        "tashladi",
        "topdi",
        "chizdi",
    ),
}
UZBEK_TEMPLATES = (
    "{Subject} {time} {place} {object} {verb}.",
    "{Time} {subject} {object} {verb}.",
    "{Subject} {place} {object} {verb}.",
    "{Subject} {time} {object} {verb}mi?",
    "{Place} {subject} {object} {verb}!",
)
LEXICONS: dict[str, tuple[dict[str, tuple[str, ...]], tuple[str, ...]]] = {
    "en": (ENGLISH_WORDS, ENGLISH_TEMPLATES),
    "uz": (UZBEK_WORDS, UZBEK_TEMPLATES),
}

_lock = threading.Lock()
_lib: Any = None
_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.c_void_p)
_chunks: list[np.ndarray] = []
_voice: list[str] = [""]  # the voice set last


@_CALLBACK
def _collect(wav: Any, n: int, events: Any) -> int:
    if n > 0:
        _chunks.append(np.ctypeslib.as_array(wav, shape=(n,)).copy())
    return 0  # go on


def _data_path() -> str:
    try:
        import espeakng_loader
    except ImportError:
        raise UserError(f"speaking a corpus needs the espeak-ng library: {INSTALL_HINT}") from None
    return str(espeakng_loader.get_data_path())


def _espeak() -> Any:
    """espeak-ng from espeakng-loader, started once for synchronous synthesis into a Python buffer."""
    global _lib
    if _lib is None:
        data_path = _data_path()
        import espeakng_loader

        lib = ctypes.CDLL(espeakng_loader.get_library_path())
        lib.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
        rate = lib.espeak_Initialize(_AUDIO_OUTPUT_SYNCHRONOUS, 0, data_path.encode(), 0)
        if rate != SAMPLE_RATE:
            raise UserError(f"espeak-ng did not start (espeak_Initialize returned {rate}; data in {data_path})")
        lib.espeak_SetSynthCallback(_collect)
        lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
        lib.espeak_SetParameter.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int]
        _lib = lib
    return _lib


def voice_of(language: str) -> str:
    """The espeak-ng voice for a BCP-47 code (``en`` -> ``en-us``, ``uz-Cyrl`` -> ``uz``, ``am`` -> ``am``);
    UserError naming the voices folder when espeak-ng has none."""
    from speechtrain.data.text.phonemize import VOICE_OF

    code = language.lower().replace("_", "-")
    base = code.split("-")[0]
    candidates = [c for c in (VOICE_OF.get(code), code, VOICE_OF.get(base), base) if c]
    with _lock:
        lib = _espeak()
        for candidate in candidates:
            if lib.espeak_SetVoiceByName(candidate.encode()) == 0:
                _voice[0] = candidate
                return candidate
    raise UserError(
        f"espeak-ng has no voice for {language!r} (tried {', '.join(dict.fromkeys(candidates))}; its voices are "
        f"in {Path(_data_path()) / 'lang'}); pass --language with one of them"
    )


def say(text: str, voice: str, rate_wpm: int | None = None, pitch: int | None = None) -> np.ndarray:
    """``text`` spoken by espeak-ng's ``voice`` (``uz``, ``am``, ``en-us``, ``uz+f3`` for a variant), at
    ``rate_wpm`` words per minute and ``pitch`` (0-100) when given: int16 samples at 22050 Hz."""
    with _lock:
        lib = _espeak()
        if _voice[0] != voice or rate_wpm is None or pitch is None:  # a voice resets rate and pitch
            if lib.espeak_SetVoiceByName(voice.encode()) != 0:
                raise UserError(f"espeak-ng has no voice {voice!r} (its voices: {Path(_data_path()) / 'lang'})")
            _voice[0] = voice
        if rate_wpm is not None:
            lib.espeak_SetParameter(_RATE, int(rate_wpm), 0)
        if pitch is not None:
            lib.espeak_SetParameter(_PITCH, int(pitch), 0)
        _chunks.clear()
        raw = text.encode("utf-8") + b"\0"
        if lib.espeak_Synth(raw, len(raw), 0, 0, 0, _CHARS_UTF8, None, None) != 0:
            raise UserError(f"espeak-ng could not speak {text!r}")
        lib.espeak_Synchronize()
        audio = np.concatenate(_chunks) if _chunks else np.zeros(0, dtype=np.int16)
        _chunks.clear()
    return audio.astype(np.int16)


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


def drawn_sentences(language: str, count: int, seed: int = 0, avoid: Sequence[str] = ()) -> list[str]:
    """``count`` different seeded sentences of ``language`` (one with a :data:`LEXICONS` entry), none in ``avoid``:
    a template filled with a word of each kind, capitalised where the template's name is (``{Subject}``)."""
    if language not in LEXICONS:
        raise UserError(f"no word list for {language!r} (have {', '.join(LEXICONS)})")
    words, templates = LEXICONS[language]
    rng = np.random.default_rng([seed, 11])
    seen: set[str] = set(avoid)
    out: list[str] = []
    for _ in range(count * 50):  # a draw repeats a sentence now and then: far more tries than that needs
        if len(out) == count:
            break
        template = templates[int(rng.integers(len(templates)))]
        fill = {}
        for kind, options in words.items():
            word = options[int(rng.integers(len(options)))]
            fill[kind], fill[kind.capitalize()] = word, word[:1].upper() + word[1:]
        text = template.format(**fill)
        if text not in seen:
            seen.add(text)
            out.append(text)
    if len(out) < count:
        raise UserError(f"the {language} word list gives only {len(out)} different sentences; ask for fewer")
    return out


def corpus_sentences(language: str, utterances: int | None = None, seed: int = 0) -> list[str]:
    """The built-in texts of ``language``: its :data:`SENTENCES` (``utterances``: the first N of them). More than it
    has: for a language with a word list (:data:`LEXICONS`: English, Uzbek) the rest are different sentences drawn
    from it (:func:`drawn_sentences`), for Amharic any number from :func:`amharic_sentences`, for the others the
    sentences again, in order, as many times as it takes (each read in another voice, rate or pitch)."""
    if utterances is not None and utterances < 1:
        raise UserError(f"--utterances must be >= 1, got {utterances}")
    if language == "am" and utterances is not None and utterances > len(SENTENCES["am"]):
        return amharic_sentences(utterances, seed)
    if language not in SENTENCES:
        raise UserError(
            f"no built-in sentences for {language!r} (have {', '.join(SENTENCES)}): pick one of those, or give your "
            f"own texts from Python: speechtrain.data.speak.make_language_corpus(OUT, {language!r}, sentences=[...])"
        )
    have = list(SENTENCES[language])
    if utterances is not None and utterances > len(have):
        if language in LEXICONS:
            return have + drawn_sentences(language, utterances - len(have), seed, avoid=have)
        return [have[i % len(have)] for i in range(utterances)]  # read again: make_language_corpus varies each reading
    return have[:utterances]


def _write_wav(path: Path, pcm: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with wave.open(str(tmp), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(SAMPLE_RATE)
        w.writeframes(np.ascontiguousarray(pcm, dtype="<i2").tobytes())
    os.replace(tmp, path)


def _spoken_form(text: str, language: str) -> str:
    """What espeak-ng is given: its Uzbek voice reads Latin with ``'``."""
    from speechtrain.data.text.phonemize import espeak_input

    return espeak_input([text], "uz")[0] if language.lower().startswith("uz") else text


def _new_reading(rng: np.random.Generator, variant: str, heard: set[tuple[str, int, int]]) -> tuple[int, int]:
    """A rate (140-190 wpm) and pitch (35-65) that this sentence was not yet read with in ``variant``."""
    while True:
        rate, pitch = int(rng.integers(140, 191)), int(rng.integers(35, 66))
        if (variant, rate, pitch) not in heard:
            heard.add((variant, rate, pitch))
            return rate, pitch


def make_language_corpus(
    out: str | os.PathLike[str],
    language: str,
    sentences: Sequence[str] | None = None,
    *,
    utterances: int | None = None,
    seed: int = 0,
    layout: str = "ljspeech",
    voices: Sequence[str] = ("",),
    eval_count: int = 2,
) -> Path:
    """Write ``sentences`` (default :func:`corpus_sentences` of ``language``) spoken by espeak-ng to ``out``
    (ids ``<language>_0001`` ...).

    ``voices``: espeak variants, one speaker each (``""`` the plain voice, ``"+f3"`` a female one); the
    sentences go round the voices. Rate (140-190 wpm) and pitch (35-65) vary per utterance, seeded by
    ``seed``; a sentence listed more than once is read each time in another voice, rate or pitch.
    ``layout``: ``ljspeech`` or ``xtts`` (the last ``eval_count`` sentences in ``eval.csv``).
    Returns ``out``."""
    texts = list(sentences) if sentences is not None else corpus_sentences(language, utterances, seed)
    if not texts:
        raise UserError("make_language_corpus: no sentences")
    if layout not in ("ljspeech", "xtts"):
        raise UserError(f"layout must be ljspeech or xtts, got {layout!r}")
    out = Path(out)
    voice = voice_of(language)
    rng = np.random.default_rng([seed, 7])
    rows: list[tuple[str, str, str]] = []  # (id, text, speaker)
    readings: dict[str, set[tuple[str, int, int]]] = {}  # text -> (voice, rate, pitch) it was read with
    for i, text in enumerate(texts):
        heard = readings.setdefault(text, set())
        variant = voices[(i + len(heard)) % len(voices)]  # a repeated sentence goes to the next voice
        uid = f"{language.replace('-', '_')}_{i + 1:04d}"
        rate, pitch = _new_reading(rng, variant, heard)
        pcm = say(_spoken_form(text, language), voice + variant, rate, pitch)
        if pcm.size == 0:
            raise UserError(f"espeak-ng produced no audio for {text!r} ({language})")
        _write_wav(out / "wavs" / f"{uid}.wav", pcm)
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
