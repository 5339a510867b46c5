"""Measure an NSF-HiFiGAN run on the synthetic singing corpus: f0 extraction error, held-out mel L1 against a
fresh generator, and the output pitch when vocoding with a shifted f0.

    python bench/nsf_measure.py RUN_DIR CORPUS [--shifts -7 -3 0 3 7 12]

RUN_DIR: a run of recipes/vocoder_nsf_hifigan_tiny.yaml (or another NSF recipe) trained on CORPUS, a folder
written by ``speechtrain make-dataset CORPUS --singing`` (its ``f0/ID.npy`` files are the true f0 per frame).
Prints (1) the YIN (and Praat, when installed) f0 error against the true f0 over the whole corpus, (2) the eval
mel_l1 of the trained and of a freshly initialised generator on the same held-out batches, (3) for every shift,
the median ratio of the output's measured f0 to the true f0 over the held-out utterances' voiced frames, with
and without folding octave errors of the measurement.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np


def main() -> None:
    import torch

    from speechtrain.data.audio import load_audio
    from speechtrain.data.features import log_mel_numpy
    from speechtrain.data.pitch import extract_f0, f0_error
    from speechtrain.data.store import held_out_ids
    from speechtrain.recipes import build_task
    from speechtrain.recipes.inference import load_task
    from speechtrain.recipes.train import TrainRecipe

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run_dir")
    ap.add_argument("corpus")
    ap.add_argument("--shifts", type=float, nargs="+", default=[-7.0, -3.0, 0.0, 3.0, 7.0, 12.0])
    args = ap.parse_args()
    torch.set_num_threads(1)
    corpus = Path(args.corpus)
    cfg, trained = load_task(args.run_dir, device="cpu")
    d = cfg.data
    wavs = sorted((corpus / "wavs").glob("*.wav"))

    # (1) f0 extraction against the true f0
    methods = ["yin"]
    try:
        import parselmouth  # noqa: F401

        methods.append("parselmouth")
    except ImportError:
        pass
    for method in methods:
        est, est_v, ref = [], [], []
        for wav in wavs:
            y, _ = load_audio(str(wav), d.sample_rate)
            f, v = extract_f0(y, d.sample_rate, d.hop_length, method, d.f0_min, d.f0_max)  # type: ignore[arg-type]
            true = np.load(corpus / "f0" / f"{wav.stem}.npy")
            n = min(len(f), len(true))
            est.append(f[:n]), est_v.append(v[:n]), ref.append(true[:n])
        err = f0_error(np.concatenate(est), np.concatenate(est_v), np.concatenate(ref))
        print(f"f0 {method} over {len(wavs)} utterances: {err.summary()}")

    # (2) held-out mel L1: trained vs fresh, same batches
    torch.manual_seed(cfg.train.seed)
    fresh = build_task(cfg)
    eval_loader = TrainRecipe(cfg).build_data(fresh).eval_loader

    def eval_mel_l1(task) -> float:  # noqa: ANN001
        outs = [(task.batch_weight(b), {k: float(v) for k, v in task.eval_step(b).items()}) for b in eval_loader]
        return task.eval_summary(outs)["mel_l1"]

    print(f"held-out mel_l1: fresh {eval_mel_l1(fresh):.3f}, trained {eval_mel_l1(trained):.3f}")

    # (3) vocoding with a shifted f0: measured output pitch / true pitch, held-out utterances
    held = held_out_ids([w.stem for w in wavs], d.eval_utterances)
    trained.generator.remove_weight_norm()
    print(f"pitch shift on {len(held)} held-out utterances (YIN on the output, voiced frames of both):")
    for shift in args.shifts:
        ratios = []
        for wav in wavs:
            if wav.stem not in held:
                continue
            y, _ = load_audio(str(wav), d.sample_rate)
            mel = log_mel_numpy(y, d)
            true = np.load(corpus / "f0" / f"{wav.stem}.npy")[: mel.shape[1]]
            out = trained.vocode(mel, true * 2 ** (shift / 12))
            f, v = extract_f0(out, d.sample_rate, d.hop_length, "yin", 50.0, 1100.0)
            n = min(len(f), len(true))
            both = v[:n] & (true[:n] > 0)
            ratios.append(f[:n][both] / true[:n][both])
        r = np.concatenate(ratios)
        want = 2 ** (shift / 12)
        octaves = np.log2(r) - shift / 12
        folded = np.abs(octaves - np.round(octaves)) < 1 / 24  # within half a semitone modulo octaves
        exact = np.abs(octaves) < 1 / 24
        print(
            f"  shift {shift:+5.1f} st: asked x{want:.3f}, median measured x{float(np.median(r)):.3f}; "
            f"{exact.mean():.0%} of {len(r)} frames within half a semitone, {folded.mean():.0%} modulo octaves"
        )


if __name__ == "__main__":
    main()
