"""``speechtrain export RUN OUT --format F``: load the run once, hand it to the format, check what was written.

The formats are :data:`speechtrain.export.formats.FORMATS` (one module each); a family's default format is
its first in that table (xtts: ``coqui``, vits: ``piper``, vocoders and the classifier: ``onnx``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from speechtrain.config import Config
from speechtrain.errors import UserError
from speechtrain.export.common import ExportFiles, ExportResult
from speechtrain.export.formats import FORMATS, format_for
from speechtrain.export.job import ExportJob
from speechtrain.logs import get_logger
from speechtrain.recipes.common import load_run_config
from speechtrain.recipes.inference import load_task

log = get_logger(__name__)

CHECK_SENTENCES = 24  # transcripts of the run offered to a TTS export's checks


def run_transcripts(cfg: Config, limit: int = CHECK_SENTENCES) -> list[str]:
    """Sentences for a TTS export's checks: ``model.eval_texts``, else the run's manifest transcripts."""
    texts = [t for t in (getattr(cfg.model, "eval_texts", None) or []) if t.strip()]
    if len(texts) < limit and cfg.data.manifest:
        from speechtrain.data.manifest import read_manifest

        try:
            entries, _ = read_manifest(cfg.data.manifest, cfg.data.format)
        except (OSError, UserError) as exc:
            log.warning(f"warning: cannot read {cfg.data.manifest} for check sentences ({exc}); use --text")
            entries = []
        texts += [e.text for e in entries if e.text and e.text.strip()][: limit - len(texts)]
    return texts


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


def checkpoint_step(run_dir: Path, which: str) -> int | None:
    """The training step of the weights ``load_task`` takes (``best.pt`` read memory-mapped)."""
    import torch

    from speechtrain.train import checkpoint as ckpt

    best = run_dir / "best.pt"
    if which == "best" and best.is_file():
        try:
            state = torch.load(best, map_location="cpu", mmap=True, weights_only=False)
            return int(state["step"]) if isinstance(state, dict) and "step" in state else None
        except (OSError, RuntimeError, ValueError, KeyError):
            return None
    steps = ckpt.list_checkpoints(run_dir / "checkpoints")
    return int(steps[-1][0]) if steps else None


def export_run(
    run_dir: str | Path,
    out_dir: str | Path,
    fmt: str | None = None,
    which: str = "best",
    texts: list[str] | None = None,
    name: str | None = None,
    check: bool = True,
) -> ExportResult:
    """Export a run in format ``fmt`` (None: the family's default) into ``out_dir``; the checks fail loudly."""
    run_dir = Path(run_dir)
    export_format = format_for(str(load_run_config(run_dir).model.name), fmt)  # refused before any loading
    cfg, task = load_task(run_dir, device="cpu", which=which)
    job = ExportJob(
        task=task,
        model=cfg.model,
        data=cfg.data,
        run_dir=run_dir,
        files=ExportFiles(out_dir),
        name=name or re.sub(r"[^\w.-]+", "_", run_dir.resolve().name) or "model",
        texts=list(texts) if texts else run_transcripts(cfg),
        speakers=run_speakers(cfg),
        step=checkpoint_step(run_dir, which),
        check=check,
    )
    result = export_format.run(job)
    result.raise_if_failed()
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


def onnx_rtf(
    task: Any,
    family: str,
    inputs: list[Any],
    warmup: int,
    sample_rate: int,
    options: dict[str, Any],
    threads: int | None,
) -> dict[str, Any]:
    """RTF of the run's graph in onnxruntime (CPU) on ``inputs``, as ``measure_rtf`` times PyTorch."""
    import tempfile

    from speechtrain.bench.rtf import measure_rtf
    from speechtrain.export.runtime import onnx_runner

    with tempfile.TemporaryDirectory(prefix="speechtrain-rtf-") as tmp:
        runner = onnx_runner(task, family, Path(tmp), threads)
        opts = {k: v for k, v in options.items() if k not in ("vocoder_run", "seed")}
        result = measure_rtf(runner, inputs, "cpu", warmup, sample_rate=sample_rate, options=opts)
    result["runtime"] = "onnxruntime"
    return result
