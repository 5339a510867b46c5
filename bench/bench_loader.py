"""Loader-only throughput: items/s and audio-seconds/s of the input pipeline, no model.

Compares, in one run, 0 vs N workers and cached features (mel read from the feature cache) vs
on-device features (raw audio shipped, log-mel computed by DeviceFeatures; on the device when
there is one, else on the CPU, which then counts in the loader's time).

    python -m speechtrain make-dataset /tmp/demo --utterances 200
    python -m speechtrain prepare /tmp/demo
    python bench/bench_loader.py /tmp/demo --batches 60

Without DATA it runs on the in-memory FakeSpeechDataset (``--fake N`` utterances).
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from typing import Any

import torch


def _cfg(data: str | None, overrides: list[str]) -> Any:
    from speechtrain.config import load_config

    extra = [f"data.manifest={data}"] if data else []
    if not data:  # the fake dataset's feature settings
        extra += ["data.hop_length=4", "data.n_fft=16", "data.win_length=16", "data.n_mels=8", "data.sample_rate=400"]
        extra += ["data.fmax=null"]
    return load_config(None, [*extra, *overrides])


def _dataset(cfg: Any, data: str | None, fake: int, fields: tuple[str, ...]) -> Any:
    if data:
        from speechtrain.data.dataset import SpeechDataset
        from speechtrain.data.prepare import ensure_prepared

        ensure_prepared(cfg.data, progress=False)
        return SpeechDataset.from_config(cfg.data, "train", fields=fields)
    from speechtrain.testing.datasets import fake_dataset

    return fake_dataset(fake, min_frames=50, max_frames=400, fields=fields)


def run_case(cfg: Any, data: str | None, fake: int, needs: Any, batches: int, device: str) -> dict[str, Any]:
    """Time ``batches`` batches through the loader (+ DeviceFeatures on ``device``)."""
    from speechtrain.data.loader import DeviceFeatures, build_train_loader, dataset_fields

    ds = _dataset(cfg, data, fake, dataset_fields(cfg.data, needs))
    loader = build_train_loader(cfg.data, ds, needs, seed=cfg.train.seed, rank=0, world_size=1)
    features = DeviceFeatures(cfg.data, needs).to(device).train()
    it = iter(loader)
    start = time.perf_counter()
    first = next(it)  # worker start-up and first batch
    first_s = time.perf_counter() - start
    items = seconds = 0.0
    n = 0
    t0 = time.perf_counter()
    for batch in itertools.islice(itertools.chain([first], it), batches):
        out = features(batch.to(device))
        if device.startswith("cuda"):
            torch.cuda.synchronize()  # sync: timing only
        items += out.size
        seconds += out.audio_seconds
        n += 1
    wall = time.perf_counter() - t0
    del it
    return {
        "workers": cfg.data.num_workers,
        "features": "on-device" if cfg.data.features_on_device else "cached",
        "batches": n,
        "first_batch_s": first_s,
        "items_per_s": items / wall,
        "audio_s_per_s": seconds / wall,
        "padding": loader.stats()["padding_fraction"],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("data", nargs="?", default=None, help="prepared dataset folder (default: fake in-memory data)")
    p.add_argument("--fake", type=int, default=400, help="utterances of the fake dataset")
    p.add_argument("--batches", type=int, default=50, help="timed batches per case (the first one included)")
    p.add_argument("--workers", type=int, default=2, help="worker count compared with 0")
    p.add_argument("--needs", default="mel,text", help="what the task reads: mel,audio,text,labels,speakers")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    p.add_argument("--json", default=None, help="write the results as JSON")
    p.add_argument("overrides", nargs="*", metavar="key=value")
    args = p.parse_args(argv)
    from speechtrain.train.task import Needs

    want = set(args.needs.split(","))
    needs = Needs(
        text="text" in want, audio="audio" in want, mel="mel" in want, labels="labels" in want,
        speakers="speakers" in want,
    )  # fmt: skip
    if args.threads:
        torch.set_num_threads(args.threads)
    rows = []
    for on_device in (False, True):
        for workers in (0, args.workers):
            over = [*args.overrides, f"data.num_workers={workers}", f"data.features_on_device={on_device}"]
            rows.append(run_case(_cfg(args.data, over), args.data, args.fake, needs, args.batches, args.device))
    print(f"loader only, data={args.data or f'fake x{args.fake}'}, device for DeviceFeatures={args.device}")
    print(f"{'features':>10} {'workers':>7} {'batches':>7} {'1st batch s':>11} {'items/s':>9} {'audio s/s':>10}")
    for r in rows:
        print(
            f"{r['features']:>10} {r['workers']:>7} {r['batches']:>7} {r['first_batch_s']:>11.2f} "
            f"{r['items_per_s']:>9.1f} {r['audio_s_per_s']:>10.1f}"
        )
    base = rows[0]["audio_s_per_s"]
    for r in rows[1:]:
        print(f"  {r['features']}, {r['workers']} workers vs cached, 0 workers: x{r['audio_s_per_s'] / base:.2f}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
