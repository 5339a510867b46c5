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

Our VITS reads ``_ s1 _ s2 ... sn _`` (``model.add_blank``: the pad id around every symbol) without start
or end markers, so the id map gives ``_`` the pad id (nothing without blanks) and ``^`` and ``$`` no id at
all: Piper then builds exactly our sequence. Each symbol is keyed by its NFD form (the runtime decomposes);
a run that lower-cases its text also maps the upper-case letters to the lower-case ids (Piper's text mode
does not lower-case). What our front end rewrites by context (Uzbek apostrophes between letters, number
words) has no place in a per-phoneme map: the export measures how many of the run's own transcripts
Piper reads to the same ids and says which differ.
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


def phoneme_id_map(task: Any) -> tuple[dict[str, list[int]], list[str]]:
    """Piper's ``phoneme_id_map`` that rebuilds the ids our VITS reads, and notes on symbols it cannot reach."""
    tok, add_blank = task.tokenizer, bool(task.cfg.add_blank)
    ids: dict[str, list[int]] = {PAD: [tok.pad_id] if add_blank else [], BOS: [], EOS: []}
    notes: list[str] = []
    decomposed, clashing = [], []
    symbol_ids = {s: tok.encode_symbols(s)[0] for s in tok.symbols}
    for symbol, i in symbol_ids.items():
        key = unicodedata.normalize("NFD", symbol)
        if len(key) != 1:
            decomposed.append(symbol)
        elif key in (PAD, BOS, EOS):
            clashing.append(symbol)
        else:
            ids[key] = [i]
    if tok.settings.phonemizer == "none":  # Piper reads the typed characters: each as our front end reads it
        for char in {c for s in tok.symbols for c in (s, s.upper(), s.lower())}:
            key, read = unicodedata.normalize("NFD", char), tok.front_end.normalize(char).symbols
            if len(key) == 1 and key not in (PAD, BOS, EOS) and len(read) == 1 and read in symbol_ids:
                ids[key] = [symbol_ids[read]]  # "H" of a lower-casing run is "h"
    if decomposed:
        notes.append(
            f"symbols {decomposed} decompose under NFD (Piper's runtime splits them into base + mark): "
            "Piper cannot produce their ids from text"
        )
    if clashing:
        notes.append(f"symbols {clashing} are Piper's pad/start/end markers: Piper reads them as markers")
    return ids, notes


def espeak_voice_of(data: Any) -> str:
    """The espeak-ng voice the run's phonemes came from (the language code for a text run)."""
    if data.phonemizer == "espeak":
        from speechtrain.data.text.phonemize import espeak_voice

        return espeak_voice(data.language)
    return str(data.language).lower().replace("_", "-").split("-")[0]


def piper_config(job: ExportJob, id_map: dict[str, list[int]]) -> dict[str, Any]:
    """The ``.onnx.json`` Piper's runtime reads (and what we add under ``speechtrain``)."""
    task, data = job.task, job.data
    n_speakers = int(job.model.n_speakers) if int(job.model.n_speakers) > 1 else 1
    speakers = job.speakers if len(job.speakers) == n_speakers else [str(i) for i in range(n_speakers)]
    return {
        "audio": {"sample_rate": int(data.sample_rate)},
        "espeak": {"voice": espeak_voice_of(data)},
        "language": {"code": str(data.language)},
        "phoneme_type": "espeak" if data.phonemizer == "espeak" else "text",
        "phoneme_id_map": id_map,
        "num_symbols": int(task.n_vocab),
        "num_speakers": n_speakers,
        "speaker_id_map": {name: i for i, name in enumerate(speakers)} if n_speakers > 1 else {},
        "inference": dict(DEFAULT_SCALES),
        "hop_length": int(data.hop_length),
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
    if job.data.phonemizer not in ("none", "espeak"):
        raise UserError(
            f"--format piper: data.phonemizer={job.data.phonemizer} has no Piper phoneme type (Piper reads text "
            "as characters or espeak-ng phonemes): train with data.phonemizer=espeak or none"
        )
    task, result = job.task, job.result("piper")
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
    id_map, notes = phoneme_id_map(task)
    job.files.write_json(f"{job.name}.onnx.json", piper_config(job, id_map))
    result.files, result.notes = list(job.files.written), notes
    if job.check:
        check_piper(job, onnx_path, result)
    return result


def _piper_ids(voice: Any, text: str) -> list[list[int]]:
    """Piper's ids per sentence for ``text`` (its own phonemizer and our id map)."""
    return [voice.phonemes_to_ids(p) for p in voice.phonemize(text) if p]


def choose_texts(job: ExportJob, voice: Any, result: ExportResult) -> list[str]:
    """Two check sentences (shortest and longest) that Piper reads to exactly our ids, one sentence each;
    the agreement over all candidates is a note."""
    agree: list[str] = []
    first_difference = ""
    quiet = QuietLogger("piper")  # piper logs every character its map lacks; the note below counts them
    for text in job.texts:
        ours = job.task.token_ids(text)
        with quiet:
            theirs = _piper_ids(voice, text)
        if len(theirs) == 1 and theirs[0] == ours:
            agree.append(text)
        elif not first_difference:
            got = job.task.tokenizer.decode(sum(theirs, []))
            first_difference = (
                f"first difference: {text!r} reads as {job.task.tokenizer.decode(ours)!r} here, {got!r} in Piper"
            )
    result.notes.append(
        f"text front end: piper-tts reads {len(agree)} of {len(job.texts)} check sentences to the ids this run "
        f"reads" + (f" ({first_difference})" if first_difference else "")
    )
    if not agree:
        raise UserError(
            f"--format piper: piper-tts reads none of the {len(job.texts)} check sentences to this run's ids "
            f"({first_difference}); give sentences in the run's own spelling with --text"
        )
    agree.sort(key=lambda t: len(job.task.token_ids(t)))
    return [agree[0], agree[-1]] if len(agree) > 1 else agree


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
    for k, text in enumerate(choose_texts(job, voice, result)):
        speaker = (n_speakers - 1) if (n_speakers > 1 and k == 1) else 0
        who_id = speaker if n_speakers > 1 else None
        result.checks.append(_piper_wav_check(piper, voice, text, who_id, _reference(task, text, speaker)))
    defaults = [DEFAULT_SCALES["noise_scale"], DEFAULT_SCALES["length_scale"], DEFAULT_SCALES["noise_w"]]
    noisy = session.run(None, _feed(task.token_ids(by_length[-1]), defaults, 0 if n_speakers > 1 else None))[0]
    if not np.isfinite(noisy).all() or noisy.size == 0:
        result.checks.append(ExportCheck("the graph with the default noise scales", float("inf"), 0.0, "no audio"))
    else:
        shown = ", ".join(f"{v:g}" for v in defaults)
        result.notes.append(f"with the default scales [{shown}] the graph speaks {noisy.size} samples (noise on)")


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
    summary="a Piper voice: NAME.onnx + NAME.onnx.json (espeak phonemes or characters, speaker ids)",
    run=export_piper,
)
