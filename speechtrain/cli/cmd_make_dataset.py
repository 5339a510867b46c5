"""speechtrain make-dataset OUT --utterances N --seed S [--labelled] | OUT --language uz [--layout xtts]"""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "make-dataset",
        help="write the synthetic demo corpus (LJSpeech layout; --labelled adds classes/<label>/)",
        description="Write a deterministic synthetic speech corpus: OUT/metadata.csv + OUT/wavs/*.wav "
        "(22050 Hz 16-bit), audio learnable from its text; the same seed gives identical files.",
    )
    p.add_argument("out", metavar="OUT", help="output folder")
    p.add_argument("--utterances", "-n", type=int, default=200, help="number of utterances (default 200)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--labelled", action="store_true", help="also write OUT/classes/<label>/*.wav (4 sound classes)")
    p.add_argument(
        "--language",
        default=None,
        help="instead: a dozen built-in sentences of this language (en, uz, uz-Cyrl, am, ru) spoken by espeak-ng "
        "in two voices (needs the 'phonemes' extra)",
    )
    p.add_argument(
        "--layout", choices=("ljspeech", "xtts"), default="ljspeech", help="with --language: the dataset layout"
    )
    return p


def _spoken(args: argparse.Namespace) -> int:
    from speechtrain.data.speak import SENTENCES, make_language_corpus

    out = make_language_corpus(args.out, args.language, layout=args.layout, voices=("", "+f3"))
    n = len(SENTENCES.get(args.language, ()))
    print(f"wrote {n} utterances in {args.language} spoken by espeak-ng to {out} ({args.layout} layout)")
    print(f"next: speechtrain prepare {out} data.language={args.language}")
    return 0


def run(args: argparse.Namespace) -> int:
    from speechtrain.data.demo import make_demo_corpus, plan_demo_corpus
    from speechtrain.errors import UserError

    if args.language:
        return _spoken(args)
    if args.utterances < 1:
        raise UserError(f"--utterances must be >= 1, got {args.utterances}")
    out = make_demo_corpus(args.out, utterances=args.utterances, seed=args.seed, labelled=args.labelled)
    hours = sum(u.duration for u in plan_demo_corpus(args.utterances, args.seed)) / 3600
    print(f"wrote {args.utterances} utterances ({hours:.3f} h) to {out}/metadata.csv and {out}/wavs/")
    if args.labelled:
        print(f"wrote labelled sound classes to {out}/classes/<label>/")
    print(f"next: speechtrain prepare {out}")
    return 0
