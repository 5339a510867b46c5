"""A trained run, used: the one recipe behind ``synthesize``, ``vocode``, ``classify``, ``export``, ``rtf`` and
the web UI's Listen tab.

:class:`InferenceRecipe` opens a run directory (:class:`~speechtrain.train.rundir.RunDir`), reads its saved
``config.yaml`` and, for a verb (``synthesize``, ``vocode``, ``classify``, ``export``, ``rtf``), refuses a run
whose family does not offer it before any weights are read (the family's declared capabilities,
:mod:`speechtrain.capabilities`); then it builds the task, loads its weights (``best.pt`` when present, else the
newest step checkpoint that loads) in eval mode on the device, and does what the front doors ask, the same way
for all of them: an NSF vocoder gets f0 measured from the audio whether the command line or the UI asks, a TTS
family gets only the options it takes, ``rtf`` times the very calls the other verbs make.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from speechtrain import registry
from speechtrain.capabilities import (
    CAPABILITIES,
    Classifier,
    Exporter,
    FoldsForInference,
    PitchVocoder,
    Synthesizer,
    Vocoder,
    offered,
)
from speechtrain.config import Config
from speechtrain.errors import CheckpointError, DataError, UserError
from speechtrain.logs import get_logger
from speechtrain.progress import Progress
from speechtrain.recipes.common import build_task, language_sentences, load_run_config
from speechtrain.train import checkpoint as ckpt
from speechtrain.train.rundir import RunDir
from speechtrain.train.task import Task

log = get_logger(__name__)

#: what each verb needs: any one of these capabilities
VERBS: dict[str, tuple[str, ...]] = {
    "synthesize": ("synthesize",),
    "vocode": ("vocode", "vocode_f0"),
    "classify": ("classify",),
    "export": ("export",),
    "rtf": ("synthesize", "vocode", "vocode_f0"),
}

#: why a run whose family lacks a verb's capability is refused it, with what to do instead
WHY_NOT: dict[str, str] = {
    "synthesize": "it cannot synthesize from text (a vocoder run is used with --vocoder)",
    "vocode": "it is not a vocoder (train one, e.g. recipes/vocoder_hifigan.yaml)",
    "classify": "it is not a classifier (train one, e.g. recipes/classifier_cnn_lstm.yaml)",
    "export": "no export format: its best.pt is the model (load it with speechtrain.recipes.inference."
    "InferenceRecipe(RUN_DIR), or start a run from it with train.init_from)",
    "rtf": "it makes no audio: the real-time factor applies to TTS and vocoder runs only",
}


def families_offering(*capabilities: str) -> list[str]:
    """The registered families that offer any of ``capabilities``."""
    return [name for name, fam in registry.families().items() if fam.offers_any(*capabilities)]


def families_taking(option: str) -> list[str]:
    """The registered families whose synthesize takes ``option`` (``vocoder_run``: the ones that make mels)."""
    out = []
    for name in families_offering("synthesize"):
        if option in getattr(registry.task_type(registry.family(name)), "synthesize_options", ()):
            out.append(name)
    return out


def refusal(verb: str, run: str | os.PathLike[str], model_name: str) -> str:
    """Why a ``model_name`` run cannot do ``verb``, with where to go instead."""
    who = ", ".join(families_offering(*VERBS[verb])) or "none"
    return f"{run} is a '{model_name}' run: {WHY_NOT[verb]}; the families that can {verb}: {who}"


def declared_capabilities(cfg: Config) -> set[str] | None:
    """What ``cfg``'s family declares it offers (None for a user's ``module:factory``: known once built)."""
    name = cfg.model.name
    if name is None or registry.is_user_factory(name):
        return None
    return set(registry.family(name).offers)


def load_modules(task: Task, state: dict[str, Any], path: Path, model_name: str) -> None:
    """Load a checkpoint's module weights into ``task``; a CheckpointError naming the file when they are
    missing or belong to another model."""
    saved = state.get("config") if isinstance(state.get("config"), dict) else {}
    saved_model = (saved.get("model") or {}).get("name", "unknown") if isinstance(saved, dict) else "unknown"
    modules = ckpt.module_states(state, path)  # a step file's own, or assembled from its shards (FSDP runs)
    where = f"{path} (saved by a '{saved_model}' run)"
    if not isinstance(modules, dict) or not modules:
        raise CheckpointError(f"{where} holds no module weights; it cannot be loaded into this '{model_name}' run")
    for name, module in task.modules().items():
        if name not in modules:
            if not module.state_dict():
                continue  # a module with nothing to save (features computed from settings)
            raise CheckpointError(
                f"{where} has no weights for module '{name}' of this run's '{model_name}' model (it holds "
                f"{', '.join(sorted(map(str, modules)))}): it is a checkpoint of another model; use that model's run"
            )
        try:
            module.load_state_dict(modules[name])
        except (RuntimeError, ValueError, TypeError, KeyError) as exc:
            first = next((line for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
            raise CheckpointError(
                f"{where}: its '{name}' weights do not fit this run's '{model_name}' model ({first.strip()}); it "
                f"was saved with another model or config"
            ) from None


def load_weights(
    task: Task, run: RunDir, model_name: str, device: str | torch.device | None = None, which: str = "best"
) -> tuple[Path, int | None]:
    """Load a run's weights into its freshly built ``task`` (:meth:`RunDir.load_weights`: ``best.pt`` if present,
    else the newest step checkpoint that loads) and put its modules in eval mode on ``device``; the file the
    weights came from and its training step (what an export records: never another file's)."""
    path, state = run.load_weights(which)
    dev = torch.device(device) if device else torch.device("cuda" if torch.cuda.is_available() else "cpu")
    load_modules(task, state, path, model_name)
    for module in task.modules().values():
        module.to(dev).eval()
    step = state.get("step")
    return path, int(step) if isinstance(step, int) else None


@dataclass
class LoadedRun:
    """A run's config and task with trained weights, and the checkpoint file they were read from."""

    cfg: Config
    task: Task
    checkpoint: Path  # the file whose weights the task holds (best.pt, or the step file a broken best.pt gave way to)
    step: int | None  # that file's training step


def load_run(
    run_dir: str | os.PathLike[str], device: str | torch.device | None = None, which: str = "best"
) -> LoadedRun:
    """:func:`load_task`, with the checkpoint file the weights came from and its step."""
    run = RunDir(run_dir)
    cfg = load_run_config(run)
    task = build_task(cfg)
    path, step = load_weights(task, run, str(cfg.model.name), device, which)
    return LoadedRun(cfg, task, path, step)


def load_task(
    run_dir: str | os.PathLike[str], device: str | torch.device | None = None, which: str = "best"
) -> tuple[Config, Task]:
    """Config and Task of a run with trained weights (``best.pt`` if present, else the newest), in eval mode
    (:meth:`RunDir.load_weights`: a checkpoint that does not load is skipped with a warning for the next; one that
    loads but does not hold this run's modules is a :class:`CheckpointError`)."""
    loaded = load_run(run_dir, device, which)
    return loaded.cfg, loaded.task


@dataclass
class Audio:
    """What synthesis or vocoding made: 1-D float32 samples at ``sample_rate``, and the seconds it took."""

    samples: np.ndarray
    sample_rate: int
    compute_seconds: float

    @property
    def seconds(self) -> float:
        return self.samples.size / self.sample_rate

    @property
    def rtf(self) -> float:
        return self.compute_seconds / self.seconds if self.seconds else float("nan")

    def write(self, path: str | os.PathLike[str]) -> Path:
        """A 16-bit wav (clipped to [-1, 1]); its folder is made. Written whole, then renamed into place
        (:func:`speechtrain.paths.write_atomic`): a full disk leaves no half wav and no traceback."""
        import io

        import soundfile as sf

        from speechtrain.paths import write_atomic

        out = Path(path)
        if out.suffix.lower() != ".wav":
            raise UserError(f"--out {out}: write a .wav file")
        wav = io.BytesIO()
        sf.write(wav, np.clip(self.samples, -1.0, 1.0), self.sample_rate, subtype="PCM_16", format="WAV")
        write_atomic(out, wav.getvalue(), "--out")
        return out


@dataclass
class Classification:
    """A classifier's label, every class's probability, and the seconds it took."""

    label: str
    probabilities: dict[str, float]
    compute_seconds: float

    @property
    def probability(self) -> float:
        return self.probabilities[self.label]


def _as_audio(out: Any) -> np.ndarray:
    if isinstance(out, torch.Tensor):
        out = out.detach().float().cpu().numpy()  # host copy: the result leaves the device
    return np.asarray(out, dtype=np.float32).reshape(-1)


class LoadedVocoder:
    """A mel-only vocoder run as a TTS family's ``vocoder_run``: ``vocode(mel)`` and the run's ``cfg`` (whose
    mel features :func:`speechtrain.models.audio.mel_to_audio` checks against the TTS run's)."""

    def __init__(self, cfg: Config, task: Vocoder) -> None:
        self.cfg, self.task = cfg, task

    def vocode(self, mel: Any) -> np.ndarray:
        return self.task.vocode(mel)


_VOCODERS: dict[str, LoadedVocoder] = {}


def load_vocoder(run_dir: str | os.PathLike[str], device: str | torch.device | None = None) -> LoadedVocoder:
    """A vocoder run to turn a TTS family's mels into audio (cached per directory and device). Refused: a run
    that cannot vocode, and an NSF vocoder (it needs f0, which no TTS family here predicts)."""
    key = f"{RunDir(run_dir)}@{device}"
    if key not in _VOCODERS:
        mel_only = ", ".join(_mel_only_vocoders())
        try:
            cfg = load_run_config(RunDir(run_dir))
        except UserError as exc:
            raise UserError(f"--vocoder {exc}") from None
        declared = declared_capabilities(cfg)
        if declared is not None and not declared & set(VERBS["vocode"]):
            raise UserError(
                f"--vocoder {run_dir} is a '{cfg.model.name}' run, not a vocoder: give a run of a mel-only vocoder "
                f"family ({mel_only}), or leave --vocoder out"
            )
        recipe = InferenceRecipe(run_dir, device=device, verb="vocode")
        if isinstance(recipe.task, PitchVocoder):
            raise UserError(
                f"--vocoder {run_dir} is a '{recipe.model_name}' run, which needs f0 besides the mel; a TTS model "
                f"gives a mel only: use a mel-only vocoder run (families: {mel_only})"
            )
        assert isinstance(recipe.task, Vocoder)
        _VOCODERS[key] = LoadedVocoder(recipe.cfg, recipe.task)
    return _VOCODERS[key]


def _mel_only_vocoders() -> list[str]:
    return [n for n in families_offering("vocode") if n not in families_offering("vocode_f0")]


class InferenceRecipe:
    """One trained run, for inference: ``task`` (eval mode, on ``device``) and its ``cfg``.

    ``verb`` (``synthesize``, ``vocode``, ``classify``, ``export``, ``rtf``): refuse a run that cannot do it, from
    its config alone (before the weights are read) for a registered family, once built for a user's model.
    ``which``: ``best`` (best.pt when present, else the newest step) or ``latest`` (the newest step)."""

    def __init__(
        self,
        run_dir: str | os.PathLike[str],
        device: str | torch.device | None = None,
        which: str = "best",
        verb: str | None = None,
    ) -> None:
        self.run = RunDir(run_dir)
        self.shown = str(run_dir)  # the path as the user gave it, for messages
        self.cfg = load_run_config(self.run)
        self.data = self.cfg.data
        self.model_name = str(self.cfg.model.name)
        declared = declared_capabilities(self.cfg)
        if verb is not None and declared is not None and not declared & set(VERBS[verb]):
            raise UserError(refusal(verb, self.shown, self.model_name))
        self.task = build_task(self.cfg)
        self.capabilities = set(offered(type(self.task))) if declared is None else declared
        if verb is not None and not self.capabilities & set(VERBS[verb]):
            raise UserError(refusal(verb, self.shown, self.model_name))  # a user's model: known once built
        load_weights(self.task, self.run, self.model_name, device, which)
        self._folded = False

    @property
    def device(self) -> torch.device:
        """The device of the task's first parameter (CPU when it has none)."""
        for module in self.task.modules().values():
            for p in module.parameters():
                return p.device
        return torch.device("cpu")

    def _able(self, capability: str) -> Any:
        """The task as the Protocol of ``capability`` (a UserError when it does not offer it)."""
        protocol = CAPABILITIES[capability]
        verb = next(v for v, caps in VERBS.items() if capability in caps)
        if capability not in self.capabilities or not isinstance(self.task, protocol):
            raise UserError(refusal(verb, self.shown, self.model_name))
        return self.task

    # ------------------------------------------------------------------ synthesize
    def synthesis_options(self, options: dict[str, Any]) -> dict[str, Any]:
        """The options a Synthesizer takes (a UserError naming those it does not), with a ``vocoder_run``
        directory loaded (:func:`load_vocoder`)."""
        task: Synthesizer = self._able("synthesize")
        if "vocoder_run" in options and "vocoder_run" not in task.synthesize_options:
            raise UserError(
                f"--vocoder does not apply to {self.shown}: a '{self.model_name}' run makes its audio itself "
                f"(--vocoder serves the runs that make mels: {', '.join(families_taking('vocoder_run'))})"
            )
        unknown = sorted(k for k in options if k not in task.synthesize_options)
        if unknown:
            raise UserError(
                f"{self.model_name} synthesize does not take {', '.join(unknown)} (its options: "
                f"{', '.join(task.synthesize_options)})"
            )
        out = dict(options)
        if isinstance(out.get("vocoder_run"), (str, os.PathLike)):
            out["vocoder_run"] = load_vocoder(out["vocoder_run"], device=self.device)
        if "speaker_wav" in task.synthesize_options and out.get("speaker_wav") is None:
            out["speaker_wav"] = self.default_reference()
        return out

    def default_reference(self) -> str:
        """The voice a family that speaks in the voice of a reference clip (XTTS) uses when given none: the first
        utterance of the run's own corpus (a UserError saying to give one when that corpus is not there)."""
        from speechtrain.data.manifest import read_manifest

        try:
            entries, _ = read_manifest(str(self.data.manifest), self.data.format)
        except (UserError, OSError, TypeError):
            entries = []
        found = next((e.audio_path for e in entries if Path(e.audio_path).is_file()), None)
        if found is None:
            raise UserError(
                f"{self.model_name} synthesize speaks in the voice of a reference clip: give one (--speaker-wav "
                f"FILE.wav); the run's own corpus ({self.data.manifest}) is not there to take one from"
            )
        log.info(f"no reference clip given: speaking in the voice of {found} (the run's corpus)")
        return str(found)

    def synthesize(self, text: str, seed: int | None = None, **options: Any) -> Audio:
        """Speech for ``text`` (``seed``: the sampling noise's, also passed on when the family takes it)."""
        task: Synthesizer = self._able("synthesize")
        if not (text or "").strip():
            raise UserError("give a sentence to speak")
        if seed is not None and "seed" in task.synthesize_options:
            options["seed"] = seed
        opts = self.synthesis_options(options)
        if seed is not None:
            torch.manual_seed(seed)
        t0 = time.perf_counter()
        with torch.inference_mode():
            samples = _as_audio(task.synthesize(text, **opts))
        return Audio(samples, int(task.output_sample_rate), time.perf_counter() - t0)

    # ------------------------------------------------------------------ vocode
    @property
    def needs_f0(self) -> bool:
        """An NSF vocoder: it vocodes a mel with f0."""
        return "vocode_f0" in self.capabilities

    def _prepare_vocoder(self) -> None:
        """Inference only from here on: a task that can fold its modules for it does so, once (HiFi-GAN: weight
        norm into the weights, the same outputs without the per-call recompute)."""
        if not self._folded and isinstance(self.task, FoldsForInference):
            self.task.fold_for_inference()
        self._folded = True

    def vocode(self, mel: Any, f0: Any = None, key_shift: float = 0.0) -> Audio:
        """Audio of a log-mel (n_mels, T_frames); an NSF vocoder needs ``f0`` (Hz per mel frame, 0 = unvoiced),
        moved by ``key_shift`` semitones."""
        if self.needs_f0:
            if f0 is None:
                raise UserError(
                    "an NSF vocoder needs f0 with a mel: give f0 (Hz per mel frame, 0 = unvoiced; --f0 F0.npy), or "
                    "vocode audio, whose f0 is measured"
                )
            f0 = np.asarray(f0, dtype=np.float32) * np.float32(2.0 ** (key_shift / 12.0))
        elif f0 is not None or key_shift:
            raise UserError(f"{self.shown} is a '{self.model_name}' vocoder: it takes no f0 (--f0, --key-shift)")
        self._prepare_vocoder()
        t0 = time.perf_counter()
        with torch.inference_mode():
            samples = _as_audio(self._vocode_call((mel, f0)))
        return Audio(samples, int(self.data.sample_rate), time.perf_counter() - t0)

    def read_audio(self, path: str | os.PathLike[str]) -> np.ndarray:
        """A file's samples at the run's rate (mono float32); a DataError when it does not read."""
        from speechtrain.data.audio import AudioProblem, load_audio

        try:
            wav, _ = load_audio(str(path), self.data.sample_rate)
        except (AudioProblem, OSError) as exc:
            raise DataError(f"{path}: cannot read audio: {exc}") from None
        return wav

    def mel_of(self, wav: np.ndarray) -> np.ndarray:
        """The log-mel of samples at the run's rate, with the run's data settings (n_mels, T_frames)."""
        from speechtrain.data.features import log_mel_numpy

        return log_mel_numpy(wav, self.data)

    def vocode_audio(self, audio: str | os.PathLike[str] | np.ndarray, f0: Any = None, key_shift: float = 0.0) -> Audio:
        """Copy-synthesis: a wav's (or samples') own log-mel through the vocoder; an NSF vocoder's f0 is
        measured from the audio as ``prepare`` measures it unless given."""
        wav = audio if isinstance(audio, np.ndarray) else self.read_audio(audio)
        if self.needs_f0 and f0 is None:
            pitch: PitchVocoder = self._able("vocode_f0")
            f0 = pitch.f0_from_audio(wav)
        return self.vocode(self.mel_of(wav), f0, key_shift)

    # ------------------------------------------------------------------ classify, export
    def classify(self, audio: str | os.PathLike[str] | np.ndarray, sample_rate: int | None = None) -> Classification:
        """Label and class probabilities of one clip (a path, or samples at ``sample_rate``)."""
        task: Classifier = self._able("classify")
        if isinstance(audio, (str, os.PathLike)) and not Path(audio).is_file():
            raise DataError(f"file not found: {audio}")
        t0 = time.perf_counter()
        label, probs = task.classify(audio, sample_rate) if sample_rate is not None else task.classify(audio)
        return Classification(label, {k: float(v) for k, v in probs.items()}, time.perf_counter() - t0)

    def export(self, out_dir: str | os.PathLike[str]) -> Path:
        """The run in its family's original layout (:class:`~speechtrain.capabilities.Exporter`)."""
        task: Exporter = self._able("export")
        return task.export(out_dir)

    # ------------------------------------------------------------------ rtf
    def eval_inputs(self, n: int) -> list[tuple[np.ndarray, np.ndarray | None]]:
        """Up to ``n`` (mel, f0 or None) of the run's eval set (else its training set), to vocode."""
        from speechtrain.recipes.data import DataRecipe

        return DataRecipe(self.cfg).eval_items(n, with_f0=self.needs_f0)

    def rtf(
        self,
        texts: Sequence[str] | None = None,
        items: int = 8,
        warmup: int = 2,
        seed: int | None = 0,
        runtime: str = "torch",
        threads: int | None = None,
        progress: Progress | None = None,
        **options: Any,
    ) -> dict[str, Any]:
        """Real-time factor of the run's inference verb: ``synthesize`` of each text (the built-in sentences by
        default) for a TTS run, ``vocode`` of ``items`` eval mels (with their f0 for an NSF vocoder) for a
        vocoder run; the calls :meth:`synthesize` and :meth:`vocode` make, timed by
        :func:`speechtrain.bench.rtf.measure_rtf`. ``runtime="onnx"``: the run's exported graph is timed in
        onnxruntime (CPU, ``threads``) on the same inputs in the same call, beside PyTorch (``result["onnx"]``,
        ``result["onnx_speedup"]``); a family without an ONNX runner is refused before any timing.
        ``progress``: where the line of each timed call goes (default: a new ``rtf`` one)."""
        from speechtrain.bench.rtf import measure_rtf

        if warmup < 0:
            raise UserError("--warmup must be >= 0")
        if runtime not in ("torch", "onnx"):
            raise UserError(f"--runtime {runtime}: torch or onnx")
        if runtime == "onnx":
            from speechtrain.export.runtime import require_onnx_runner

            require_onnx_runner(self.model_name)
        onnx_call: Callable[[Any, Any], Any]
        if "synthesize" in self.capabilities:
            task: Synthesizer = self._able("synthesize")
            if seed is not None and "seed" in task.synthesize_options:
                options["seed"] = seed
            opts = self.synthesis_options(options)
            if texts:
                inputs: list[Any] = list(texts)
            else:
                inputs, source = language_sentences(self.cfg, items)
                log.info(f"rtf: {len(inputs)} sentences from {source}")
            rate, mode, describe = int(task.output_sample_rate), "synthesize", None
            call: Callable[[Any], Any] = lambda text: task.synthesize(text, **opts)  # noqa: E731
            plain = {k: v for k, v in opts.items() if k not in ("vocoder_run", "seed")}
            onnx_call = lambda runner, text: runner.synthesize(text, **plain)  # noqa: E731
        elif self.capabilities & {"vocode", "vocode_f0"}:
            if texts:
                raise UserError(f"{self.shown} is a vocoder run: it vocodes eval mels, --texts does not apply")
            if "vocoder_run" in options:
                raise UserError(f"{self.shown} is a vocoder run: --vocoder does not apply (it vocodes eval mels)")
            if options:
                raise UserError(f"{self.shown} is a vocoder run: {', '.join(sorted(options))} do not apply")
            self._prepare_vocoder()
            inputs = list(self.eval_inputs(items))
            rate, mode, call = int(self.data.sample_rate), "vocode", self._vocode_call
            describe = lambda pair: f"mel {tuple(pair[0].shape)}"  # noqa: E731
            onnx_call = lambda runner, pair: runner.vocode(*pair) if pair[1] is not None else runner.vocode(pair[0])  # noqa: E731
        else:
            raise UserError(refusal("rtf", self.shown, self.model_name))
        if seed is not None:
            torch.manual_seed(seed)  # the sampling noise (an NSF source's too)
        progress = progress or Progress("rtf")
        progress.stage(f"{warmup} untimed warm-up call(s), then {len(inputs)} timed {mode} call(s)")
        result = measure_rtf(call, inputs, self.device, warmup, rate, mode, describe, on_item=progress.round)
        result["runtime"] = "torch"
        if runtime == "onnx":
            import tempfile

            from speechtrain.export.runtime import onnx_runner

            with tempfile.TemporaryDirectory(prefix="speechtrain-rtf-") as tmp:
                progress.stage("exporting the model to ONNX for onnxruntime")
                runner = onnx_runner(self.task, self.model_name, Path(tmp), threads)
                onnx_progress = Progress("rtf onnxruntime")
                onnx = measure_rtf(
                    lambda x: onnx_call(runner, x), inputs, "cpu", warmup, rate, mode, describe, onnx_progress.round
                )
            onnx["runtime"] = "onnxruntime"
            result["onnx"] = onnx
            result["onnx_speedup"] = result["rtf"] / onnx["rtf"] if onnx["rtf"] > 0 else None
        result["run_dir"] = self.shown
        result["model"] = self.model_name
        result["threads"] = torch.get_num_threads()
        return result

    def _vocode_call(self, pair: tuple[Any, Any]) -> Any:
        """The vocoder's call on (mel, f0 or None): what :meth:`vocode` and :meth:`rtf` time."""
        mel, f0 = pair
        if self.needs_f0:
            task: PitchVocoder = self._able("vocode_f0")
            return task.vocode(mel, f0)
        plain: Vocoder = self._able("vocode")
        return plain.vocode(mel)


def load_synthesizer(run_dir: str | os.PathLike[str], device: str | torch.device | None) -> tuple[Config, Task]:
    """Config and task of a run that can synthesize (UserError otherwise): :class:`InferenceRecipe` with
    ``verb="synthesize"``."""
    recipe = InferenceRecipe(run_dir, device=device, verb="synthesize")
    return recipe.cfg, recipe.task
