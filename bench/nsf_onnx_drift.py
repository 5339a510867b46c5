"""The NSF-HiFiGAN ONNX graph against PyTorch on long inputs (issue 39): the largest |difference| of the
waveform, source noise off on both sides, at several lengths in mel frames.

    python bench/nsf_onnx_drift.py [--frames 100 1000 6000] [--recipe recipes/vocoder_nsf_hifigan_tiny.yaml]
    python bench/nsf_onnx_drift.py --fp32-phase    # the phase accumulated in float32, as before the fix

A random-weight generator of the recipe (seed 0) is traced with ``--format onnx``'s graph (DiffSinger's layout)
and run in onnxruntime (CPU) on a smooth log-mel and an f0 glide 110 -> 440 Hz; the reference is
``task.vocode`` with ``deterministic_source``. ``--fp32-phase`` patches the sine generator's phase accumulation
back to float32 (``per_frame.cumsum`` over the frames), to measure what the float64 accumulation removes.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np


def main() -> None:
    import torch

    from speechtrain.config import load_config
    from speechtrain.export.common import ExportFiles, ort_session, without_random_nodes
    from speechtrain.export.onnx import f0_glide, fixed_mel, write_nsf_graph
    from speechtrain.models.nsf_hifigan import model as nsf_model
    from speechtrain.models.nsf_hifigan.graph import deterministic_source
    from speechtrain.registry import build_task

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, nargs="+", default=[100, 1000, 6000])
    ap.add_argument("--recipe", default="recipes/vocoder_nsf_hifigan_tiny.yaml")
    ap.add_argument("--fp32-phase", action="store_true")
    args = ap.parse_args()
    if args.fp32_phase:
        nsf_model.PHASE_DTYPE = torch.float32
    torch.manual_seed(0)
    cfg = load_config(args.recipe)
    task = build_task(cfg.model, cfg.data)
    task.generator.eval()
    n_mels = int(cfg.data.n_mels)
    with tempfile.TemporaryDirectory() as tmp:
        path = write_nsf_graph(ExportFiles(Path(tmp)), task, n_mels)
        session = ort_session(without_random_nodes(path)[0])
    phase = "float32" if args.fp32_phase else "float64"
    print(f"{args.recipe}: phase accumulated in {phase}; onnxruntime vs PyTorch, source noise off")
    for frames in args.frames:
        mel, f0 = fixed_mel(n_mels, frames, 1), f0_glide(frames)
        with deterministic_source(task.generator):
            ref = task.vocode(mel[0], f0[0])
        out = session.run(None, {"mel": mel.transpose(1, 2).numpy(), "f0": f0.numpy()})[0].reshape(-1)
        diff = np.abs(out - ref)
        print(f"  {frames:6d} frames: max |diff| {diff.max():.3g}, at sample {int(diff.argmax())} of {diff.size}")


if __name__ == "__main__":
    main()
