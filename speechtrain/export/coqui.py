"""``--format coqui``: an XTTS fine-tune written back as the Coqui XTTS-v2 folder it was loaded from.

The family's task writes it (``XttsTask.export``: same keys, order and dtypes as the source folder, the
vocabulary and languages updated); Coqui's own loader is the runtime: ``bench/coqui_xtts_check.py`` loads
exports with it (``strict=True``) and compares outputs, and the tests check the layout Coqui builds
(``tests/fixtures/xtts_tiny_coqui_layout.json``, recorded by that script).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from speechtrain.export.common import ExportResult
from speechtrain.export.job import ExportFormat, ExportJob


def export_coqui(job: ExportJob) -> ExportResult:
    result = job.result("coqui")
    folder = job.task.export(job.files.out_dir)
    result.files = sorted(p for p in folder.iterdir() if p.is_file())
    result.notes.append(coqui_note(_written_config(folder)))
    return result


def _written_config(folder: Path) -> dict[str, Any]:
    """The config.json the task wrote ({} where it wrote none that parses: a test double's folder)."""
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return config if isinstance(config, dict) else {}


def coqui_note(config: dict[str, Any]) -> str:
    """Whether Coqui's ``Xtts`` can load a folder of this config.json. It sizes the GPT from ``model_args`` and
    hard-codes the rest at XTTS-v2's sizes (conditioning encoder depth, perceiver, HiFi-GAN decoder, speaker
    encoder); a ``model.random_checkpoint: tiny`` base shrinks those too (``speechtrain_arch``), so Coqui cannot
    load its fine-tunes. Such runs are still exported: speechtrain loads them back (rehearsals, tests). The DVAE
    sizes do not count: ``Xtts`` has no DVAE (dvae.pth is read by Coqui's trainer only)."""
    shrunk = sorted(k for k in config.get("speechtrain_arch") or {} if not k.startswith("dvae_"))
    if shrunk:
        return (
            f"Coqui's Xtts cannot load this folder: it hard-codes {', '.join(shrunk)} at XTTS-v2's sizes "
            "(config.json speechtrain_arch); fine-tune from a real XTTS-v2 or a model.random_checkpoint=tiny_coqui "
            "base for a folder Coqui loads"
        )
    return (
        "load it with Coqui TTS (Xtts(config) + load_checkpoint(strict=True)); bench/coqui_xtts_check.py, run "
        "where coqui-tts is installed, loads such a folder that way and compares it with speechtrain's modules"
    )


FORMAT = ExportFormat(
    key="coqui",
    families=("xtts",),
    runtime="Coqui TTS",
    summary="a Coqui XTTS-v2 checkpoint folder (model.pth, dvae.pth, mel_stats.pth, vocab.json, config.json)",
    run=export_coqui,
)
