"""Page faults and time of explicit attention steps with glibc's default malloc and with
``apply_cpu_allocator`` (speechtrain/accel/allocator.py), each in a fresh process, interleaved.

    python bench/bench_allocator.py [--repeat 3] [--batch 16] [--heads 4] [--seq 600] [--steps 20]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys


def one(args: argparse.Namespace, tuned: bool) -> dict[str, float]:
    import resource
    import time

    import torch

    from speechtrain.accel.allocator import apply_cpu_allocator

    torch.set_num_threads(1)
    rec = apply_cpu_allocator(tuned)
    b, h, s, d = args.batch, args.heads, args.seq, 64
    q = torch.randn(b, h, s, d, requires_grad=True)
    mask = torch.ones(s, s, dtype=torch.bool).triu(1)

    def step() -> None:
        scores = (q @ q.transpose(-1, -2) / d**0.5).masked_fill(mask, float("-inf"))  # (B, H, S, S)
        (torch.softmax(scores, -1) @ q).sum().backward()

    for _ in range(3):
        step()
    r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    for _ in range(args.steps):
        step()
    r1, t1 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    return {
        "applied": rec.applied,
        "minor_faults": r1.ru_minflt - r0.ru_minflt,
        "kernel_seconds": r1.ru_stime - r0.ru_stime,
        "wall_seconds": t1 - t0,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--seq", type=int, default=600)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--child", choices=["default", "tuned"], default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(one(args, args.child == "tuned")))
        return 0
    runs: dict[str, list[dict[str, float]]] = {"default": [], "tuned": []}
    for _ in range(args.repeat):
        for mode in ("default", "tuned"):
            cmd = [sys.executable, __file__, "--child", mode] + [
                f"--{k}={getattr(args, k)}" for k in ("batch", "heads", "seq", "steps")
            ]
            runs[mode].append(json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout))
    print(
        f"explicit attention {args.batch}x{args.heads}x{args.seq}x{args.seq}, {args.steps} steps, 1 thread, "
        f"median of {args.repeat} interleaved fresh processes"
    )
    print(f"{'malloc':<8} {'minor faults':>13} {'kernel s':>9} {'wall s':>8}")
    med = {}
    for mode, rs in runs.items():
        med[mode] = {k: statistics.median(r[k] for r in rs) for k in ("minor_faults", "kernel_seconds", "wall_seconds")}
        m = med[mode]
        print(f"{mode:<8} {m['minor_faults']:>13,.0f} {m['kernel_seconds']:>9.2f} {m['wall_seconds']:>8.2f}")
    d, t = med["default"], med["tuned"]
    walls = {mode: [r["wall_seconds"] for r in rs] for mode, rs in runs.items()}
    print(
        f"faults / {d['minor_faults'] / max(t['minor_faults'], 1):.1f}, "
        f"wall x{d['wall_seconds'] / t['wall_seconds']:.2f}"
    )
    print("spread (wall s): " + ", ".join(f"{m} {min(w):.2f}-{max(w):.2f}" for m, w in walls.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
