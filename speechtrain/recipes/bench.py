"""``speechtrain bench``: the benchmark recipe.

:mod:`speechtrain.bench` measures (timed loop, ladder, report); this recipe builds what one row of
the ladder runs from its resolved config: the task (its data-dependent setup shared by the rows),
the training set (the prepared corpus, or ``--fake-data`` synthetic utterances), and either the
plain PyTorch loop or the Trainer the training recipe builds. A row measured in a fresh process runs
``python -m speechtrain.recipes.bench SPEC.json OUT.json``.
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from speechtrain.bench.measure import RunResult, RunSpec, timed_loop
from speechtrain.config import Config, build_config
from speechtrain.data.loader import TrainLoader
from speechtrain.errors import UserError
from speechtrain.recipes.common import build_task
from speechtrain.recipes.data import DataRecipe
from speechtrain.registry import register_all
from speechtrain.train.task import Needs


def run_bench(cfg: Config, **kwargs: Any) -> dict[str, Any]:
    """:func:`speechtrain.bench.run_bench` with this recipe measuring the rows run in this process."""
    from speechtrain.bench import run_bench as measure_ladder

    return measure_ladder(cfg, execute=execute, **kwargs)


def load_train_dataset(cfg: Config, needs: Needs, fake_data: int | None = None) -> Any:
    """The training SpeechDataset (prepared when needed), or ``fake_data`` synthetic LJSpeech-like utterances."""
    data = DataRecipe(cfg)
    if fake_data:
        return data.synthetic(fake_data, needs)
    if not cfg.data.manifest:
        raise UserError("data.manifest is not set: give a corpus (data.manifest=PATH) or --fake-data N")
    data.ensure_prepared()
    return data.dataset("train", data.fields(needs))


def execute(spec: RunSpec, progress: Callable[[int], None] | None = None) -> RunResult:
    """Build and measure one configuration in this process."""
    with tempfile.TemporaryDirectory(prefix="speechtrain-bench-") as tmp:
        return _execute(spec, Path(tmp), progress)


def _execute(spec: RunSpec, tmp: Path, progress: Callable[[int], None] | None) -> RunResult:
    from speechtrain.bench.baseline import PlainLoop, endless, plain_loader
    from speechtrain.bench.flops import count_flops
    from speechtrain.device import resolve_device
    from speechtrain.memory.stats import peak_bytes, reset_peak
    from speechtrain.recipes.train import TrainRecipe

    cfg = build_config(spec.raw)
    if spec.threads:
        torch.set_num_threads(spec.threads)
    DataRecipe(cfg).resolve_symbols(prepare=not spec.fake_data)
    torch.manual_seed(cfg.train.seed)
    task = build_task(cfg)
    needs = task.needs()
    dataset = load_train_dataset(cfg, needs, spec.fake_data)
    _setup(task, dataset, spec.setup_state)
    flops_per_frame = None
    applied: dict[str, Any] = {}
    precision = "fp32"
    loader: Any = None
    if spec.kind == "baseline":
        device = resolve_device(cfg.train.device)
        reset_peak(device)
        loop = PlainLoop(cfg, task, device)
        batches = endless(plain_loader(cfg, dataset, needs))
        if spec.count_flops:
            first = loop.prepare(next(batches))
            flops = count_flops(lambda: loop.losses(first))
            loop.zero_grad()
            flops_per_frame = flops / first.padded_frames if flops and first.padded_frames else None
        step = loop.step
    elif spec.kind == "engine":
        recipe = TrainRecipe(cfg)
        loader = recipe.data_recipe.train_loader(dataset, needs)
        trainer = recipe.build_trainer(task, loader, run_dir=tmp / "run")
        device = trainer.device
        reset_peak(device)
        applied = _records(trainer)
        precision = trainer.precision.name
        batches = iter(loader)

        def step(batch: Any) -> None:
            trainer.train_step([batch])

    else:
        raise ValueError(f"unknown run kind {spec.kind!r} (baseline or engine)")
    counts = timed_loop(step, batches, spec.steps, spec.warmup, device, spec.time_limit, progress)
    if loader is not None:
        applied.update(_data_record(cfg, loader))
    bucketed = spec.kind == "engine" and cfg.data.bucketing and not cfg.data.crop_frames
    buckets = loader.num_buckets if bucketed and isinstance(loader, TrainLoader) else 1
    return RunResult(
        items_per_batch_limit=len(dataset) / buckets,
        name=spec.name,
        peak_memory_bytes=peak_bytes(device),
        flops_per_padded_frame=flops_per_frame,
        precision=precision,
        applied=applied,
        **counts,
    )


def _records(trainer: Any) -> dict[str, Any]:
    """What the Trainer says took effect: its acceleration records and one optimizer record per
    stage (``optimizer:<stage>``)."""
    out: dict[str, Any] = {}
    for rec in trainer.accel.records:
        out[str(rec.name)] = _record_dict(rec)
    for stage, rec in trainer.optimizer_records.items():
        out[f"optimizer:{stage}"] = _record_dict(rec)
    return out


def _record_dict(rec: Any) -> dict[str, Any]:
    d = rec.to_dict()
    return {k: d.get(k) for k in ("applied", "exact", "detail", "info")}


def _setup(task: Any, dataset: Any, state_path: str | None) -> None:
    """``task.setup(dataset)`` once per ladder: the first row saves the fitted modules (codebooks,
    normalisers) and the later rows load them, so every row trains exactly the same model."""
    path = Path(state_path) if state_path else None
    if path is not None and path.is_file():
        state = torch.load(path, map_location="cpu", weights_only=True)
        for name, module in task.modules().items():
            module.load_state_dict(state[name])
        return
    task.setup(dataset)
    if path is not None:
        torch.save({name: m.state_dict() for name, m in task.modules().items()}, path)


def _data_record(cfg: Config, loader: Any) -> dict[str, Any]:
    d = cfg.data
    stats = loader.stats() if hasattr(loader, "stats") else {}
    bucketing: dict[str, Any] = {
        "applied": bool(d.bucketing),
        "exact": True,
        "detail": (
            f"{loader.num_buckets if isinstance(loader, TrainLoader) else d.num_buckets} duration buckets"
            + (" (num_buckets=auto)" if d.num_buckets == "auto" else "")
            if d.bucketing
            else "fixed-count random batches"
        )
        + (f"; tuned per-bucket sizes {d.bucket_batch_sizes}" if d.bucket_batch_sizes else ""),
    }
    if isinstance(stats, dict) and stats.get("padding_fraction") is not None:
        bucketing["detail"] += f"; padding {float(stats['padding_fraction']):.1%} over this run's batches"
    workers = {
        "applied": d.num_workers > 0,
        "exact": True,
        "detail": f"num_workers={d.num_workers}, pin_memory={d.pin_memory}, prefetch_factor={d.prefetch_factor}, "
        f"persistent_workers={d.persistent_workers}",
    }
    return {"bucketing": bucketing, "loader": workers}


def _main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m speechtrain.recipes.bench SPEC.json OUT.json", file=sys.stderr)
        return 2
    spec = RunSpec(**json.loads(Path(argv[0]).read_text()))
    register_all(spec.families or {})  # the plug-in families of the parent (the test-suite's toy tasks)
    result = execute(spec)
    Path(argv[1]).write_text(json.dumps(asdict(result), default=str))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
