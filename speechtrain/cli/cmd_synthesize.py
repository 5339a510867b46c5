"""speechtrain synthesize RUN_DIR --text "..." --out FILE.wav [--vocoder RUN_DIR] [options]"""

from __future__ import annotations

import argparse
from typing import Any

# CLI flag -> synthesize() keyword; only the flags given are passed, so each family sees its own options
OPTIONS = {
    "noise_scale": "noise_scale",
    "noise_scale_w": "noise_scale_w",
    "length_scale": "length_scale",
    "speaker": "speaker",
    "temperature": "temperature",
    "top_k": "top_k",
    "max_seconds": "max_seconds",
    "seed": "seed",
    "speaker_wav": "speaker_wav",
    "language": "language",
    "top_p": "top_p",
    "repetition_penalty": "repetition_penalty",
    "length_penalty": "length_penalty",
}


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser("synthesize", help="text to a wav file with a trained TTS run (vits, gpt_tts, xtts)")
    p.add_argument("run_dir", help="run directory of a TTS model (holds config.yaml and checkpoints)")
    p.add_argument("--text", required=True, help="the sentence to speak")
    p.add_argument("--out", required=True, help="output .wav path (at the model's output rate: xtts 24 kHz)")
    p.add_argument("--vocoder", default=None, help="a HiFi-GAN run directory (gpt_tts; default Griffin-Lim)")
    p.add_argument("--noise-scale", type=float, default=None, help="vits: prior noise scale")
    p.add_argument("--noise-scale-w", type=float, default=None, help="vits: duration noise scale")
    p.add_argument("--length-scale", type=float, default=None, help="vits: speaking-rate scale (>1 slower)")
    p.add_argument("--speaker", default=None, help="speaker id (number) or name of a multi-speaker model")
    p.add_argument("--speaker-wav", default=None, help="xtts: a reference clip of the voice to speak in")
    p.add_argument("--language", default=None, help="xtts: language tag of the text (default: model.language)")
    p.add_argument("--temperature", type=float, default=None, help="gpt_tts/xtts: sampling temperature (0: greedy)")
    p.add_argument("--top-k", type=int, default=None, help="gpt_tts/xtts: sample among the k likeliest codes")
    p.add_argument("--top-p", type=float, default=None, help="xtts: nucleus sampling mass")
    p.add_argument("--repetition-penalty", type=float, default=None, help="xtts: penalty on codes already emitted")
    p.add_argument("--length-penalty", type=float, default=None, help="xtts: accepted for Coqui parity (no effect)")
    p.add_argument("--max-seconds", type=float, default=None, help="gpt_tts/xtts: stop after this much audio")
    p.add_argument("--seed", type=int, default=None, help="seed of the sampling noise")
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:N (default: cuda when available)")
    p.add_argument("--threads", type=int, default=None, help="CPU threads for torch (default: torch's choice)")
    return p


def synthesis_options(args: argparse.Namespace) -> dict[str, Any]:
    """The synthesize() keywords of the flags that were given."""
    opts: dict[str, Any] = {}
    for attr, key in OPTIONS.items():
        value = getattr(args, attr, None)
        if value is None:
            continue
        if key == "speaker" and isinstance(value, str) and value.lstrip("-").isdigit():
            value = int(value)
        opts[key] = value
    if getattr(args, "vocoder", None):
        opts["vocoder_run"] = args.vocoder
    return opts


def run(args: argparse.Namespace) -> int:
    from speechtrain.cli.common import set_threads, wav_out
    from speechtrain.recipes.inference import InferenceRecipe

    out = wav_out(args.out)
    set_threads(args.threads)
    recipe = InferenceRecipe(args.run_dir, device=args.device, verb="synthesize")
    options = synthesis_options(args)
    seed = options.pop("seed", None)
    audio = recipe.synthesize(args.text, seed=seed, **options)
    audio.write(out)
    print(f"wrote {out} ({audio.seconds:.2f} s at {audio.sample_rate} Hz)")
    return 0
