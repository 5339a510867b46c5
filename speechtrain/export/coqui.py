"""``--format coqui``: an XTTS fine-tune written back as the Coqui XTTS-v2 folder it was loaded from.

The family's task writes it (``XttsTask.export``: same keys, order and dtypes as the source folder, the
vocabulary and languages updated); Coqui's own loader is the runtime, checked in the xtts tests.
"""

from __future__ import annotations

from speechtrain.export.common import ExportResult
from speechtrain.export.job import ExportFormat, ExportJob


def export_coqui(job: ExportJob) -> ExportResult:
    result = job.result("coqui")
    folder = job.task.export(job.files.out_dir)
    result.files = sorted(p for p in folder.iterdir() if p.is_file())
    result.notes.append("load it with Coqui TTS (Xtts.init_from_config + load_checkpoint); no runtime check here")
    return result


FORMAT = ExportFormat(
    key="coqui",
    families=("xtts",),
    runtime="Coqui TTS",
    summary="a Coqui XTTS-v2 checkpoint folder (model.pth, dvae.pth, mel_stats.pth, vocab.json, config.json)",
    run=export_coqui,
)
