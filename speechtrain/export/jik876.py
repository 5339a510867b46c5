"""``--format jik876``: a HiFi-GAN run as jik876/hifi-gan's files, ``g_XXXXXXXX`` + ``config.json``.

jik876's ``inference.py`` / ``inference_e2e.py`` build their ``Generator`` from ``config.json`` and load the
``"generator"`` entry of ``g_file`` (the check reads it back with :func:`speechtrain.ckptio.load`); their
layers use torch's original weight norm (``weight_g`` and ``weight_v`` per layer), ours the parametrization API
(``parametrizations.weight.original0/1``), so the state dict is renamed back (the inverse of
:mod:`speechtrain.models.hifigan.importers`). The check builds our generator with torch's original weight norm,
which names every tensor as jik876's does, loads the file into it strictly and compares its audio with the run's at
two mel lengths.
"""

from __future__ import annotations

import re
import warnings
from typing import Any

import torch
from torch import nn

from speechtrain import ckptio
from speechtrain.export.common import AUDIO_TOLERANCE, ExportResult, compare
from speechtrain.export.job import ExportFormat, ExportJob
from speechtrain.export.onnx import CHECK_FRAMES, fixed_mel
from speechtrain.models.common import has_weight_norm, remove_weight_norm

JIK876_MELS = 80
_PARAMETRIZED = re.compile(r"^(.*)\.parametrizations\.weight\.original([01])$")


def jik876_state_dict(generator: nn.Module) -> dict[str, torch.Tensor]:
    """The generator's tensors under jik876's names (``X.weight_g`` / ``X.weight_v``), on the CPU."""
    out = {}
    for key, value in generator.state_dict().items():
        m = _PARAMETRIZED.match(key)
        name = f"{m.group(1)}.weight_{'g' if m.group(2) == '0' else 'v'}" if m else key
        out[name] = value.detach().cpu().clone()
    return out


def jik876_config(job: ExportJob) -> dict[str, Any]:
    """jik876's ``config.json`` for this generator and the run's mel (training keys from the run's config)."""
    m, d = job.model, job.data
    return {
        "resblock": str(m.resblock),
        "num_gpus": 0,
        "batch_size": int(d.batch_size or 16),
        "learning_rate": 0.0002,
        "adam_b1": 0.8,
        "adam_b2": 0.99,
        "lr_decay": 0.999,
        "seed": 1234,
        "upsample_rates": list(m.upsample_rates),
        "upsample_kernel_sizes": list(m.upsample_kernel_sizes),
        "upsample_initial_channel": int(m.upsample_initial_channel),
        "resblock_kernel_sizes": list(m.resblock_kernel_sizes),
        "resblock_dilation_sizes": [list(x) for x in m.resblock_dilation_sizes],
        "segment_size": int(d.crop_frames or 32) * int(d.hop_length),
        "num_mels": int(d.n_mels),
        "num_freq": int(d.n_fft) // 2 + 1,
        "n_fft": int(d.n_fft),
        "hop_size": int(d.hop_length),
        "win_size": int(d.win_length),
        "sampling_rate": int(d.sample_rate),
        "fmin": float(d.fmin),
        "fmax": float(d.fmax) if d.fmax is not None else None,
        "fmax_for_loss": m.fmax_for_loss,
        "num_workers": 4,
        "dist_config": {"dist_backend": "nccl", "dist_url": "tcp://localhost:54321", "world_size": 1},
    }


def original_weight_norm_generator(job: ExportJob) -> nn.Module:
    """Our generator with torch's original weight norm on the layers jik876 normalises (its tensor names)."""
    from speechtrain.models.hifigan.task import build_generator

    gen = build_generator(job.model, int(job.data.n_mels))
    normed = [mod for mod in gen.modules() if has_weight_norm(mod)]
    remove_weight_norm(gen)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's original weight norm is deprecated; jik876's files use it
        for mod in normed:
            # parametrized weight norm leaves a load hook that renames weight_g/weight_v to its own names;
            # folding does not remove it, and with it this module could not load jik876's names
            mod._load_state_dict_pre_hooks.clear()
            nn.utils.weight_norm(mod)
    return gen.eval()


def jik876_contract(model: Any, data: Any) -> list[str]:
    """What jik876's ``Generator(AttrDict(config.json))`` can build (:mod:`speechtrain.models.hifigan.upstream`)."""
    from speechtrain.models.hifigan.upstream import resblock_problems

    problems = resblock_problems(
        model.resblock,
        model.resblock_kernel_sizes,
        model.resblock_dilation_sizes,
        model.upsample_rates,
        model.upsample_kernel_sizes,
    )
    if int(data.n_mels) != JIK876_MELS:  # their conv_pre is Conv1d(80, ...) whatever config.json says
        problems.append(
            f"data.n_mels={data.n_mels}: jik876's Generator reads {JIK876_MELS} mel bands (conv_pre is built with "
            f"{JIK876_MELS} input channels, not num_mels); train with data.n_mels={JIK876_MELS}, or use --format onnx"
        )
    return problems


def export_jik876(job: ExportJob) -> ExportResult:
    result = job.result("jik876")
    state = jik876_state_dict(job.task.generator)
    g_path = job.files.write_torch(f"g_{int(job.step or 0):08d}", {"generator": state})
    job.files.write_json("config.json", jik876_config(job))
    result.files = list(job.files.written)
    if job.check:
        loaded = ckptio.load(g_path)["generator"]  # read back as jik876 reads it, tensors only
        gen = original_weight_norm_generator(job)
        gen.load_state_dict(loaded, strict=True)  # every tensor, no more and no fewer, under jik876's names
        for k, frames in enumerate(CHECK_FRAMES):
            mel = fixed_mel(int(job.data.n_mels), frames, k + 1)
            with torch.no_grad():
                audio = gen(mel).squeeze(1).numpy()
            reference = job.task.vocode(mel[0])
            name = f"{g_path.name} in a jik876-named generator (original weight norm) vs the run, {frames} frames"
            result.checks.append(compare(name, audio, reference, AUDIO_TOLERANCE))
    return result


FORMAT = ExportFormat(
    key="jik876",
    families=("hifigan",),
    runtime="jik876/hifi-gan (PyTorch)",
    summary="jik876/hifi-gan's generator file g_XXXXXXXX + config.json",
    run=export_jik876,
    contract=jik876_contract,
)
