"""``speechtrain export RUN OUT [--format F]``: load the run once, hand it to the format, check what was written,
and put it in place atomically -- never over what the run came from.

The formats are :data:`speechtrain.export.formats.FORMATS` (one module each); a family's default format is
its first in that table (xtts: ``coqui``, vits: ``piper``, vocoders and the classifier: ``onnx``). A run the
format's runtime cannot load (:attr:`ExportFormat.contract`, read from the runtime's code) is refused from its
config alone, before its weights are read or anything is written.
``consolidate``: the run's full weights in one speechtrain checkpoint file, ``OUT/model.pt`` (with the run's
``config.yaml`` beside it), whatever layout the run saved them in: the shards of an FSDP2 run (DCP, written by
any number of ranks) are assembled in one process. ``model.pt`` loads with ``train.init_from=OUT/model.pt``
and with :func:`speechtrain.train.checkpoint.safe_load`.

Every export is written to a temporary folder beside the target (``.OUT.export-tmp-PID``) and moved into place
only once every file is whole and its checks passed (a full disk or a kill leaves the target as it was, and the
next export to the same target removes, and says, the temporary folders whose writer is gone; an export whose
check fails is left in ``OUT.rejected`` for inspection). The target may be a new or an empty folder; one holding
files is refused unless ``force`` (then the exported files replace theirs one by one, each atomically). A folder the
run's config reads from (XTTS's ``model.checkpoint_dir``, the base weights it was fine-tuned from; a
``train.init_from`` source) and the run directory itself are always refused.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from speechtrain.config import Config, save_config
from speechtrain.errors import CheckpointError, UserError, free_space
from speechtrain.export.common import ExportFiles, ExportResult
from speechtrain.export.formats import FORMATS, format_for
from speechtrain.export.job import ExportJob
from speechtrain.logs import get_logger
from speechtrain.progress import Progress
from speechtrain.recipes.common import load_run_config, run_transcripts
from speechtrain.recipes.inference import load_run
from speechtrain.train import checkpoint as ckpt

log = get_logger(__name__)


def run_speakers(cfg: Config) -> list[str]:
    """The training speakers' names in id order, from the feature cache (empty when it is gone)."""
    try:
        from speechtrain.data.store import FeatureStore

        store = FeatureStore.from_data(cfg.data)
        refs = store.manifests()
        index = store.latest_index(refs[0]) if refs else None
        return list(index.speakers) if index is not None else []
    except (OSError, UserError, ValueError, KeyError):
        return []


def export_run(
    run_dir: str | Path,
    out_dir: str | Path,
    fmt: str | None = None,
    which: str = "best",
    texts: list[str] | None = None,
    name: str | None = None,
    check: bool = True,
    force: bool = False,
    consolidate: bool = False,
) -> ExportResult:
    """Export a run in format ``fmt`` (None: the family's default) into ``out_dir``, or its full weights as one
    file with ``consolidate``; the checks fail loudly (see the module doc)."""
    run_dir, out = Path(run_dir), Path(out_dir)
    progress = Progress("export")  # loading, tracing and checking take minutes on a CPU: a line per stage
    if consolidate:
        progress.stage(f"consolidating the weights of {run_dir}")
        cfg = load_run_config(run_dir)
        check_target(out, run_dir, cfg, force)
        write_folder(out, lambda tmp: consolidated(run_dir, cfg, which, tmp), force)
        return ExportResult("consolidated", out, files=[out / "model.pt", out / "config.yaml"])
    run_cfg = load_run_config(run_dir)
    export_format = format_for(str(run_cfg.model.name), fmt)  # refused before any loading
    export_format.require_loadable(run_cfg.model, run_cfg.data)  # what its runtime cannot load: nothing written
    progress.stage(f"loading {run_dir} ({which} checkpoint) and building the model")
    loaded = load_run(run_dir, device="cpu", which=which)
    cfg, task = loaded.cfg, loaded.task
    check_target(out, run_dir, cfg, force)
    results: list[ExportResult] = []

    def write(tmp: Path) -> None:
        job = ExportJob(
            task=task,
            model=cfg.model,
            data=cfg.data,
            run_dir=run_dir,
            files=ExportFiles(tmp),
            name=name or re.sub(r"[^\w.-]+", "_", run_dir.resolve().name) or "model",
            texts=list(texts) if texts else run_transcripts(cfg),
            speakers=run_speakers(cfg),
            step=loaded.step,  # of the file whose weights are exported, never of one that was refused
            check=check,
        )
        checked = ", then running it in its runtime beside PyTorch (the check)" if check else " (no check)"
        progress.stage(f"tracing and writing the {export_format.key} files{checked}")
        result = export_format.export(job)
        progress.done(f"{export_format.key} {'checked' if check else 'written'}")
        if not result.ok:  # kept beside the target for inspection; the target is left as it was
            rejected = out.parent / f"{out.name}.rejected"
            shutil.rmtree(rejected, ignore_errors=True)
            shutil.copytree(tmp, rejected)
            result.out_dir = rejected
            result.raise_if_failed()
        results.append(result)

    write_folder(out, write, force)
    result = results[0]
    tmp_prefix = str(result.out_dir)
    result.files = [out / Path(p).relative_to(tmp_prefix) if str(p).startswith(tmp_prefix) else p for p in result.files]
    result.out_dir = out
    return result


def describe_formats() -> str:
    """One line per format: key, families, runtime (the CLI's help)."""
    return "; ".join(f"{f.key} ({', '.join(f.families)}: {f.runtime})" for f in FORMATS.values())


def format_keys() -> list[str]:
    return list(FORMATS)


def check_onnx_rtf(family: str) -> None:
    """UserError before any timing when ``rtf --runtime onnx`` cannot serve ``family``."""
    from speechtrain.export.runtime import require_onnx_runner

    require_onnx_runner(family)


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
    clean_stale_temporaries(out)
    tmp = out.parent / f"{export_tmp_prefix(out)}{os.getpid()}"
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


def export_tmp_prefix(out: Path) -> str:
    """The name of an export's temporary folders beside ``out``, less the writer's process id."""
    return f".{out.name}.export-tmp-"


def clean_stale_temporaries(out: Path) -> list[Path]:
    """Remove the temporary folders of earlier exports to ``out`` whose writer is gone (killed mid-export: they
    hold a partial model, gigabytes for XTTS) and say so, one line each; a live writer's folder is kept."""
    prefix = export_tmp_prefix(out)
    removed = []
    for path in sorted(out.parent.glob(f"{glob.escape(prefix)}*")) if out.parent.is_dir() else []:
        pid = path.name[len(prefix) :]
        if not pid.isdigit() or not _writer_gone(int(pid)):
            continue
        shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
        removed.append(path)
        log.info(f"removed {path}: the temporary folder of an export whose process ({pid}) is gone")
    return removed


def _writer_gone(pid: int) -> bool:
    """No process ``pid`` runs on this machine (this process's own folder is not stale: write_folder replaces it)."""
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # another user's process: alive
        return False
    return False


def _fsync(path: Path) -> None:
    if path.is_file():
        with open(path, "rb") as fh:
            os.fsync(fh.fileno())


def _not_exported(out: Path, exc: BaseException) -> UserError:
    import errno

    if isinstance(exc, OSError) and exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        # not a full disk: "free some space" sent a user with a read-only target after space they had
        return UserError(
            f"could not write the export to {out}: {ckpt.failure_reason(exc, out.parent)}; the folder cannot be "
            "written (read-only file system or no permission). Nothing in it was changed: choose a folder you can "
            "write, or make this one writable, and export again"
        )
    return UserError(
        f"could not write the export to {out}: {ckpt.failure_reason(exc, out.parent)}; "
        f"{free_space(out.parent)} free there. Nothing in {out} was changed: free some space (or choose "
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
