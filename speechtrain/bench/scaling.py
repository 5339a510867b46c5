"""``speechtrain bench --nproc N``: how training scales over processes (one per device).

Rows, all on the same model, data, per-process batch and per-process threads, in one invocation:

- ``n processes`` for n = 1..N: speechtrain's Trainer under ``torchrun --standalone --nproc-per-node n``
  (``train.strategy``: DDP, or FSDP2 where the config or ``auto`` picks it; 1 is a plain single
  process): audio-seconds/s summed over the ranks, each rank training its own batches of the same
  size (weak scaling, as adding GPUs does);
- ``n processes, all-reduce left out`` for n >= 2: the same, with every step's gradient all-reduce
  (FSDP2: reduce-scatter) skipped (every piece without gradient sync). Its step time beside the synced
  row's is the part of the step spent waiting for gradient communication that the backward did not
  hide: the *gradient sync share*, ``1 - t(left out) / t(synced)``. The library's own small collectives
  (the step's weight, the loss terms) run in both rows, so they count in the step, not in the share.

Scaling efficiency is ``rate(n) / (n x rate(1))``: 1.0 is perfect. With ``repeat`` passes
(interleaved, :func:`~speechtrain.bench.ablate.run_ladder`) each ratio is taken within a pass and the
median and range over passes are shown. Every rank runs the same fixed number of timed steps (the
steps are collectives); a row's seconds are its slowest rank's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from speechtrain.bench.ablate import LadderRow, Spread, Variant

GIB = 2**30


def scaling_variants(nproc: int) -> list[Variant]:
    """The rows for 1..``nproc`` processes, then the all-reduce-left-out twins for 2..``nproc``."""
    rows = [Variant(f"p{n}", f"{n} process" if n == 1 else f"{n} processes") for n in range(1, nproc + 1)]
    rows += [Variant(f"p{n}_nosync", f"{n} processes, all-reduce left out") for n in range(2, nproc + 1)]
    return rows


def variant_processes(variant: Variant) -> tuple[int, bool]:
    """(processes, gradient sync) of a row of :func:`scaling_variants`."""
    key = variant.key.removeprefix("p")
    if key.endswith("_nosync"):
        return int(key.removesuffix("_nosync")), False
    return int(key), True


def _ratios(row: LadderRow, reference: LadderRow, scale: float) -> Spread | None:
    """Per-pass ``row rate / (scale x reference rate)``, as median and range."""
    return Spread.of([a / (scale * b) for a, b in zip(row.rates, reference.rates) if a is not None and b])


def _spread(spread: Spread | None) -> dict[str, Any] | None:
    return None if spread is None else {"median": spread.median, "low": spread.low, "high": spread.high}


def build_scaling_report(
    rows: Sequence[LadderRow], info: dict[str, Any], command: str, notes: list[str]
) -> dict[str, Any]:
    """The report of a scaling run: one line per process count, with efficiency and all-reduce share."""
    synced = {variant_processes(r.variant)[0]: r for r in rows if variant_processes(r.variant)[1]}
    unsynced = {variant_processes(r.variant)[0]: r for r in rows if not variant_processes(r.variant)[1]}
    one = synced.get(1)
    lines = []
    for n, row in sorted(synced.items()):
        res = row.result
        line: dict[str, Any] = {"processes": n, "label": row.variant.label, "error": row.error}
        if res is not None:
            line.update(
                audio_seconds_per_second=res.audio_seconds_per_second,
                audio_seconds_per_second_per_process=res.audio_seconds_per_second / n,
                samples_per_second=res.samples_per_second,
                step_seconds=res.seconds / res.steps if res.steps else None,
                peak_memory_bytes=res.peak_memory_bytes,
                padding_fraction=res.padding_fraction,
                rates=row.rates,
                strategy=((res.applied.get("strategy") or {}).get("info") or {}).get("strategy", "single process"),
            )
        efficiency = _ratios(row, one, n) if one is not None and one.result is not None and res is not None else None
        line["scaling_efficiency"] = _spread(efficiency)
        twin = unsynced.get(n)
        if twin is not None and twin.result is not None and res is not None:
            # share of the synced step not spent when the all-reduce is left out: 1 - rate(synced) / rate(left out)
            share = Spread.of([1.0 - a / b for a, b in zip(row.rates, twin.rates) if a is not None and b])
            line["allreduce_share"] = _spread(share)
            line["allreduce_left_out_audio_seconds_per_second"] = twin.result.audio_seconds_per_second
        elif twin is not None:
            line["allreduce_share"] = None
            line["error"] = line["error"] or twin.error
        lines.append(line)
    runs = [
        {**r.result.to_dict(), "row": r.variant.label}
        if r.result is not None
        else {"row": r.variant.label, "error": r.error}
        for r in rows
    ]
    return {"kind": "scaling", "command": command, "device": info, "notes": notes, "scaling": lines, "runs": runs}


def _range(spread: dict[str, Any] | None, fmt: str) -> str:
    if spread is None:
        return "-"
    text = format(spread["median"], fmt)
    if spread["high"] > spread["low"]:
        text += f" ({format(spread['low'], fmt)} to {format(spread['high'], fmt)})"
    return text


def scaling_markdown(report: dict[str, Any]) -> str:
    """The scaling table (markdown)."""
    head = [
        "| processes | strategy | audio-s/s (all ranks) | per process | scaling efficiency | step time | "
        "gradient sync share of the step | peak memory per process |",
        "|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    body = []
    for line in report["scaling"]:
        if line.get("audio_seconds_per_second") is None:
            body.append(f"| {line['processes']} | - | failed: {line.get('error')} | | | | | |")
            continue
        peak = line.get("peak_memory_bytes")
        step = line.get("step_seconds")
        share = "-" if line["processes"] == 1 else _range(line.get("allreduce_share"), ".1%")
        body.append(
            f"| {line['processes']} | {line.get('strategy', '-')} | {line['audio_seconds_per_second']:.1f} | "
            f"{line['audio_seconds_per_second_per_process']:.1f} | {_range(line.get('scaling_efficiency'), '.2f')} | "
            f"{'-' if step is None else f'{step * 1000:.0f} ms'} | {share} | "
            f"{'-' if peak is None else f'{peak / GIB:.2f} GiB'} |"
        )
    return "\n".join(head + body)


def scaling_report_markdown(report: dict[str, Any], title: str = "speechtrain bench --nproc") -> str:
    """The whole scaling report as a markdown document (table, device, command, notes)."""
    dev = report.get("device", {})
    lines = [
        f"# {title}",
        "",
        f"Device: {dev.get('name')} ({dev.get('type')}), torch {dev.get('torch')}, {dev.get('date')}",
        "",
        f"Command: `{report.get('command')}`",
        "",
        scaling_markdown(report),
        "",
    ]
    lines += [f"- {n}" for n in report.get("notes", [])]
    return "\n".join(lines) + "\n"
