"""speechtrain score GENERATED --references CORPUS [--kind tts|speaker_tts|vocoder|pitch_vocoder]
[--asr judge|FOLDER [--asr-language L]] [--language L] [--format F] [--json OUT] [--threads N]"""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "score",
        help="score a folder of generated audio against its recordings, every metric beside its ceiling",
        description="Score GENERATED (a folder of <id>.wav, or a list file: one path or id|path a line) against "
        "the reference recordings of --references with the metrics training reports (PESQ, STOI, MCD, MCD-DTW, "
        "DNSMOS, CER...), each beside its ceiling: the same metric on the recordings themselves.",
    )
    p.add_argument("generated", metavar="GENERATED", help="folder of <id>.wav, or a list file of paths")
    p.add_argument(
        "--references",
        "-r",
        required=True,
        help="the recordings: a corpus in any layout (its ids and texts are used), or a plain folder of .wav files",
    )
    p.add_argument(
        "--kind",
        default="tts",
        choices=("tts", "speaker_tts", "vocoder", "pitch_vocoder"),
        help="which metrics: tts (DNSMOS, MCD-DTW; default) or vocoder (PESQ, STOI, MCD frame by frame, MR-STFT)",
    )
    p.add_argument(
        "--asr",
        default=None,
        metavar="judge|pocketsphinx|FOLDER",
        help="TTS: cer (beside the same ASR's CER on the recordings) by judge (a small CTC recogniser trained on "
        "the references' corpus, cached), pocketsphinx (built-in US English, for human recordings) or a local "
        "Hugging Face ASR model folder; default: no cer",
    )
    p.add_argument("--asr-language", default=None, metavar="L", help="Whisper's language for --asr FOLDER")
    p.add_argument(
        "--language",
        default="und",
        metavar="L",
        help="the transcripts' language (data.language): how cer folds case and reads numbers (default: und)",
    )
    p.add_argument("--format", default="auto", help="the references' data.format (default: detected)")
    p.add_argument("--json", default=None, help="also write the result to this JSON file")
    p.add_argument("--threads", type=int, default=None, help="CPU threads for torch (default: torch's choice)")
    return p


def run(args: argparse.Namespace) -> int:
    from speechtrain.cli.common import set_threads, user_file, write_json
    from speechtrain.recipes.score import score_audio

    set_threads(args.threads)
    if args.json:
        user_file(args.json)  # before the scoring: a folder, under a file, a run's own file ...
    result = score_audio(
        args.generated, args.references, args.kind, args.asr, args.asr_language, args.format, args.language
    )
    print(result.table())
    write_json(args.json, result.to_dict())
    return 0
