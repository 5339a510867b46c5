"""The checkpointer: a run's state out and in, the checkpoint files, resume, and the ``best.pt`` policy.

:class:`Checkpointer` owns what a checkpoint holds and when one is written: :meth:`Checkpointer.state_dict` (the
:class:`~speechtrain.train.state.RunState` counters, the schedulers and scalers, the loader's position, the random
streams, the guards' state, the best metric, the config, and the modules and optimizers: full state dicts, or
FSDP2 shards), :meth:`Checkpointer.load_state_dict` (the same keys as before these parts left the Trainer: every
older checkpoint loads), :meth:`Checkpointer.save` (every rank at the same step; rank 0 writes, atomically, and
keeps the last ``train.keep_checkpoints``, with ``best.pt`` beside them when an evaluation found a new best),
:meth:`Checkpointer.resume` and the last good state the numerics guard's fallback reloads. The files themselves
are :class:`~speechtrain.train.rundir.RunDir`'s and :mod:`~speechtrain.train.checkpoint`'s.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

from speechtrain.accel.precision import resolve_precision
from speechtrain.config import TrainConfig
from speechtrain.data.loader import TrainBatches
from speechtrain.errors import CheckpointError, UserError
from speechtrain.logs import get_logger
from speechtrain.train import checkpoint as ckpt
from speechtrain.train.distributed import any_rank, full_state, gather, load_full_state, load_sharded, save_sharded
from speechtrain.train.eval_schedule import EvalSchedule
from speechtrain.train.metrics import MetricsWriter
from speechtrain.train.numerics import NumericsGuard
from speechtrain.train.oom_guard import OOMGuard, merge_rank_states
from speechtrain.train.optimizers import StageOptimizers
from speechtrain.train.rundir import RunDir
from speechtrain.train.state import RunState
from speechtrain.train.task import OptimizerSpec
from speechtrain.train.wrapping import StageWrapping

log = get_logger(__name__)


class Checkpointer:
    """Saves and restores a run made of the parts it is given (``run_dir`` None: nothing is written)."""

    def __init__(
        self,
        run_dir: RunDir | None,
        train: TrainConfig,
        state: RunState,
        modules: dict[str, nn.Module],
        specs: list[OptimizerSpec],
        optimizers: StageOptimizers,
        wrapping: StageWrapping,
        oom: OOMGuard,
        numerics: NumericsGuard,
        evals: EvalSchedule,
        metrics: MetricsWriter,
        device: torch.device,
        train_loader: TrainBatches | None = None,
        run_config: dict[str, Any] | None = None,
        optim_name: str = "",
    ) -> None:
        self.run_dir, self.train, self.state, self.modules, self.specs = run_dir, train, state, modules, specs
        self.optimizers, self.wrapping, self.oom, self.numerics, self.evals = optimizers, wrapping, oom, numerics, evals
        self.metrics, self.device, self.train_loader, self.run_config = metrics, device, train_loader, run_config
        self.optim_name = optim_name
        self.initial_state: dict[str, Any] | None = None  # fp16's last good state before the first checkpoint

    # ------------------------------------------------------------------ state out
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue the same run (sharded: the full states, every rank calls it)."""
        return {**self.run_state(), **self.model_state()}

    def run_state(self) -> dict[str, Any]:
        """The state without the modules and optimizers (a sharded checkpoint keeps those in its shards)."""
        s, opts = self.state, self.optimizers
        return {
            ckpt.FORMAT_KEY: ckpt.FORMAT_VERSION,
            **s.counters(),
            "schedulers": {k: sch.state_dict() for k, sch in opts.schedulers.items()},
            "scalers": {k: sc.state_dict() for k, sc in opts.scalers.items()},
            "loader": self.train_loader.state_dict() if self.train_loader is not None else None,
            "rng": ckpt.rng_state(),
            **self.oom.state_dict(),
            **self.numerics.state_dict(),
            "interval": s.interval.state_dict(),
            "precision": opts.precision.name,
            **self.evals.state_dict(),
            "config": self.run_config,
        }

    def stage_modules(self) -> dict[str, list[str]]:
        return {s.name: list(s.modules) for s in self.specs}

    def model_state(self) -> dict[str, Any]:
        """Modules and optimizers; sharded: full state dicts (every rank calls it), loadable by any world size."""
        optimizers = self.optimizers.optimizers
        if self.wrapping.sharded:
            mods, opts = full_state(self.modules, optimizers, self.stage_modules())
            return {"modules": mods, "optimizers": opts, "sharded_optimizer_state": True}
        return {
            "modules": {k: m.state_dict() for k, m in self.modules.items()},
            "optimizers": {k: o.state_dict() for k, o in optimizers.items()},
        }

    # ------------------------------------------------------------------ state in
    def load_state_dict(self, state: dict[str, Any], restore_loader: bool = True) -> None:
        """Restore a :meth:`state_dict` (checkpoint)."""
        opts = self.optimizers
        group_keys = {k: {key for g in o.param_groups for key in g} for k, o in opts.optimizers.items()}
        try:
            if ckpt.SHARDS_KEY in state:  # a sharded checkpoint (saved by any number of ranks)
                load_sharded(
                    self.modules,
                    opts.optimizers,
                    self.stage_modules(),
                    Path(state[ckpt.SHARDS_KEY]),
                    state[ckpt.SHARD_REST_KEY],
                )
            elif self.wrapping.sharded or state.get("sharded_optimizer_state"):  # FQN-keyed (FSDP2 runs)
                load_full_state(
                    self.modules, opts.optimizers, self.stage_modules(), state["modules"], state["optimizers"]
                )
            else:
                for k, m in self.modules.items():
                    m.load_state_dict(state["modules"][k])
                for k, o in opts.optimizers.items():
                    o.load_state_dict(state["optimizers"][k])
            for k, s in opts.schedulers.items():
                s.load_state_dict(state["schedulers"][k])
        except (KeyError, RuntimeError, ValueError) as exc:
            raise UserError(
                f"checkpoint does not match this model/optimizer config ({str(exc).splitlines()[0]}); "
                f"resume with the run's own config (speechtrain train --resume RUN_DIR)"
            ) from None
        self._check_optimizer_state(state, group_keys)
        if state["precision"] != opts.precision.name:
            opts.set_precision(resolve_precision(state["precision"], self.device, opts.precision.avoid_bf16))
        for k, scaler in opts.scalers.items():
            if state["scalers"].get(k):
                scaler.load_state_dict(state["scalers"][k])
        self.state.load_counters(state)
        rank, world_size = self.wrapping.rank, self.wrapping.world_size
        oom_ranks = state.get("oom_ranks")  # each rank's caps and counters, when as many ranks saved them
        if oom_ranks and len(oom_ranks) == world_size:
            self.oom.load_state_dict(oom_ranks[rank])
        else:  # one process's state, or the ranks' merged: the smallest caps, every skip, the counters on rank 0
            self.oom.load_state_dict(state if rank == 0 else {**state, "oom_recoveries": 0, "oom_events": []})
        self.numerics.load_state_dict(state)
        self.evals.load_state_dict(state)
        if restore_loader and state.get("loader") is not None and self.train_loader is not None:
            self.train_loader.load_state_dict(state["loader"])
        ranks = state.get("rng_ranks")  # every rank's streams, when saved by as many ranks as there are now
        ckpt.set_rng_state(ranks[rank] if ranks and len(ranks) == world_size else state["rng"])

    def _check_optimizer_state(self, state: dict[str, Any], group_keys: dict[str, set[str]]) -> None:
        """A checkpoint's optimizer state must be of this run's optimizer: another one's loads "fine" and fails
        at the first step (SGD on AdamW state: KeyError 'momentum'), or silently keeps the old settings."""
        saved = state.get("config") if isinstance(state.get("config"), dict) else {}
        saved_name = (saved.get("optim") or {}).get("name") if isinstance(saved, dict) else None
        optimizers = self.optimizers.optimizers
        missing = {
            k: sorted(want - {key for g in optimizers[k].param_groups for key in g}) for k, want in group_keys.items()
        }
        missing = {k: v for k, v in missing.items() if v}
        if (saved_name is None or saved_name == self.optim_name) and not missing:
            return
        lacks = "; ".join(f"{k}: no {', '.join(v)}" for k, v in missing.items())
        where = self.run_dir or "RUN_DIR"
        raise UserError(
            f"the checkpoint's optimizer state is of {saved_name or 'another optimizer'}"
            f"{f' ({lacks})' if lacks else ''}, not of optim.name={self.optim_name}: resume with the run's own "
            f"optim settings (leave out the optim.* overrides), or start a new run from its weights with "
            f"train.init_from={where}"
        )

    # ------------------------------------------------------------------ files
    def due(self, best: bool, stale: bool, heard: bool) -> bool:
        """Whether this step writes a checkpoint: every ``train.save_every`` steps, the last step, a new best
        (``best.pt`` too), an early stop, ``train.max_audio_seconds`` heard."""
        t, step = self.train, self.state.step
        return step % t.save_every == 0 or step == t.max_steps or best or stale or heard

    def save(self, best: bool = False) -> Path | None:
        """Atomically write ``checkpoints/step_N.pt`` (and ``best.pt``), keep the last K.

        Every rank calls it at the same step (it gathers every rank's RNG state); rank 0 alone writes the
        file. Sharded (FSDP2): every rank first writes its shards to a temporary folder, which rank 0 renames
        to ``step_N.dcp`` before writing ``step_N.pt`` (run state only) last, as the commit marker. A failed
        write is a CheckpointError on every rank. None is written while the latest steps were non-finite (every
        rank decides the same: the guard's counts are the same on every rank): the last finite checkpoint stays
        the one a resume continues.
        """
        if self.run_dir is None:
            return None
        if self.numerics.in_streak():  # (a host read of the guard's counts: a save reads the device anyway)
            last = self.last_written()
            log.warning(
                f"warning: step {self.state.step}: no checkpoint written: the latest {self.numerics.in_row} step(s) "
                "were non-finite (skipped); "
                + (f"{last} stays the one to resume from" if last else "no checkpoint was written before them")
            )
            return None
        rank, world_size, step = self.wrapping.rank, self.wrapping.world_size, self.state.step
        ranks = gather((ckpt.rng_state(), os.getpid(), self.oom.state_dict()), world_size) if world_size > 1 else None
        shards, state = None, None
        if self.wrapping.sharded:
            assert ranks is not None
            shards = self.run_dir.shard_temp(step, ranks[0][1])
            rest = save_sharded(self.modules, self.optimizers.optimizers, self.stage_modules(), shards)
            state = {**self.run_state(), ckpt.SHARD_REST_KEY: rest, "shard_ranks": world_size}
        error: CheckpointError | None = None
        path = None
        if rank == 0:
            state = state if state is not None else self.state_dict()
            if ranks is not None:  # every rank's random streams and OOM state (caps, counters, skips)
                state["rng_ranks"] = [rng for rng, _, _ in ranks]
                state["oom_ranks"] = [oom for _, _, oom in ranks]
                state.update(merge_rank_states(state["oom_ranks"]))
            try:
                path = self.run_dir.save(state, self.train.keep_checkpoints, best, shards)
            except CheckpointError as exc:
                error = exc
        if any_rank(error is not None, self.device, world_size):  # the others must not train on alone
            raise error or CheckpointError(
                f"rank {rank}: rank 0 could not write the checkpoint of step {step} (see its message)"
            )
        return path

    def resume(self, found: tuple[Path, dict[str, Any]] | None = None) -> bool:
        """Load the newest loadable checkpoint of ``run_dir`` (or ``found``, a ``(path, state)`` already read)
        and rewind ``metrics.jsonl`` to its step (the rows after it are written again); False if there is none."""
        if found is None:
            found = self.run_dir.latest(quarantine=self.wrapping.rank == 0) if self.run_dir else None
        if found is None:
            return False
        self.load_state_dict(found[1])
        self.metrics.rewind(self.state.step)
        log.info(f"resumed from {found[0]} (step {self.state.step})")
        return True

    def last_written(self) -> Path | None:
        """The newest step checkpoint of the run (what a resume continues; None: none)."""
        steps = self.run_dir.steps() if self.run_dir else []
        return steps[-1][1] if steps else None

    def keep_start(self) -> None:
        """fp16 only falls back (reloading the last good state): before the first checkpoint that is the start."""
        if self.initial_state is None and self.state.step == 0 and self.optimizers.precision.use_grad_scaler:
            self.initial_state = ckpt.cpu_copy(self.state_dict())

    def last_good(self) -> dict[str, Any] | None:
        """The state a fallback reloads: the newest checkpoint, else the start (:meth:`keep_start`)."""
        found = self.run_dir.latest() if self.run_dir else None
        return found[1] if found is not None else self.initial_state
