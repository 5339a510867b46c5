"""A trained run, loaded for inference: what ``synthesize``, ``vocode``, ``classify`` and ``rtf`` need.

:func:`load_task` builds the run's task from its saved ``config.yaml`` and loads its weights
(``best.pt`` when present, else the newest step checkpoint), in eval mode on the device.
:class:`InferenceRecipe` holds one loaded run and turns a ``vocoder_run`` directory among the
synthesis options into a loaded vocoder (cached per directory and device, features checked).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from speechtrain.config import Config
from speechtrain.errors import CheckpointError, UserError
from speechtrain.logs import get_logger
from speechtrain.recipes.common import build_task, load_run_config
from speechtrain.train import checkpoint as ckpt

log = get_logger(__name__)


def load_task(run_dir: str | Path, device: str | torch.device | None = None, which: str = "best") -> tuple[Config, Any]:
    """Config and Task of a run with trained weights (``best.pt`` if present, else the newest), in eval mode.

    A checkpoint that does not load (empty, truncated, damaged) is skipped with a warning for the next
    newest; one that loads but does not hold this run's modules is a :class:`CheckpointError`."""
    run_dir = Path(run_dir)
    cfg = load_run_config(run_dir)
    task = build_task(cfg)
    candidates = [run_dir / "best.pt"] if which == "best" and (run_dir / "best.pt").is_file() else []
    candidates += [p for _, p in reversed(ckpt.list_checkpoints(run_dir / "checkpoints"))]
    if not candidates:
        raise UserError(f"{run_dir} has no checkpoint yet (train it first: speechtrain train --config ...)")
    failures: list[str] = []
    for path in candidates:
        try:
            state = ckpt.safe_load(path)
            break
        except CheckpointError as exc:
            log.warning(f"warning: skipping {exc}")
            failures.append(str(exc))
    else:
        raise CheckpointError(
            f"{run_dir}: none of its {len(candidates)} checkpoint(s) loads (the newest: {failures[0]})"
        )
    dev = torch.device(device) if device else torch.device("cuda" if torch.cuda.is_available() else "cpu")
    load_modules(task, state, path, str(cfg.model.name))
    for module in task.modules().values():
        module.to(dev).eval()
    return cfg, task


def load_modules(task: Any, state: dict[str, Any], path: Path, model_name: str) -> None:
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


class LoadedVocoder:
    """A vocoder run for ``mel_to_audio``: ``vocode(mel)`` and the run's ``cfg`` (its mel features are checked)."""

    def __init__(self, cfg: Config, task: Any) -> None:
        self.cfg, self.task = cfg, task

    def vocode(self, mel: Any) -> Any:
        return self.task.vocode(mel)


_VOCODERS: dict[str, LoadedVocoder] = {}


def load_vocoder(run_dir: str | os.PathLike[str], device: str | torch.device | None = None) -> LoadedVocoder:
    """A vocoder run (cached per directory and device); UserError for a run that cannot vocode."""
    key = f"{os.path.abspath(run_dir)}@{device}"
    if key not in _VOCODERS:
        cfg, task = load_task(Path(run_dir), device=device)
        if not hasattr(task, "vocode"):  # an optional inference method of a family's task
            raise UserError(
                f"{run_dir}: a '{cfg.model.name}' run cannot vocode; pass a vocoder run (model.name=hifigan)"
            )
        _VOCODERS[key] = LoadedVocoder(cfg, task)
    return _VOCODERS[key]


class InferenceRecipe:
    """One trained run, for inference: ``task`` (in eval mode on ``device``) and its ``cfg``."""

    def __init__(self, run_dir: str | Path, device: str | torch.device | None = None, which: str = "best") -> None:
        self.run_dir = Path(run_dir)
        self.cfg, self.task = load_task(run_dir, device=device, which=which)
        self.data = self.cfg.data
        self.model_name = self.cfg.model.name

    @property
    def device(self) -> torch.device:
        """The device of the task's first parameter (CPU when it has none)."""
        for module in self.task.modules().values():
            for p in module.parameters():
                return p.device
        return torch.device("cpu")

    def can(self, method: str) -> bool:
        """Whether the family's task has the inference method (``synthesize``, ``vocode``, ``classify``)."""
        return callable(getattr(self.task, method, None))

    def options(self, options: dict[str, Any]) -> dict[str, Any]:
        """Synthesis options with a ``vocoder_run`` directory replaced by the loaded vocoder."""
        out = dict(options)
        if isinstance(out.get("vocoder_run"), (str, os.PathLike)):
            out["vocoder_run"] = load_vocoder(out["vocoder_run"], device=self.device)
        return out

    def synthesize(self, text: str, **options: Any) -> Any:
        """``task.synthesize(text, **options)`` with the options resolved."""
        return self.task.synthesize(text, **self.options(options))


def load_synthesizer(run_dir: str, device: str | None) -> tuple[Any, Any]:
    """Config and task of a run that can synthesize (UserError otherwise)."""
    from speechtrain.errors import UserError

    cfg, task = load_task(run_dir, device=device)
    if not hasattr(task, "synthesize"):
        raise UserError(
            f"{run_dir} is a '{cfg.model.name}' run, which cannot synthesize from text "
            f"(TTS families: vits, gpt_tts, xtts; a vocoder run is used with --vocoder)"
        )
    return cfg, task
