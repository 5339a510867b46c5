"""Real-time factor of inference: synthesis (or vocoding) time / duration of the audio produced.

RTF < 1 is faster than real time. Each input is timed on its own, after ``warmup`` untimed calls,
with the device synchronised before and after the timed region (CUDA kernels run asynchronously;
without the sync the clock would stop before the work is done).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np
import torch

T = TypeVar("T")

DEFAULT_SENTENCES = (
    "Hello.",
    "The quick brown fox jumps over the lazy dog.",
    "Printing, in the only sense with which we are at present concerned, differs from most arts.",
    "It was a bright cold day in April, and the clocks were striking thirteen.",
    "Yes, I think so.",
    "She sells sea shells by the sea shore, and the shells she sells are surely sea shells.",
    "After a long pause, the committee decided that the old house by the river should be kept as it was, "
    "a little museum for the children of the town.",
    "Numbers like 42 and 1999 are read out one digit at a time by a character model.",
)


def synchronize(device: str | torch.device) -> None:
    """Wait for queued work on ``device`` (CUDA/MPS); a no-op on the CPU."""
    dev = torch.device(device)
    if dev.type == "cuda" and torch.cuda.is_available():
        torch.cuda.synchronize(dev)
    elif dev.type == "mps" and hasattr(torch, "mps"):
        torch.mps.synchronize()


def _describe(item: Any) -> str:
    if isinstance(item, str):
        return item
    shape = tuple(getattr(item, "shape", ()))
    return f"mel {shape}"


def measure_rtf(
    call: Callable[[T], Any],
    inputs: Sequence[T],
    device: str | torch.device,
    warmup: int,
    sample_rate: int,
    mode: str = "synthesize",
    describe: Callable[[T], str] | None = None,
    on_item: Callable[[int, int, str], None] | None = None,
) -> dict[str, Any]:
    """Time ``call(x)`` (synthesis of a text, vocoding of a mel: the inference recipe builds it) for each input
    and return the real-time factor of the audio it returns (at ``sample_rate``).

    The first ``warmup`` inputs (cycled) run untimed first. Returns ``{"rtf", "audio_seconds",
    "seconds", "device", "mode", "warmup", "items": [{"input", "seconds", "audio_seconds", "rtf"}]}``;
    ``rtf`` is total seconds / total audio seconds. ``on_item(k, n, what)``: called before the k-th timed
    input, outside the timed span (the progress lines of a long measurement).
    """
    if not inputs:
        raise ValueError("measure_rtf needs at least one input")
    sr = int(sample_rate)
    shown = describe or _describe
    with torch.inference_mode():
        for i in range(warmup):
            call(inputs[i % len(inputs)])
        synchronize(device)
        items: list[dict[str, Any]] = []
        for k, x in enumerate(inputs, start=1):
            if on_item is not None:
                on_item(k, len(inputs), f"timing {mode} of {shown(x)}")
            synchronize(device)
            start = time.perf_counter()
            audio = call(x)
            synchronize(device)
            seconds = time.perf_counter() - start
            n = int(audio.numel() if isinstance(audio, torch.Tensor) else np.asarray(audio).size)
            audio_s = n / sr
            items.append(
                {
                    "input": shown(x),
                    "seconds": seconds,
                    "audio_seconds": audio_s,
                    "rtf": seconds / audio_s if audio_s > 0 else float("inf"),
                }
            )
    total_s = sum(it["seconds"] for it in items)
    total_audio = sum(it["audio_seconds"] for it in items)
    return {
        "rtf": total_s / total_audio if total_audio > 0 else float("inf"),
        "audio_seconds": total_audio,
        "seconds": total_s,
        "device": str(torch.device(device)),
        "mode": mode,
        "warmup": warmup,
        "items": items,
    }
