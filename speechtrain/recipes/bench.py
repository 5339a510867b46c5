"""``speechtrain bench``: the benchmark recipe.

:mod:`speechtrain.bench` measures (timed loop, ladder, report); this recipe builds what one row of
the ladder runs from its resolved config: the task (its data-dependent setup shared by the rows),
the training set (the prepared corpus, or ``--fake-data`` synthetic utterances), and either the
plain PyTorch loop or the Trainer the training recipe builds. A row measured in a fresh process runs
``python -m speechtrain.recipes.bench SPEC.json OUT.json``.
"""

from __future__ import annotations

import copy
import json
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch

from speechtrain import ckptio
from speechtrain.bench.measure import (
    NOT_APPLICABLE_EXIT,
    RowNotApplicable,
    RunResult,
    RunSpec,
    mean_losses,
    profile_summary,
    profile_view,
    profiled_step,
    profiler,
    timed_loop,
)
from speechtrain.config import Config, build_config
from speechtrain.data.loader import TrainLoader
from speechtrain.device import usable_cores
from speechtrain.errors import UserError
from speechtrain.progress import Progress
from speechtrain.recipes.common import build_task
from speechtrain.recipes.data import DataRecipe
from speechtrain.recipes.quality_bench import (
    LadderQuality,
    LadderQualityPlan,
    check_out_dir,
    quality_metric,
    run_ladder_quality,
)
from speechtrain.registry import register_all, registered_families
from speechtrain.train.distributed import barrier, gather, init_from_env, shutdown, world
from speechtrain.train.task import Needs, Task

if TYPE_CHECKING:
    from speechtrain.bench.ablate import Variant


def run_bench(
    cfg: Config,
    *,
    steps: int | None = None,
    warmup: int | None = None,
    min_seconds: float | None = None,
    repeat: int | None = None,
    threads: int | str | None = None,
    max_spread: float | None = None,
    ablate: bool = False,
    skip: Sequence[str] = (),
    isolate: bool = True,
    fake_data: int | None = None,
    time_limit: float | Callable[[int], float] | None = None,
    measure_peak: bool = True,
    tuned: dict[str, Any] | None = None,
    command: str = "",
    on_row: Callable[[int, int, str], None] | None = None,
    progress: Progress | None = None,
    row_timeout: float | None = None,
    log_dir: str | Path | None = None,
    on_report: Callable[[dict[str, Any], str], None] | None = None,
    profile: int = 0,
    quality: LadderQualityPlan | None = None,
) -> dict[str, Any]:
    """Measure the baseline and speechtrain on ``cfg`` (or the whole ladder) and build the report.

    ``steps`` (at least this many timed steps), ``warmup``, ``min_seconds`` (and at least this long),
    ``repeat`` (passes over the rows, interleaved), ``threads`` (torch threads per row; ``"auto"``:
    the cores left over by the row's loader workers) and ``max_spread`` (widest range of a ratio that
    still counts as a speed-up) default to ``cfg.bench``. ``isolate`` runs each measurement in a fresh
    process (per-configuration peak memory on the CPU). ``fake_data`` benchmarks on that many
    synthetic LJSpeech-like utterances instead of ``data.manifest``. ``time_limit`` bounds each
    measurement's timed region (seconds, at least 2 steps; or a function of the row index).
    ``measure_peak`` times a matmul on the CPU so that MFU has a (measured, not specified) peak.
    ``tuned``: the tuner's overrides (``speechtrain.bench.ablate.tuned_overrides(report.config.data,
    cfg.data)``) for the tuned-batch rung and the ``all`` row. ``on_row(i, n, label)`` is called
    before each measurement (``progress``: a line as each stage and each measurement starts, ``row k of n (pass p
    of P): NAME`` with the time left, and one as each measurement ends); ``on_report(report so far, key of the
    row just measured)`` after each (the CLI
    prints the row's figures and rewrites its JSON and markdown there, so a killed ladder keeps its rows).
    ``row_timeout`` (default ``bench.row_timeout``): seconds a row's process may take in all, then it is
    killed, marked timed out and the next row runs. ``log_dir``: each row's output is kept in
    ``log_dir/<row>.log`` (default: a fresh temporary folder, named in the report). ``profile`` > 0: one
    more run per row under torch.profiler, its view (top ``profile`` host and device operators, the device's
    idle share, launches per step) in the row's ``profile_view``. ``quality`` (with ``ablate``): after the passes,
    every Trainer rung is trained for equal audio with ``quality.repeat`` seeds (:func:`run_ladder_quality`); the
    report gains a "quality after equal audio" column, rewritten through ``on_report(report, "quality:<row>")``
    after every training run.
    """
    from speechtrain.bench.ablate import (
        Variant,
        config_tuned,
        fair_variant,
        plan_ladder,
        run_ladder,
        tuned_batch_size,
    )
    from speechtrain.bench.measure import device_info, probe
    from speechtrain.bench.report import build_report
    from speechtrain.device import resolve_device

    if quality is not None:  # checked before the passes, not after them
        if not ablate:
            raise UserError("the quality column (--quality-audio) is the ablation ladder's: add --ablate")
        if fake_data:
            raise UserError(
                "the quality column (--quality-audio) trains and scores on the corpus (data.manifest): leave out "
                "--fake-data"
            )
        quality_metric(cfg, quality.metric)
        check_out_dir(quality.out_dir)
    b = cfg.bench
    steps = b.steps if steps is None else steps
    warmup = b.warmup if warmup is None else warmup
    min_seconds = b.min_seconds if min_seconds is None else min_seconds
    repeat = b.repeat if repeat is None else repeat
    threads = b.threads if threads is None else threads
    max_spread = b.max_spread if max_spread is None else max_spread
    dev = resolve_device(cfg.train.device)
    cores = usable_cores()
    saved_threads = torch.get_num_threads()
    torch.set_num_threads(cores if threads == "auto" else int(threads))  # the CPU peak at the rows' thread count
    if progress is not None:
        progress.stage("probing the device" + (" (timing a matmul for the CPU's peak)" if measure_peak else ""))
    try:
        probe_result = probe(measure=measure_peak and dev.type == "cpu")
    finally:
        torch.set_num_threads(saved_threads)
    row_timeout = b.row_timeout if row_timeout is None else row_timeout
    if ablate:
        variants = plan_ladder(cfg.data, dev.type, probe_result, skip, tuned)
    else:
        variants = [
            Variant("baseline", "baseline (plain PyTorch loop)", kind="baseline"),
            fair_variant(dev.type),
            Variant("config", "speechtrain (this config)", records=()),
        ]
        for v in variants:
            if v.key in skip and v.key != "config":
                v.skip_reason = f"skipped (--skip {v.key})"
    n = len(variants)
    logs = Path(log_dir) if log_dir is not None else Path(tempfile.mkdtemp(prefix="speechtrain-bench-logs-"))
    window = f"at least {steps} timed steps and {min_seconds:g} s" + (
        " (fewer if time-limited)" if time_limit is not None else ""
    )
    notes = [f"each measurement: {warmup} warm-up steps, then {window}"]
    if row_timeout:
        notes.append(f"each row's process: at most {row_timeout:g} s in all (start, warm-up, compilation), then killed")
    if isolate:
        notes.append(f"each row's output: {logs}/<row>.log")
    if repeat > 1:
        notes.append(
            f"{repeat} passes over the rows, interleaved round-robin; each row shows its median pass and the "
            "range of its passes; a speed-up is the ratio of medians, its range that of the ratios within each pass"
        )
    notes.append(
        f"torch threads per row: {threads}"
        + (" (the cores left over by the row's loader workers)" if threads == "auto" else "")
        + f"; {cores} usable cores"
    )
    if fake_data:
        notes.append(f"data: {fake_data} synthetic LJSpeech-like utterances (--fake-data)")
    info = device_info(probe_result, cfg.train.device)
    info["torch_threads"] = threads
    info["usable_cores"] = cores
    tuned_size = tuned_batch_size(tuned) or tuned_batch_size(config_tuned(cfg.data))

    column: dict[str, Any] | None = None

    def report_of(rows: list[Any]) -> dict[str, Any]:
        return build_report(
            rows, info, probe_result, command, notes, tuned_batch_size=tuned_size, max_spread=max_spread, quality=column
        )

    def on_result(rows: list[Any], i: int) -> None:
        if on_report is not None:
            on_report(report_of(rows), variants[i].key)

    def label(i: int, v: Variant, r: int) -> str:
        if r < 0:
            return v.label + " (profiled run, not ranked)"
        return v.label + (f" (pass {r + 1}/{repeat})" if repeat > 1 else "")

    with tempfile.TemporaryDirectory(prefix="speechtrain-ladder-") as tmp:
        setup_state = str(Path(tmp) / "setup.pt")  # the task's data-dependent setup runs once; later rows load it
        specs = []
        for v in variants:
            raw = variant_raw(cfg, v, dev.type)
            spec = RunSpec(
                name=v.label,
                raw=raw,
                kind=v.kind,
                steps=steps,
                warmup=warmup,
                min_seconds=min_seconds,
                count_flops=v.kind == "baseline" and v.key == "baseline",
                fake_data=fake_data,
                setup_state=setup_state,
                threads=row_threads(threads, raw, cores),
                families=registered_families(),
                source_dir=str(cfg.source_dir) if cfg.source_dir else None,
            )
            specs.append(None if v.skip_reason else spec)
        rows = run_ladder(
            variants,
            specs,
            repeat=repeat,
            isolate=isolate,
            time_limit=time_limit,
            on_row=(lambda i, v, r: on_row(i, n, label(i, v, r))) if on_row else None,
            execute=execute,
            row_timeout=row_timeout,
            log_dir=logs,
            on_result=on_result,
            profile=profile,
            progress=progress,
        )
    if quality is not None:

        def on_run(state: LadderQuality) -> None:
            nonlocal column
            column = state.to_dict()
            if on_report is not None:
                on_report(report_of(rows), f"quality:{state.last or ''}")

        run_ladder_quality(cfg, rows, dev.type, quality, on_run)
    return report_of(rows)


def run_scaling(
    cfg: Config,
    nproc: int,
    *,
    steps: int | None = None,
    warmup: int | None = None,
    repeat: int | None = None,
    threads: int | str | None = None,
    fake_data: int | None = None,
    command: str = "",
    on_row: Callable[[int, int, str], None] | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """``speechtrain bench --nproc N``: ``cfg`` trained in 1..``nproc`` processes (torchrun, DDP) and
    without the gradient all-reduce (:mod:`speechtrain.bench.scaling`); every process gets the same
    batch and ``threads`` torch threads (default: the usable cores shared out over ``nproc``)."""
    from speechtrain.bench.ablate import Variant, run_ladder
    from speechtrain.bench.measure import device_info
    from speechtrain.bench.scaling import build_scaling_report, scaling_variants, variant_processes
    from speechtrain.device import resolve_device

    if nproc < 2:
        raise UserError(f"--nproc must be at least 2 (1..N processes are measured), got {nproc}")
    dev = resolve_device(cfg.train.device)
    if dev.type == "cuda" and torch.cuda.device_count() < nproc:
        raise UserError(
            f"--nproc {nproc} needs {nproc} GPUs (one per process); this machine has {torch.cuda.device_count()}"
        )
    b = cfg.bench
    steps = b.steps if steps is None else steps
    warmup = b.warmup if warmup is None else warmup
    repeat = b.repeat if repeat is None else repeat
    cores = usable_cores()
    per_process = max(1, cores // nproc) if threads in (None, "auto") else int(threads)
    variants = scaling_variants(nproc)
    n = len(variants)
    with tempfile.TemporaryDirectory(prefix="speechtrain-scaling-") as tmp:
        raw = variant_raw(cfg, Variant("config", "config"), dev.type)
        specs = []
        for v in variants:
            processes, sync = variant_processes(v)
            specs.append(
                RunSpec(
                    name=v.label,
                    raw=raw,
                    steps=steps,
                    warmup=warmup,
                    fake_data=fake_data,
                    setup_state=str(Path(tmp) / "setup.pt"),
                    threads=per_process,
                    families=registered_families(),
                    source_dir=str(cfg.source_dir) if cfg.source_dir else None,
                    processes=processes,
                    gradient_sync=sync,
                )
            )
        rows = run_ladder(
            variants,
            specs,
            repeat=repeat,
            on_row=(lambda i, v, r: on_row(i, n, v.label + (f" (pass {r + 1}/{repeat})" if repeat > 1 else "")))
            if on_row
            else None,
            progress=progress,
        )
    notes = [
        f"each measurement: {warmup} warm-up steps, then exactly {steps} timed steps on every rank; a row's seconds "
        "are its slowest rank's, its audio and items the sum over ranks",
        f"every process: the config's batch (weak scaling: n processes train n batches per step) and {per_process} "
        f"torch thread(s); {cores} usable cores"
        + (" (processes share the CPU's cores: their sum caps the scaling)" if dev.type == "cpu" else ""),
        "scaling efficiency: rate(n) / (n x rate(1)), per pass; gradient sync share: 1 - t(step, all-reduce left "
        "out) / t(step), per pass (the exposed gradient communication the backward did not hide)",
        f"process groups: {'NCCL, one GPU per process' if dev.type == 'cuda' else 'gloo on the CPU'}",
    ]
    if repeat > 1:
        notes.append(f"{repeat} passes over the rows, interleaved; the median pass and the range over passes")
    if fake_data:
        notes.append(f"data: {fake_data} synthetic LJSpeech-like utterances (--fake-data)")
    info = device_info(None, cfg.train.device)
    info["torch_threads_per_process"] = per_process
    info["usable_cores"] = cores
    return build_scaling_report(rows, info, command, notes)


def row_threads(threads: int | str, raw: dict[str, Any], cores: int) -> int:
    """Torch threads for a row: ``threads``, or with ``"auto"`` the cores its loader workers leave
    (each worker process takes a core; torch runs its workers single-threaded), at least 1."""
    if threads != "auto":
        return int(threads)
    workers = int((raw.get("data") or {}).get("num_workers") or 0)
    return max(1, cores - workers)


def variant_raw(cfg: Config, variant: Variant, device_type: str) -> dict[str, Any]:
    """The raw config of a row: ``cfg`` + all-off + the row's overrides (``config``: ``cfg`` as it is)."""
    from speechtrain.bench.ablate import row_overrides, set_dotted

    raw = copy.deepcopy(cfg.to_dict())
    for key, value in row_overrides(variant, device_type).items():
        set_dotted(raw, key, value)
    return raw


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
    from speechtrain.memory.stats import reset_peak
    from speechtrain.recipes.train import TrainRecipe

    cfg = build_config(spec.raw)
    size = world()[1]
    if size > 1:
        if spec.kind != "engine":
            raise UserError(f"a {spec.kind} row runs in one process; only speechtrain's own loop runs in several")
        # every rank must run the same steps (each is a collective): a fixed count, no time window
        spec = replace(spec, min_seconds=0.0, time_limit=None)
    if spec.source_dir:
        cfg._source_dir = Path(spec.source_dir)  # the YAML's folder, lost in the raw dict (own models live there)
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
    trained: int | None = None
    if spec.kind in ("baseline", "fair"):
        device = resolve_device(cfg.train.device)
        reset_peak(device)
        explicit = cfg.accel.sdpa is False  # the naive row; the reference keeps the model's SDPA attention
        loop = PlainLoop(cfg, task, device, explicit_attention=explicit, fair=spec.kind == "fair")
        precision = loop.precision
        if spec.kind == "fair":
            applied["fair_loop"] = {
                "applied": True,
                "exact": loop.precision == "fp32",
                "detail": f"{'bf16 autocast' if loop.precision == 'bf16' else 'fp32'}, SDPA, {loop.optimizer_name}, "
                f"random batches of {cfg.data.batch_size}",
                "info": {"precision": loop.precision, "optimizer": loop.optimizer_name},
            }
        if explicit:
            if not loop.explicit_attention_modules:
                raise RowNotApplicable("not applicable: the model has no attention module with a `use_sdpa` switch")
            applied["explicit_attention"] = {
                "applied": True,
                "exact": True,
                "detail": "explicit softmax(QK^T)V attention",
                "info": {"modules": loop.explicit_attention_modules},
            }
        batches = endless(plain_loader(cfg, dataset, needs))
        if spec.count_flops:
            first = loop.prepare(next(batches))
            flops = count_flops(lambda: loop.losses(first))
            loop.zero_grad()
            flops_per_frame = flops / first.padded_frames if flops and first.padded_frames else None
        step: Callable[[Any], Any] = loop.step
    elif spec.kind == "lightning":
        from speechtrain.bench.lightning_row import run_lightning
        from speechtrain.data.loader import DeviceFeatures

        device = resolve_device(cfg.train.device)
        reset_peak(device)
        features = DeviceFeatures(cfg.data, needs)
        counts, extra = run_lightning(
            task,
            plain_loader(cfg, dataset, needs),
            cfg.optim,
            device,
            steps=spec.steps,
            warmup=spec.warmup,
            min_seconds=spec.min_seconds,
            time_limit=spec.time_limit,
            features=features if features.active else None,
            progress=progress,
        )
        precision = extra.pop("precision")
        applied.update(extra)
        return _result(spec, cfg, dataset, None, device, None, precision, applied, counts)
    elif spec.kind == "engine":
        recipe = TrainRecipe(cfg)
        loader = recipe.data_recipe.train_loader(dataset, needs)
        trainer = recipe.build_trainer(task, loader, run_dir=tmp / "run")
        if not spec.gradient_sync:
            trainer.sync = {name: cast(Any, WithoutGradientSync(stage)) for name, stage in trainer.sync.items()}
        device = trainer.device
        reset_peak(device)
        applied = _records(trainer)
        trained = trained_parameters(trainer)
        if trainer.world_size > 1:
            applied["strategy"] = {
                "applied": True,
                "exact": True,
                "detail": f"{trainer.strategy.strategy}: {trainer.strategy.reason}"
                + ("" if spec.gradient_sync else "; gradient sync left out (timing only)"),
                "info": {"strategy": trainer.strategy.strategy},
            }
        precision = trainer.precision.name
        batches = iter(loader)

        def engine_step(batch: Any) -> dict[str, Any]:
            return trainer.train_step([batch])

        step = engine_step

    else:
        raise ValueError(f"unknown run kind {spec.kind!r} (baseline, lightning or engine)")
    outputs: list[Any] | None = [] if spec.record_losses else None
    if spec.profile:
        step = profiled_step(step)
    with profiler(spec.profile, device.type) as prof:
        counts = timed_loop(
            step, batches, spec.steps, spec.warmup, device, spec.time_limit, progress, spec.min_seconds, outputs
        )
    if loader is not None:
        applied.update(_data_record(cfg, loader))
    result = _result(spec, cfg, dataset, loader, device, flops_per_frame, precision, applied, counts)
    result.losses = mean_losses(outputs or [], spec.record_losses)
    result.trained_parameters = trained
    if spec.profile:
        result.profile = profile_summary(prof, spec.profile, device.type)
        result.profile_view = profile_view(prof, spec.profile, device.type, skip_steps=spec.warmup)
    if spec.quality_dir:  # after the timed window: the audio of the trained weights, not part of the rate
        if spec.kind != "engine":
            raise UserError(f"quality_dir: only speechtrain's own loop writes quality audio, not a {spec.kind} row")
        write_quality_audio(trainer, task, recipe.data_recipe, needs, Path(spec.quality_dir))
    return result


def write_quality_audio(trainer: Any, task: Task, data: DataRecipe, needs: Needs, folder: Path) -> list[str]:
    """The task's quality audio (:meth:`Task.quality_audio`: a vocoder's resynthesis from the item's own mel, a TTS
    model's synthesis of the item's text, with its fixed-seed noise) for every held-out (eval split) item, written
    as ``folder/<id>.wav`` at the data's rate; fp32, the modules in eval mode (restored after). Returns the ids.
    What ``bench/peers/run.py`` scores beside the peer's own audio for the same items."""
    import soundfile as sf

    dataset = data.dataset("eval", data.fields(needs))
    if len(dataset) == 0:
        raise UserError("quality_dir: the corpus has no held-out items (data.eval_utterances=0 and no eval manifest)")
    modules = task.modules()
    was_training = {name: m.training for name, m in modules.items()}
    for m in modules.values():
        m.eval()
    folder.mkdir(parents=True, exist_ok=True)
    written: list[str] = []
    try:
        for batch in data.eval_loader(dataset, needs):
            batch = trainer.to_device(batch, training=False)
            for item_id, wav in zip(batch.ids, task.quality_audio(batch, batch.size)):
                sf.write(str(folder / f"{item_id}.wav"), np.clip(wav, -1.0, 1.0), batch.sample_rate, subtype="FLOAT")
                written.append(str(item_id))
    finally:
        for name, m in modules.items():
            m.train(was_training[name])
    return written


def _result(
    spec: RunSpec,
    cfg: Config,
    dataset: Any,
    loader: Any,
    device: torch.device,
    flops_per_frame: float | None,
    precision: str,
    applied: dict[str, Any],
    counts: dict[str, Any],
) -> RunResult:
    from speechtrain.memory.stats import peak_bytes

    bucketed = spec.kind == "engine" and cfg.data.bucketing and not cfg.data.crop_frames
    buckets = loader.num_buckets if bucketed and isinstance(loader, TrainLoader) else 1
    return RunResult(
        items_per_batch_limit=len(dataset) / buckets,
        name=spec.name,
        peak_memory_bytes=peak_bytes(device),
        flops_per_padded_frame=flops_per_frame,
        precision=precision,
        applied=applied,
        threads=torch.get_num_threads(),
        **counts,
    )


class WithoutGradientSync:
    """A stage's DDP with its gradient all-reduce left out (every piece under ``no_sync``): the twin row
    of the scaling bench, whose step time beside the synced row's is the exposed cost of that all-reduce.
    Each rank then steps on its own gradient: for timing only, never for training."""

    def __init__(self, stage: Any) -> None:
        self.stage = stage

    def run(self, fn: Callable[[], Any], sync: bool) -> Any:
        return self.stage.run(fn, False)


def trained_parameters(trainer: Any) -> int:
    """Parameters the trainer's optimizers update (each counted once)."""
    seen: dict[int, int] = {}
    for opt in trainer.optimizers.values():
        for group in opt.param_groups:
            for p in group["params"]:
                seen[id(p)] = p.numel()
    return sum(seen.values())


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


def _setup(task: Task, dataset: Any, state_path: str | None) -> None:
    """``task.setup(dataset)`` once per ladder: the first row saves the fitted modules (codebooks,
    normalisers) and the later rows load them, so every row trains exactly the same model. Under a
    process group rank 0 fits and saves while the others wait, then they load its file."""
    path = Path(state_path) if state_path else None
    rank, size = world()
    if path is None:
        task.setup(dataset)
        return
    first = not path.is_file()
    if first and rank == 0:
        task.setup(dataset)
        torch.save({name: m.state_dict() for name, m in task.modules().items()}, path)
    if first and size > 1:
        barrier()
    if not (first and rank == 0):
        state = ckptio.load(path)
        for name, module in task.modules().items():
            module.load_state_dict(state[name])


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
    _exit_with_parent()
    register_all(spec.families or {})  # the plug-in families of the parent (the test-suite's toy tasks)
    started = init_from_env(None)  # under torchrun (spec.processes > 1): one process per device
    try:
        try:
            result = execute(spec)
        except RowNotApplicable as exc:
            print(str(exc), file=sys.stderr)
            return NOT_APPLICABLE_EXIT
        rank, size = world()
        if size > 1:
            result = merge_ranks(gather(asdict(result), size))
        if rank == 0:
            Path(argv[1]).write_text(json.dumps(asdict(result), default=str))
        return 0
    finally:
        shutdown(started)


def _exit_with_parent() -> None:
    """End this measuring process when the bench that started it is gone (killed with SIGKILL, say): a row
    runs in a process group of its own (so that a row timeout can kill its loader workers with it), which a
    kill of the bench does not reach. A daemon thread looks for a new parent once a second."""
    import os
    import threading
    import time

    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(1.0)
            if os.getppid() != parent:
                os._exit(1)  # no clean-up to wait for: nobody reads this row any more

    threading.Thread(target=watch, name="speechtrain-bench-parent-watch", daemon=True).start()


def merge_ranks(results: list[dict[str, Any]]) -> RunResult:
    """One row from every rank's measurement of the same timed steps: items, audio and frames summed
    (each rank trained its own batches), the slowest rank's seconds (the step waits for it), the
    largest peak memory and data wait, CPU seconds summed."""
    first = RunResult.from_raw(results[0])
    runs = [RunResult.from_raw(r) for r in results]
    peaks = [r.peak_memory_bytes for r in runs if r.peak_memory_bytes is not None]
    cpu = [r.cpu_seconds for r in runs if r.cpu_seconds is not None]
    return replace(
        first,
        processes=len(runs),
        seconds=max(r.seconds for r in runs),
        samples=sum(r.samples for r in runs),
        audio_seconds=sum(r.audio_seconds for r in runs),
        padded_frames=sum(r.padded_frames for r in runs),
        real_frames=sum(r.real_frames for r in runs),
        data_wait_seconds=max(r.data_wait_seconds for r in runs),
        peak_memory_bytes=max(peaks) if peaks else None,
        cpu_seconds=sum(cpu) if len(cpu) == len(runs) else None,
        page_faults=None,
    )


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
