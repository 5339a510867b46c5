"""The matrix: every model family through every door it declares, under every strategy it accepts.

Computed from the registry (:class:`speechtrain.registry.Family`: what a family offers, its optimizer stages)
and from :mod:`speechtrain.config` (what a config refuses when it is read), never written by hand: ``docs/matrix.md``
is :func:`markdown` of :func:`matrix` (``python3 scripts/write_matrix.py`` writes it, a test checks it), and
``tests/test_matrix.py`` runs every cell that works and checks that every refused one is refused when the
config is read, with the reason shown here.

A model of your own (``model.name: package.module:factory``) has no registry entry: its row is computed from
its task class the same way (:func:`user_row`; the doc shows ``examples/own_model.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from speechtrain import registry
from speechtrain.capabilities import offered
from speechtrain.recipes.inference import WHY_NOT

#: the doors, in table order (the inference verb's door is named by the family's verb)
DOORS = ("train", "resume", "tune", "bench --ablate", "inference", "rtf", "export", "UI API")
#: the strategies, in table order (x2: two processes under torchrun, gloo on the CPU / NCCL on GPUs)
STRATEGIES = ("one process", "torchrun DDP x2", "FSDP2 x2", "tune under torchrun x2")

_VERB_OF = {"synthesize": "synthesize", "vocode_f0": "vocode (mel + f0)", "vocode": "vocode", "classify": "classify"}
_UI_OF = {"synthesize": "/synthesize", "vocode_f0": "/vocode", "vocode": "/vocode", "classify": "/classify"}
#: what the UI's API starts for every family (the CLI in a background process)
UI_JOBS = "/prepare /tune /start_train /stop_train /resume_train /bench"


@dataclass(frozen=True)
class Cell:
    """One door (or strategy) of one family: it works (``how``: the command or endpoint) or is refused (``why``:
    the reason and the alternative, as the refusal message says it)."""

    door: str
    works: bool
    how: str = ""
    why: str = ""

    def text(self) -> str:
        return f"works: {self.how}" if self.works else f"refused: {self.why}"


@dataclass(frozen=True)
class Row:
    """A family's cells: the doors, then the strategies."""

    family: str
    summary: str
    doors: list[Cell] = field(default_factory=list)
    strategies: list[Cell] = field(default_factory=list)

    def cell(self, name: str) -> Cell:
        return next(c for c in [*self.doors, *self.strategies] if c.door == name)


def _export_door(family: str, offers: set[str]) -> Cell:
    """``speechtrain export``: the formats of :data:`speechtrain.export.formats.FORMATS` that serve the family
    (its default first), or the family's own ``Exporter``; else refused with the formats' reasons."""
    from speechtrain.export.formats import FORMATS, NO_FORMAT, formats_of

    served = [f.key for f in formats_of(family)]
    if served:
        return Cell("export", True, how="speechtrain export --format " + " | ".join(served))
    if "export" in offers:
        return Cell("export", True, how="speechtrain export")
    reasons = [f"{f.key}: {f.refused[family]}" for f in FORMATS.values() if family in f.refused]
    return Cell("export", False, why="; ".join(reasons) if reasons else NO_FORMAT)


def _inference_doors(family: str, offers: set[str]) -> list[Cell]:
    verb = next((cap for cap in ("synthesize", "vocode_f0", "vocode", "classify") if cap in offers), None)
    cells = []
    if verb is None:
        cells.append(
            Cell(
                "inference",
                False,
                why="no inference verb: it offers none of synthesize, vocode, classify (each refuses such a run "
                "before reading its weights); use its Task from Python: speechtrain.recipes.inference."
                "InferenceRecipe(RUN_DIR).task",
            )
        )
    else:
        cells.append(Cell("inference", True, how=f"speechtrain {_VERB_OF[verb]}"))
    if verb in ("synthesize", "vocode", "vocode_f0"):
        cells.append(
            Cell("rtf", True, how="speechtrain rtf" + (" (eval mels with their f0)" if verb == "vocode_f0" else ""))
        )
    else:
        cells.append(Cell("rtf", False, why=WHY_NOT["rtf"]))
    cells.append(_export_door(family, offers))
    listen = f" {_UI_OF[verb]}" if verb is not None else ""
    cells.append(Cell("UI API", True, how=UI_JOBS + listen))
    return cells


def _row(name: str, summary: str, offers: set[str], fsdp_refusal: str | None) -> Row:
    doors = [
        Cell("train", True, how="speechtrain train"),
        Cell("resume", True, how="speechtrain train --resume"),
        Cell("tune", True, how="speechtrain tune"),
        Cell("bench --ablate", True, how="speechtrain bench --ablate"),
        *_inference_doors(name, offers),
    ]
    strategies = [
        Cell("one process", True, how="speechtrain train"),
        Cell("torchrun DDP x2", True, how="torchrun --nproc-per-node 2 -m speechtrain train"),
        (
            Cell("FSDP2 x2", False, why=f"{fsdp_refusal}: use train.strategy=ddp")
            if fsdp_refusal
            else Cell("FSDP2 x2", True, how="torchrun ... train train.strategy=fsdp")
        ),
        Cell("tune under torchrun x2", True, how="torchrun --nproc-per-node 2 -m speechtrain tune"),
    ]
    return Row(name, summary, doors, strategies)


def family_row(fam: registry.Family) -> Row:
    """The cells of a registered family, from what it declares."""
    return _row(fam.name, fam.summary, set(fam.offers), fam.fsdp_refusal())


def user_row(name: str, summary: str, task_class: type, stages: int) -> Row:
    """The cells of a model of your own (``package.module:factory``): what its task class offers, and its number
    of optimizer stages (FSDP2 shards one)."""
    why = f"{name} trains {stages} optimizer stages; FSDP2 shards a task of one stage" if stages > 1 else None
    return _row(name, summary, set(offered(task_class)), why)


def user_row_for(factory: str, name: str, summary: str, search: Sequence[Path] = ()) -> Row:
    """:func:`user_row` of the task ``factory`` (``package.module:factory``) builds with the default sections."""
    from speechtrain.config import DataConfig, OpaqueModelConfig

    task = registry.build_task(OpaqueModelConfig(name=factory), DataConfig(), search=search)
    return user_row(name, summary, type(task), len(task.optimizer_specs()))


def matrix(extra: list[Row] | None = None) -> list[Row]:
    """The built-in families' rows (in registry order), then ``extra`` (user models)."""
    return [family_row(f) for f in registry.BUILT_IN.values()] + list(extra or [])


def _shown(cell: Cell, reasons: dict[str, int]) -> str:
    if not cell.works:
        n = reasons.setdefault(cell.why, len(reasons) + 1)
        return f"refused [{n}]"
    if cell.door == "inference":
        return cell.how.removeprefix("speechtrain ")
    if cell.door == "UI API":
        listen = cell.how.removeprefix(UI_JOBS).strip()
        return f"jobs + {listen}" if listen else "jobs"
    return "works"


def markdown(rows: list[Row]) -> str:
    """``docs/matrix.md``: the table (works / refused) and the reasons, as generated."""
    names = [*DOORS, *STRATEGIES]
    reasons: dict[str, int] = {}
    table = [
        "| family | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
        *(f"| {row.family} | " + " | ".join(_shown(row.cell(n), reasons) for n in names) + " |" for row in rows),
    ]
    lines = [
        "# The matrix: every family through every door, under every strategy",
        "",
        "<!-- generated by `python3 scripts/write_matrix.py` from the registry (speechtrain/registry.py) and the",
        "     config's checks (speechtrain/recipes/matrix.py); tests/test_matrix.py checks that this file is what",
        "     it generates, and runs every cell. Do not edit by hand. -->",
        "",
        "`tests/test_matrix.py` tries every cell with a tiny run (a few steps on the demo corpora; torchrun with 2 "
        "gloo processes on the CPU). A cell that works runs; a refused cell is refused when the config (or a run's "
        "saved config) is read, before any work, with the reason below. The inference column names the family's "
        "verb (`speechtrain synthesize`, `vocode`, `classify`); the UI API column the web UI's endpoints: `jobs` "
        f"(`{UI_JOBS}`, the CLI in a background process) and the Listen tab's. A model of your own goes through the "
        "UI when the UI was started with its name (`speechtrain ui --allow-model MODULE:FACTORY`): the page imports "
        "no other code.",
        "",
        *table,
        "",
        "## Why a cell is refused",
        "",
        *(f"{n}. {why}" for why, n in reasons.items()),
        "",
        "## The families",
        "",
        *(f"- **{row.family}**: {row.summary}" for row in rows),
    ]
    return "\n".join(lines) + "\n"
