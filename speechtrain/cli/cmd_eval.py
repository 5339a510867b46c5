"""speechtrain eval RUN_DIR [--checkpoint best|latest|FILE] [--data CORPUS] [--items N] [--runtime torch|onnx]
[--json OUT] [--device D] [--asr FOLDER [--asr-language L]]"""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "eval",
        help="score a trained run (or its ONNX export) with its family's quality metrics (PESQ, STOI, MCD, DNSMOS...)",
    )
    p.add_argument("run_dir", help="run directory")
    p.add_argument("--checkpoint", default="best", help="best (default), latest, or a checkpoint file of the run")
    p.add_argument(
        "--data", default=None, help="another corpus (manifest or folder): its held-out utterances are scored"
    )
    p.add_argument("--items", type=int, default=None, help="utterances whose audio is scored (default: quality_items)")
    p.add_argument(
        "--runtime",
        choices=("torch", "onnx"),
        default="torch",
        help="onnx: the audio comes from the run's exported graph in onnxruntime (hifigan, vits)",
    )
    p.add_argument(
        "--asr",
        default=None,
        metavar="judge|pocketsphinx|FOLDER",
        help="TTS: the ASR whose transcripts of the synthesis give cer, the character error rate, beside its ceiling "
        "on the recordings: judge (a small CTC recogniser trained on the corpus's own recordings, cached; "
        "recipes/asr_ctc_tiny.yaml), pocketsphinx (US English, human recordings) or a local Hugging Face ASR "
        "model folder (Whisper or wav2vec2-CTC, safetensors). Default: the run's train.quality_asr; none: no cer",
    )
    p.add_argument(
        "--asr-language", default=None, metavar="L", help="Whisper's language for --asr (e.g. en); default: detected"
    )
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:N (default: cuda when available)")
    p.add_argument("--json", default=None, help="also write the result to this JSON file")
    p.add_argument("--threads", type=int, default=None, help="CPU threads for torch (default: torch's choice)")
    return p


def run(args: argparse.Namespace) -> int:
    from speechtrain.cli.common import set_threads, user_file, write_json
    from speechtrain.recipes.eval import EvalRecipe

    if args.json:
        user_file(args.json)  # before the evaluation: a folder, under a file, the run's own config ...
    set_threads(args.threads)
    recipe = EvalRecipe(
        args.run_dir, args.checkpoint, args.data, args.device, args.items, args.runtime, args.asr, args.asr_language
    )
    result = recipe.run()
    print(result.table())
    write_json(args.json, result.to_dict())
    return 0
