"""Benchmark `prepare`: 1 vs N feature workers on a cold cache, and a second (cached) run.

    python bench/bench_prepare.py --utterances 200 --workers 2

Writes a demo corpus to a temporary folder (or --corpus), then times prepare_dataset three ways in
this one run and prints a table: audio seconds prepared per wall second, and the ratio to 1 worker.
torch is imported before timing (so the first row does not carry the import); on Linux the workers
are forked from this process, so their start-up is in the timing, as a user would see it.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path


def main() -> None:
    from speechtrain.config import load_config
    from speechtrain.data import features  # noqa: F401 - imports torch before any timing
    from speechtrain.data.demo import make_demo_corpus
    from speechtrain.data.prepare import prepare_dataset

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--utterances", type=int, default=200)
    ap.add_argument("--workers", type=int, default=2, help="worker count compared with 1")
    ap.add_argument("--corpus", help="existing LJSpeech folder (default: a fresh demo corpus)")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="bench_prepare_"))
    try:
        corpus = Path(args.corpus) if args.corpus else make_demo_corpus(tmp / "demo", args.utterances, seed=0)
        rows = []
        for label, workers, cache in (
            ("cold, 1 worker", 1, "c1"),
            (f"cold, {args.workers} workers", args.workers, "c2"),
            (f"cached rerun ({args.workers} workers asked)", args.workers, "c2"),
        ):
            cfg = load_config(None, [f"data.manifest={corpus}", f"data.cache_dir={tmp / cache}"])
            start = time.perf_counter()
            report = prepare_dataset(cfg.data, workers=workers, progress=False)
            wall = time.perf_counter() - start
            rows.append((label, report, wall))
        base = rows[0][2]
        audio_s = rows[0][1].hours * 3600
        print(f"corpus: {corpus} ({rows[0][1].kept} utterances, {audio_s / 60:.1f} min of audio)")
        print(f"{'run':40s} {'computed':>8s} {'reused':>7s} {'wall s':>8s} {'audio s/s':>10s} {'speed-up':>8s}")
        for label, report, wall in rows:
            print(
                f"{label:40s} {report.computed:8d} {report.reused:7d} {wall:8.2f} "
                f"{audio_s / wall:10.1f} {base / wall:7.2f}x"
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
