"""speechtrain vocode RUN_DIR (--mel MEL.npy | --audio IN.wav) [--f0 F0.npy] [--key-shift N] --out OUT.wav"""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "vocode",
        help="turn a log-mel (.npy) or a wav's own log-mel into a waveform with a trained vocoder run",
        description="Loads RUN_DIR/best.pt (else the newest checkpoint) of a vocoder run (e.g. hifigan). "
        "--mel takes a float array (n_mels, T_frames) of natural-log mels computed with the run's data settings; "
        "--audio computes that mel from a wav (copy-synthesis, to hear what the vocoder does). An NSF vocoder "
        "(nsf_hifigan) also takes f0 per mel frame: --f0, or measured from --audio with the run's data.f0_method; "
        "--key-shift moves that f0 by N semitones (the mel is kept: the vocoder sings the same sound higher).",
    )
    p.add_argument("run_dir", metavar="RUN_DIR", help="a training run directory (config.yaml + checkpoints)")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--mel", metavar="MEL.npy", help="log-mel array (n_mels, T_frames), .npy")
    src.add_argument("--audio", metavar="IN.wav", help="audio file: vocode its own log-mel")
    p.add_argument("--f0", metavar="F0.npy", help="NSF vocoders: f0 in Hz per mel frame (T_frames,), 0 = unvoiced")
    p.add_argument("--key-shift", type=float, default=0.0, metavar="N", help="NSF vocoders: shift f0 by N semitones")
    p.add_argument("--out", "-o", required=True, metavar="OUT.wav", help="output wav file")
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:N (default: cuda when available)")
    p.add_argument("--checkpoint", choices=["best", "latest"], default="best", help="best.pt or the newest step")
    return p


def _read_mel(path: str, n_mels: int):  # noqa: ANN202 - numpy array
    import numpy as np

    from speechtrain.errors import DataError

    try:
        mel = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise DataError(f"{path}: not a readable .npy array ({exc})") from None
    if mel.ndim == 3 and mel.shape[0] == 1:
        mel = mel[0]
    if mel.ndim != 2 or mel.shape[0] != n_mels:
        raise DataError(f"{path}: expected a log-mel of shape ({n_mels}, T_frames), got {mel.shape}")
    if not np.all(np.isfinite(mel)):
        raise DataError(f"{path}: the mel has NaN/inf values")
    return mel.astype(np.float32)


def _read_f0(path: str):  # noqa: ANN202 - numpy array
    import numpy as np

    from speechtrain.errors import DataError

    try:
        f0 = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise DataError(f"{path}: not a readable .npy array ({exc})") from None
    if f0.ndim == 2 and 1 in f0.shape:
        f0 = f0.reshape(-1)  # (1, T) or (T, 1)
    if f0.ndim != 1:
        raise DataError(f"{path}: expected f0 of shape (T_frames,) in Hz, got {f0.shape}")
    if not np.all(np.isfinite(f0)) or (f0 < 0).any():
        raise DataError(f"{path}: f0 must be finite and >= 0 Hz (0 = unvoiced)")
    return f0.astype(np.float32)


def run(args: argparse.Namespace) -> int:
    from speechtrain.cli.common import wav_out
    from speechtrain.recipes.inference import InferenceRecipe

    out = wav_out(args.out)
    recipe = InferenceRecipe(args.run_dir, device=args.device, which=args.checkpoint, verb="vocode")
    f0 = _read_f0(args.f0) if args.f0 else None
    if args.mel:
        mel = _read_mel(args.mel, recipe.data.n_mels)
        audio = recipe.vocode(mel, f0, args.key_shift)
        frames = mel.shape[1]
    else:
        audio = recipe.vocode_audio(args.audio, f0, args.key_shift)
        frames = audio.samples.size // recipe.data.hop_length
    audio.write(out)
    print(f"wrote {out}: {audio.seconds:.2f} s at {audio.sample_rate} Hz from {frames} frames (RTF {audio.rtf:.3f})")
    return 0
