"""``--format piper``: a VITS run as a Piper voice, ``NAME.onnx`` + ``NAME.onnx.json``.

The contract, read from Piper's runtime (the ``piper-tts`` package, ``piper/voice.py`` and ``config.py``):

- the graph takes ``input`` (1, T) int64 phoneme ids, ``input_lengths`` (1,), ``scales`` (3,) float32 =
  ``[noise_scale, length_scale, noise_w]`` and, when ``num_speakers > 1``, ``sid`` (1,); its first output
  is the audio (squeezed by the runtime);
- the runtime turns text into phonemes (``phoneme_type: espeak``: espeak-ng clauses with their punctuation,
  NFD-decomposed, one phoneme per code point; ``text``: the NFD code points of the text as typed), then
  into ids as ``id_map["^"] + id_map["_"] + (id_map[p] + id_map["_"] for each p) + id_map["$"]``;
- it reads ``audio.sample_rate``, ``espeak.voice``, ``phoneme_type``, ``phoneme_id_map``, ``num_symbols``,
  ``num_speakers``, ``speaker_id_map`` and ``inference`` (``noise_scale``, ``length_scale``, ``noise_w``).

A run trained with ``data.phonemizer=piper`` (:mod:`speechtrain.data.text.piper_text`) reads exactly these
ids: its symbols are Piper's phonemes and markers, produced by Piper's own code from the text as typed, so the
``phoneme_id_map`` is its symbol table (``^``, ``$`` and ``_`` each with one id, as Piper's trainer writes them
and as sherpa-onnx's ``add_meta_data.py`` indexes them). That is the format's contract: a run trained on other
ids (characters, speechtrain's espeak front end, VITS blanks without start/end ids) is refused before anything
is written, with the recipe change. The export then reads every check sentence through Piper's phonemizer and
id map and refuses when any gives other ids than the run trained on (listing them); it notes where Piper
(and so the run) reads a character otherwise than speechtrain's own front end would (Uzbek U+02BC, say).
"""

from __future__ import annotations

import logging
import tempfile
import unicodedata
import wave
from pathlib import Path
from typing import Any

import numpy as np
import torch

from speechtrain.errors import UserError
from speechtrain.export.common import (
    AUDIO_TOLERANCE,
    WAV_TOLERANCE,
    ExportCheck,
    ExportResult,
    compare,
    ort_session,
    require,
)
from speechtrain.export.job import ExportFormat, ExportJob

PAD, BOS, EOS = "_", "^", "$"  # Piper's markers (piper/const.py)
DEFAULT_SCALES = {"noise_scale": 0.667, "length_scale": 1.0, "noise_w": 0.8}  # VITSTask.synthesize's defaults
#: the config version Piper's own trainer writes (piper/train/vits/dataset.py, piper-tts 1.8.0)
PIPER_VERSION = "1.5.0"
SHOWN = 5  # sentences listed in a refusal


def piper_contract(model: Any, data: Any) -> list[str]:
    """What Piper's runtime reads: the ids of its own phonemizer and layout (see the module doc)."""
    if data.phonemizer == "piper":
        return []
    return [
        f"Piper reads text as its own espeak-ng phonemes, each sentence as ids of ^ _ p1 _ ... pn _ $ (sherpa-onnx "
        f"needs an id for ^ and $ too); this run trained on data.phonemizer={data.phonemizer} ids without start "
        "and end ids and after speechtrain's own normalisation, so Piper would give it other ids than it trained "
        "on: train it with data.phonemizer=piper model.add_blank=false (its best.pt stays usable in speechtrain "
        "itself: synthesize, rtf, init_from)"
    ]


def phoneme_id_map(task: Any) -> tuple[dict[str, list[int]], list[str]]:
    """Piper's ``phoneme_id_map`` of a ``data.phonemizer=piper`` run: every symbol with its one id, keyed as
    Piper looks it up (NFD code points); UserError when ``^``, ``$`` or ``_`` has no id or a symbol cannot be
    reached from text. Returns the map and notes."""
    tok = task.tokenizer
    ids: dict[str, list[int]] = {}
    unreachable = []
    for symbol in tok.symbols:
        key = unicodedata.normalize("NFD", symbol)
        if len(key) != 1:
            unreachable.append(symbol)
        else:
            ids[key] = tok.encode_symbols(symbol)
    missing = [m for m in (BOS, EOS, PAD) if m not in ids]
    if missing:
        raise UserError(
            f"--format piper: this run's symbols have no {' '.join(missing)}: Piper's id map needs one id each for "
            "^, $ and _ (its trainer writes them; sherpa-onnx indexes them); train with data.phonemizer=piper "
            "(its symbols carry them) and leave data.symbols unset"
        )
    notes = []
    if unreachable:
        notes.append(f"symbols {unreachable} decompose under NFD: Piper cannot produce their ids from text")
    return {m: ids.pop(m) for m in (PAD, BOS, EOS)} | ids, notes


def piper_config(job: ExportJob, id_map: dict[str, list[int]]) -> dict[str, Any]:
    """The ``.onnx.json`` as Piper's trainer writes it (``PiperConfig.to_dict``'s keys), ours under ``speechtrain``."""
    from speechtrain.data.text.piper_text import piper_voice

    task, data = job.task, job.data
    n_speakers = int(job.model.n_speakers) if int(job.model.n_speakers) > 1 else 1
    speakers = job.speakers if len(job.speakers) == n_speakers else [str(i) for i in range(n_speakers)]
    return {
        "audio": {"sample_rate": int(data.sample_rate)},
        "espeak": {"voice": piper_voice(str(data.language))},
        "language": {"code": str(data.language)},
        "phoneme_type": "espeak",
        "num_symbols": int(task.n_vocab),
        "num_speakers": n_speakers,
        "inference": dict(DEFAULT_SCALES),
        "phoneme_id_map": id_map,
        "speaker_id_map": {name: i for i, name in enumerate(speakers)} if n_speakers > 1 else {},
        "hop_length": int(data.hop_length),
        "default_speaker_id": 0,
        "piper_version": PIPER_VERSION,
        "dataset": job.name,
        "speechtrain": {
            "run_dir": str(job.run_dir),
            "step": job.step,
            "add_blank": bool(job.model.add_blank),
            "tokenizer": task.tokenizer.state_dict(),
        },
    }


def export_piper(job: ExportJob) -> ExportResult:
    """Write ``NAME.onnx`` and ``NAME.onnx.json`` and check them in onnxruntime and in ``piper-tts``."""
    task, result = job.task, job.result("piper")
    id_map, notes = phoneme_id_map(task)  # refused before anything is written
    graph = task.inference_graph()
    multi = bool(graph.multi_speaker)
    example = torch.tensor([task.token_ids(job.texts[0] if job.texts else "a")], dtype=torch.long)
    args: tuple[Any, ...] = (example, torch.tensor([example.shape[1]]), torch.tensor([0.0, 1.0, 0.0]))
    names = ["input", "input_lengths", "scales"] + (["sid"] if multi else [])
    if multi:
        args = (*args, torch.tensor([0]))
    onnx_path = job.files.write_onnx(
        f"{job.name}.onnx",
        graph,
        args,
        names,
        ["output"],
        {
            "input": {0: "batch_size", 1: "phonemes"},
            "input_lengths": {0: "batch_size"},
            "output": {0: "batch_size", 2: "time"},
        },
    )
    config = piper_config(job, id_map)
    job.files.write_json(f"{job.name}.onnx.json", config)
    add_sherpa_metadata(onnx_path, config)
    job.files.write_text("tokens.txt", sherpa_tokens(id_map))
    result.files, result.notes = list(job.files.written), notes
    if job.check:
        check_piper(job, onnx_path, result)
    return result


def sherpa_metadata(config: dict[str, Any]) -> dict[str, str]:
    """What sherpa-onnx reads from a Piper voice's ``.onnx`` (the keys its ``scripts/piper/add_meta_data.py`` writes:
    without them it refuses the file, and a user had to run that script on ours)."""
    return {
        "model_type": "vits",
        "comment": "piper",  # sherpa-onnx's switch to Piper's text path (espeak-ng phonemes, ^ _ $ ids)
        "language": str(config["language"]["code"]),
        "voice": str(config["espeak"]["voice"]),
        "has_espeak": "1",
        "n_speakers": str(config["num_speakers"]),
        "sample_rate": str(config["audio"]["sample_rate"]),
    }


def add_sherpa_metadata(onnx_path: Path, config: dict[str, Any]) -> None:
    """Write :func:`sherpa_metadata` into the graph's ``metadata_props`` (the file is rewritten in place: it is still
    in the export's temporary folder)."""
    onnx = require("onnx", "speechtrain export --format piper")
    model = onnx.load(str(onnx_path))
    del model.metadata_props[:]
    for key, value in sherpa_metadata(config).items():
        model.metadata_props.add(key=key, value=value)
    onnx.save(model, str(onnx_path))


def sherpa_tokens(id_map: dict[str, list[int]]) -> str:
    """``tokens.txt`` as sherpa-onnx reads it beside a Piper voice: ``symbol id`` per line (a newline symbol has no
    line of its own)."""
    return "".join(f"{symbol} {ids[0]}\n" for symbol, ids in id_map.items() if symbol != "\n")


def _piper_ids(voice: Any, text: str) -> tuple[list[int], int]:
    """Piper's ids for ``text`` (its phonemizer and our id map), its sentences chained as its trainer does, and
    the number of sentences it splits the text into."""
    sentences = [p for p in voice.phonemize(text) if p]
    return [i for p in sentences for i in voice.phonemes_to_ids(p)], len(sentences)


def check_text_path(job: ExportJob, voice: Any, result: ExportResult) -> list[str]:
    """Every check sentence through Piper's phonemizer and id map: UserError listing those whose ids differ
    from the ids the run reads; notes where speechtrain's own front end would have read the text otherwise.
    Returns the one-sentence texts (shortest and longest) for the spoken check."""
    task, single, differ = job.task, [], []
    with QuietLogger("piper"):  # piper logs every phoneme its map lacks; the refusal below lists them
        for text in job.texts:
            theirs, n = _piper_ids(voice, text)
            ours = task.token_ids(text)
            if theirs != ours:
                unseen = sorted({c for c in task.tokenizer.front_end(text) if task.tokenizer.unknown(c)})
                why = f"phonemes this run never saw: {unseen}" if unseen else f"{len(theirs)} vs {len(ours)} ids"
                differ.append(f"{text!r} ({why})")
            elif n == 1:
                single.append(text)
    if differ:
        raise UserError(
            f"--format piper: Piper reads {len(differ)} of {len(job.texts)} check sentences to other ids than this "
            f"run trained on: {'; '.join(differ[:SHOWN])}{' ...' if len(differ) > SHOWN else ''} (train on "
            "transcripts that have those phonemes, or check other sentences with --text)"
        )
    result.notes.append(
        f"text path: Piper reads all {len(job.texts)} check sentences to the ids this run trained on "
        f"({len(job.texts) - len(single)} of them as several sentences, chained as Piper's trainer does)"
    )
    result.notes += front_end_differences(job, voice)
    single.sort(key=lambda t: len(task.token_ids(t)))
    return list(dict.fromkeys([single[0], single[-1]])) if single else []


def front_end_differences(job: ExportJob, voice: Any) -> list[str]:
    """Sentences that Piper's espeak-ng reads otherwise than the text speechtrain's espeak front end would give it
    (language cleaners: Uzbek apostrophes and tutuq, Amharic numbers as words): a note with examples, the
    characters concerned and Piper's reading (the run was trained as Piper reads, so the ids agree)."""
    from speechtrain.data.text.frontend import TextFrontEnd, TextSettings
    from speechtrain.data.text.phonemize import espeak_input
    from speechtrain.data.text.piper_text import piper_voice

    ours = TextFrontEnd(TextSettings(str(job.data.language), "none", lowercase=False))
    espeak_voice = piper_voice(str(job.data.language))
    changed = []
    with QuietLogger("piper"):
        for text in job.texts:  # what data.phonemizer=espeak gives espeak-ng, against the text as typed
            normalised = espeak_input([ours.normalize(text).symbols], espeak_voice)[0]
            as_typed = "".join("".join(p) for p in voice.phonemize(text))
            if as_typed != "".join("".join(p) for p in voice.phonemize(normalised)):
                chars = ", ".join(f"U+{ord(c):04X} {c}" for c in sorted(set(text) - set(normalised)))
                changed.append(f"{text!r} ({chars or 'rewritten'}; Piper reads {as_typed!r})")
    if not changed:
        return []
    return [
        f"{len(changed)} of {len(job.texts)} check sentences are read by Piper otherwise than after speechtrain's "
        "own normalisation (this run was trained as Piper reads them; write such text as the voice's users will "
        "type it): " + "; ".join(changed[:SHOWN])
    ]


class QuietLogger:
    """A logger held at ERROR inside a ``with`` block."""

    def __init__(self, name: str) -> None:
        self.logger = logging.getLogger(name)
        self.level = self.logger.level

    def __enter__(self) -> None:
        self.level = self.logger.level
        self.logger.setLevel(logging.ERROR)

    def __exit__(self, *exc: object) -> None:
        self.logger.setLevel(self.level)


def check_piper(job: ExportJob, onnx_path: Path, result: ExportResult) -> None:
    """onnxruntime on our ids (the shortest and the longest check sentence) and ``piper-tts`` from text (two that
    it reads as we do), each beside ``task.synthesize`` with both noise scales 0; a multi-speaker run's second
    sentence is spoken by its last speaker."""
    piper = require("piper", "speechtrain export --format piper (its check)")
    task = job.task
    voice = piper.PiperVoice.load(str(onnx_path))
    session = ort_session(onnx_path)
    n_speakers = int(job.model.n_speakers) if int(job.model.n_speakers) > 1 else 1
    by_length = sorted(job.texts or ["a"], key=lambda t: len(task.token_ids(t)))
    for k, text in enumerate(dict.fromkeys([by_length[0], by_length[-1]])):
        speaker = (n_speakers - 1) if (n_speakers > 1 and k == 1) else 0
        ids = task.token_ids(text)
        out = session.run(None, _feed(ids, [0.0, 1.0, 0.0], speaker if n_speakers > 1 else None))[0]
        who = f", speaker {speaker}" if n_speakers > 1 else ""
        name = f"onnxruntime vs PyTorch, {len(ids)} ids{who}, noise 0"
        result.checks.append(compare(name, out, _reference(task, text, speaker), AUDIO_TOLERANCE))
    spoken = check_text_path(job, voice, result)
    if not spoken:
        result.notes.append("no check sentence is one sentence for Piper: the piper-tts WAV check was not run")
    for k, text in enumerate(spoken):
        speaker = (n_speakers - 1) if (n_speakers > 1 and k == 1) else 0
        who_id = speaker if n_speakers > 1 else None
        result.checks.append(_piper_wav_check(piper, voice, text, who_id, _reference(task, text, speaker)))
    result.checks += sherpa_checks(onnx_path, voice, job.texts[:2] or ["a"], task)
    if not any(c.name.startswith("sherpa-onnx") for c in result.checks):
        result.notes.append(
            "sherpa-onnx is not installed here: the voice was not checked in it (pip install sherpa-onnx)"
        )
    defaults = [DEFAULT_SCALES["noise_scale"], DEFAULT_SCALES["length_scale"], DEFAULT_SCALES["noise_w"]]
    noisy = session.run(None, _feed(task.token_ids(by_length[-1]), defaults, 0 if n_speakers > 1 else None))[0]
    if not np.isfinite(noisy).all() or noisy.size == 0:
        result.checks.append(ExportCheck("the graph with the default noise scales", float("inf"), 0.0, "no audio"))
    else:
        shown = ", ".join(f"{v:g}" for v in defaults)
        result.notes.append(f"with the default scales [{shown}] the graph speaks {noisy.size} samples (noise on)")


def sherpa_checks(onnx_path: Path, voice: Any, texts: list[str], task: Any) -> list[ExportCheck]:
    """sherpa-onnx, where installed, loads the ``.onnx`` as written (its metadata) with ``tokens.txt`` and speaks
    ``texts`` from Piper's phonemes (sherpa-onnx 2 takes the phonemes of an outside phonemizer for Piper voices: its
    ``phoneme_codepoints``), noise 0, each beside ``task.synthesize``; none where sherpa-onnx is absent."""
    try:
        import sherpa_onnx
    except ImportError:
        return []
    vits = sherpa_onnx.OfflineTtsVitsModelConfig(
        model=str(onnx_path), tokens=str(onnx_path.parent / "tokens.txt"), noise_scale=0.0, noise_scale_w=0.0
    )
    tts = sherpa_onnx.OfflineTts(
        sherpa_onnx.OfflineTtsConfig(model=sherpa_onnx.OfflineTtsModelConfig(vits=vits, num_threads=1))
    )
    checks = []
    for text in texts:
        gen = sherpa_onnx.GenerationConfig()
        with QuietLogger("piper"):
            gen.phoneme_codepoints = [[ord(c) for c in "".join(p)] for p in voice.phonemize(text) if p]
        spoken = np.asarray(tts.generate(text, gen).samples, dtype=np.float32)
        reference = np.clip(_reference(task, text, 0), -1.0, 1.0)
        checks.append(compare(f"sherpa-onnx from Piper's phonemes vs PyTorch, {text[:40]!r}", spoken, reference,
                              AUDIO_TOLERANCE))  # fmt: skip
    return checks


def _feed(ids: list[int], scales: list[float], speaker: int | None) -> dict[str, np.ndarray]:
    """The graph's inputs for one utterance (Piper's names)."""
    feed: dict[str, np.ndarray] = {
        "input": np.array([ids], dtype=np.int64),
        "input_lengths": np.array([len(ids)], dtype=np.int64),
        "scales": np.array(scales, dtype=np.float32),
    }
    if speaker is not None:
        feed["sid"] = np.array([speaker], dtype=np.int64)
    return feed


def _reference(task: Any, text: str, speaker: int) -> np.ndarray:
    """``task.synthesize`` with both noise scales 0: the deterministic part the graph must equal."""
    return task.synthesize(text, noise_scale=0.0, noise_scale_w=0.0, length_scale=1.0, speaker=speaker)


def _piper_wav_check(piper: Any, voice: Any, text: str, speaker: int | None, reference: np.ndarray) -> ExportCheck:
    """piper-tts speaks ``text`` to a 16-bit WAV (peak-normalised, its default); the reference is normalised alike."""
    syn = piper.SynthesisConfig(speaker_id=speaker, noise_scale=0.0, noise_w_scale=0.0, length_scale=1.0)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "piper.wav"
        with wave.open(str(path), "wb") as wav_file:
            voice.synthesize_wav(text, wav_file, syn_config=syn)
        with wave.open(str(path), "rb") as wav_file:
            frames = wav_file.readframes(wav_file.getnframes())
    spoken = np.frombuffer(frames, dtype=np.int16).astype(np.float32) / 32767.0
    peak = float(np.max(np.abs(reference))) or 1.0
    expected = np.clip(reference / peak, -1.0, 1.0)
    return compare(
        f"piper-tts from text to WAV vs PyTorch (peak-normalised), {text[:40]!r}", spoken, expected, WAV_TOLERANCE
    )


FORMAT = ExportFormat(
    key="piper",
    families=("vits",),
    runtime="piper-tts (onnxruntime)",
    summary="a Piper voice: NAME.onnx + NAME.onnx.json (a data.phonemizer=piper run: Piper's own phoneme ids)",
    run=export_piper,
    contract=piper_contract,
)
