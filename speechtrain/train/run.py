"""Everything ``speechtrain train`` does, as functions: prepare, build, train, resume, load for inference."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from speechtrain.config import Config, apply_overrides, build_config, read_yaml, save_config
from speechtrain.errors import UserError
from speechtrain.registry import build_task
from speechtrain.train import checkpoint as ckpt
from speechtrain.train.task import Task


def build_data(cfg: Config, task: Task, log: Callable[[str], None] = print) -> tuple[Any, Any, Any]:
    """Prepare the feature cache when missing or stale, then build datasets and loaders."""
    from speechtrain.data.dataset import SpeechDataset
    from speechtrain.data.loader import build_eval_loader, build_train_loader, dataset_fields
    from speechtrain.data.prepare import ensure_prepared

    needs = task.needs()
    report = ensure_prepared(cfg.data, require_text=needs.text)
    if report is not None:
        log(f"prepared the feature cache: {report.summary() if hasattr(report, 'summary') else report}")
    fields = dataset_fields(cfg.data, needs)
    train_ds = SpeechDataset.from_config(cfg.data, "train", fields=fields)
    if len(train_ds) == 0:
        raise UserError(f"no training utterances in {cfg.data.manifest} (after validation); see `speechtrain prepare`")
    try:
        eval_ds = SpeechDataset.from_config(cfg.data, "eval", fields=fields)
    except UserError:
        eval_ds = None
    train_loader = build_train_loader(cfg.data, train_ds, needs, seed=cfg.train.seed)
    eval_loader = build_eval_loader(cfg.data, eval_ds, needs) if eval_ds is not None and len(eval_ds) else None
    return train_ds, train_loader, eval_loader


def load_run_config(run_dir: str | Path, overrides: list[str] | None = None) -> Config:
    """The resolved config saved in a run directory, with ``key=value`` overrides."""
    path = Path(run_dir) / "config.yaml"
    if not path.is_file():
        raise UserError(f"{run_dir} is not a speechtrain run directory (no config.yaml)")
    return build_config(apply_overrides(read_yaml(path), overrides or []))


def train_from_config(
    cfg: Config, resume: str | Path | None = None, log: Callable[[str], None] = print
) -> tuple[Path, dict[str, Any]]:
    """Train as ``speechtrain train`` does; returns the run directory and the fit summary."""
    from speechtrain.train.trainer import Trainer

    run_dir = Path(resume) if resume else Path(cfg.train.output_dir)
    if not resume and ckpt.list_checkpoints(run_dir / "checkpoints"):
        raise UserError(
            f"{run_dir} already holds checkpoints: continue it with `speechtrain train --resume {run_dir}`, "
            f"or choose another train.output_dir"
        )
    if resume:
        cfg.train.output_dir = str(run_dir)
    from speechtrain.train.trainer import seed_everything

    seed_everything(cfg.train.seed)  # model initialisation is part of the run
    task = build_task(cfg)
    train_ds, train_loader, eval_loader = build_data(cfg, task, log)
    run_dir.mkdir(parents=True, exist_ok=True)
    save_config(cfg, run_dir / "config.yaml")
    if not resume:
        task.setup(train_ds)
    trainer = Trainer(cfg, task, train_loader, eval_loader, run_dir, log=log)
    if resume and not trainer.resume():
        log(f"no checkpoint in {run_dir}/checkpoints: starting from step 0")
        task.setup(train_ds)
    summary = trainer.fit()
    return run_dir, summary


def load_task(
    run_dir: str | Path, device: str | torch.device | None = None, which: str = "best"
) -> tuple[Config, Task]:
    """Config and Task of a run with trained weights (``best.pt`` if present, else the newest), in eval mode."""
    run_dir = Path(run_dir)
    cfg = load_run_config(run_dir)
    task = build_task(cfg)
    path = run_dir / "best.pt"
    if which != "best" or not path.is_file():
        found = ckpt.list_checkpoints(run_dir / "checkpoints")
        if not found:
            raise UserError(f"{run_dir} has no checkpoint yet (train it first: speechtrain train --config ...)")
        path = found[-1][1]
    state = ckpt.safe_load(path)
    dev = torch.device(device) if device else torch.device("cuda" if torch.cuda.is_available() else "cpu")
    for name, module in task.modules().items():
        module.load_state_dict(state["modules"][name])
        module.to(dev).eval()
    return cfg, task
