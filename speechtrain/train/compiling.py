"""The compile bookkeeping of a run: which steps compiled (their time is warm-up, not the rate's) and a failed
compile (the modules go back to eager, the failure is written down).

:class:`CompileWatch` owns the run's acceleration plan (:class:`~speechtrain.accel.apply.AccelPlan`, whose
compile record it updates), the warm-up seconds and steps, and the compile events not yet in a metrics row. The
step runner calls :meth:`CompileWatch.failed` when a stage fails to compile; the Trainer times each step with
:meth:`CompileWatch.mark` and :meth:`CompileWatch.count`.
"""

from __future__ import annotations

import json
import traceback
from typing import Any

from torch import nn

from speechtrain.accel.apply import AccelPlan
from speechtrain.accel.compile import compile_seconds, disable_compile, failure_record, is_compile_error
from speechtrain.logs import get_logger
from speechtrain.train.rundir import RunDir

log = get_logger(__name__)


class CompileWatch:
    """torch.compile's share of a run (``rank``: only rank 0 writes ``compile_error.log``)."""

    def __init__(self, accel: AccelPlan, modules: dict[str, nn.Module], run_dir: RunDir | None, rank: int) -> None:
        self.accel, self.modules, self.run_dir, self.rank = accel, modules, run_dir, rank
        record = accel.record("compile")
        self.compiling = record is not None and record.applied
        self.warmup_seconds = 0.0  # wall time of the steps that compiled (kept out of the rates)
        self.steps = 0
        self.events: list[dict[str, Any]] = []
        self.failed_at: int | None = None

    def is_failure(self, exc: BaseException) -> bool:
        """Whether ``exc`` is a compile error of a run that compiles (the stage is then run again in eager)."""
        return self.compiling and is_compile_error(exc)

    def mark(self) -> float:
        """The compile seconds so far (before a step)."""
        return compile_seconds() if self.compiling else 0.0

    def count(self, before: float, step: int, elapsed: float) -> bool:
        """Whether step ``step`` (``elapsed`` seconds, ``before`` from :meth:`mark`) compiled a graph or tried to:
        its time is warm-up then, counted here."""
        warm = compile_seconds() > before if self.compiling else self.failed_at == step
        if warm:
            self.warmup_seconds += elapsed
            self.steps += 1
        return warm

    def take_events(self) -> list[dict[str, Any]]:
        events, self.events = self.events, []
        return events

    def failed(self, exc: BaseException, step: int) -> None:
        """torch.compile failed in step ``step``: its whole traceback goes to ``compile_error.log`` in the run
        directory, its first lines to the log and to the compile record (and ``accel.json``), and the modules
        run in eager from now on. Every rank compiles the same graphs, so every rank gets here in the same
        stage."""
        path = None
        if self.run_dir is not None and self.rank == 0:
            path = self.run_dir.compile_log
            try:
                self.run_dir.mkdir()
                path.write_text("".join(traceback.format_exception(exc)))
            except OSError as err:
                log.warning(f"warning: could not write {path}: {err}")
                path = None
        record = failure_record(exc, step, str(path) if path else None)
        undone = disable_compile(self.modules)
        self.accel.records = [record if r.name == "compile" else r for r in self.accel.records]
        self.compiling = False
        self.failed_at = step
        log.warning(f"warning: {record.detail} (modules back in eager: {', '.join(undone) or 'none'})")
        self.events.append({"event": "compile_failed", "step": step, "detail": record.detail})
        if path is not None and self.run_dir is not None and self.run_dir.accel.is_file():
            try:  # accel.json says what ran: now eager
                saved = json.loads(self.run_dir.accel.read_text())
                saved["accelerations"] = self.accel.records_dict()
                self.run_dir.accel.write_text(json.dumps(saved, indent=2, default=str) + "\n")
            except (OSError, ValueError, KeyError) as err:
                log.warning(f"warning: could not update {self.run_dir.accel}: {err}")
