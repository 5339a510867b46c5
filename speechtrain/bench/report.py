"""Benchmark reports: JSON, a markdown table and a PNG chart, from measured ladder rows.

The JSON has ``device``, ``runs`` (measured configurations, rates derived from the raw counts),
``skipped`` (rows listed with their reason but not measured: skipped, not applicable, failed with the first
lines of their error and their log, timed out, or not measured yet when the ladder was stopped),
``bottleneck`` (the diagnosis), ``headline``, ``command`` and ``notes``. Speed-ups are ratios to the plain
baseline of the same invocation (``speedup_vs_baseline``) and to the fair baseline (``speedup_vs_fair``).
A ladder rewrites its report after every row (:func:`write_json`, :func:`write_markdown` replace the file
atomically), so a killed ladder leaves the rows it measured.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from speechtrain.bench.ablate import (
    LadderRow,
    Spread,
    Verdict,
    applied_text,
    exceeds_bound,
    mechanism_bound,
    paired_ratios,
    verdict,
)
from speechtrain.bench.diagnose import diagnose
from speechtrain.bench.flops import mfu, peak_flops_for
from speechtrain.device import foreign_load
from speechtrain.errors import UserError

GIB = 1024**3


def _finish_runs(rows: Sequence[LadderRow], probe_result: Any) -> None:
    """Fill speed-up and MFU of every measured row (from the baseline of the same invocation)."""
    base = next((r.result for r in rows if r.variant.key == "baseline" and r.result is not None), None)
    base_rate = base.audio_seconds_per_second if base is not None else None
    fair = next((r.result for r in rows if r.variant.key == "fair_baseline" and r.result is not None), None)
    fair_rate = fair.audio_seconds_per_second if fair is not None else None
    flops_per_frame = base.flops_per_padded_frame if base is not None else None
    for row in rows:
        res = row.result
        if res is None:
            continue
        res.speedup_vs_baseline = res.audio_seconds_per_second / base_rate if base_rate else None
        res.speedup_vs_fair = res.audio_seconds_per_second / fair_rate if fair_rate else None
        flops = flops_per_frame * res.padded_frames if flops_per_frame else None
        tf32 = bool((res.applied.get("tf32") or {}).get("applied"))
        peak = peak_flops_for(probe_result, res.precision, tf32=tf32)
        res.mfu = mfu(flops, res.seconds, peak)


#: the rows a headline ratio is read from, first measured wins ("all" failed: the same settings without compile)
HEADLINE_KEYS = ("all", "all_eager", "all_compile", "all_graphs", "config")


def _spread_dict(spread: Spread | None) -> dict[str, Any] | None:
    if spread is None:
        return None
    return {"median": spread.median, "low": spread.low, "high": spread.high, "passes": spread.count}


def _row_stats(
    row: LadderRow,
    reference: LadderRow | None,
    max_spread: float,
    base: LadderRow | None = None,
    fair: LadderRow | None = None,
) -> dict[str, Any]:
    """The row's rate range over its passes and its ratio to the reference with a verdict; a rung whose gain
    over ``base`` (the row it sits on) passes what its mechanism can give is flagged (verdict "exceeds its
    mechanism"), whatever its spread."""
    rates = Spread.of([r for r in row.rates if r is not None])
    out: dict[str, Any] = {
        "passes": 0 if rates is None else rates.count,
        "rate_spread": _spread_dict(rates),
        "rate_spread_fraction": None if rates is None or rates.count < 2 else rates.width,
    }
    if fair is not None and row is not fair:
        out["speedup_vs_fair_spread"] = _spread_dict(Spread.of(paired_ratios(row, fair)))
    if reference is None:
        return out
    if row is reference:
        out["verdict"], out["verdict_detail"] = Verdict.REFERENCE.value, "the reference of every ratio"
        return out
    ratio = Spread.of(paired_ratios(row, reference))
    kind, detail = verdict(ratio, max_spread)
    out["speedup_spread"] = _spread_dict(ratio)
    if base is not None and base is not row and base.result is not None:
        bound = mechanism_bound(row.variant, row.result, base.result)
        if bound is not None:
            gain = Spread.of(paired_ratios(row, base))
            out["bound"] = {"limit": bound.limit, "base": bound.base, "reason": bound.reason}
            if exceeds_bound(gain, bound):
                assert gain is not None
                kind = Verdict.IMPLAUSIBLE
                detail = (
                    f"{gain.median:.2f}x over '{bound.base}' where its mechanism allows {bound.limit:.2f}x at most "
                    f"({bound.reason}): noise, not a result; re-run on a quiet machine"
                )
    out["verdict"], out["verdict_detail"] = kind.value, detail
    return out


def _headline(runs: list[dict[str, Any]], device_type: str) -> dict[str, Any] | None:
    """The headline ratio: the "all" row (or the config row) against the fair baseline on a GPU (the loop a
    competent user writes there: bf16, SDPA, fused AdamW), against the plain fp32 loop elsewhere or when the
    fair row was not measured; the text names the reference and gives the other ratio beside it."""
    by_key = {r["key"]: r for r in runs}
    row = next((by_key[k] for k in HEADLINE_KEYS if k in by_key), None)
    if row is None or row.get("speedup_vs_baseline") is None:
        return None
    plain = row["speedup_vs_baseline"]
    fair = row.get("speedup_vs_fair")
    against_fair = device_type == "cuda" and fair is not None
    if against_fair:
        spread = row.get("speedup_vs_fair_spread") or {}
        text = f"{row['name']} vs the fair baseline (bf16 autocast, SDPA, fused AdamW): {fair:.2f}x"
    else:
        spread = row.get("speedup_spread") or {}
        text = f"{row['name']} vs the baseline (plain fp32 PyTorch loop): {plain:.2f}x"
    if spread.get("passes", 0) >= 2:
        text += f" (passes {spread['low']:.2f}-{spread['high']:.2f}x)"
    if row.get("verdict") == Verdict.INCONCLUSIVE.value and not against_fair:
        text += ": inconclusive, " + str(row.get("verdict_detail"))
    elif spread.get("passes", 0) < 2:
        text += ": one pass, no spread"
    if against_fair:
        text += f"; vs the plain fp32 loop: {plain:.2f}x"
    elif fair is not None:
        text += f"; vs the fair baseline: {fair:.2f}x"
    return {
        "key": row["key"],
        "reference": "fair_baseline" if against_fair else "baseline",
        "speedup": fair if against_fair else plain,
        "speedup_vs_baseline": plain,
        "speedup_vs_fair": fair,
        "spread": spread or None,
        "verdict": None if against_fair else row.get("verdict"),
        "text": text,
    }


def build_report(
    rows: Sequence[LadderRow],
    device: dict[str, Any],
    probe_result: Any = None,
    command: str = "",
    notes: Sequence[str] = (),
    tuned_batch_size: float | None = None,
    max_spread: float = 0.2,
    quality: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The report dict (JSON-ready) of a finished ladder, with the diagnosis and the headline.

    ``tuned_batch_size``: the tuner's mean items per batch, if known (the diagnosis compares it
    with each run's mean batch). ``max_spread``: the widest range of a ratio's passes (as a fraction
    of its median) that still counts as a speed-up or slow-down; wider, or across 1.0x: inconclusive.
    ``quality``: the quality column so far (``LadderQuality.to_dict()`` of :mod:`speechtrain.recipes.quality_bench`:
    ``rows`` holds a cell per rung key); each run gains its cell as ``quality``, the report the section."""
    _finish_runs(rows, probe_result)
    for row in rows:
        if row.result is not None and tuned_batch_size is not None:
            row.result.tuned_batch_size = tuned_batch_size
    reference = next((r for r in rows if r.variant.key == "baseline" and r.result is not None), None)
    # the row every rung sits on: speechtrain with everything off, else the baseline
    base = next((r for r in rows if r.variant.key == "engine" and r.result is not None), reference)
    fair = next((r for r in rows if r.variant.key == "fair_baseline" and r.result is not None), None)
    runs = []
    skipped: list[dict[str, Any]] = []
    for index, row in enumerate(rows):
        if row.result is not None:
            rec = row.result.to_dict()
            rec["key"] = row.variant.key
            rec["index"] = index
            rec["status"] = "measured"
            rec["log"] = row.log
            rec["applied_summary"] = applied_text(row.result, row.variant)
            rec.update(_row_stats(row, reference, max_spread, base, fair))
            runs.append(rec)
        else:
            reason = row.error or row.variant.skip_reason
            status = getattr(row.status, "value", row.status)
            if status == "measured":  # a row built without a status: skipped when it carries a reason
                status = "skipped"
            entry: dict[str, Any] = {"name": row.variant.label, "key": row.variant.key, "reason": reason}
            entry.update(index=index, status=status, error_lines=list(row.error_lines), log=row.log)
            skipped.append(entry)
    bottleneck = diagnose(runs, device)
    # the load beyond the row's own torch threads (a row at `threads` threads loads the machine by about that
    # much itself; its loader workers stay below a core on these rows): what other processes added
    cores = device.get("usable_cores") or device.get("cpu_count") or 1
    others = [(foreign_load(r.get("host_load"), r.get("threads") or 0, cores), r.get("host_load")) for r in runs]
    flagged_load = [(o, load) for o, load in others if o is not None]
    loaded = bool(flagged_load)
    if loaded:
        extra, load = max(flagged_load)
        notes = [
            *notes,
            f"other processes loaded the machine (1-minute load average up to {load:.1f} on {cores} cores, "
            f"{extra:.1f} beyond the row's own threads, while rows were timed): wall-clock rates and their ratios "
            "are unreliable; on a CPU compare audio-s per CPU-s, and re-run on a quiet machine before quoting a figure",
        ]
    flagged = [r for r in runs if r.get("verdict") == Verdict.IMPLAUSIBLE.value]
    if flagged:
        notes = [
            *notes,
            *(f"'{r['name']}' flagged: {r['verdict_detail']}" for r in flagged),
        ]
    headline = _headline(runs, str(device.get("type")))
    pending = [str(s["name"]) for s in skipped if s.get("status") == "not measured yet"]
    if pending:
        notes = [*notes, f"in progress or stopped: {len(pending)} row(s) not measured yet ({', '.join(pending)})"]
    if headline is not None and headline["verdict"] == Verdict.INCONCLUSIVE.value:
        why = "the machine was too loaded to conclude" if loaded else "the passes disagree too much to conclude"
        advice = "re-run with more --repeat or on a quiet machine"
        notes = [*notes, f"headline inconclusive: {why} ({headline['text']}); {advice}"]
    if quality is not None:
        cells = quality.get("rows") or {}
        for rec in runs:
            rec["quality"] = cells.get(rec["key"])
        notes = [*notes, *quality_notes(quality, {r["key"]: r["name"] for r in runs})]
    peak_note = (
        "MFU: FLOPs counted once on the baseline (torch.utils.flop_counter, forward+backward) per padded frame, "
        "scaled by each run's padded frames; peak from the probe ("
        + str((device.get("probe") or {}).get("peak_source", "unknown"))
        + "); null where the peak for the run's precision is unknown."
    )
    out = {
        "device": device,
        "runs": runs,
        "skipped": skipped,
        "bottleneck": bottleneck,
        "headline": headline,
        "command": command,
        "notes": [*notes, peak_note],
    }
    if quality is not None:
        out["quality"] = quality
    return out


def quality_notes(quality: dict[str, Any], names: dict[str, str]) -> list[str]:
    """What the quality column means, and each rung whose speed-up costs quality."""
    better = "higher" if quality.get("mode") == "max" else "lower"
    ref = quality.get("reference_label") or quality.get("reference")
    out = [
        f"quality after equal audio: every Trainer rung trained for {quality['audio_seconds']:g} s of audio, "
        f"{quality['repeat']} seed(s) interleaved (runs in {quality.get('out_dir')}); {quality['metric']} at the last "
        f"evaluation ({better} is better), median [range over the seeds]; a rung is marked 'costs quality' where its "
        f"median lies beyond the worst seed of '{ref}' (its run-to-run spread). The quality does not depend on the "
        "machine's load"
    ]
    cells = quality.get("rows") or {}
    ref_cell = cells.get(quality.get("reference", ""), {})
    for key, cell in cells.items():
        if cell.get("costs_quality"):
            out.append(
                f"'{names.get(key, key)}' costs quality: {quality['metric']} {_median_range(cell)} against "
                f"'{ref}' {_median_range(ref_cell)}"
            )
    return out


def _median_range(cell: dict[str, Any]) -> str:
    if cell.get("median") is None:
        return "-"
    if cell.get("seeds", 0) < 2:
        return f"{cell['median']:.4g}"
    return f"{cell['median']:.4g} [{cell['low']:.4g}, {cell['high']:.4g}]"


def quality_header(quality: dict[str, Any]) -> str:
    better = "higher" if quality.get("mode") == "max" else "lower"
    return f"{quality['metric']} after {quality['audio_seconds']:g} s audio ({better} is better)"


def quality_cell(cell: dict[str, Any] | None) -> str:
    """A rung's quality: median [range over the seeds], the seeds so far while it is trained, and the mark of a
    speed-up that costs quality; else why there is none."""
    if not cell:
        return "-"
    if cell.get("median") is None:
        return str(cell.get("reason") or cell.get("status") or "-")
    text = _median_range(cell)
    if cell.get("seeds", 0) < cell.get("of", 0):
        text += f" ({cell['seeds']}/{cell['of']} seeds)"
    if cell.get("status") == "failed":
        text += f"; failed: {cell.get('reason')}"
    if cell.get("verdict") == "reference":
        text += " reference"
    elif cell.get("costs_quality"):
        text += " **costs quality** (beyond the reference's spread)"
    elif str(cell.get("verdict", "")).startswith("keeps quality"):
        text += " keeps quality"
    return text


def _gib(n: Any) -> str:
    return "-" if n is None else f"{n / GIB:.2f} GiB"


def _pct(x: Any) -> str:
    return "-" if x is None else f"{x:.1%}"


def _cell(text: str) -> str:
    return str(text).replace("|", "/").replace("\n", " ")


def markdown_table(report: dict[str, Any]) -> str:
    """The ladder as a markdown table (ladder order; skipped and failed rows carry their reason).

    ``vs fair`` is the ratio to the fair baseline (bf16 autocast, SDPA, fused AdamW) where it was measured.
    ``speed-up`` is the ratio of medians to the baseline, with the range of the per-pass ratios and
    "inconclusive" when that range crosses 1.0x or is too wide; ``spread`` is the range of the row's
    own audio-s/s over its passes, as a share of its median. On a CPU device two more columns: audio
    seconds per CPU second of the row's process, the host's load average while it was timed, and the
    process's minor page faults per timed step (what ``accel.cpu_allocator`` lowers)."""
    runs = report["runs"]
    cpu = report.get("device", {}).get("type") == "cpu"
    base = next((r for r in runs if r.get("key") == "baseline"), None)
    base_peak = base.get("peak_memory_bytes") if base else None
    extra = " audio-s/CPU-s | load | faults/step |" if cpu else ""
    quality = report.get("quality")
    header = (
        "| configuration | audio-s/s | speed-up | vs fair | spread | steps/s | samples/s | peak memory | memory saved "
        "| padding | data wait | GPU busy | MFU |"
        + extra
        + (f" quality: {quality_header(quality)} |" if quality else "")
        + " applied? |\n"
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        + ("---:|---:|---:|" if cpu else "")
        + ("---|" if quality else "")
        + "---|\n"
    )
    lines: list[tuple[int, str]] = []
    for r in runs:
        peak = r.get("peak_memory_bytes")
        saved = 1.0 - peak / base_peak if (peak and base_peak) else None
        cells = [
            _cell(r["name"]),
            f"{r['audio_seconds_per_second']:.1f}",
            _speedup_cell(r),
            "-" if r.get("speedup_vs_fair") is None else f"{r['speedup_vs_fair']:.2f}x",
            "-" if r.get("rate_spread_fraction") is None else f"{r['rate_spread_fraction']:.0%}",
            f"{r['steps_per_second']:.2f}",
            f"{r['samples_per_second']:.1f}",
            _gib(peak),
            "-" if saved is None else f"{saved:+.0%}",
            _pct(r["padding_fraction"]),
            _pct(r["data_wait_fraction"]),
            _pct(r.get("gpu_busy_fraction")),
            _pct(r.get("mfu")),
        ]
        if cpu:
            per_cpu, load = r.get("audio_seconds_per_cpu_second"), r.get("host_load")
            faults = r.get("page_faults_per_step")
            cells += ["-" if per_cpu is None else f"{per_cpu:.1f}", "-" if load is None else f"{load:.1f}"]
            cells.append("-" if faults is None else f"{faults:.0f}")
        if quality:
            cells.append(_cell(quality_cell(r.get("quality"))))
        cells.append(_cell(r.get("applied_summary", "")))
        lines.append((r.get("index", 0), "| " + " | ".join(cells) + " |"))
    for s in report.get("skipped", []):
        dashes = " - |" * ((15 if cpu else 12) + (1 if quality else 0))
        lines.append((s.get("index", 0), f"| {_cell(s['name'])} |{dashes} {_cell(skipped_reason(s))} |"))
    return header + "\n".join(text for _, text in sorted(lines, key=lambda x: x[0])) + "\n"


def skipped_reason(s: dict[str, Any]) -> str:
    """The cell of a row that was not measured: its reason; a failed or timed-out row adds the first lines of
    its error (beyond the reason's own line) and its log file."""
    text = str(s.get("reason") or "")
    extra = [ln for ln in s.get("error_lines") or [] if ln and ln not in text][:3]
    if extra:
        text += " / " + " / ".join(extra)
    if s.get("log") and s.get("status") in ("failed", "timed out"):
        text += f" (log: {s['log']})"
    return text


def row_line(report: dict[str, Any], key: str) -> str:
    """One line with a row's figures as soon as it is measured (or why it was not); ``quality:<row>``: the row's
    quality after equal audio as it stands."""
    if key.startswith("quality:"):
        quality = report.get("quality") or {}
        rung = key.split(":", 1)[1]
        if not rung:
            n = sum(1 for c in (quality.get("rows") or {}).values() if c.get("status") != "not trained")
            return f"  quality after equal audio: {n} rows to train for {quality.get('audio_seconds')} s of audio"
        name = next((r["name"] for r in report["runs"] if r.get("key") == rung), rung)
        return f"  {name}: {quality.get('metric', 'quality')} {quality_cell((quality.get('rows') or {}).get(rung))}"
    run = next((r for r in report["runs"] if r.get("key") == key), None)
    if run is None:
        s = next((s for s in report.get("skipped", []) if s.get("key") == key), None)
        return f"  {key}: {skipped_reason(s) if s else 'no result'}"
    parts = [
        f"{run['audio_seconds_per_second']:.1f} audio-s/s",
        f"{run['steps_per_second']:.2f} steps/s",
        f"{run['mean_batch_size']:.1f} items/batch",
        f"peak {_gib(run.get('peak_memory_bytes'))}",
    ]
    if run.get("speedup_vs_baseline") is not None:
        parts.append(f"{run['speedup_vs_baseline']:.2f}x plain loop")
    if run.get("speedup_vs_fair") is not None:
        parts.append(f"{run['speedup_vs_fair']:.2f}x fair loop")
    for label, field_key in (("GPU busy", "gpu_busy_fraction"), ("MFU", "mfu")):
        if run.get(field_key) is not None:
            parts.append(f"{label} {run[field_key]:.1%}")
    if run.get("warmup_seconds") is not None:
        parts.append(f"warm-up {run['warmup_seconds']:.1f} s")
    view = run.get("profile_view") or {}
    if view.get("launches_per_step") is not None:
        parts.append(f"{view['launches_per_step']:.0f} launches/step")
    if view.get("device_idle_fraction") is not None:
        parts.append(f"device idle {view['device_idle_fraction']:.0%}")
    return f"  {run['name']}: " + ", ".join(parts)


def _speedup_cell(r: dict[str, Any]) -> str:
    speedup = r.get("speedup_vs_baseline")
    if speedup is None:
        return "-"
    text = f"{speedup:.2f}x"
    spread = r.get("speedup_spread") or {}
    if spread.get("passes", 0) >= 2:
        text += f" ({spread['low']:.2f}-{spread['high']:.2f})"
    if r.get("verdict") == Verdict.INCONCLUSIVE.value:
        text += " inconclusive"
    elif r.get("verdict") == Verdict.IMPLAUSIBLE.value:
        text += f" exceeds its mechanism (<= {r['bound']['limit']:.2f}x): noise"
    return text


def diagnosis_text(report: dict[str, Any]) -> str:
    """The bottleneck as a few plain lines."""
    b = report["bottleneck"]
    out = [f"Bottleneck: {b['kind']}", f"  evidence: {b['evidence']}"]
    out += [f"  - {a}" for a in b.get("advice", [])]
    return "\n".join(out)


def markdown_report(report: dict[str, Any], title: str = "speechtrain bench") -> str:
    """A whole markdown page: device, command, table, diagnosis, notes."""
    dev = report["device"]
    lines = [
        f"# {title}",
        "",
        f"- device: {dev.get('type')} ({dev.get('name')}), {dev.get('cpu_count')} CPU cores, torch {dev.get('torch')}",
        f"- date: {dev.get('date')}",
        f"- command: `{report.get('command', '')}`",
        f"- peak memory: {dev.get('peak_memory_kind')}",
        *([f"- headline: {report['headline']['text']}"] if report.get("headline") else []),
        "",
        markdown_table(report),
        "```",
        diagnosis_text(report),
        "```",
        "",
    ]
    lines += [f"- {n}" for n in report.get("notes", [])]
    profile = profile_markdown(report)
    if profile:
        lines += ["", profile]
    return "\n".join(lines) + "\n"


def profile_markdown(report: dict[str, Any], top: int = 3) -> str:
    """The profiler's view of each profiled row (``--profile N``): launches per step, the device's idle
    share of the step, the step time under the profiler and the top host and device operators."""
    rows = [r for r in report["runs"] if r.get("profile_view")]
    if not rows:
        return ""
    out = [
        "## Profile (one more run per row under torch.profiler; its rates are not the row's)",
        "",
        "| configuration | step ms (profiled) | launches/step | device idle | top host operators (self CPU) "
        "| top device operators (self device) |",
        "|---|---:|---:|---:|---|---|",
    ]
    for r in rows:
        v = r["profile_view"]
        if v.get("error"):
            out.append(f"| {_cell(r['name'])} | - | - | - | {_cell(v['error'])} | - |")
            continue

        def ops(key: str, v: dict[str, Any] = v) -> str:
            return "; ".join(f"{o['op']} {o['share']:.0%}" for o in (v.get(key) or [])[:top]) or "-"

        step = "-" if v.get("step_ms") is None else f"{v['step_ms']:.1f}"
        launches = "-" if v.get("launches_per_step") is None else f"{v['launches_per_step']:.0f}"
        out.append(
            f"| {_cell(r['name'])} | {step} | {launches} | {_pct(v.get('device_idle_fraction'))} "
            f"| {_cell(ops('host_ops'))} | {_cell(ops('device_ops'))} |"
        )
    out.append("")
    out.append(
        "launches/step: device kernels and copies per step on a GPU; on a CPU (no launches) the ATen operators "
        "the dispatcher ran per step. device idle: share of the steps' window with no kernel running (GPU only)."
    )
    return "\n".join(out)


def write_atomic(path: str | Path, text: str) -> Path:
    """Write ``text`` to a temporary file beside ``path``, then rename it over ``path``: a reader (or a kill)
    sees the old file or the new one, never half of one."""
    from speechtrain.paths import write_atomic as _write

    return _write(path, text)


def write_json(report: dict[str, Any], path: str | Path) -> Path:
    return write_atomic(path, json.dumps(report, indent=2, default=str) + "\n")


def write_markdown(report: dict[str, Any], path: str | Path, title: str = "speechtrain bench") -> Path:
    return write_atomic(path, markdown_report(report, title))


def chart_label(r: dict[str, Any]) -> str:
    """The text beside a row's bar in the PNG: the speed-up with its range over the passes and the verdict
    where it is not a plain result (inconclusive, exceeds its mechanism, one pass), as in the table."""
    text = _speedup_cell(r)
    if text == "-":
        return ""
    if r.get("verdict") == Verdict.UNREPEATED.value:
        text += " (one pass)"
    return " " + text


def rate_error(r: dict[str, Any]) -> tuple[float, float]:
    """(below, above) the row's audio-s/s: the range of its passes, for the PNG's error bar (0, 0: one pass)."""
    spread = r.get("rate_spread") or {}
    if spread.get("passes", 0) < 2:
        return 0.0, 0.0
    rate = r["audio_seconds_per_second"]
    return max(0.0, rate - spread["low"]), max(0.0, spread["high"] - rate)


def write_plot(report: dict[str, Any], path: str | Path) -> Path:
    """A PNG with two bar charts per configuration: audio-seconds/s (with the range of the passes as an error
    bar, and the speed-up, its range and the verdict beside the bar, as in the table) and peak memory."""
    import matplotlib.pyplot as plt

    fig = plot_figure(report)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_figure(report: dict[str, Any]) -> Any:
    """The matplotlib figure :func:`write_plot` saves."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import MaxNLocator
    except ImportError:
        raise UserError(
            "--plot needs matplotlib: pip install 'speechtrain[plot]' (or pip install matplotlib)"
        ) from None
    runs = report["runs"]
    if not runs:
        raise UserError("nothing was measured, so there is nothing to plot")
    shown = runs[::-1]
    names = [str(r.get("key") or r["name"]) for r in shown]  # short: the full names are in the table
    rates = [r["audio_seconds_per_second"] for r in shown]
    errors = [rate_error(r) for r in shown]
    peaks = [(r.get("peak_memory_bytes") or 0) / GIB for r in shown]
    colours = [
        "#999999" if r.get("verdict") in (Verdict.INCONCLUSIVE.value, Verdict.IMPLAUSIBLE.value) else "#3b7dd8"
        for r in shown
    ]
    height = max(3.0, 0.4 * len(runs) + 1.9)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, height), sharey=True, gridspec_kw={"width_ratios": [3, 2]})
    xerr = [[e[0] for e in errors], [e[1] for e in errors]]
    bars = ax1.barh(names, rates, color=colours, xerr=xerr, capsize=3, ecolor="#333333")
    for bar, r, err in zip(bars, shown, errors):
        label = chart_label(r)
        if label:
            x = bar.get_width() + err[1]
            ax1.text(x, bar.get_y() + bar.get_height() / 2, label, va="center", fontsize=7)
    longest = max((len(chart_label(r)) for r in shown), default=0)  # room for the notes beside the bars
    ax1.set_xlim(0, max(rate + e[1] for rate, e in zip(rates, errors)) * (1.15 + 0.035 * longest) or 1.0)
    ax1.set_xlabel("audio seconds per second (higher is better)")
    ax1.set_title("bar: median pass; line: range of the passes", fontsize=8)
    ax2.barh(names, peaks, color="#d8833b")
    ax2.set_xlabel("peak memory, GiB (" + ("GPU allocated" if report["device"].get("type") == "cuda" else "RSS") + ")")
    ax2.set_title("peak memory", fontsize=8)
    for ax in (ax1, ax2):  # no tick label at a panel's right end, where the next panel's first one is
        ax.xaxis.set_major_locator(MaxNLocator(nbins=4, prune="upper"))
    dev = report["device"]
    lines = [f"speechtrain bench on {dev.get('name')} ({dev.get('date')})"]
    if any(r.get("verdict") in (Verdict.INCONCLUSIVE.value, Verdict.IMPLAUSIBLE.value) for r in runs):
        lines.append("grey: inconclusive or beyond what the change can give (noise, not a result)")
    fig.suptitle("\n".join(textwrap.fill(line, 110) for line in lines), fontsize=9)
    fig.tight_layout()
    return fig
