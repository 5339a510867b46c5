"""What an exporter is given (:class:`ExportJob`) and how formats declare themselves (:class:`ExportFormat`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from speechtrain.errors import UserError
from speechtrain.export.common import ExportFiles, ExportResult

if TYPE_CHECKING:
    from speechtrain.config import DataConfig


@dataclass
class ExportJob:
    """One export of a loaded run (the recipe builds it; nothing here reads the whole config)."""

    task: Any  # the family's task, weights loaded, eval mode, on the CPU
    model: Any  # the family's model section
    data: DataConfig
    run_dir: Path
    files: ExportFiles
    name: str  # base name of the model file (Piper: NAME.onnx + NAME.onnx.json)
    texts: list[str] = field(default_factory=list)  # sentences for the checks of a TTS export
    speakers: list[str] = field(default_factory=list)  # training speaker names, in id order
    step: int | None = None  # training step of the weights (jik876's g_XXXXXXXX)
    check: bool = True  # run the exported model in its runtime beside PyTorch

    def result(self, fmt: str) -> ExportResult:
        return ExportResult(fmt, self.files.out_dir)


def accepts_any(model: Any, data: Any) -> list[str]:
    """The contract of a runtime that loads whatever the family writes."""
    return []


@dataclass(frozen=True)
class ExportFormat:
    """A ``--format``: the families it serves, the runtime it targets, and its exporter.

    ``refused`` names families the format cannot serve, with the reason (printed as the error). ``contract`` is
    what the format's runtime accepts, read from the runtime's own code: given the run's model and data
    sections it returns why the runtime could not load this run (each with the recipe change; empty: it can).
    :meth:`export` refuses such a run before anything is written."""

    key: str
    families: tuple[str, ...]
    runtime: str  # what runs the files (the check uses it)
    summary: str
    run: Callable[[ExportJob], ExportResult]
    refused: Mapping[str, str] = field(default_factory=dict)
    contract: Callable[[Any, Any], list[str]] = accepts_any

    def require_loadable(self, model: Any, data: Any) -> None:
        """UserError (exit 2) with the runtime's reasons when it could not load a run of these sections."""
        problems = self.contract(model, data)
        if problems:
            raise UserError(
                f"--format {self.key}: {self.runtime} cannot load this run, nothing written: " + "; ".join(problems)
            )

    def export(self, job: ExportJob) -> ExportResult:
        """The run checked against the runtime's contract, then written (and checked in the runtime)."""
        self.require_loadable(job.model, job.data)
        return self.run(job)
