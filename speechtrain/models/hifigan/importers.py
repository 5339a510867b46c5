"""Import jik876/hifi-gan checkpoints: ``g_XXXXXXXX`` (``{"generator": state dict}``) and ``do_XXXXXXXX``
(``{"mpd": ..., "msd": ..., "optim_g", "optim_d", "steps", "epoch"}``).

Our generator, multi-period and multi-scale discriminators (``scale_discriminator: msd``) use the
reference's module names, so the mapping is the weight-norm / spectral-norm renaming of
:mod:`speechtrain.models.importing`; optimizer states, steps and epochs are left behind (a fine-tuning run
starts a fresh optimizer). The reference's multi-period discriminator has periods 2, 3, 5, 7, 11, which a
state dict does not record: keep ``model.periods`` at those.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from speechtrain.errors import CheckpointError
from speechtrain.models.importing import (
    CheckpointImporter,
    ImportedCheckpoint,
    ImportReport,
    map_state_dict,
    read_checkpoint,
    tensors_only,
)

LAYOUT = "jik876/hifi-gan"
Source = str | os.PathLike[str] | Mapping[str, Any]


def _strip_module(key: str) -> str:
    return key[len("module.") :] if key.startswith("module.") else key  # saved from DataParallel


def import_jik876(
    generator: Source, discriminators: Source | None = None, trust_pickle: bool = False
) -> ImportedCheckpoint:
    """State dicts for our ``generator`` (and ``mpd`` + ``msd`` when the ``do_`` file is given) from a
    jik876/hifi-gan ``g_`` file (and ``do_`` file), with a report of every tensor."""
    g_obj, g_name = read_checkpoint(generator, trust_pickle)
    if not isinstance(g_obj, Mapping) or "generator" not in g_obj:
        found = sorted(g_obj)[:8] if isinstance(g_obj, Mapping) else type(g_obj).__name__
        raise CheckpointError(
            f"{g_name}: not a {LAYOUT} generator file: expected {{'generator': state dict}} (g_XXXXXXXX), found {found}"
        )
    g_sd = tensors_only(g_obj["generator"], "the generator's state dict", g_name)
    if any(k.startswith(("m_source.", "noise_convs.", "source_conv.")) for k in g_sd):
        raise CheckpointError(
            f"{g_name}: an NSF-HiFiGAN generator (it has a harmonic source): import it with "
            f"speechtrain.models.nsf_hifigan.importers.import_singingvocoders"
        )
    if not any(k.startswith("conv_pre.") for k in g_sd) or not any(k.startswith("ups.") for k in g_sd):
        raise CheckpointError(f"{g_name}: not a HiFi-GAN generator (no conv_pre / ups tensors): {sorted(g_sd)[:6]}")
    report = ImportReport(LAYOUT, g_name)
    out = {"generator": map_state_dict(g_sd, _strip_module, report, "generator.", "generator.")}
    if discriminators is not None:
        d_obj, d_name = read_checkpoint(discriminators, trust_pickle)
        if not isinstance(d_obj, Mapping) or "mpd" not in d_obj or "msd" not in d_obj:
            found = sorted(d_obj)[:8] if isinstance(d_obj, Mapping) else type(d_obj).__name__
            raise CheckpointError(
                f"{d_name}: not a {LAYOUT} discriminator file: expected {{'mpd', 'msd', ...}} (do_XXXXXXXX), "
                f"found {found}"
            )
        report.source = f"{g_name} + {d_name}"
        for name in ("mpd", "msd"):
            sd = tensors_only(d_obj[name], f"the {name} state dict", d_name)
            out[name] = map_state_dict(sd, _strip_module, report, f"{name}.", f"{name}.")
        for key in d_obj:
            if key not in ("mpd", "msd"):
                report.skipped.append((key, "optimizer state / counters: fine-tuning starts a fresh optimizer"))
    return ImportedCheckpoint(out, report)


def _is_jik876(obj: Any) -> bool:
    gen = obj.get("generator") if isinstance(obj, Mapping) else None
    if not isinstance(gen, Mapping) or "state_dict" in obj:
        return False
    return not any(str(k).startswith(("m_source.", "source_conv.")) for k in gen)  # those are NSF's


#: what ``train.init_from`` reads for this family (collected by ``speechtrain.registry.checkpoint_importers``)
IMPORTERS = [
    CheckpointImporter(
        "jik876/hifi-gan g_ files (and their do_ file)",
        _is_jik876,
        lambda obj, second, trust: import_jik876(obj, second, trust),
        pair="its do_ file (the discriminators)",
    )
]
