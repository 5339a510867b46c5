"""``--format onnx``: vocoders and the classifier as ONNX graphs for ONNX Runtime, each checked in it.

- ``hifigan``: ``model.onnx`` (``mel`` (B, n_mels, n_frames) -> ``audio`` (B, n_samples)) + ``config.json``
  (the mel the vocoder reads: sample rate, hop, FFT, window, bands, fmin/fmax, natural log, Slaney scale).
- ``nsf_hifigan``: ``model.onnx`` in the layout of DiffSinger's NSF-HiFiGAN exporter (``mel`` (1, n_frames,
  n_mels), ``f0`` (1, n_frames) Hz -> ``waveform`` (1, n_samples)) + ``vocoder.yaml``, the file OpenUtau reads
  beside it (DiffSinger's ``export_attachments`` keys, with ``win_size``, ``fft_size`` and
  ``pitch_controllable`` that OpenUtau's ``DsVocoderConfig`` adds).
- ``cnn_lstm``: ``model.onnx`` (``mel`` (B, n_mels, n_frames) -> ``logits``, ``probs``) + ``config.json``
  (labels in id order, the mel settings).
- ``gpt_tts`` is refused: its synthesis is an autoregressive sampling loop with a key/value cache whose
  length depends on the text, around a codec decoder; one graph of it would need ONNX control flow and
  sampling, which this exporter does not write.

Each check runs the written file in onnxruntime on fixed inputs of two lengths beside the PyTorch model
(the NSF source's random nodes set to zero against PyTorch with its noise off).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import torch

from speechtrain.export.common import (
    AUDIO_TOLERANCE,
    ExportFiles,
    ExportResult,
    compare,
    ort_session,
    without_random_nodes,
)
from speechtrain.export.job import ExportFormat, ExportJob
from speechtrain.logs import get_logger

log = get_logger(__name__)

CHECK_FRAMES = (37, 83)  # two input lengths of every check (the graph is traced at a third, 50)
TRACE_FRAMES = 50
PROB_TOLERANCE = 1e-4

GPT_TTS_REFUSAL = (
    "GPT-TTS synthesizes by an autoregressive sampling loop with a key/value cache, as long as the text needs, "
    "around a codec decoder; a single ONNX graph of it would need control flow and sampling that this exporter "
    "does not write (export its vocoder run instead, or use speechtrain synthesize)"
)


def fixed_mel(n_mels: int, frames: int, seed: int) -> torch.Tensor:
    """A reproducible log-mel-like input (B=1, n_mels, frames): smooth in time, around a speech level."""
    gen = torch.Generator().manual_seed(seed)
    base = torch.randn(1, n_mels, frames // 4 + 2, generator=gen)
    smooth = torch.nn.functional.interpolate(base, size=frames, mode="linear", align_corners=False)
    return smooth * 1.5 - 5.0


def f0_glide(frames: int) -> torch.Tensor:
    """f0 (1, frames) gliding 110 -> 440 Hz, voiced throughout."""
    return 110.0 * 2.0 ** (2.0 * torch.linspace(0, 1, frames)).unsqueeze(0)


def mel_spec(data: Any) -> dict[str, Any]:
    """The mel a vocoder or classifier reads, by the names OpenUtau's vocoder.yaml uses."""
    return {
        "sample_rate": int(data.sample_rate),
        "hop_size": int(data.hop_length),
        "win_size": int(data.win_length),
        "fft_size": int(data.n_fft),
        "num_mel_bins": int(data.n_mels),
        "mel_fmin": float(data.fmin),
        "mel_fmax": float(data.fmax) if data.fmax is not None else float(data.sample_rate) / 2,
        "mel_base": "e",
        "mel_scale": "slaney",
    }


def export_hifigan(job: ExportJob, result: ExportResult) -> None:
    task = job.task
    graph = task.inference_graph()
    n_mels = int(job.data.n_mels)
    path = job.files.write_onnx(
        "model.onnx",
        graph,
        (fixed_mel(n_mels, TRACE_FRAMES, 0),),
        ["mel"],
        ["audio"],
        {"mel": {0: "batch", 2: "n_frames"}, "audio": {0: "batch", 1: "n_samples"}},
    )
    config = {"model": "model.onnx", "family": "hifigan", "inputs": {"mel": "(B, n_mels, n_frames)"}}
    config["outputs"] = {"audio": "(B, n_frames * hop_size)"}
    job.files.write_json("config.json", {**config, **mel_spec(job.data), "step": job.step})
    if job.check:
        session = ort_session(path)
        for k, frames in enumerate(CHECK_FRAMES):
            mel = fixed_mel(n_mels, frames, k + 1)
            out = session.run(None, {"mel": mel.numpy()})[0]
            result.checks.append(
                compare(f"onnxruntime vs PyTorch vocode, {frames} frames", out, task.vocode(mel[0]), AUDIO_TOLERANCE)
            )


def write_nsf_graph(files: ExportFiles, task: Any, n_mels: int) -> Path:
    """An NSF run's generator as ``model.onnx`` in DiffSinger's layout: ``mel`` (1, n_frames, n_mels), ``f0``
    (1, n_frames) Hz -> ``waveform`` (1, n_samples)."""
    trace = (fixed_mel(n_mels, TRACE_FRAMES, 0).transpose(1, 2), f0_glide(TRACE_FRAMES))
    return files.write_onnx(
        "model.onnx",
        task.inference_graph(),
        trace,
        ["mel", "f0"],
        ["waveform"],
        {
            "mel": {0: "batch", 1: "n_frames"},
            "f0": {0: "batch", 1: "n_frames"},
            "waveform": {0: "batch", 1: "n_samples"},
        },
    )


def export_nsf(job: ExportJob, result: ExportResult) -> None:
    from speechtrain.models.nsf_hifigan.graph import deterministic_source

    task = job.task
    n_mels = int(job.data.n_mels)
    path = write_nsf_graph(job.files, task, n_mels)
    write_openutau_package(job, result)
    if not job.check:
        return
    model_bytes, replaced = without_random_nodes(path)
    quiet, shipped = ort_session(model_bytes), ort_session(path)
    for k, frames in enumerate(CHECK_FRAMES):
        mel, f0 = fixed_mel(n_mels, frames, k + 1), f0_glide(frames)
        feed = {"mel": mel.transpose(1, 2).numpy(), "f0": f0.numpy()}
        with deterministic_source(task.generator):
            reference = task.vocode(mel[0], f0[0])
        result.checks.append(
            compare(
                f"onnxruntime vs PyTorch vocode, {frames} frames, source noise off ({replaced} random nodes zeroed)",
                quiet.run(None, feed)[0],
                reference,
                AUDIO_TOLERANCE,
            )
        )
        noisy = shipped.run(None, feed)[0]
        if k == 0 and replaced:
            diff = float(np.max(np.abs(noisy.squeeze() - task.vocode(mel[0], f0[0]))))
            result.notes.append(
                f"with its source noise on (as shipped), the graph and PyTorch differ by draws of noise: max |diff| "
                f"{diff:.3g} on {frames} frames"
            )


def package_id(name: str) -> str:
    """An OpenUtau package id: lower-case letters, digits, ``-`` and ``.`` only (its package manager's rule)."""
    return re.sub(r"[^a-z0-9.-]+", "-", name.lower()).strip("-.") or "vocoder"


def write_openutau_package(job: ExportJob, result: ExportResult) -> None:
    """``vocoder.yaml`` (OpenUtau's ``DsVocoderConfig``: the mel, and ``pitch_controllable`` from the run's
    ``pc_aug`` as DiffSinger writes it) and ``oudep.yaml`` beside it: OpenUtau's ``DependencyInstaller`` reads
    ``name`` from it and installs the archive's files into ``Dependencies/NAME``, where ``DsVocoder(NAME)`` loads
    ``vocoder.yaml``; its package manager reads ``id``, ``version`` and ``description``. The f0-grid warning of
    every NSF export is a note here too."""
    from speechtrain.models.nsf_hifigan.export import PC_AUG, f0_grid_warning

    name = package_id(job.name)
    vocoder = {"name": name, "model": "model.onnx", **mel_spec(job.data), "pitch_controllable": PC_AUG}
    job.files.write_yaml("vocoder.yaml", vocoder)
    step = f" at step {job.step}" if job.step is not None else ""
    oudep = {
        "name": name,
        "id": name,
        "version": f"1.0.{int(job.step or 0)}",
        "description": f"NSF-HiFiGAN vocoder trained with speechtrain ({job.run_dir.name}{step})",
    }
    job.files.write_yaml("oudep.yaml", oudep)
    result.notes.append(
        f"OpenUtau: zip the folder's files as {name}.oudep and drop it on OpenUtau (installed as Dependencies/{name}); "
        f"a voicebank's dsconfig.yaml names it with vocoder: {name}"
    )
    warning = f0_grid_warning(float(job.data.f0_frame_offset))
    if warning:
        log.warning(f"export: {warning}")
        result.notes.append(warning)


def export_classifier(job: ExportJob, result: ExportResult) -> None:
    task = job.task
    graph = task.inference_graph()
    n_mels = int(job.data.n_mels)
    path = job.files.write_onnx(
        "model.onnx",
        graph,
        (fixed_mel(n_mels, TRACE_FRAMES, 0),),
        ["mel"],
        ["logits", "probs"],
        {"mel": {0: "batch", 2: "n_frames"}, "logits": {0: "batch"}, "probs": {0: "batch"}},
    )
    config = {"model": "model.onnx", "family": "cnn_lstm", "labels": list(task.labels), **mel_spec(job.data)}
    config["inputs"] = {"mel": "(B, n_mels, n_frames), clips of one length"}
    job.files.write_json("config.json", {**config, "step": job.step})
    if job.check:
        session = ort_session(path)
        for k, frames in enumerate(CHECK_FRAMES):
            mel = fixed_mel(n_mels, frames, k + 1)
            with torch.no_grad():
                logits = task.model(mel, torch.tensor([frames]), [frames])
            reference = torch.softmax(logits.float(), -1).numpy()
            probs = session.run(None, {"mel": mel.numpy()})[1]
            result.checks.append(
                compare(
                    f"onnxruntime vs PyTorch class probabilities, {frames} frames", probs, reference, PROB_TOLERANCE
                )
            )


EXPORTERS = {"hifigan": export_hifigan, "nsf_hifigan": export_nsf, "cnn_lstm": export_classifier}


def export_onnx(job: ExportJob) -> ExportResult:
    """Write the run's ONNX graph and its config, and check it in onnxruntime (see the module doc)."""
    result = job.result("onnx")
    EXPORTERS[str(job.model.name)](job, result)
    result.files = list(job.files.written)
    return result


FORMAT = ExportFormat(
    key="onnx",
    families=tuple(EXPORTERS),
    runtime="onnxruntime",
    summary="model.onnx + its config (nsf_hifigan: OpenUtau's vocoder.yaml)",
    run=export_onnx,
    refused={"gpt_tts": GPT_TTS_REFUSAL},
)
