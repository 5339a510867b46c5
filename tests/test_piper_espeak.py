"""Piper's espeak-ng bridge (``piper/espeakbridge.so``, espeak-ng 1.52 linked in) is started once per process.

Each ``EspeakPhonemizer()`` calls ``espeakbridge.initialize``; a second start frees espeak-ng's phoneme tables while
the voice set before keeps pointing into them, so phonemizing in that voice again reads freed memory: garbage
phonemes, or SIGSEGV once something else has written there (the one-process test run died so in 2026-11).
Both tests run a child process: the start happens once per process, and the crash must not take pytest down.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# The freed tables are made to be overwritten at once (without the fix this child dies of SIGSEGV in 20 of 20 runs):
# espeak-ng starts in a worker thread, so its tables live in that thread's malloc arena; after the restart (in the
# main thread's arena) threads that take the worker's arena back fill it with 0x55.
_REUSE_AFTER_RESTART = """
import threading

from piper.phonemize_espeak import EspeakPhonemizer

from speechtrain.data.text.piper_text import piper_phonemes

TEXT = "Salom. Men har kuni ertalab choy ichaman! Gʻalaba yaqin. Bolalar maktabga piyoda borishadi."
first, held = [], []


def scribble(barrier):
    barrier.wait()  # all alive at once: each takes an arena of its own, the worker's among them
    held.extend(b"\\x55" * 60000 for _ in range(64))


worker = threading.Thread(target=lambda: first.append(piper_phonemes(TEXT, "uz")))
worker.start()
worker.join()
same = []
for _ in range(3):
    EspeakPhonemizer()  # as PiperVoice, Piper's data module, a test or a user does
    barrier = threading.Barrier(8)
    scribblers = [threading.Thread(target=scribble, args=(barrier,)) for _ in range(8)]
    for t in scribblers:
        t.start()
    for t in scribblers:
        t.join()
    same.append(piper_phonemes(TEXT, "uz") == first[0])
print(same)
"""

_STARTS = """
from types import SimpleNamespace

from piper import espeakbridge
from piper.config import PhonemeType
from piper.phonemize_espeak import ESPEAK_DATA_DIR, EspeakPhonemizer
from piper.voice import PiperVoice

from speechtrain.data.text.piper_text import piper_symbols

starts = []
start = espeakbridge.initialize
espeakbridge.initialize = lambda data_dir: (starts.append(data_dir), start(data_dir))[1]
EspeakPhonemizer().phonemize("en-us", "Hello.")  # a user's own, before speechtrain's
ours = piper_symbols("Salom. Rahmat!", "uz")
config = SimpleNamespace(phoneme_type=PhonemeType.ESPEAK, espeak_voice="uz", vowel_clusters=None)
voice = SimpleNamespace(config=config, espeak_data_dir=ESPEAK_DATA_DIR, use_tashkeel=False)
theirs = PiperVoice.phonemize(voice, "Salom. Rahmat!")  # export.piper's path: piper's own EspeakPhonemizer
EspeakPhonemizer().phonemize("en-us", "Hello.")
assert ours == "".join("^_" + "".join(p + "_" for p in s) + "$" for s in theirs), (ours, theirs)
print("starts:", len(starts), flush=True)
try:  # unguarded, espeak-ng would exit(1) here: it finds no phontab in that folder
    EspeakPhonemizer("/tmp/another-espeak-ng-data")
except RuntimeError as exc:
    print("refused:", exc)
"""


def _child(code: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)


def test_phonemes_stay_right_when_pipers_espeak_is_constructed_again() -> None:
    pytest.importorskip("piper")
    proc = _child(_REUSE_AFTER_RESTART)
    assert proc.returncode == 0, f"child exited {proc.returncode} (-11: SIGSEGV)\n{proc.stderr[-2000:]}"
    assert proc.stdout.split() == ["[True,", "True,", "True]"], proc.stdout


def test_pipers_espeak_starts_once_per_process_whoever_asks() -> None:
    """A user's EspeakPhonemizer, speechtrain's, PiperVoice's and another bare one share one start; another data
    folder is refused (restarting would free the tables), not silently taken."""
    pytest.importorskip("piper")
    proc = _child(_STARTS)
    assert "starts: 1" in proc.stdout, proc.stdout + proc.stderr[-2000:]
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "refused: Piper's espeak-ng runs with the data in" in proc.stdout, proc.stdout
