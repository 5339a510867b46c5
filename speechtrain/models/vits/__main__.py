"""``python -m speechtrain.models.vits --config recipes/vits.yaml [key=value ...]``: parameter counts.

The model is built on the ``meta`` device, so even the full model costs no memory and no time.
``--bench-mas`` instead times the batched monotonic alignment search against the per-item reference
on one random ragged batch (``--device``, ``--batch``, ``--frames``, ``--tokens``) and checks that the
paths are equal.
"""

from __future__ import annotations

import argparse


def main(argv: list[str] | None = None) -> int:
    """Print the generator, discriminator and total parameter counts of a VITS config."""
    import torch

    from speechtrain.config import load_config
    from speechtrain.registry import build_task

    p = argparse.ArgumentParser(prog="python -m speechtrain.models.vits", description=__doc__.split("\n")[0])
    p.add_argument("--config", "-c", default=None, help="YAML config (recipes/vits*.yaml)")
    p.add_argument("overrides", nargs="*", metavar="key=value")
    p.add_argument("--bench-mas", action="store_true", help="time batched MAS against the reference instead")
    p.add_argument("--device", default="cpu", help="--bench-mas: device of the batched version")
    p.add_argument("--batch", type=int, default=16, help="--bench-mas: items")
    p.add_argument("--frames", type=int, default=800, help="--bench-mas: longest item in frames")
    p.add_argument("--tokens", type=int, default=150, help="--bench-mas: longest item in tokens")
    p.add_argument("--reference-items", type=int, default=2, help="--bench-mas: items timed with the reference")
    args = p.parse_args(argv)
    if args.bench_mas:
        return bench_mas(args.device, args.batch, args.frames, args.tokens, args.reference_items)
    cfg = load_config(args.config, ["model.name=vits", *args.overrides])
    with torch.device("meta"):
        counts = build_task(cfg.model, cfg.data).parameter_counts()
    for name, n in counts.items():
        print(f"{name:>13}: {n:>12,d}  ({n / 1e6:.2f}M)")
    return 0


def bench_mas(device: str, batch: int, frames: int, tokens: int, reference_items: int = 2) -> int:
    """Print the batched MAS time per batch beside the reference's time per item and per batch."""
    import time

    import numpy as np
    import torch

    from speechtrain.models.vits.mas import maximum_path, maximum_path_reference

    rng = np.random.default_rng(0)
    log_p = rng.standard_normal((batch, frames, tokens)).astype(np.float32)
    n_tokens = rng.integers(max(1, tokens // 3), tokens + 1, batch)
    n_frames = np.maximum(rng.integers(frames // 2, frames + 1, batch), n_tokens)
    n_frames[0], n_tokens[0] = frames, tokens
    mask = np.zeros((batch, frames, tokens), dtype=bool)
    for b in range(batch):
        mask[b, : n_frames[b], : n_tokens[b]] = True
    lp, m = torch.from_numpy(log_p).to(device), torch.from_numpy(mask).to(device)
    maximum_path(lp[:2], m[:2])  # warm-up
    sync = torch.cuda.synchronize if lp.device.type == "cuda" else (lambda: None)
    sync()
    start = time.perf_counter()
    path = maximum_path(lp, m)
    sync()
    batched = time.perf_counter() - start
    path = path.cpu().numpy()
    k = max(1, min(reference_items, batch))
    start = time.perf_counter()
    refs = [maximum_path_reference(log_p[b], int(n_frames[b]), int(n_tokens[b])) for b in range(k)]
    per_item = (time.perf_counter() - start) / k
    equal = all((path[b] == refs[b]).all() for b in range(k))
    print(
        f"MAS B={batch}, {frames} frames x {tokens} tokens (ragged), torch threads {torch.get_num_threads()}: "
        f"batched on {device} {batched:.3f} s per batch; reference (NumPy, per item) {per_item:.3f} s per item "
        f"= {per_item * batch:.2f} s per batch ({per_item * batch / batched:.1f}x); paths equal: {equal}"
    )
    return 0 if equal else 1


if __name__ == "__main__":
    raise SystemExit(main())
