"""Audio reading for the data pipeline: soundfile to read, soxr to resample, mono by averaging.

``probe_audio`` reads only the header (plus, for WAV, the declared size of the data chunk, since
libsndfile silently shortens a truncated WAV to what is there); ``load_audio`` decodes, checks the
decoded length against the header, downmixes and resamples. Problems raise :class:`AudioProblem`
with a reason code from :data:`speechtrain.data.manifest.REASONS`.

A segment of a file (NeMo's ``offset`` + ``duration``) is the file's path with a media fragment,
``/data/book.wav#t=12.5,16.25`` (:func:`segment_path`): both functions read only that stretch, and its
header facts are the segment's. Everything else treats the string as one utterance's audio.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass

import numpy as np

SEGMENT = "#t="


def segment_path(path: str, offset: float, duration: float | None) -> str:
    """``path`` limited to ``offset`` .. ``offset + duration`` seconds (to the end when duration is None)."""
    end = f"{offset + duration:g}" if duration is not None else ""
    return f"{path}{SEGMENT}{offset:g},{end}"


def split_segment(path: str | os.PathLike[str]) -> tuple[str, float, float | None]:
    """(file, start s, end s or None) of a path that may carry a segment (:func:`segment_path`)."""
    text = os.fspath(path)
    file, mark, span = text.rpartition(SEGMENT)
    if not mark:
        return text, 0.0, None
    try:
        start_text, _, end_text = span.partition(",")
        return file, float(start_text), float(end_text) if end_text else None
    except ValueError:
        return text, 0.0, None


class AudioProblem(Exception):
    """A file that cannot be used; ``reason`` is a code such as ``truncated_audio``."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclass
class AudioInfo:
    """What the header says. ``samples`` counts samples per channel (soundfile calls them frames;
    here frames are mel frames)."""

    sample_rate: int
    channels: int
    samples: int

    @property
    def duration(self) -> float:
        return self.samples / self.sample_rate if self.sample_rate else 0.0


def wav_declared_samples(path: str | os.PathLike[str], channels: int) -> int | None:
    """Samples per channel that the WAV ``data`` chunk header declares (None: not a plain RIFF/WAVE
    file, or a streamed file with an unknown size). Reads the chunk headers only."""
    with open(path, "rb") as f:
        head = f.read(12)
        if len(head) < 12 or head[:4] != b"RIFF" or head[8:12] != b"WAVE":
            return None
        block_align = None
        for _ in range(64):  # a real WAV has a handful of chunks
            chunk = f.read(8)
            if len(chunk) < 8:
                return None
            cid, size = chunk[:4], struct.unpack("<I", chunk[4:])[0]
            if cid == b"fmt ":
                fmt = f.read(size + (size & 1))
                if len(fmt) >= 14:
                    block_align = struct.unpack("<H", fmt[12:14])[0]
                continue
            if cid == b"data":
                if size in (0, 0xFFFFFFFF) or not block_align:
                    return None  # streamed WAV: size unknown
                return size // block_align
            f.seek(size + (size & 1), os.SEEK_CUR)
    return None


def probe_audio(path: str | os.PathLike[str]) -> AudioInfo:
    """Header of an audio file (of its segment, when the path names one); raises :class:`AudioProblem`
    (missing, unreadable, truncated, empty, a segment beyond the file's end)."""
    file, start, end = split_segment(path)
    if file != os.fspath(path):
        whole = _probe_file(file)
        first = int(round(start * whole.sample_rate))
        last = whole.samples if end is None else int(round(end * whole.sample_rate))
        if start < 0 or (end is not None and end <= start):
            raise AudioProblem("unreadable_audio", f"segment {start:g}-{end:g} s is empty or negative")
        if last > whole.samples:
            raise AudioProblem(
                "truncated_audio",
                f"segment {start:g}-{(end if end is not None else start):g} s ends after the file's "
                f"{whole.duration:.3f} s (offset/duration beyond the file)",
            )
        return AudioInfo(whole.sample_rate, whole.channels, last - first)
    return _probe_file(file)


def _probe_file(path: str | os.PathLike[str]) -> AudioInfo:
    import soundfile as sf

    if not os.path.exists(path):
        raise AudioProblem("missing_file", "file not found")
    if not os.path.isfile(path):
        raise AudioProblem("unreadable_audio", "not a regular file")
    if os.path.getsize(path) == 0:
        raise AudioProblem("unreadable_audio", "file is empty (0 bytes)")
    try:
        info = sf.info(str(path))
    except Exception as exc:  # soundfile raises several types (LibsndfileError, RuntimeError, TypeError)
        raise AudioProblem("unreadable_audio", _short(exc)) from None
    out = AudioInfo(int(info.samplerate), int(info.channels), int(info.frames))  # soundfile frames = samples
    declared = wav_declared_samples(path, out.channels) if info.format == "WAV" else None
    if declared is not None and declared > out.samples:
        raise AudioProblem("truncated_audio", f"header says {declared} samples, file holds {out.samples}")
    if out.samples <= 0:
        raise AudioProblem("empty_audio", "no samples")
    if out.sample_rate <= 0 or out.channels <= 0:
        raise AudioProblem("unreadable_audio", f"bad header (rate {out.sample_rate}, channels {out.channels})")
    return out


def load_audio(path: str | os.PathLike[str], sample_rate: int) -> tuple[np.ndarray, AudioInfo]:
    """Mono float32 samples at ``sample_rate`` (downmixed by averaging, resampled with soxr) and the
    header info of the file. Raises :class:`AudioProblem` when decoding fails or comes up short."""
    import soundfile as sf
    import soxr

    info = probe_audio(path)
    file, start, end = split_segment(path)
    try:
        if file != os.fspath(path):  # a segment: read only its samples
            rate = sf.info(file).samplerate
            first = int(round(start * rate))
            data, sr = sf.read(file, start=first, frames=info.samples, dtype="float32", always_2d=True)
        else:
            data, sr = sf.read(str(path), dtype="float32", always_2d=True)  # (T_samples, channels)
    except Exception as exc:
        raise AudioProblem("truncated_audio", f"decoding failed: {_short(exc)}") from None
    if data.shape[0] < info.samples:
        raise AudioProblem("truncated_audio", f"header says {info.samples} samples, decoded {data.shape[0]}")
    mono = data.mean(axis=1) if data.shape[1] > 1 else data[:, 0]
    if sr != sample_rate:
        mono = soxr.resample(mono, sr, sample_rate, quality="HQ")
    mono = np.asarray(mono, dtype=np.float32)
    if not np.all(np.isfinite(mono)):
        raise AudioProblem("unreadable_audio", "samples are not finite (NaN/inf)")
    return mono, info


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text[:200]
