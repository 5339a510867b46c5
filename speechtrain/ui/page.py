"""What the tabs of the page share: the workspace, the inputs every tab reads (recipe, dataset, format, the
switches' overrides), and the small helpers of the handlers (status lines, tables, plots).

Each tab is its own module (:mod:`speechtrain.ui.tabs`): ``layout(ws)`` makes its components inside its
``gr.Tab``, ``wire(...)`` attaches its handlers once every tab's components exist (a tab's handler may read
another tab's inputs or update another tab's outputs). :func:`speechtrain.ui.app.build_app` puts them together.
"""

from __future__ import annotations

import functools
import inspect
import os
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr
import pandas as pd

from speechtrain.errors import UserError
from speechtrain.paths import Roots
from speechtrain.ui import backend, jobs, runs
from speechtrain.ui.uploads import UploadLimits

POLL_SECONDS = 1.0
SWITCH_COLUMNS = ["setting", "recommended", "recipe", "use", "why"]


class Workspace:
    """Where the UI keeps things: run directories under ``runs``, datasets under ``data``; its own
    job folders (prepare, tune, bench, listen) under ``runs/.ui``.

    ``also``: more folders whose runs the page lists (the demo's report folder, ``reports``); ``allow_models``: the
    ``package.module:factory`` models the person who started the UI allows, ``allow_code``: the other config values
    naming code it allows (``KEY=module:function``); every other one is refused
    (:func:`speechtrain.ui.backend.check_runnable`). ``local``: the page is served on this machine only; served
    beyond it, a request may not name model weights for a job to load (:meth:`check_models`). Uploaded zips are
    unpacked in ``runs/.ui/uploads`` (a folder no import name reaches: its path holds ``.ui``), and the server serves
    files from ``runs/.ui/shown`` only: the copies of what the page shows (eval audio, the ladder's chart, the Listen
    tab's output)."""

    def __init__(
        self,
        runs_root: str | Path = "runs",
        data_root: str | Path = "data",
        also: tuple[str | Path, ...] | list[str | Path] = (),
        allow_models: tuple[str, ...] | list[str] = (),
        allow_code: tuple[str, ...] | list[str] = (),
        recipe_folders: tuple[str | Path, ...] | list[str | Path] = (),
        local: bool = True,
        limits: UploadLimits | None = None,
    ) -> None:
        self.limits = limits or UploadLimits()  # what one upload may be (speechtrain ui --max-upload-gb ...)
        self.local = local  # served on this machine only (speechtrain ui --host 127.0.0.1)
        self.runs = Path(runs_root).resolve()
        self.data = Path(data_root).resolve()
        self.ui = self.runs / ".ui"
        self.tuned = self.ui / "tuned"
        self.uploads = self.ui / "uploads"
        self.shown = self.ui / "shown"
        for d in (self.runs, self.data, self.ui, self.shown):
            d.mkdir(parents=True, exist_ok=True)
        self.also = [Path(p).resolve() for p in also if Path(p).resolve() != self.runs]
        self.allow_models = tuple(allow_models)
        self.allow_code = backend.parse_allow_code(allow_code)
        self.recipe_folders = [Path(p).resolve() for p in recipe_folders]
        self.gpu: deque[dict[str, Any]] = deque(maxlen=600)
        #: ``key=value`` override -> ``key=<resolved path>``, as last checked (:meth:`check_path`), for :meth:`start`
        self.checked: dict[str, str] = {}
        self.t0 = time.time()

    def job(self, kind: str) -> Path:
        return self.ui / "jobs" / f"{kind}-{time.strftime('%Y%m%d-%H%M%S')}-{time.time_ns() % 10**6:06d}"

    def last_job(self, kind: str) -> Path | None:
        found = sorted((self.ui / "jobs").glob(f"{kind}-*"))
        return found[-1] if found else None

    def recipes(self) -> list[str]:
        return backend.list_recipes([self.tuned, *self.recipe_folders])

    # ------------------------------------------------------------------ recipes
    def operator_recipe_folders(self) -> list[Path]:
        """Folders whose recipes the operator put there: ./recipes and the shipped recipes/, ``--recipes`` folders,
        and the tuned configs the page wrote (from configs it checked)."""
        return [*backend.recipe_dirs(), *self.recipe_folders, self.tuned]

    def recipe(self, name: str | None) -> Path:
        """The recipe file the page names ``name``: a listed recipe (by name or path), or a ``.yaml`` file under the
        operator's recipe folders or the data roots, each file it ``extends:`` too; else a one-line UserError naming
        those roots. Nothing is read before the check (any other YAML file of the machine, read as a recipe, would
        show its keys in the errors)."""
        if not name:
            raise UserError("choose a recipe (e.g. gpt_tts_tiny)")
        if "/" not in name and "\\" not in name:  # a name: the folders' own recipes only
            stem = name.removesuffix(".yaml").removesuffix(".yml")
            for folder in self.operator_recipe_folders():
                if (folder / f"{stem}.yaml").is_file():
                    return folder / f"{stem}.yaml"
            raise UserError(f"recipe '{name}' is not listed here (recipes: {', '.join(self.recipes()) or 'none'})")
        path = self._recipe_file(Path(name))
        self._check_extends(path)
        return path

    def _recipe_file(self, path: Path, named_by: str = "") -> Path:
        roots = [*self.operator_recipe_folders(), *self.data_roots()]
        full = self.roots(roots).resolve(path)
        if full is not None and path.suffix in (".yaml", ".yml") and full.suffix in (".yaml", ".yml"):
            return full
        raise UserError(
            f"recipe {path}{named_by}: the web UI reads recipes only from its recipe folders and data roots "
            f"({', '.join(str(r) for r in dict.fromkeys(roots))}; speechtrain ui --recipes DIR adds one), as .yaml "
            "files: choose a listed recipe, or put the file there"
        )

    def _check_extends(self, path: Path) -> None:
        """Each file ``path`` extends (``extends: base.yaml``, relative to the file) lies under the recipe roots too:
        a recipe under the uploads must not pull in any other file of the machine."""
        import yaml

        seen: set[Path] = set()
        while path not in seen:
            seen.add(path)
            try:
                raw = yaml.safe_load(path.read_text(encoding="utf-8"))
            except (OSError, ValueError, yaml.YAMLError):
                return  # the config reader says what is wrong with this file (it is under the roots)
            base = raw.get("extends") if isinstance(raw, dict) else None
            if not base:
                return
            path = self._recipe_file(path.parent / str(base), f" (extends: of {path})")

    def is_operators_recipe(self, path: Path) -> bool:
        """A recipe of the operator's folders (:meth:`operator_recipe_folders`), not one of the data roots."""
        return self.roots(self.operator_recipe_folders(), follow=False).inside(path)

    def load_config(self, recipe: str, overrides: list[str], reads_data: bool = True) -> Any:
        """:func:`backend.load_config` of the checked recipe (:meth:`recipe`) with the code this UI allows; with
        ``reads_data`` (every job but the probe) its dataset paths must be under the data roots (:meth:`data_path`)
        and its other path values under the UI's folders (:meth:`check_paths`), but for the values of an operator's
        recipe."""
        path = self.recipe(recipe)
        cfg = backend.load_config(str(path), overrides, self.allow_models, self.allow_code)
        trusted = _saved_values(path) if self.is_operators_recipe(path) else {}
        self.check_models(cfg, trusted)
        if reads_data:
            self.check_paths(cfg, {k: v for k, v in trusted.items() if k not in self.DATA_KEYS})
        return cfg

    def load_run_config(self, run_dir: Path, overrides: list[str] | None = None) -> Any:
        """A run's config with the page's overrides; a path value the overrides change must be under the UI's
        folders (:meth:`check_paths`; the run's own, written by whoever started it, is kept). A run the page started
        that has not yet written its config is said to be starting (it was "not a speechtrain run directory")."""
        if not (Path(run_dir) / "config.yaml").is_file() and runs.run_info(run_dir).status == "starting":
            raise UserError(
                f"{Path(run_dir).name} is starting: its config and first checkpoint are not written yet; try again "
                "in a moment (the Train tab shows its output)"
            )
        cfg = backend.load_run_config(run_dir, overrides or [], self.allow_models, self.allow_code)
        from speechtrain.train.rundir import RunDir

        saved = RunDir(run_dir).config
        trusted = _saved_values(saved) if saved.is_file() else {}
        self.check_models(cfg, trusted)
        self.check_paths(cfg, trusted)
        return cfg

    def check_models(self, cfg: Any, trusted: dict[str, list[str]] | None = None) -> None:
        """Served beyond this machine (not :attr:`local`), the page loads no model weights a request named: every
        value of a field the schema declares with :data:`speechtrain.config.NAMES_MODEL` (``train.quality_asr``,
        the ASR model of ``cer``) is refused but those ``trusted`` lists by key (the operator's recipe, the run's
        saved config); a one-line UserError naming the key and the way to set it."""
        if self.local:
            return
        from speechtrain.config import model_values

        for key, value in model_values(cfg):
            if value not in (trusted or {}).get(key, []):
                raise UserError(
                    f"{key}={value}: served beyond this machine, the web UI loads no model a request names; put "
                    f"{key} in a recipe of its recipe folders (speechtrain ui --recipes DIR), or run from the "
                    "command line"
                )

    # ------------------------------------------------------------------ data roots
    #: the config keys naming files or folders a job reads as a dataset
    DATA_KEYS = ("data.manifest", "data.eval_manifest")

    def data_roots(self) -> list[Path]:
        """The folders the page reads datasets from: ``--data`` and its uploads."""
        return [self.data, self.uploads]

    def roots(self, folders: list[Path], follow: bool = True) -> Roots:
        """The one path check (:class:`speechtrain.paths.Roots`) over ``folders``: paths as the kernel resolves
        them; the operator's links under ``--data`` (``follow``) admit their targets as roots. Made for each check:
        links change while the page runs."""
        return Roots(folders, follow=[self.data] if follow and self.data in folders else [])

    def data_path(self, path: str | Path, key: str = "dataset") -> Path:
        """``path`` (absolute, ``..`` resolved) when it is under one of :meth:`data_roots`, else a one-line UserError
        naming the roots: the page must not read any file of the machine as a dataset (``/etc/passwd`` as an
        LJSpeech manifest would show its lines as errors). The path is resolved as the kernel opens it; a link the
        operator put under ``--data`` is followed and its target is a root (:meth:`roots`)."""
        full = self.roots(self.data_roots()).resolve(path)
        if full is not None:
            return full
        raise UserError(
            f"{key} {path}: the web UI reads datasets only under its data folder {self.data} (speechtrain ui --data) "
            f"and its uploads {self.uploads}: upload a .zip, or put the dataset under {self.data}"
        )

    def path_roots(self, kind: str) -> list[Path]:
        """Where a path value of this kind (:func:`speechtrain.config.path_kind`) may point from the page: datasets
        under the data roots, a run directory under ``--runs``, other files (caches, checkpoints) under ``--runs``
        or ``--data``."""
        if kind == "dataset":
            return self.data_roots()
        return [self.runs] if kind == "run" else [self.runs, self.data]

    def check_path(self, key: str, kind: str, value: str) -> Path:
        """One path value of a config, resolved (:meth:`roots`): under :meth:`path_roots`, never in the UI's own
        folder ``RUNS/.ui`` (what it serves, its jobs, its tuned recipes) but for the uploads' data; a one-line
        UserError naming the key and the roots otherwise. The override ``key=value`` is handed to the jobs the page
        starts as ``key=<the resolved path>`` (:meth:`start`)."""
        if kind == "dataset":
            return self._checked(key, value, self.data_path(value, key))
        roots = self.path_roots(kind)
        full = self.roots(roots).resolve(value)
        own = full is not None and full.is_relative_to(self.ui)
        if full is not None and not (own and (kind == "run" or not full.is_relative_to(self.uploads))):
            return self._checked(key, value, full)
        where = " or ".join(str(r) for r in roots)
        raise UserError(
            f"{key}={value}: the web UI reads and writes only under its folders ({where}, not in its own {self.ui}"
            + ("" if kind == "run" else f" but for {self.uploads}")
            + "): choose a path there, or run it from the command line"
        )

    def _checked(self, key: str, value: str, full: Path) -> Path:
        if len(self.checked) > 4096:  # a long session's overrides: only the latest matter (start follows a check)
            self.checked.clear()
        self.checked[f"{key}={value}"] = f"{key}={full}"
        return full

    def check_paths(self, cfg: Any, trusted: dict[str, list[str]] | None = None) -> None:
        """Every path value of ``cfg`` (the fields the schema declares with a path mark: data.manifest, data.cache_dir,
        train.output_dir, train.init_from, model.checkpoint_dir ...) is under its roots (:meth:`check_path`), but
        the values ``trusted`` lists by key (the operator's recipe, the run's saved config)."""
        from speechtrain.config import path_values

        for key, kind, value in path_values(cfg):
            if value not in (trusted or {}).get(key, []):
                self.check_path(key, kind, value)

    def check_data_paths(self, cfg: Any) -> None:
        """Every dataset path of ``cfg`` (:attr:`DATA_KEYS`) is under the data roots (:meth:`data_path`)."""
        for key in self.DATA_KEYS:
            value = backend.config_value(cfg, key)
            if value:
                self.data_path(str(value), key)

    def reading_data(self) -> Any:
        """A context in which a manifest's audio outside the data roots is refused (skipped, with its reason), for
        the reads the page does in its own process (plan, estimate, the prepare report)."""
        from speechtrain.data.manifest import audio_roots

        return audio_roots(self.data_roots())

    def start(self, folder: Path, argv: list[str]) -> Any:
        """:func:`jobs.start` of a job whose manifests' audio must lie under the data roots (as
        :meth:`reading_data`, told to the job by its environment, the targets of the operator's links among them).
        Each path override of ``argv`` that the page checked (``data.manifest=...``) is handed on as the resolved
        path it was checked as, so the job opens what was checked."""
        from speechtrain.data.manifest import ROOTS_ENV

        roots = self.roots(self.data_roots()).roots
        argv = [self.checked.get(arg, arg) for arg in argv]
        return jobs.start(folder, argv, env={ROOTS_ENV: os.pathsep.join(str(r) for r in roots)})

    # ------------------------------------------------------------------ runs
    def run_paths(self) -> list[Path]:
        """Every run directory the page lists: under ``runs``, then under each of ``also`` that exists."""
        found = runs.find_runs(self.runs)
        for root in self.also:
            found += [p for p in runs.find_runs(root) if p not in found]
        return found

    def run_name(self, path: Path) -> str:
        """A run as the page names it: its path under ``runs``, else under the working directory, else absolute."""
        for root in (self.runs, Path.cwd().resolve()):
            if path.is_relative_to(root):
                return str(path.relative_to(root))
        return str(path)

    def resolve_run(self, run: str | None) -> Path:
        """The run directory the page names ``run``: one the page lists (by its name or path), else a UserError."""
        if not run:
            raise UserError("choose a run (Train or Runs tab)")
        listed = self.run_paths()
        for path in listed:
            if run in (self.run_name(path), str(path)):
                return path
        asked = Path(run) if Path(run).is_absolute() else self.runs / run
        if asked.resolve() in listed:
            return asked.resolve()
        where = " or ".join(str(r) for r in [self.runs, *self.also])
        raise UserError(f"{run}: no run of that name under {where} (choose one from the run list)")

    def run_names(self) -> list[str]:
        return [self.run_name(r.path) for r in self.list_runs()]

    def list_runs(self) -> list[runs.RunInfo]:
        """:func:`runs.list_runs` of every folder the page lists, most recently updated first."""
        return sorted((runs.run_info(p) for p in self.run_paths()), key=lambda r: -r.updated)

    # ------------------------------------------------------------------ served files
    def show(self, path: str | Path | None) -> str | None:
        """A copy of ``path`` in ``runs/.ui/shown`` (the one folder the server serves), made when missing or older."""
        if path is None:
            return None
        import hashlib
        import shutil

        src = Path(path).resolve()
        if src.is_relative_to(self.shown):
            return str(src)
        copy = self.shown / f"{hashlib.sha1(str(src).encode()).hexdigest()[:12]}-{src.name}"
        stat = src.stat()
        if not copy.is_file() or copy.stat().st_mtime < stat.st_mtime or copy.stat().st_size != stat.st_size:
            tmp = copy.with_name(copy.name + ".tmp")
            shutil.copyfile(src, tmp)
            tmp.replace(copy)
        return str(copy)


@dataclass
class Inputs:
    """The page's header (recipe, dataset folder, format) and the Recipe tab's overrides: what prepare, estimate,
    plan, tune, train and bench all read."""

    recipe: Any
    data: Any
    fmt: Any
    switch_text: Any = None
    extra: Any = None

    def all(self) -> list[Any]:
        """The five components, in the order :func:`all_overrides` takes their values."""
        return [self.recipe, self.data, self.fmt, self.switch_text, self.extra]


def _saved_values(path: Path) -> dict[str, list[str]]:
    """The values a config file names itself, by dotted key (a list's items one by one; ``extends:`` merged): the
    path values the page keeps as they are (an operator's recipe, a run's saved config). {} when unreadable."""
    from speechtrain.config import read_yaml

    try:
        raw = read_yaml(path)
    except UserError:
        return {}
    found: dict[str, list[str]] = {}

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, f"{prefix}{k}.")
        else:
            items = node if isinstance(node, list) else [node]
            found[prefix.rstrip(".")] = [str(v) for v in items if isinstance(v, str)]

    walk(raw, "")
    return found


def header(ws: Workspace) -> Inputs:
    """The row above the tabs: recipe, dataset folder or manifest, format."""
    with gr.Row():
        recipe = gr.Dropdown(
            ws.recipes(),
            value="gpt_tts_tiny" if "gpt_tts_tiny" in ws.recipes() else None,
            label="recipe",
            allow_custom_value=True,
            elem_id="recipe",
            scale=2,
        )
        data = gr.Textbox(str(ws.data / "demo"), label="dataset folder or manifest", elem_id="data", scale=3)
        fmt = gr.Dropdown(list(backend.FORMATS), value="auto", label="format", elem_id="format", scale=1)
    return Inputs(recipe, data, fmt)


# -------------------------------------------------------------------------------------------- helpers
def ok(text: str) -> str:
    return text


def err(exc: BaseException) -> str:
    return f"error: {exc}"


def guarded(n_outputs: int):  # noqa: ANN201 - a decorator
    """Bad input (UserError, including the config's ValidationError texts) becomes the status line;
    the other outputs are left as they are."""

    def wrap(fn):  # noqa: ANN001, ANN202
        if inspect.isgeneratorfunction(fn):

            @functools.wraps(fn)
            def gen(*args: Any):  # noqa: ANN202
                try:
                    yield from fn(*args)
                except UserError as exc:
                    yield (err(exc), *[gr.skip()] * (n_outputs - 1)) if n_outputs > 1 else err(exc)

            return gen

        @functools.wraps(fn)
        def call(*args: Any):  # noqa: ANN202
            try:
                return fn(*args)
            except UserError as exc:
                return (err(exc), *[gr.skip()] * (n_outputs - 1)) if n_outputs > 1 else err(exc)

        return call

    return wrap


def df(rows: list[Any], columns: list[str]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=columns)


#: the plots' series colours, in order of first appearance (speechtrain.ui.charts): Vega's own ten (its first,
#: #4c78a8, is what a plot of one series draws)
PALETTE = (
    "#4c78a8", "#f58518", "#e45756", "#72b7b2", "#54a24b", "#eeca3b", "#b279a2", "#ff9da6", "#9d755d", "#bab0ac"
)  # fmt: skip


def _switch_rows(table: Any) -> list[list[Any]]:
    """Rows of the switches table as the page sends them (DataFrame, dict or list)."""
    if table is None:
        return []
    if isinstance(table, pd.DataFrame):
        return table.values.tolist()
    if isinstance(table, dict):
        return list(table.get("data") or [])
    return list(table)


def switch_overrides(table: Any) -> list[str]:
    """``key=value`` for each switch whose 'use' differs from the recipe's value."""
    out = []
    for row in _switch_rows(table):
        if len(row) < 4:
            continue
        key, _rec, recipe, use = (str(c).strip() if c is not None else "" for c in row[:4])
        if key.startswith("note.") or not key or not use or use == recipe:
            continue
        out.append(f"{key}={use}")
    return out


def all_overrides(recipe: str, data: str, fmt: str, switches: str, extra: str) -> list[str]:
    return (
        backend.data_overrides(recipe, data, fmt) + backend.parse_overrides(switches) + backend.parse_overrides(extra)
    )


def err_line(state: jobs.JobState) -> str:
    return state.error or f"error: the command ended with exit code {state.exit_code} (see its output)"
