"""``--format singingvocoders``: an NSF-HiFiGAN run written in openvpi/SingingVocoders' export layout
(``model.ckpt`` with the generator in their names + ``config.json``), which their ``Generator``, DiffSinger,
DDSP-SVC and so-vits-svc load. The family writes it (:mod:`speechtrain.models.nsf_hifigan.export`); the
parity with their own Generator is checked in tests/test_models_nsf_export.py (same waveform to ~1e-7).
"""

from __future__ import annotations

from typing import Any

from speechtrain.export.common import ExportResult
from speechtrain.export.job import ExportFormat, ExportJob


def singingvocoders_contract(model: Any, data: Any) -> list[str]:
    """What their ``Generator`` can hold: jik876's residual blocks and their fixed harmonic source."""
    from speechtrain.models.nsf_hifigan.export import exportable_problems

    return exportable_problems(model)


def export_singingvocoders(job: ExportJob) -> ExportResult:
    result = job.result("singingvocoders")
    folder = job.task.export(job.files.out_dir)
    result.files = sorted(p for p in folder.iterdir() if p.is_file())
    from speechtrain.models.nsf_hifigan.export import f0_grid_warning

    warning = f0_grid_warning(float(job.data.f0_frame_offset))
    if warning:
        result.notes.append(warning)
    result.notes.append(
        "load it with SingingVocoders' Generator (or DiffSinger / DDSP-SVC / so-vits-svc); no runtime check here"
    )
    return result


FORMAT = ExportFormat(
    key="singingvocoders",
    families=("nsf_hifigan",),
    runtime="SingingVocoders / DiffSinger",
    summary="SingingVocoders' export layout (model.ckpt with the generator + config.json)",
    run=export_singingvocoders,
    contract=singingvocoders_contract,
)
