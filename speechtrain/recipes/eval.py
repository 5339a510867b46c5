"""``speechtrain eval``: a trained run (or its ONNX export) scored with the quality metrics its evaluations report.

The run is opened as inference opens it (:class:`~speechtrain.recipes.inference.InferenceRecipe`: its config, its
weights), its eval set (or the held-out part of another corpus, ``data``) read as training reads it, and the same
:class:`~speechtrain.train.evaluate.Evaluator` runs over it: the task's eval losses, and the quality metrics of the
first ``items`` utterances against their recordings (:mod:`speechtrain.quality`). With ``runtime="onnx"`` the audio
comes from the run's exported graph in onnxruntime (:mod:`speechtrain.export.runtime`) instead of PyTorch: a
deployed voice is scored as trained.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from speechtrain.data.batch import Batch
from speechtrain.errors import UserError
from speechtrain.logs import get_logger
from speechtrain.quality.asr import check_folder
from speechtrain.quality.catalog import METRICS
from speechtrain.quality.judge import JUDGE
from speechtrain.quality.pocketsphinx_asr import POCKETSPHINX
from speechtrain.recipes.data import DataRecipe
from speechtrain.recipes.inference import InferenceRecipe, load_modules
from speechtrain.recipes.quality import AsrSettings, quality_scorer
from speechtrain.train import checkpoint as ckpt
from speechtrain.train.evaluate import Evaluator

log = get_logger(__name__)

#: the keys of an eval summary that are bookkeeping, not scores
_NOT_SCORES = {"quality_items", "quality_seconds", "quality_share", "items"}


@dataclass
class EvalResult:
    """What ``speechtrain eval`` reports: the run, the checkpoint and step scored, the runtime that made the audio,
    the scores (metric -> value), the items scored, and what was left out (missing packages, items without a
    value)."""

    run_dir: str
    checkpoint: str
    step: int | None
    runtime: str
    model: str
    items: int
    scores: dict[str, float] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def table(self) -> str:
        """The scores as a plain-text table: metric, value, unit, which way is better."""
        lines = [f"{self.model} run {self.run_dir} ({self.checkpoint}, step {self.step}, {self.runtime})"]
        lines.append(f"{'metric':<16} {'value':>10}  {'unit':<8} better")
        for name, value in self.scores.items():
            if name == "cer_recordings":
                continue
            spec = METRICS.get(name)
            if name == "cer" and "cer_recordings" in self.scores:  # the model's CER read beside its ceiling
                ceiling = self.scores["cer_recordings"]
                lines.append(f"{name:<16} model {value:.4f} / recordings {ceiling:.4f}  share    lower")
                continue
            unit, better = (spec.unit, "higher" if spec.mode == "max" else "lower") if spec else ("", "")
            lines.append(f"{name:<16} {value:>10.4f}  {unit:<8} {better}")
        lines.append(f"({self.items} items scored)")
        for hint in self.extra.get("quality_missing", []):
            lines.append(f"not scored, package missing: {hint}")
        return "\n".join(lines)


class EvalRecipe:
    """Scores run ``run_dir``: ``checkpoint`` best, latest or a checkpoint file; ``data`` another corpus whose held-out
    utterances are scored (default: the run's own eval set); ``items`` the utterances whose audio is scored
    (default: the run's ``train.quality_items``); ``runtime`` torch or onnx; ``asr`` the folder of a local ASR model
    whose transcripts of a TTS model's synthesis give ``cer`` (default: the run's ``train.quality_asr``) and
    ``asr_language`` Whisper's language (default: the run's ``train.quality_asr_language``)."""

    def __init__(
        self,
        run_dir: str | os.PathLike[str],
        checkpoint: str = "best",
        data: str | None = None,
        device: str | None = None,
        items: int | None = None,
        runtime: str = "torch",
        asr: str | None = None,
        asr_language: str | None = None,
    ) -> None:
        if runtime not in ("torch", "onnx"):
            raise UserError(f"--runtime {runtime}: torch or onnx")
        which = checkpoint if checkpoint in ("best", "latest") else "best"
        device = (device or "cpu") if runtime == "onnx" else device  # onnxruntime runs on the CPU here
        self.inference = InferenceRecipe(run_dir, device=device, which=which)
        self.cfg, self.task, self.runtime = self.inference.cfg, self.inference.task, runtime
        self.checkpoint, self.step = self._load(checkpoint)
        if data is not None:
            self.cfg.data.manifest, self.cfg.data.eval_manifest = str(data), None
        self.items = self.cfg.train.quality_items if items is None else int(items)
        if self.items < 0:
            raise UserError("--items must be >= 0")
        self.asr = self._asr_settings(asr, asr_language)

    def _asr_settings(self, asr: str | None, language: str | None) -> AsrSettings | None:
        """The ASR model that scores ``cer``: ``--asr`` (its language ``--asr-language``; ``--asr none``: no cer),
        else the run's own ``train.quality_asr``, whose folder is checked here (a run scored on another machine)."""
        t = self.cfg.train
        if language is not None and (asr == "none" or (asr is None and not t.quality_asr)):
            raise UserError("--asr-language is the language of the --asr model: give --asr FOLDER too")
        if asr == "none":
            return None
        folder = asr if asr is not None else t.quality_asr
        if not folder:
            return None
        if asr is None and folder not in (JUDGE, POCKETSPHINX):
            try:
                check_folder(folder)
            except UserError as exc:
                why = "the run's own: --asr FOLDER names another, --asr none scores no cer"
                raise UserError(f"{exc} ({why})") from None
        key = "--asr" if asr is not None else "train.quality_asr"
        lang = language if language is not None else (t.quality_asr_language if asr is None else None)
        return AsrSettings(folder, lang, str(self.inference.device), key=key)

    def _load(self, checkpoint: str) -> tuple[str, int | None]:
        """The checkpoint scored and its step (a file given: its weights replace the run's best)."""
        run = self.inference.run
        if checkpoint in ("best", "latest"):
            path, state = run.load_weights(checkpoint)
        else:
            path = Path(checkpoint)
            if not path.is_file():
                raise UserError(f"--checkpoint {checkpoint}: file not found (give best, latest or a checkpoint file)")
            state = ckpt.safe_load(path)
            load_modules(self.task, state, path, self.inference.model_name)
            for module in self.task.modules().values():
                module.to(self.inference.device).eval()
        step = state.get("step")
        return str(path), int(step) if isinstance(step, int) else None

    def run(self) -> EvalResult:
        """The task's eval summary with the quality metrics of ``items`` utterances, as an :class:`EvalResult`."""
        task, data = self.task, DataRecipe(self.cfg)
        needs = task.needs()
        _, eval_set = data.train_and_eval(needs)
        if eval_set is None or len(eval_set) == 0:
            raise UserError(f"no eval utterances in {self.cfg.data.manifest}; give a corpus with --data")
        loader = data.eval_loader(eval_set, needs)
        settings = self.cfg.train.model_copy(update={"quality_items": self.items, "eval_audio_samples": 0})
        scorer = quality_scorer(task, self.cfg.data, self.items, self.asr)
        with tempfile.TemporaryDirectory(prefix="speechtrain-eval-") as tmp:
            generate = self._onnx_audio(Path(tmp)) if self.runtime == "onnx" else None
            evaluator = Evaluator(task, loader, settings, quality=scorer, generate=generate)
            features = data.device_features(needs)
            device = self.inference.device
            transform = features.to(device).eval() if features is not None else None

            def prepare(batch: Batch) -> Batch:
                moved = batch.to(device)
                return transform(moved, False) if transform is not None else moved

            summary = evaluator.run(self.step or 0, prepare, _off)
        if summary is None:
            raise UserError(f"no eval batch in {self.cfg.data.manifest}")
        scores = {k: float(v) for k, v in summary.items() if _number(v) and k not in _NOT_SCORES}
        if self.runtime == "onnx":  # the task's own eval losses are PyTorch's: kept apart from the graph's scores
            scores = {k: v for k, v in scores.items() if k in METRICS and k != "loss"}
        extra = {k: v for k, v in summary.items() if k not in scores}
        return EvalResult(
            str(self.inference.shown),
            self.checkpoint,
            self.step,
            "onnxruntime" if self.runtime == "onnx" else "torch",
            self.inference.model_name,
            int(summary.get("quality_items", summary.get("items", 0)) or 0),
            scores,
            extra,
        )

    def _onnx_audio(self, folder: Path) -> Callable[[Batch, int], list[np.ndarray]]:
        """The audio of a batch's first items from the run's ONNX graph (vocoders: each item's mel; VITS: its
        text): what the Evaluator scores instead of the PyTorch task's audio."""
        from speechtrain.export.runtime import onnx_runner

        runner = onnx_runner(self.task, self.inference.model_name, folder)
        hop = int(self.cfg.data.hop_length)
        if hasattr(runner, "vocode"):

            def vocode(batch: Batch, n: int) -> list[np.ndarray]:
                frames = batch.frame_lengths
                mels = batch["mel"].float().cpu().numpy()  # host copy, eval only
                return [runner.vocode(mels[i, :, : frames[i]])[: frames[i] * hop] for i in range(min(n, batch.size))]

            return vocode

        def synthesize(batch: Batch, n: int) -> list[np.ndarray]:
            return [runner.synthesize(text) for text in batch.texts[: min(n, batch.size)]]

        return synthesize


def _off() -> Any:
    """No autocast: evaluation in the weights' own precision."""
    import contextlib

    return contextlib.nullcontext()


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)
