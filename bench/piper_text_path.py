"""One text path from training to a Piper voice (issue 39), measured on a language's built-in corpus.

    python bench/piper_text_path.py --language uz [--steps 2] [--out /tmp/piper-uz]
    python bench/piper_text_path.py --language am

1. ``speechtrain make-dataset OUT/corpus --language LANG`` (its built-in sentences, spoken by espeak-ng).
2. For every transcript: the phonemes speechtrain's own espeak front end gives (``data.phonemizer=espeak``, the
   path runs took before) against the phonemes Piper's runtime computes from the same text (its espeak-ng,
   sentence by sentence): how many differ, with the first examples.
3. A tiny VITS trained ``--steps`` steps with ``data.phonemizer=piper model.add_blank=false``, exported with
   ``--format piper``; the voice loaded with ``piper.PiperVoice`` and, for every transcript, the ids Piper computes
   from the text compared with the ids the run trained on (``task.token_ids``); one sentence spoken by piper-tts.
"""

from __future__ import annotations

import argparse
import wave
from pathlib import Path


def espeak_front_end_differences(texts: list[str], language: str) -> list[str]:
    """Transcripts whose phonemes from speechtrain's espeak front end differ from Piper's phonemes."""
    from speechtrain.data.text.frontend import TextFrontEnd, TextSettings
    from speechtrain.data.text.piper_text import piper_espeak, piper_voice

    ours = TextFrontEnd(TextSettings(language, "espeak"))
    piper = piper_espeak()
    differ = []
    for text in texts:
        theirs = "".join("".join(s) for s in piper.phonemize(piper_voice(language), text))
        mine = ours.process(text).symbols
        if " ".join(theirs.split()) != " ".join(mine.split()):
            differ.append(f"{text!r}: speechtrain {mine!r} / Piper {theirs!r}")
    return differ


def main() -> None:
    import piper
    import torch

    from speechtrain.cli.main import main as cli
    from speechtrain.config import load_config
    from speechtrain.data.manifest import read_manifest
    from speechtrain.recipes.inference import load_task
    from speechtrain.recipes.train import train_from_config

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--language", required=True)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    out = Path(args.out or f"/tmp/piper-text-path-{args.language}")
    corpus = out / "corpus"
    if not corpus.exists():
        assert cli(["make-dataset", str(corpus), "--language", args.language]) == 0
    texts = [e.text for e in read_manifest(corpus, "auto")[0]]
    differ = espeak_front_end_differences(texts, args.language)
    print(f"[{args.language}] speechtrain's espeak front end vs Piper's phonemes: {len(differ)} of {len(texts)} differ")
    for line in differ[:3]:
        print(f"  {line}")
    torch.manual_seed(0)
    over = [
        f"data.manifest={corpus}",
        f"data.cache_dir={out / 'cache'}",
        f"data.language={args.language}",
        "data.phonemizer=piper",
        "model.add_blank=false",
        "data.eval_utterances=2",
        f"train.output_dir={out / 'run'}",
        f"train.max_steps={args.steps}",
        f"train.eval_every={args.steps}",
        f"train.save_every={args.steps}",
        "train.progress=false",
    ]
    run, _ = train_from_config(load_config("recipes/vits_tiny.yaml", over))
    voice_dir = out / "voice"
    assert cli(["export", str(run), str(voice_dir), "--format", "piper", "--name", "voice", "--force"]) == 0
    voice = piper.PiperVoice.load(str(voice_dir / "voice.onnx"))
    _, task = load_task(run, device="cpu")
    equal = sum([i for p in voice.phonemize(t) for i in voice.phonemes_to_ids(p)] == task.token_ids(t) for t in texts)
    print(f"[{args.language}] Piper's ids from the text == the ids the run trained on: {equal} of {len(texts)}")
    with wave.open(str(out / "piper.wav"), "wb") as w:
        voice.synthesize_wav(texts[0], w)
    with wave.open(str(out / "piper.wav"), "rb") as w:
        print(f"[{args.language}] piper-tts spoke {texts[0]!r}: {w.getnframes() / w.getframerate():.2f} s")


if __name__ == "__main__":
    main()
