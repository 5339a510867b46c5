"""Peer row: Piper's own VITS trainer (``piper.train.vits``: ``VitsModel`` and ``VitsDataModule`` under
``lightning.Trainer``, piper-tts 1.8 with its ``train`` extra), as ``python -m piper.train fit`` runs it.

    PYTHON_OF_THE_PEER_ENV bench/peers/piper_vits.py SPEC.json OUT.json

SPEC.json's ``raw``: ``corpus`` (LJSpeech layout), ``work`` (Piper's cache, config and the compiled alignment
search), ``mas_source`` (Piper's ``monotonic_align/core.pyx``, read from its repository by the orchestrator: the
wheel ships no source and no build of it), ``data`` (``VitsDataModule`` arguments) and ``model`` (``VitsModel``
arguments), ``train_csv`` (the corpus's metadata without the held-out sentences) and ``held_out`` (their ids and
texts: with the spec's ``quality_dir`` Piper synthesises each after the timed steps, ``<id>.wav``). Piper's data
module phonemizes with its espeak-ng bridge and caches ids, audio and spectrograms before training (outside the timed
window, as speechtrain's ``prepare``).

What the bench adds: it compiles ``core.pyx`` with Cython as Piper's ``build_monotonic_align.sh`` does (into the
work folder, not into the installed package) and makes it importable where Piper looks for it; a Lightning callback
counts each batch, reads the step's logged losses and stops after the timed steps. The Trainer is built with the
LightningCLI's defaults Piper uses (``max_epochs=-1``) without validation or checkpoints in the window.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import types
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from meter import StepMeter, StopPeer  # noqa: E402

MAS_PACKAGE = "piper.train.vits.monotonic_align.monotonic_align"


def build_mas(pyx: Path, build: Path) -> Path:
    """``cythonize -i core.pyx`` (Piper's build script) in ``build``; returns the folder holding ``core*.so``."""
    build.mkdir(parents=True, exist_ok=True)
    if not list(build.glob("core*.so")):
        shutil.copy(pyx, build / "core.pyx")
        proc = subprocess.run(
            [sys.executable, "-c", "from Cython.Build.Cythonize import main; main(['-i', 'core.pyx'])"],
            cwd=build,
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:  # e.g. no Cython in the peers' venv: say so, not only "exit status 1"
            lines = (proc.stderr or proc.stdout).strip().splitlines()
            raise RuntimeError(f"compiling Piper's core.pyx failed: {lines[-1] if lines else proc.returncode}")
    return build


def expose_mas(folder: Path) -> None:
    """Make ``folder``'s compiled ``core`` the package Piper imports (``from .monotonic_align.core import ...``)."""
    pkg = types.ModuleType(MAS_PACKAGE)
    pkg.__path__ = [str(folder)]
    sys.modules[MAS_PACKAGE] = pkg


def phoneme_ids(data: Any, text: str) -> list[int]:
    """Piper's phoneme ids of ``text`` as its data module makes them for training (its espeak-ng bridge, its
    default id map, one id run per sentence)."""
    import itertools

    from piper.phoneme_ids import DEFAULT_PHONEME_ID_MAP, phonemes_to_ids

    from speechtrain.data.text.piper_text import espeak_lock, piper_espeak

    phonemizer = piper_espeak()
    with espeak_lock():
        sentences = phonemizer.phonemize(data.espeak_voice, text, vowel_clusters=data.vowel_clusters)
    return list(itertools.chain(*(phonemes_to_ids(p, id_map=DEFAULT_PHONEME_ID_MAP) for p in sentences)))


def write_quality_audio(model: Any, data: Any, s: dict[str, Any], folder: Path) -> None:
    """Piper's synthesis (``model_g.infer``, its default scales 0.667 / 1.0 / 0.8) of each held-out sentence as
    ``folder/<id>.wav``: fp32, eval mode, the noise from a fixed seed (as speechtrain's quality audio)."""
    import numpy as np
    import soundfile as sf
    import torch

    folder.mkdir(parents=True, exist_ok=True)
    model.model_g.eval()
    for item in s.get("held_out") or []:
        ids = torch.LongTensor(phoneme_ids(data, item["text"]))[None]  # (1, T_tokens)
        with torch.no_grad(), torch.random.fork_rng():
            torch.manual_seed(0)
            audio = model.model_g.infer(ids, torch.LongTensor([ids.shape[1]]), noise_scale=0.667, noise_scale_w=0.8)[0]
        wav = audio.reshape(-1).float().numpy()  # (T_samples,)
        sf.write(str(folder / f"{item['id']}.wav"), np.clip(wav, -1.0, 1.0), int(s["model"]["sample_rate"]), "FLOAT")


def main(spec_path: str, out_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    s = spec["raw"]
    work = Path(s["work"])
    expose_mas(build_mas(Path(s["mas_source"]), work / "monotonic_align"))
    import lightning as L
    import torch
    from lightning.pytorch.callbacks import Callback
    from lightning.pytorch.loggers import TensorBoardLogger
    from piper.train.vits.dataset import VitsDataModule
    from piper.train.vits.lightning import VitsModel

    if spec.get("threads"):
        torch.set_num_threads(int(spec["threads"]))
    from speechtrain.data.text.piper_text import piper_espeak

    piper_espeak()  # espeak-ng started once: Piper's data module and phoneme_ids construct EspeakPhonemizer again
    L.seed_everything(s.get("seed", 1234))
    data = VitsDataModule(
        csv_path=s.get("train_csv") or s["corpus"] + "/metadata.csv",  # without the held-out sentences
        cache_dir=str(work / "cache"),
        config_path=str(work / "config.json"),
        audio_dir=s["corpus"] + "/wavs",
        **s["data"],
    )
    model = VitsModel(**s["model"])
    hop = int(s["model"].get("hop_length", 256))
    last = spec.get("record_losses") or 10
    meter = StepMeter(spec["name"], spec["steps"], spec["warmup"], last, hop, spec.get("profile") or 0)
    counted: dict[str, int] = {}

    class Meter(Callback):
        def on_train_start(self, trainer: Any, module: Any) -> None:
            counted["params"] = sum(p.numel() for p in module.parameters() if p.requires_grad)

        def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, batch_idx: int) -> None:
            meter.batch([int(n) for n in batch.audio_lengths], int(s["model"]["sample_rate"]), batch.audios.shape[-1])

        def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            metrics = {
                k: float(v) for k, v in trainer.callback_metrics.items() if getattr(v, "numel", lambda: 1)() == 1
            }
            if "train_mel" in metrics:  # Piper logs the raw mel L1 as train_mel; speechtrain calls it mel_l1
                metrics["mel_l1"] = metrics["train_mel"]
            meter.step_done(metrics)

    trainer = L.Trainer(
        accelerator="auto",  # the LightningCLI default Piper runs with: the GPU when there is one
        devices=1,
        precision=s.get("precision", "32-true"),
        max_epochs=-1,
        callbacks=[Meter()],
        logger=TensorBoardLogger(save_dir=tempfile.mkdtemp(prefix="peer-piper-")),
        enable_checkpointing=False,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        log_every_n_steps=50,
    )
    try:
        trainer.fit(model, datamodule=data)
    except StopPeer:
        pass
    if spec.get("quality_dir"):  # after the timed window: what the bench scores beside our rows' audio
        write_quality_audio(model, data, s, Path(spec["quality_dir"]))
    meter.write(
        out_path,
        precision="fp32" if str(s.get("precision", "32-true")).startswith("32") else str(s["precision"]),
        trained_parameters=counted.get("params"),
        applied={"peer": {"applied": True, "exact": True, "detail": "piper.train.vits VitsModel + lightning Trainer"}},
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
