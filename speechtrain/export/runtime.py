"""A run's exported graph in onnxruntime behind the task's own inference methods, for ``rtf --runtime onnx``:
``synthesize(text, ...)`` (vits), ``vocode(mel)`` (hifigan) and ``vocode(mel, f0)`` (nsf_hifigan, the graph
``--format onnx`` writes for OpenUtau, its source noise on as shipped) as :func:`speechtrain.bench.rtf.measure_rtf`
calls them, so that PyTorch and ONNX Runtime are timed on the same inputs in one run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from speechtrain.errors import UserError
from speechtrain.export.common import ExportFiles, ort_session
from speechtrain.export.onnx import TRACE_FRAMES, fixed_mel


class OnnxSynthesizer:
    """A VITS run's Piper graph: ``synthesize(text, noise_scale, noise_scale_w, length_scale, speaker)``."""

    def __init__(self, task: Any, folder: Path, threads: int | None = None) -> None:
        import torch

        self.task, self.multi = task, int(task.cfg.n_speakers) > 1
        example = torch.tensor([task.token_ids("a")], dtype=torch.long)
        args: tuple[Any, ...] = (example, torch.tensor([example.shape[1]]), torch.tensor([0.667, 1.0, 0.8]))
        names = ["input", "input_lengths", "scales"]
        if self.multi:
            args, names = (*args, torch.tensor([0])), [*names, "sid"]
        axes = {"input": {0: "batch_size", 1: "phonemes"}, "input_lengths": {0: "batch_size"}}
        path = ExportFiles(folder).write_onnx("model.onnx", task.inference_graph(), args, names, ["output"], axes)
        self.session = ort_session(path, threads)

    def synthesize(
        self,
        text: str,
        noise_scale: float = 0.667,
        noise_scale_w: float = 0.8,
        length_scale: float = 1.0,
        speaker: int | None = None,
        **_: Any,
    ) -> np.ndarray:
        ids = self.task.token_ids(text)
        feed = {
            "input": np.array([ids], dtype=np.int64),
            "input_lengths": np.array([len(ids)], dtype=np.int64),
            "scales": np.array([noise_scale, length_scale, noise_scale_w], dtype=np.float32),
        }
        if self.multi:
            feed["sid"] = np.array([int(speaker or 0)], dtype=np.int64)
        return self.session.run(None, feed)[0].reshape(-1)


class OnnxVocoder:
    """A HiFi-GAN run's graph: ``vocode(mel)`` for a (n_mels, n_frames) log-mel."""

    def __init__(self, task: Any, folder: Path, threads: int | None = None) -> None:
        mel = fixed_mel(int(task.n_mels), TRACE_FRAMES, 0)
        axes = {"mel": {0: "batch", 2: "n_frames"}, "audio": {0: "batch", 1: "n_samples"}}
        path = ExportFiles(folder).write_onnx("model.onnx", task.inference_graph(), (mel,), ["mel"], ["audio"], axes)
        self.session = ort_session(path, threads)

    def vocode(self, mel: Any) -> np.ndarray:
        x = np.asarray(mel.detach().cpu() if hasattr(mel, "detach") else mel, dtype=np.float32)
        return self.session.run(None, {"mel": x[None] if x.ndim == 2 else x})[0].reshape(-1)


class OnnxNSFVocoder:
    """An NSF-HiFiGAN run's graph (DiffSinger's layout): ``vocode(mel, f0)`` for a (n_mels, n_frames) log-mel and
    its f0 (n_frames,) in Hz, f0 edge-padded or trimmed to the mel's frames as the task does."""

    def __init__(self, task: Any, folder: Path, threads: int | None = None) -> None:
        from speechtrain.export.onnx import write_nsf_graph

        path = write_nsf_graph(ExportFiles(folder), task, int(task.mel_settings.n_mels))
        self.session = ort_session(path, threads)

    def vocode(self, mel: Any, f0: Any = None) -> np.ndarray:
        if f0 is None:
            raise UserError("vocode: an NSF vocoder needs f0 (Hz per mel frame) with the mel")
        x = np.asarray(mel.detach().cpu() if hasattr(mel, "detach") else mel, dtype=np.float32)
        f = np.asarray(f0.detach().cpu() if hasattr(f0, "detach") else f0, dtype=np.float32).reshape(-1)
        frames = x.shape[-1]
        f = np.pad(f[:frames], (0, max(0, frames - f.size)), mode="edge") if f.size else np.zeros(frames, np.float32)
        feed = {"mel": x.reshape(-1, frames).T[None].copy(), "f0": f[None]}
        return self.session.run(None, feed)[0].reshape(-1)


#: the families with an ONNX export that makes audio, and the runner of each
RUNNERS: dict[str, Any] = {"vits": OnnxSynthesizer, "hifigan": OnnxVocoder, "nsf_hifigan": OnnxNSFVocoder}
ONNX_RTF_FAMILIES = tuple(RUNNERS)


def require_onnx_runner(family: str) -> None:
    """UserError before any timing when ``family`` has no ONNX runner."""
    if family not in ONNX_RTF_FAMILIES:
        raise UserError(
            f"rtf --runtime onnx: a '{family}' run has no ONNX runner ({', '.join(ONNX_RTF_FAMILIES)} have)"
        )


def onnx_runner(task: Any, family: str, folder: Path, threads: int | None = None) -> Any:
    """The run's graph in onnxruntime with the task's inference method; UserError for other families."""
    require_onnx_runner(family)
    return RUNNERS[family](task, folder, threads)
