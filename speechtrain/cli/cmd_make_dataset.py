"""speechtrain make-dataset OUT --utterances N --seed S
[--labelled | --singing [--sample-rate SR --hop-length H] | --language LANG [--layout xtts] [--voices 1|2]]"""

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
    p.add_argument(
        "--utterances",
        "-n",
        type=int,
        default=None,
        help="number of utterances (default 200; with --language: its built-in sentences, about a dozen)",
    )
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    kind = p.add_mutually_exclusive_group()
    kind.add_argument("--labelled", action="store_true", help="also write OUT/classes/<label>/*.wav (4 sound classes)")
    kind.add_argument(
        "--singing",
        action="store_true",
        help="a sung corpus instead (phrases of notes with glides and vibrato) with its true f0 per mel frame in "
        "OUT/f0/ID.npy, for NSF vocoders and pitch checks",
    )
    kind.add_argument(
        "--language",
        default=None,
        help="instead: sentences of this language spoken by espeak-ng (built in: en, uz, uz-Cyrl, am, ru; -n N "
        "makes N utterances: past the dozen built-in sentences, English and Uzbek draw different sentences from a "
        "word list and Amharic from a lexicon; uz-Cyrl and ru read theirs again, each time in another voice, speed "
        "or pitch)",
    )
    p.add_argument(
        "--voices",
        type=int,
        choices=(1, 2),
        default=2,
        help="with --language: 1 = one speaker (espeak-ng's plain voice), 2 = two (plain and +f3, taking turns)",
    )
    p.add_argument(
        "--layout", choices=("ljspeech", "xtts"), default="ljspeech", help="with --language: the dataset layout"
    )
    p.add_argument("--sample-rate", type=int, default=None, help="--singing: sample rate (default 22050)")
    p.add_argument("--hop-length", type=int, default=None, help="--singing: hop of the true f0 files (default 256)")
    return p


def _singing(args: argparse.Namespace) -> int:
    from speechtrain.data.demo_singing import HOP_LENGTH, SAMPLE_RATE, make_singing_corpus, plan_singing_corpus
    from speechtrain.errors import UserError

    sr, hop = args.sample_rate or SAMPLE_RATE, args.hop_length or HOP_LENGTH
    if sr < 8000 or hop < 1:
        raise UserError(f"--sample-rate must be >= 8000 and --hop-length >= 1, got {sr} and {hop}")
    out = make_singing_corpus(args.out, utterances=args.utterances, seed=args.seed, sample_rate=sr, hop_length=hop)
    seconds = sum(
        u.lead_s + u.tail_s + sum(n.seconds + n.rest_after_s for n in u.notes)
        for u in plan_singing_corpus(args.utterances, args.seed)
    )
    hours = seconds / 3600
    print(f"wrote {args.utterances} sung phrases (about {hours:.3f} h, {sr} Hz) to {out}/metadata.csv, {out}/wavs/")
    print(f"true f0 per mel frame (hop {hop}) in {out}/f0/")
    print(f"next: speechtrain prepare {out} data.f0_method=yin  (or train recipes/vocoder_nsf_hifigan_tiny.yaml)")
    return 0


def _spoken(args: argparse.Namespace) -> int:
    from speechtrain.data.speak import corpus_sentences, make_language_corpus

    texts = corpus_sentences(args.language, args.utterances, args.seed)
    voices = ("", "+f3")[: args.voices]
    out = make_language_corpus(args.out, args.language, texts, seed=args.seed, layout=args.layout, voices=voices)
    n = len(texts)
    print(f"wrote {n} utterances in {args.language} spoken by espeak-ng to {out} ({args.layout} layout)")
    # the README's VITS command trains on Piper's text path: a prepare for another front end was prepared again
    print(
        f"next: speechtrain prepare {out} data.language={args.language} data.phonemizer=piper  (the text path of a "
        "Piper voice, which the README's VITS command trains on; needs speechtrain[export])"
    )
    return 0


def run(args: argparse.Namespace) -> int:
    from speechtrain.data.demo import make_demo_corpus, plan_demo_corpus
    from speechtrain.errors import UserError

    if args.language:
        return _spoken(args)
    if args.utterances is None:
        args.utterances = 200
    if args.utterances < 1:
        raise UserError(f"--utterances must be >= 1, got {args.utterances}")
    if (args.sample_rate or args.hop_length) and not args.singing:
        raise UserError("--sample-rate and --hop-length apply to --singing only (the demo corpus is 22050 Hz)")
    if args.singing:
        return _singing(args)
    out = make_demo_corpus(args.out, utterances=args.utterances, seed=args.seed, labelled=args.labelled)
    hours = sum(u.duration for u in plan_demo_corpus(args.utterances, args.seed)) / 3600
    print(f"wrote {args.utterances} utterances ({hours:.3f} h) to {out}/metadata.csv and {out}/wavs/")
    if args.labelled:
        print(f"wrote labelled sound classes to {out}/classes/<label>/")
    print(f"next: speechtrain prepare {out}")
    return 0
