"""The training loop: accumulation, multi-optimizer stages, clipping, schedules, mixed precision,
the OOM guard, the numerics guard, checkpoints, evaluation and logging.

One optimizer step = for each stage of the task (one for most models; ``disc`` then ``gen`` for
GANs): forward/backward every micro-batch, each loss scaled by its share of the step's weight,
then unscale, clip, check finite, step. No model code lives here.
"""

from __future__ import annotations

import gc
import math
import random
import signal
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from speechtrain.data.batch import Batch
from speechtrain.data.loader import TimedIterator
from speechtrain.device import resolve_device
from speechtrain.errors import UserError
from speechtrain.memory.oom import is_oom_error, maybe_inject_oom
from speechtrain.train import checkpoint as ckpt
from speechtrain.train.metrics import MetricsWriter
from speechtrain.train.schedule import build_scheduler, lr_scale
from speechtrain.train.task import Task


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch (all devices)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _world() -> tuple[int, int]:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


class Trainer:
    """Runs a :class:`Task` with the settings of a :class:`speechtrain.config.Config`."""

    def __init__(
        self,
        cfg: Any,
        task: Task,
        train_loader: Any = None,
        eval_loader: Any = None,
        run_dir: str | Path | None = None,
        oom_guard: bool = True,
        log: Callable[[str], None] = print,
    ) -> None:
        from speechtrain.accel import apply_accelerations, build_optimizer

        self.cfg, self.task, self.log = cfg, task, log
        self.train_loader, self.eval_loader = train_loader, eval_loader
        self.run_dir = Path(run_dir) if run_dir else None
        self.oom_guard = oom_guard
        self.device = resolve_device(cfg.train.device)
        self.rank, self.world_size = _world()
        seed_everything(cfg.train.seed)

        self.modules: dict[str, nn.Module] = task.modules()
        for m in self.modules.values():
            m.to(self.device)
            m.train()
        self.accel = apply_accelerations(cfg, self.modules, self.device)
        self.precision = self.accel.precision
        from speechtrain.memory.stats import RetryStormDetector, set_memory_fraction

        self.memory_record = set_memory_fraction(cfg.train.memory_fraction, self.device)
        self.retry_storm = RetryStormDetector()
        self._recompiles_warned = False

        self.specs = task.optimizer_specs()
        eff_batch = float(getattr(train_loader, "mean_batch_size", cfg.data.batch_size))
        eff_batch *= cfg.train.grad_accum * self.world_size
        self.lr_multiplier, self.lr_note = lr_scale(cfg.optim, eff_batch)
        self.optimizers: dict[str, torch.optim.Optimizer] = {}
        self.optimizer_records = {}
        for spec in self.specs:
            mods = [self.modules[name] for name in spec.modules]
            opt, rec = build_optimizer(mods, cfg.optim, self.device, self.lr_multiplier * spec.lr_multiplier)
            self.optimizers[spec.name] = opt
            self.optimizer_records[spec.name] = rec
        self.schedulers = {
            name: build_scheduler(opt, cfg.optim, cfg.train.max_steps) for name, opt in self.optimizers.items()
        }
        self.scalers = {name: self._new_scaler() for name in self.optimizers}
        self.device_features = self._build_device_features()

        # run state (all saved in checkpoints)
        self.step = 0
        self.samples_seen = 0
        self.audio_seconds_seen = 0.0
        self.last_epoch = getattr(train_loader, "epoch", 0)
        self.bucket_caps: dict[int, int] = {}  # bucket -> max items per micro-batch learned from OOMs
        self.oom_recoveries = 0
        self.nonfinite_steps = 0
        self.nonfinite_in_row = 0
        self.precision_fallbacks: list[str] = []
        self.best_eval: float | None = None
        self._stop_signal: int | None = None
        self._initial_state: dict[str, Any] | None = None
        self.metrics = MetricsWriter(self.run_dir, cfg.train.tensorboard) if self.run_dir else MetricsWriter(None)
        self._events: list[dict[str, Any]] = []

    # ------------------------------------------------------------------ setup helpers
    def _new_scaler(self) -> torch.amp.GradScaler:
        return torch.amp.GradScaler(self.device.type, enabled=bool(self.precision.use_grad_scaler))

    def _build_device_features(self) -> nn.Module | None:
        from speechtrain.data.loader import DeviceFeatures

        features = DeviceFeatures(self.cfg.data, self.task.needs())
        return features.to(self.device) if features.active else None

    def params_of(self, stage: str) -> list[nn.Parameter]:
        spec = next(s for s in self.specs if s.name == stage)
        return [p for name in spec.modules for p in self.modules[name].parameters() if p.requires_grad]

    # ------------------------------------------------------------------ one optimizer step
    def to_device(self, batch: Batch, training: bool = True) -> Batch:
        """Host batch -> device (non-blocking), then on-device features/augmentation."""
        out = batch.to(self.device, non_blocking=True)  # no-op for tensors already there
        if self.device_features is not None:
            out = self.device_features(out, training=training)
        return out

    def _piece_plan(self, mb: Batch) -> list[Batch]:
        cap = self.bucket_caps.get(mb.bucket if mb.bucket is not None else -1)
        return mb.chunks(cap) if cap else [mb]

    def _forward_backward(
        self, piece: Batch, stage: str, share: float, cache: dict[str, Any], sums: dict[str, torch.Tensor]
    ) -> None:
        maybe_inject_oom(piece)
        dev_piece = self.to_device(piece)
        with self.precision.autocast():
            out = self.task.training_step(dev_piece, stage, cache)
        loss = out["loss"]
        self.scalers[stage].scale(loss.float() * share).backward()
        for k, v in out.items():
            v = v.detach().float()
            sums[k] = sums[k] + v * share if k in sums else v * share

    def _run_stage(
        self, stage: str, micro: list[Batch], weights: list[float], caches: list[dict[str, Any]]
    ) -> dict[str, torch.Tensor]:
        """All micro-batches of one stage; on OOM, lower the bucket's cap and redo the stage."""
        total = sum(weights) or 1.0
        while True:
            sums: dict[str, torch.Tensor] = {}
            failed: Batch | None = None
            try:
                for mb, w, cache in zip(micro, weights, caches):
                    pieces = self._piece_plan(mb)
                    for piece in pieces:
                        piece_w = self.task.batch_weight(piece) if len(pieces) > 1 else w
                        failed = piece
                        self._forward_backward(piece, stage, piece_w / total, cache if len(pieces) == 1 else {}, sums)
                failed = None
            except Exception as exc:
                if not (self.oom_guard and is_oom_error(exc)):
                    raise
                msg = str(exc).splitlines()[0]
                del exc
            if not self._any_rank(failed is not None):
                return sums
            # drop every reference to the failed attempt, then retry the whole stage smaller
            sums.clear()
            for c in caches:
                c.clear()
            self.optimizers[stage].zero_grad(set_to_none=True)
            gc.collect()
            if self.device.type == "cuda":
                torch.cuda.empty_cache()
            if failed is not None:
                if failed.size <= 1:
                    raise UserError(
                        f"out of memory on a single utterance ({failed.ids[0]}, {failed.padded_frames} frames) "
                        f"in stage '{stage}': lower data.max_duration or data.crop_frames, switch on "
                        f"accel.activation_checkpointing / bf16, or use a larger GPU. ({msg})"
                    )
                bucket = failed.bucket if failed.bucket is not None else -1
                new_cap = max(1, failed.size // 2)
                self.bucket_caps[bucket] = min(self.bucket_caps.get(bucket, new_cap), new_cap)
                self.oom_recoveries += 1
                event = {
                    "event": "oom_recovered",
                    "step": self.step + 1,
                    "stage": stage,
                    "bucket": bucket,
                    "failed_items": failed.size,
                    "new_max_items": self.bucket_caps[bucket],
                    "padded_frames": failed.padded_frames,
                }
                self._events.append(event)
                self.log(
                    f"[oom] step {self.step + 1} stage {stage}: {failed.size} items x "
                    f"{failed.padded_frames // failed.size} frames did not fit; bucket {bucket} now at most "
                    f"{self.bucket_caps[bucket]} items per micro-batch, redoing the step in pieces"
                )

    def _any_rank(self, flag: bool) -> bool:
        """True if ``flag`` is set on any rank (one all-reduce under a process group)."""
        if self.world_size == 1:
            return flag
        t = torch.tensor([1.0 if flag else 0.0], device=self.device)
        torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX)
        return bool(t.item())  # host sync: ranks must agree before going on

    def _sync_grads(self, stage: str) -> None:
        if self.world_size == 1:
            return
        for p in self.params_of(stage):
            if p.grad is not None:
                torch.distributed.all_reduce(p.grad)
                p.grad.div_(self.world_size)

    def _optimizer_step(self, stage: str) -> tuple[torch.Tensor, bool]:
        opt, scaler = self.optimizers[stage], self.scalers[stage]
        self._sync_grads(stage)
        scaler.unscale_(opt)
        spec = next(s for s in self.specs if s.name == stage)
        clip = spec.grad_clip if spec.grad_clip is not None else self.cfg.optim.grad_clip
        params = self.params_of(stage)
        grad_norm = torch.nn.utils.clip_grad_norm_(params, clip if clip else float("inf"))
        finite = bool(torch.isfinite(grad_norm).item())  # host sync: one per stage, needed to skip bad steps
        if finite:
            scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        return grad_norm.detach(), finite

    def train_step(self, micro_batches: list[Batch]) -> dict[str, Any]:
        """One optimizer step over ``micro_batches`` (host or device batches) for every stage."""
        weights = [self.task.batch_weight(mb) for mb in micro_batches]
        caches: list[dict[str, Any]] = [{} for _ in micro_batches]
        out: dict[str, Any] = {}
        all_finite = True
        for spec in self.specs:
            # a later stage's backward (a GAN generator through its discriminator) leaves gradients on
            # an earlier stage's parameters: each stage starts from clean gradients
            self.optimizers[spec.name].zero_grad(set_to_none=True)
            sums = self._run_stage(spec.name, micro_batches, weights, caches)
            loss_finite = bool(torch.isfinite(sums["loss"]).item())  # host sync: numerics guard
            if loss_finite:
                grad_norm, grad_finite = self._optimizer_step(spec.name)
            else:
                grad_norm, grad_finite = sums["loss"], False
                self.optimizers[spec.name].zero_grad(set_to_none=True)
            all_finite &= loss_finite and (grad_finite or self._routine_overflow(spec.name))
            prefix = "" if spec is self.specs[-1] else f"{spec.name}_"
            for k, v in sums.items():
                if k == "loss" and prefix:
                    out[f"{spec.name}_loss"] = v
                elif k != "loss" or not prefix:
                    out[k] = v
            out[f"grad_norm_{spec.name}"] = grad_norm
            if spec is self.specs[-1]:
                out["grad_norm"] = grad_norm
        del caches
        for opt in self.optimizers.values():
            opt.zero_grad(set_to_none=True)  # free stray gradients between steps
        self.step += 1
        for mb in micro_batches:
            self.samples_seen += mb.size
            self.audio_seconds_seen += mb.audio_seconds
        if self.cfg.optim.scheduler_interval == "step":
            for s in self.schedulers.values():
                s.step()
        self._numerics_guard(all_finite)
        out["finite"] = all_finite
        return out

    # ------------------------------------------------------------------ numerics guard
    def _routine_overflow(self, stage: str) -> bool:
        """fp16 overflow that the grad scaler handles by backing off its scale (not a numerics fault)."""
        scaler = self.scalers[stage]
        return scaler.is_enabled() and scaler.get_scale() >= 1.0  # host sync, only after an overflow

    def _numerics_guard(self, finite: bool) -> None:
        if finite:
            self.nonfinite_in_row = 0
            return
        self.nonfinite_steps += 1
        self.nonfinite_in_row += 1
        self.log(
            f"[numerics] step {self.step}: non-finite loss or gradient, step skipped ({self.nonfinite_in_row} in a row)"
        )
        k = self.cfg.train.nan_fallback_after
        if self.nonfinite_in_row < k:
            return
        fallback = self.precision.fallback()
        if fallback is None or fallback.name == self.precision.name:
            if self.nonfinite_in_row >= 10 * k:
                raise UserError(
                    f"training diverged: {self.nonfinite_in_row} non-finite steps in a row in {self.precision.name}; "
                    f"lower optim.lr, set optim.grad_clip, or check the data"
                )
            return
        old = self.precision.name
        self._reload_last_good()
        self.precision = fallback
        self.scalers = {name: self._new_scaler() for name in self.optimizers}
        self.nonfinite_in_row = 0
        note = f"{old} -> {fallback.name} after {k} non-finite steps in a row (reloaded the last good state)"
        self.precision_fallbacks.append(note)
        self._events.append({"event": "precision_fallback", "step": self.step, "detail": note})
        self.log(f"[numerics] precision fallback: {note}")

    def _reload_last_good(self) -> None:
        found = ckpt.latest_loadable(self.run_dir / "checkpoints") if self.run_dir else None
        if found is not None:
            self.load_state_dict(found[1], restore_loader=False)
        elif self._initial_state is not None:
            self.load_state_dict(self._initial_state, restore_loader=False)

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue the same run."""
        return {
            ckpt.FORMAT_KEY: ckpt.FORMAT_VERSION,
            "step": self.step,
            "samples_seen": self.samples_seen,
            "audio_seconds_seen": self.audio_seconds_seen,
            "last_epoch": self.last_epoch,
            "modules": {k: m.state_dict() for k, m in self.modules.items()},
            "optimizers": {k: o.state_dict() for k, o in self.optimizers.items()},
            "schedulers": {k: s.state_dict() for k, s in self.schedulers.items()},
            "scalers": {k: s.state_dict() for k, s in self.scalers.items()},
            "loader": self.train_loader.state_dict() if hasattr(self.train_loader, "state_dict") else None,
            "rng": ckpt.rng_state(),
            "bucket_caps": {str(k): v for k, v in self.bucket_caps.items()},
            "oom_recoveries": self.oom_recoveries,
            "nonfinite_steps": self.nonfinite_steps,
            "precision": self.precision.name,
            "precision_fallbacks": list(self.precision_fallbacks),
            "best_eval": self.best_eval,
            "config": self.cfg.to_dict(),
        }

    def load_state_dict(self, state: dict[str, Any], restore_loader: bool = True) -> None:
        """Restore a :meth:`state_dict` (checkpoint)."""
        try:
            for k, m in self.modules.items():
                m.load_state_dict(state["modules"][k])
            for k, o in self.optimizers.items():
                o.load_state_dict(state["optimizers"][k])
            for k, s in self.schedulers.items():
                s.load_state_dict(state["schedulers"][k])
        except (KeyError, RuntimeError, ValueError) as exc:
            raise UserError(
                f"checkpoint does not match this model/optimizer config ({str(exc).splitlines()[0]}); "
                f"resume with the run's own config (speechtrain train --resume RUN_DIR)"
            ) from None
        if state["precision"] != self.precision.name:
            from speechtrain.accel import resolve_precision

            self.precision = resolve_precision(state["precision"], self.device)
            self.scalers = {name: self._new_scaler() for name in self.optimizers}
        for k, s in self.scalers.items():
            if k in state["scalers"] and state["scalers"][k]:
                s.load_state_dict(state["scalers"][k])
        self.step = int(state["step"])
        self.samples_seen = int(state["samples_seen"])
        self.audio_seconds_seen = float(state["audio_seconds_seen"])
        self.last_epoch = int(state["last_epoch"])
        self.bucket_caps = {int(k): int(v) for k, v in state["bucket_caps"].items()}
        self.oom_recoveries = int(state["oom_recoveries"])
        self.nonfinite_steps = int(state["nonfinite_steps"])
        self.precision_fallbacks = list(state["precision_fallbacks"])
        self.best_eval = state["best_eval"]
        if restore_loader and state.get("loader") is not None and hasattr(self.train_loader, "load_state_dict"):
            self.train_loader.load_state_dict(state["loader"])
        ckpt.set_rng_state(state["rng"])

    def save_checkpoint(self, best: bool = False) -> Path | None:
        """Atomically write ``checkpoints/step_N.pt`` (and ``best.pt``), keep the last K."""
        if self.run_dir is None or self.rank != 0:
            return None
        state = self.state_dict()
        path = self.run_dir / "checkpoints" / f"step_{self.step:08d}.pt"
        ckpt.atomic_save(state, path)
        ckpt.prune(self.run_dir / "checkpoints", self.cfg.train.keep_checkpoints)
        if best:
            ckpt.atomic_save(state, self.run_dir / "best.pt")
        return path

    def resume(self) -> bool:
        """Load the newest loadable checkpoint of ``run_dir``; False if there is none."""
        found = ckpt.latest_loadable(self.run_dir / "checkpoints") if self.run_dir else None
        if found is None:
            return False
        self.load_state_dict(found[1])
        self.log(f"resumed from {found[0]} (step {self.step})")
        return True

    # ------------------------------------------------------------------ evaluation
    @torch.no_grad()
    def evaluate(self) -> dict[str, Any] | None:
        """Evaluate on ``eval_loader``; writes audio samples where the task makes them."""
        if self.eval_loader is None:
            return None
        for m in self.modules.values():
            m.eval()
        outputs: list[tuple[float, dict[str, float]]] = []
        audio_written = 0
        cap = self.cfg.train.eval_batches
        try:
            for i, batch in enumerate(self.eval_loader):
                if cap is not None and i >= cap:
                    break
                dev = self.to_device(batch, training=False)
                with self.precision.autocast():
                    metrics = self.task.eval_step(dev)
                outputs.append((self.task.batch_weight(batch), {k: float(v) for k, v in metrics.items()}))
                want = self.cfg.train.eval_audio_samples - audio_written
                if self.task.produces_audio and want > 0:
                    audio_written += self._write_eval_audio(dev, want)
        finally:
            for m in self.modules.values():
                m.train()
        return self.task.eval_summary(outputs) if outputs else None

    def _write_eval_audio(self, batch: Batch, n: int) -> int:
        import soundfile as sf

        wavs = self.task.eval_audio(batch, n)
        folder = self.run_dir / "samples" / f"step_{self.step:08d}" if self.run_dir else None
        for item_id, wav in zip(batch.ids, wavs):
            wav = np.asarray(wav, dtype=np.float32).reshape(-1)
            if folder is not None:
                folder.mkdir(parents=True, exist_ok=True)
                sf.write(folder / f"{item_id}.wav", np.clip(wav, -1, 1), batch.sample_rate)
            self.metrics.audio(f"eval/{item_id}", wav, self.step, batch.sample_rate)
        return len(wavs)

    # ------------------------------------------------------------------ the loop
    def _install_signals(self) -> dict[int, Any]:
        def handler(signum: int, frame: Any) -> None:  # noqa: ARG001
            self._stop_signal = signum

        old = {}
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                old[sig] = signal.signal(sig, handler)
            except ValueError:  # not the main thread
                pass
        return old

    def startup_summary(self) -> str:
        """What runs where, printed at start and saved as accel.json."""
        lines = [f"device: {self.device}  precision: {self.precision.name}  world size: {self.world_size}"]
        lines.append(self.accel.summary())
        for name, rec in self.optimizer_records.items():
            lines.append(f"optimizer[{name}]: {rec.detail}")
        lines.append(f"lr scaling: {self.lr_note}")
        lines.append(f"memory fraction: {self.memory_record.detail}")
        for note in getattr(self.train_loader, "notes", []) or []:
            lines.append(f"data: {note}")
        return "\n".join(lines)

    def _save_records(self) -> None:
        if self.run_dir is None:
            return
        import json

        records = {
            "accelerations": self.accel.records_dict(),
            "optimizers": {k: r.to_dict() for k, r in self.optimizer_records.items()},
            "memory_fraction": self.memory_record.to_dict(),
            "lr_scaling": self.lr_note,
            "precision": self.precision.name,
        }
        (self.run_dir / "accel.json").write_text(json.dumps(records, indent=2, default=str) + "\n")

    def fit(self) -> dict[str, Any]:
        """Train until ``train.max_steps`` (or max_minutes, or a signal). Returns a summary."""
        cfg = self.cfg.train
        if self.train_loader is None:
            raise UserError("Trainer.fit needs a train_loader")
        if self.run_dir is not None:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            self._save_records()
        self.log(self.startup_summary())
        if self._initial_state is None and self.step == 0 and self.precision.use_grad_scaler:
            # only fp16 falls back (reloading the last good state); before the first checkpoint that is the start
            self._initial_state = _cpu_copy(self.state_dict())
        old_handlers = self._install_signals()
        it = TimedIterator(self.train_loader)  # seconds blocked waiting for data
        t_start = time.perf_counter()
        interval = _Interval()
        bar = _progress(cfg.max_steps, self.step, cfg.progress and self.rank == 0)
        reason = "max_steps"
        try:
            while self.step < cfg.max_steps:
                if self._stop_signal is not None:
                    reason = f"signal {signal.Signals(self._stop_signal).name}"
                    break
                if cfg.max_minutes and time.perf_counter() - t_start > cfg.max_minutes * 60:
                    reason = "max_minutes"
                    break
                t0 = time.perf_counter()
                micro = [next(it) for _ in range(cfg.grad_accum)]
                out = self.train_step(micro)
                interval.add(micro, out, it.reset(), time.perf_counter() - t0)
                self._epoch_boundary()
                bar.update(1)
                if self.step % cfg.log_every == 0 or self.step == cfg.max_steps:
                    row = self._log_row(interval)
                    bar.set_postfix(
                        loss=f"{row['loss']:.3f}", aps=f"{row['audio_seconds_per_second']:.1f}", mem=row["mem"]
                    )
                    interval = _Interval()
                eval_now = self.step % cfg.eval_every == 0 or self.step == cfg.max_steps
                save_now = self.step % cfg.save_every == 0 or self.step == cfg.max_steps
                best = self._maybe_eval() if eval_now else False
                if save_now or best:
                    self.save_checkpoint(best=best)
        finally:
            bar.close()
            for sig, h in old_handlers.items():
                signal.signal(sig, h)
        if reason != "max_steps":
            path = self.save_checkpoint()
            self.log(f"stopped ({reason}) at step {self.step}; checkpoint {path}")
        self.metrics.close()
        return {
            "steps": self.step,
            "stopped": reason,
            "oom_recoveries": self.oom_recoveries,
            "nonfinite_steps": self.nonfinite_steps,
            "precision": self.precision.name,
            "precision_fallbacks": self.precision_fallbacks,
            "best_eval": self.best_eval,
        }

    def _epoch_boundary(self) -> None:
        epoch = getattr(self.train_loader, "epoch", self.last_epoch)
        if epoch != self.last_epoch:
            self.last_epoch = epoch
            if self.cfg.optim.scheduler_interval == "epoch":
                for s in self.schedulers.values():
                    s.step()

    def _maybe_eval(self) -> bool:
        summary = self.evaluate()
        if summary is None:
            return False
        row = {"split": "eval", "step": self.step}
        row.update({k: v for k, v in summary.items()})
        self.metrics.write(row)
        loss = summary.get("loss")
        self.log(f"[eval] step {self.step}: " + ", ".join(f"{k}={v:.4g}" for k, v in summary.items() if _num(v)))
        if loss is None or self.step < self.cfg.train.best_after or not math.isfinite(loss):
            return False
        if self.best_eval is None or loss < self.best_eval:
            self.best_eval = float(loss)
            return True
        return False

    def _log_row(self, interval: _Interval) -> dict[str, Any]:
        from speechtrain.memory.stats import memory_stats

        row: dict[str, Any] = {"split": "train", "step": self.step, "epoch": self.last_epoch}
        row.update(interval.means())  # host sync: .item() of the accumulated losses, once per log interval
        for name, opt in self.optimizers.items():
            row[f"lr_{name}"] = opt.param_groups[0]["lr"]
        row["lr"] = self.optimizers[self.specs[-1].name].param_groups[0]["lr"]
        row["samples_seen"] = self.samples_seen
        row["audio_seconds_seen"] = self.audio_seconds_seen
        row["oom_recoveries"] = self.oom_recoveries
        row["nonfinite_steps"] = self.nonfinite_steps
        row["precision"] = self.precision.name
        if self.bucket_caps:
            row["bucket_max_items"] = {str(k): v for k, v in self.bucket_caps.items()}
        mem = memory_stats(self.device)
        row.update({f"mem_{k}": v for k, v in mem.items() if v is not None and k != "device"})
        peak = mem.get("peak") or mem.get("peak_rss") or 0
        row["mem"] = f"{peak / 2**30:.2f}G"
        storm = self.retry_storm.update(mem)
        if storm:
            self.log(f"warning: {storm}")
            row["warning"] = storm
        self._compile_row(row)
        if self._events:
            row["events"] = self._events
            self._events = []
        self.metrics.write(row)
        return row

    def _compile_row(self, row: dict[str, Any]) -> None:
        stats = self.accel.compile_stats()
        if stats is None:
            return
        row["recompiles"] = stats["recompiles"]
        row["graph_breaks"] = stats["graph_breaks"]
        limit = 4 * max(1, self.cfg.data.num_buckets)
        if stats["recompiles"] > limit and not self._recompiles_warned:
            self._recompiles_warned = True
            self.log(
                f"warning: torch.compile recompiled {stats['recompiles']} times (more than {limit}): batch shapes "
                f"vary too much; set data.pad_multiple (e.g. 64) or accel.compile_dynamic=true"
            )


class _Interval:
    """Accumulates step outputs between log rows (tensors stay on the device until means())."""

    def __init__(self) -> None:
        self.sums: dict[str, torch.Tensor] = defaultdict(lambda: torch.zeros(()))
        self.steps = 0
        self.seconds = 0.0
        self.wait = 0.0
        self.audio_seconds = 0.0
        self.padded = 0
        self.real = 0
        self.samples = 0

    def add(self, micro: list[Batch], out: dict[str, Any], wait: float, seconds: float) -> None:
        for k, v in out.items():
            if isinstance(v, torch.Tensor):
                self.sums[k] = self.sums[k].to(v.device) + v.float()
        self.steps += 1
        self.seconds += seconds
        self.wait += wait
        for mb in micro:
            self.audio_seconds += mb.audio_seconds
            self.padded += mb.padded_frames
            self.real += mb.real_frames
            self.samples += mb.size

    def means(self) -> dict[str, Any]:
        n = max(self.steps, 1)
        row = {k: float(v) / n for k, v in self.sums.items()}
        row["audio_seconds_per_second"] = self.audio_seconds / self.seconds if self.seconds else 0.0
        row["samples_per_second"] = self.samples / self.seconds if self.seconds else 0.0
        row["steps_per_second"] = self.steps / self.seconds if self.seconds else 0.0
        row["data_wait_fraction"] = self.wait / self.seconds if self.seconds else 0.0
        row["padding_fraction"] = 1 - self.real / self.padded if self.padded else 0.0
        return row


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _cpu_copy(obj: Any) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, dict):
        return {k: _cpu_copy(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_cpu_copy(v) for v in obj]
    return obj


class _NoBar:
    def update(self, n: int) -> None: ...
    def set_postfix(self, **kw: Any) -> None: ...
    def close(self) -> None: ...


def _progress(total: int, initial: int, enabled: bool) -> Any:
    if not enabled:
        return _NoBar()
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, desc="train", unit="step", file=sys.stderr, dynamic_ncols=True)
