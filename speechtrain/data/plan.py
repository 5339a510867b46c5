"""The batch plan of an epoch, without reading audio: bucket bounds, batches per bucket, items
per batch and padding, for duration-bucketed batching beside plain random batching of the same
mean batch size (the naive baseline). Used by ``speechtrain plan`` and by the docs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from speechtrain.data.planners import (
    OVERSIZE,
    BucketedPlanner,
    CropPlanner,
    FixedCountPlanner,
    FrameBudget,
    Planner,
)
from speechtrain.data.sampler import BucketBatchSampler, EpochPlan

if TYPE_CHECKING:
    from speechtrain.config import DataConfig


def _plan_stats(planner: Planner, plan: EpochPlan, limit: float | None) -> dict[str, Any]:
    batches = plan.all_batches() + list(plan.remainder)
    frames = planner.frames
    budget = planner.budget
    sizes = np.array([len(k.indices) for k in batches], dtype=np.int64)
    real = padded = 0
    costs = []
    per_bucket: dict[int, dict[str, float]] = {}
    for k in batches:
        lengths = frames[list(k.indices)]
        pad_len = int(budget.padded(int(lengths.max())))
        real += int(lengths.sum())
        padded += pad_len * len(lengths)
        costs.append(len(lengths) * float(budget.cost(pad_len)))
        if k.bucket is not None:
            entry = per_bucket.setdefault(k.bucket, {"batches": 0, "utterances": 0, "real": 0, "padded": 0})
            entry["batches"] += 1
            entry["utterances"] += len(lengths)
            entry["real"] += int(lengths.sum())
            entry["padded"] += pad_len * len(lengths)
    out: dict[str, Any] = {
        "batches": len(batches),
        "utterances": int(sizes.sum()),
        "padding_fraction": 0.0 if padded == 0 else 1.0 - real / padded,
        "real_frames": real,
        "padded_frames": padded,
        "mean_batch_size": float(sizes.mean()) if sizes.size else 0.0,
        "min_batch_size": int(sizes.min()) if sizes.size else 0,
        "max_batch_size": int(sizes.max()) if sizes.size else 0,
        "max_batch_cost": max(costs, default=0.0),
    }
    if limit is not None and np.isfinite(limit):
        out["budget"] = limit
        out["batches_over_budget"] = int(sum(c > limit for c in costs))
    if isinstance(planner, BucketedPlanner):
        buckets = []
        for b in sorted(per_bucket):
            e = per_bucket[b]
            upper = "oversize" if b == OVERSIZE else int(planner.boundaries[b])
            buckets.append(
                {
                    "bucket": b,
                    "upper_frames": upper,
                    "batches": int(e["batches"]),
                    "utterances": int(e["utterances"]),
                    "items_per_batch": e["utterances"] / e["batches"],
                    "padding_fraction": 0.0 if e["padded"] == 0 else 1.0 - e["real"] / e["padded"],
                }
            )
        out["boundaries"] = planner.boundaries.tolist()
        out["buckets"] = buckets
    return out


def _epoch0(planner: Planner, seed: int) -> EpochPlan:
    return BucketBatchSampler(planner, seed=seed, rank=0, world_size=1).plan(0)


def plan_report(
    frames: Sequence[int] | np.ndarray,
    data: DataConfig,
    *,
    seed: int = 0,
    ids: Sequence[str] | None = None,
    hop_length: int | None = None,
    sample_rate: int | None = None,
) -> dict[str, Any]:
    """Plan one epoch (epoch 0, one rank) of bucketed batches and of random batches of the same
    mean batch size, with ``data``'s batching settings and the sampler seed ``seed`` (``train.seed``).
    Returns a JSON-safe dict with keys ``bucketed``, ``random`` (each: ``padding_fraction``,
    ``batches``, ``utterances``, ...), ``utterances``, ``audio_hours`` and, in crop mode, ``crop``."""
    hop = hop_length or data.hop_length
    sr = sample_rate or data.sample_rate
    frames = np.asarray(frames, dtype=np.int64)
    bucketed = BucketedPlanner.from_data(data, frames, ids)
    b_stats = _plan_stats(bucketed, _epoch0(bucketed, seed), bucketed.limit)
    mean_bs = max(1, round(b_stats["mean_batch_size"]))
    random_budget = FrameBudget(
        batch_size=mean_bs, pad_multiple=data.pad_multiple, quadratic_frames=data.quadratic_frames
    )
    rnd = FixedCountPlanner(frames, random_budget, shuffle=data.shuffle, ids=ids)
    r_stats = _plan_stats(rnd, _epoch0(rnd, seed), bucketed.limit)
    r_stats["batch_size"] = mean_bs
    report: dict[str, Any] = {
        "utterances": int(frames.size),
        "audio_hours": float(frames.sum()) * hop / sr / 3600.0,
        "frames_per_second": sr / hop,
        "min_frames": int(frames.min()) if frames.size else 0,
        "max_frames": int(frames.max()) if frames.size else 0,
        "config": {
            "max_frames": data.max_frames,
            "quadratic_frames": data.quadratic_frames,
            "num_buckets": data.num_buckets,
            "buckets": int(len(bucketed.boundaries)),
            "bucket_padding_target": data.bucket_padding_target,
            "max_batch_size": data.max_batch_size,
            "batch_size": data.batch_size,
            "sort_pool": data.sort_pool,
            "pad_multiple": data.pad_multiple,
            "bucket_batch_sizes": data.bucket_batch_sizes,
            "bucket_boundaries": data.bucket_boundaries,
        },
        "bucketed": {**b_stats, **bucketed.report.to_dict()},
        "random": r_stats,
    }
    if data.crop_frames:
        crop = CropPlanner.from_data(data, frames, ids)
        c_stats = _plan_stats(crop, _epoch0(crop, seed), None)
        # padding in crop mode: short items padded up to crop_frames
        real = int(np.minimum(frames[crop.usable], data.crop_frames).sum())
        c_stats["padding_fraction"] = 1.0 - real / max(1, crop.usable.size * data.crop_frames)
        report["crop"] = {**c_stats, **crop.report.to_dict(), "crop_frames": data.crop_frames}
    return report


def format_plan(report: dict[str, Any]) -> str:
    """The plan as text: one line per bucket, then bucketed vs random."""
    b, r = report["bucketed"], report["random"]
    lines = [
        f"{report['utterances']} utterances, {report['audio_hours']:.2f} h, "
        f"{report['min_frames']}-{report['max_frames']} frames ({report['frames_per_second']:.1f} frames/s)",
        f"frame budget per batch: {b['budget']:.0f}" if "budget" in b else "frame budget: none",
    ]
    if b.get("auto_buckets"):
        n, pad = b["auto_buckets"][-1]
        tried = ", ".join(f"{k}: {p:.1%}" for k, p in b["auto_buckets"])
        target = report["config"].get("bucket_padding_target")
        lines.append(f"num_buckets=auto: {n} bucket(s), planned padding {pad:.1%} (target {target:.0%}; tried {tried})")
    lines += [
        "",
        f"{'bucket':>7} {'<= frames':>10} {'utts':>7} {'batches':>8} {'items/batch':>12} {'padding':>8}",
    ]
    for e in b.get("buckets", []):
        lines.append(
            f"{e['bucket']:>7} {e['upper_frames']!s:>10} {e['utterances']:>7} {e['batches']:>8} "
            f"{e['items_per_batch']:>12.1f} {e['padding_fraction']:>8.1%}"
        )
    lines += [
        "",
        f"{'plan':>9} {'batches':>8} {'items/batch':>12} {'max items':>10} {'padding':>8} {'over budget':>12}",
        f"{'bucketed':>9} {b['batches']:>8} {b['mean_batch_size']:>12.1f} {b['max_batch_size']:>10} "
        f"{b['padding_fraction']:>8.1%} {b.get('batches_over_budget', 0):>12}",
        f"{'random':>9} {r['batches']:>8} {r['mean_batch_size']:>12.1f} {r['max_batch_size']:>10} "
        f"{r['padding_fraction']:>8.1%} {r.get('batches_over_budget', 0):>12}",
    ]
    if "crop" in report:
        c = report["crop"]
        lines.append(
            f"{'crop':>9} {c['batches']:>8} {c['mean_batch_size']:>12.1f} {c['max_batch_size']:>10} "
            f"{c['padding_fraction']:>8.1%} {'':>12}  (crop_frames={c['crop_frames']})"
        )
    notes = []
    if b["oversize"]:
        notes.append(
            f"{b['oversize']} utterance(s) over the budget ({b['oversize_action']}): {', '.join(b['oversize_ids'])}"
        )
    if "crop" in report and report["crop"]["crop_short"]:
        c = report["crop"]
        notes.append(f"{c['crop_short']} utterance(s) shorter than crop_frames ({c['crop_short_action']})")
    return "\n".join(lines + notes)
