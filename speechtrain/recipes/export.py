"""``speechtrain export``: a trained run written out, atomically and never over what it came from.

Two kinds of output, both written to a temporary folder beside the target and moved into place only once
every file is whole (a full disk or a kill leaves the target as it was, and no half-written ``model.pth``):

- the family's own format (``task.export(folder)``; xtts: a Coqui XTTS-v2 checkpoint folder);
- ``consolidate``: the run's full weights in one speechtrain checkpoint file, ``OUT/model.pt`` (with the run's
  ``config.yaml`` beside it), whatever layout the run saved them in: the shards of an FSDP2 run (DCP, written by
  any number of ranks) are assembled in one process. ``model.pt`` loads with ``train.init_from=OUT/model.pt``
  and with :func:`speechtrain.train.checkpoint.safe_load`.

The target may be a new or an empty folder; one holding files is refused unless ``force`` (then the exported
files replace theirs one by one, each atomically). A folder the run's config reads from (XTTS's
``model.checkpoint_dir``, the base weights it was fine-tuned from; a ``train.init_from`` source) and the run
directory itself are always refused.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from speechtrain.config import Config, save_config
from speechtrain.errors import CheckpointError, UserError
from speechtrain.logs import get_logger
from speechtrain.recipes import inference
from speechtrain.recipes.common import load_run_config
from speechtrain.train import checkpoint as ckpt

log = get_logger(__name__)


def export_run(
    run_dir: str | Path, out_dir: str | Path, which: str = "best", force: bool = False, consolidate: bool = False
) -> Path:
    """Write run ``run_dir`` to ``out_dir`` (see the module doc); the folder written."""
    run_dir, out = Path(run_dir), Path(out_dir)
    if consolidate:
        cfg = load_run_config(run_dir)
        check_target(out, run_dir, cfg, force)
        return write_folder(out, lambda tmp: consolidated(run_dir, cfg, which, tmp), force)
    cfg, task = inference.load_task(run_dir, device="cpu", which=which)
    export = getattr(task, "export", None)  # an optional method of a family's task
    if not callable(export):
        raise UserError(
            f"{run_dir} is a '{cfg.model.name}' run, which has no export format (xtts has); "
            "`speechtrain export RUN OUT --consolidate` writes any run's weights as one file"
        )
    check_target(out, run_dir, cfg, force)
    return write_folder(out, export, force)


def _paths_in(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [p for v in value.values() for p in _paths_in(v)]
    if isinstance(value, (list, tuple)):
        return [p for v in value for p in _paths_in(v)]
    return []


def protected_folders(run_dir: Path, cfg: Config) -> list[Path]:
    """The folders an export must never write into: the run directory and every folder the run's model
    section or ``train.init_from`` names (or names a file of)."""
    found = [run_dir.resolve()]
    for text in _paths_in(cfg.model.model_dump()) + list(cfg.train.init_from or []):
        path = Path(text).expanduser()
        if len(text) > 1 and path.exists():
            found.append((path if path.is_dir() else path.parent).resolve())
    return found


def check_target(out: Path, run_dir: Path, cfg: Config, force: bool) -> None:
    """Refuse a target that is a file, one of :func:`protected_folders`, or (without ``force``) a folder with
    files in it."""
    if out.exists() and not out.is_dir():
        raise UserError(f"{out} is a file: export writes a folder; choose a new or empty folder")
    target = out.resolve()
    for folder in protected_folders(run_dir, cfg):
        if target == folder:
            what = (
                "the run directory itself" if folder == run_dir.resolve() else "a folder this run's config reads from"
            )
            raise UserError(
                f"{out} is {what} (the base weights it was fine-tuned from, say): exporting there would replace "
                "them; choose a new folder"
            )
    if out.is_dir() and not force:
        present = sorted(p.name for p in out.iterdir())
        if present:
            listed = ", ".join(present[:5]) + (" ..." if len(present) > 5 else "")
            raise UserError(
                f"{out} already holds files ({listed}): export into a new or empty folder, or pass --force to replace "
                "the files an export writes"
            )


def write_folder(out: Path, write: Callable[[Path], Any], force: bool = False) -> Path:
    """``write(folder)`` into a temporary folder beside ``out``, then move its files into ``out`` (the whole
    folder at once when ``out`` is new or empty). A failed write leaves ``out`` as it was: a one-line error."""
    tmp = out.parent / f".{out.name}.export-tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir(parents=True)
        write(tmp)
        for path in tmp.iterdir():
            _fsync(path)
    except UserError:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    except (OSError, RuntimeError) as exc:  # torch.save wraps a failed write in a RuntimeError
        shutil.rmtree(tmp, ignore_errors=True)
        raise _not_exported(out, exc) from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    try:
        if out.is_dir() and not any(out.iterdir()):
            out.rmdir()
        if not out.exists():
            os.replace(tmp, out)
        else:  # --force: each file replaced atomically, the folder's other files kept
            for path in sorted(tmp.iterdir()):
                os.replace(path, out / path.name)
            tmp.rmdir()
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise _not_exported(out, exc) from None
    return out


def _fsync(path: Path) -> None:
    if path.is_file():
        with open(path, "rb") as fh:
            os.fsync(fh.fileno())


def _not_exported(out: Path, exc: BaseException) -> UserError:
    return UserError(
        f"could not write the export to {out}: {ckpt.failure_reason(exc, out.parent)}; "
        f"{ckpt.free_space(out.parent)} free there. Nothing in {out} was changed: free some space (or choose "
        "another disk) and export again"
    )


def consolidated(run_dir: Path, cfg: Config, which: str, folder: Path) -> Path:
    """Write the full weights of run ``run_dir`` (its best or newest loadable checkpoint, either layout) as
    ``folder/model.pt`` with ``folder/config.yaml``; the file written."""
    candidates = [run_dir / "best.pt"] if which == "best" and (run_dir / "best.pt").is_file() else []
    candidates += [p for _, p in reversed(ckpt.list_checkpoints(run_dir / "checkpoints"))]
    if not candidates:
        raise UserError(f"{run_dir} has no checkpoint yet (train it first)")
    for path in candidates:
        try:
            state = ckpt.safe_load(path)
            modules = ckpt.module_states(state, path)  # an FSDP run's shards, assembled here
            break
        except CheckpointError as exc:
            log.warning(f"warning: skipping {exc}")
    else:
        raise CheckpointError(f"{run_dir}: none of its {len(candidates)} checkpoint(s) loads (see the warnings)")
    if not modules:
        raise CheckpointError(f"{path} holds no module weights")
    out = folder / "model.pt"
    single = {
        ckpt.FORMAT_KEY: ckpt.FORMAT_VERSION,
        "modules": modules,
        "config": cfg.to_dict(),
        "step": int(state.get("step", 0)),
        "consolidated_from": path.name,
    }
    with open(out, "wb") as fh:  # a Python file: a full disk is an OSError (ENOSPC), not torch's "unexpected pos"
        torch.save(ckpt.with_checksum(single), fh)  # in the temporary folder: moved into place once whole
    save_config(cfg, folder / "config.yaml")
    n = sum(len(sd) for sd in modules.values())
    log.info(f"consolidated {path.name} (step {single['step']}): {len(modules)} module(s), {n} tensors -> {out.name}")
    return out
