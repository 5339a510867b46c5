"""Side by side with the trainers users would pick instead (``bench/peers/run.py``, ``speechtrain bench --peers``).

Each peer is measured as three rows of one ladder (:func:`speechtrain.bench.ablate.run_ladder`: interleaved
passes, the median pass, the range of the passes): the peer's own trainer (``peer``), speechtrain with the
peer's exact settings (``same``: model size, batch, precision, optimizer, steps) and speechtrain with the
recipe's recommended settings (``autopilot``). The gain is split in two ratios, each with the range of its
per-pass paired ratios and a :func:`~speechtrain.bench.ablate.verdict`:

- same settings: ``same / peer`` (what the engine itself gives);
- autopilot: ``autopilot / same`` (what the recommended settings add on top), and the total ``autopilot / peer``.

The loss after equal steps (the mean over the last steps of each row) is shown side by side: a speed-up that
costs quality is no speed-up. Where the peer has a quality plan (:class:`PeerQuality`), every row also writes
audio for the same held-out items after its timed steps (each pass with its own seed, the same on every row), and
the bench scores all of it here with :mod:`speechtrain.quality` (:func:`score_audio_folder`): the "quality after
equal audio" column gives each metric's median and range over the passes, and a row beyond the peer row's range is
marked (:func:`quality_verdict`). The runners that train the peers' own code live in ``bench/peers/`` (they need the
peers' packages, installed by the bench into a separate environment, never by speechtrain's install).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from speechtrain.bench.ablate import LadderRow, Spread, Verdict, paired_ratios, verdict
from speechtrain.device import foreign_load
from speechtrain.quality.catalog import METRICS
from speechtrain.quality.score import QualityItem, QualityReport, QualityScorer

#: the three rows of a peer, in table order
PEER, SAME, AUTO = "peer", "same", "autopilot"
ROW_KEYS = (PEER, SAME, AUTO)


@dataclass
class PeerRun:
    """One peer after its ladder: its three rows and what the table says about them."""

    key: str  # "xtts", "vits", "nsf", "hifigan"
    title: str  # what is trained, e.g. "XTTS-v2 GPT fine-tuning (tiny layout)"
    rows: list[LadderRow]  # variants keyed PEER, SAME, AUTO
    settings: str = ""  # the shared settings in words (model size, batch, precision, optimizer, steps)
    shims: list[str] = field(default_factory=list)  # what the bench supplied that the peer's install lacked
    commands: dict[str, str] = field(default_factory=dict)  # row key -> the command that trains that row alone
    loss_keys: dict[str, str] = field(default_factory=dict)  # row key -> the loss key compared across rows
    notes: list[str] = field(default_factory=list)
    profiles: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # row key -> top operators
    quality: PeerQuality | None = None  # the quality after equal audio (None: not scored, see quality_note)
    quality_note: str = ""  # why this peer has no quality column


@dataclass
class PeerQuality:
    """The quality after equal audio of one peer's rows: the held-out items every row made audio for (never
    trained on by any row), the metrics shown (the first is the table's column), the seed of each pass (the same
    on every row), and per row key the scores of each pass (None: that pass left no audio to score)."""

    kind: str  # a quality kind of speechtrain.quality.catalog.KINDS: "vocoder" or "tts"
    items: list[str]  # the held-out item ids
    metrics: list[str]  # shown, the first in the main table
    seeds: list[int]  # pass r trained every row with seeds[r]
    what: str  # what the audio is, in words ("resynthesis of ... from each side's own mel")
    scores: dict[str, list[dict[str, Any] | None]] = field(default_factory=dict)


def read_wav(path: Path) -> tuple[np.ndarray, int]:
    """A mono float32 signal and its rate (the first channel of a multi-channel file)."""
    import soundfile as sf

    audio, rate = sf.read(str(path), dtype="float32", always_2d=True)
    return audio[:, 0], int(rate)


def score_audio_folder(
    folder: Path, references: Mapping[str, Path], kind: str, mel_fn: Callable[[np.ndarray], np.ndarray]
) -> QualityReport:
    """Score ``folder/<id>.wav`` against each reference recording ``references[id]`` with the metrics of ``kind``
    (``mel_fn``: one log-mel for every row, so that MCD compares like with like). An item without its file, or at
    another sample rate than its recording, is scored as no value (counted in ``failed``), never left out."""
    rate = None
    items = []
    for item_id, ref_path in references.items():
        ref, ref_rate = read_wav(ref_path)
        rate = rate or ref_rate
        gen_path = folder / f"{item_id}.wav"
        gen = np.zeros(0, dtype=np.float32)
        if gen_path.is_file():
            audio, gen_rate = read_wav(gen_path)
            gen = audio if gen_rate == ref_rate else gen
        items.append(QualityItem(item_id, gen, reference=ref))
    return QualityScorer(kind, rate or 22050, mel_fn).score(items)


def quality_verdict(row: dict[str, Spread], reference: dict[str, Spread], metrics: list[str]) -> str:
    """Whether a row's quality differs from the reference row's beyond the reference's range over its passes:
    for each metric, the row's median below the reference's worst pass (worse) or above its best (better)."""
    worse, better = [], []
    for name in metrics:
        mine, ref = row.get(name), reference.get(name)
        if mine is None or ref is None:
            continue
        if mine.count < 2 or ref.count < 2:
            return "one pass: no spread to judge by"
        sign = 1.0 if METRICS[name].mode == "max" else -1.0  # higher = better after the sign
        worst, best = (ref.low, ref.high) if sign > 0 else (ref.high, ref.low)
        if sign * (mine.median - worst) < 0:
            worse.append(name)
        elif sign * (mine.median - best) > 0:
            better.append(name)
    if worse:
        return (
            "**worse beyond the peer's spread** on "
            + ", ".join(worse)
            + (f" (better on {', '.join(better)})" if better else "")
        )
    if better:
        return "better beyond the peer's spread on " + ", ".join(better)
    return "within the peer's spread"


def quality_summary(q: PeerQuality) -> dict[str, Any]:
    """Per row key: each metric's median and range over the passes that left audio, the passes scored, the items
    without a value, and the verdict against the peer row."""
    spreads: dict[str, dict[str, Spread]] = {}
    out: dict[str, Any] = {}
    for key, passes in q.scores.items():
        done = [p for p in passes if p is not None]
        names = sorted({n for p in done for n in p.get("scores", {})})
        spreads[key] = {
            n: s for n in names if (s := Spread.of([p["scores"][n] for p in done if n in p["scores"]])) is not None
        }
        failed: dict[str, int] = {}
        for p in done:
            for n, c in (p.get("failed") or {}).items():
                failed[n] = failed.get(n, 0) + int(c)
        out[key] = {
            "metrics": {n: _spread_dict(s) for n, s in spreads[key].items()},
            "passes": len(done),
            "failed": failed,
            "per_pass": passes,
        }
    ref = spreads.get(PEER)
    for key, entry in out.items():
        if not entry["passes"]:
            entry["verdict"] = "no audio to score (the row failed)"
        elif key == PEER:
            entry["verdict"] = "reference"
        elif not ref:
            entry["verdict"] = "not judged: the peer row left no audio to compare with"
        else:
            entry["verdict"] = quality_verdict(spreads[key], ref, q.metrics)
    return out


def _spread_dict(spread: Spread | None) -> dict[str, Any] | None:
    if spread is None:
        return None
    return {"median": spread.median, "low": spread.low, "high": spread.high, "passes": spread.count}


def _ratio(a: LadderRow | None, b: LadderRow | None, max_spread: float) -> dict[str, Any] | None:
    """``a`` over ``b``: the ratio of their median rates, the range of the paired per-pass ratios, a verdict."""
    if a is None or b is None or a.result is None or b.result is None:
        return None
    rate_b = b.result.audio_seconds_per_second
    spread = Spread.of(paired_ratios(a, b))
    kind, detail = verdict(spread, max_spread)
    return {
        "ratio": a.result.audio_seconds_per_second / rate_b if rate_b else None,
        "spread": _spread_dict(spread),
        "verdict": kind.value,
        "verdict_detail": detail,
    }


def ratio_text(r: dict[str, Any] | None) -> str:
    """``1.34x (1.19-1.36) faster`` / ``... inconclusive`` / ``-`` when a side was not measured."""
    if r is None or r.get("ratio") is None:
        return "-"
    text = f"{r['ratio']:.2f}x"
    spread = r.get("spread") or {}
    if spread.get("passes", 0) >= 2:
        text += f" ({spread['low']:.2f}-{spread['high']:.2f})"
    return f"{text} {r['verdict']}"


def _run_record(peer: PeerRun, row: LadderRow, reference: LadderRow | None, max_spread: float) -> dict[str, Any]:
    """A row as the ladder report's run records are (so :func:`speechtrain.bench.report.write_plot` draws it):
    its rate, the range of its passes, and its ratio to the peer's own trainer."""
    assert row.result is not None
    rec = row.result.to_dict()
    rec["name"] = f"{peer.title}: {row.variant.label}"
    rec["key"] = f"{peer.key}:{row.variant.key}"
    rates = Spread.of([r for r in row.rates if r is not None])
    rec["rate_spread"] = _spread_dict(rates)
    rec["rate_spread_fraction"] = None if rates is None or rates.count < 2 else rates.width
    if reference is None or reference.result is None:
        return rec
    base = reference.result.audio_seconds_per_second
    rec["speedup_vs_baseline"] = rec["audio_seconds_per_second"] / base if base else None
    if row is reference:
        rec["verdict"] = Verdict.REFERENCE.value
    else:
        ratio = _ratio(row, reference, max_spread)
        assert ratio is not None
        rec["speedup_spread"], rec["verdict"] = ratio["spread"], ratio["verdict"]
    return rec


def peer_summary(peer: PeerRun, max_spread: float) -> dict[str, Any]:
    """The JSON of one peer: its rows (rate, range, memory, loss, parameters, or why not measured) and the
    three ratios."""
    by = {r.variant.key: r for r in peer.rows}
    ref = by.get(PEER)
    rows = []
    for key in ROW_KEYS:
        row = by.get(key)
        if row is None:
            continue
        entry: dict[str, Any] = {"key": key, "label": row.variant.label, "command": peer.commands.get(key)}
        if row.result is None:
            entry["error"] = row.error or row.variant.skip_reason or "not measured"
        else:
            res = row.result
            rates = Spread.of([r for r in row.rates if r is not None])
            loss_key = peer.loss_keys.get(key)
            entry.update(
                audio_seconds_per_second=res.audio_seconds_per_second,
                rate_spread=_spread_dict(rates),
                peak_memory_bytes=res.peak_memory_bytes,
                steps=res.steps,
                mean_batch_size=res.mean_batch_size,
                padding_fraction=res.padding_fraction,
                data_wait_fraction=res.data_wait_fraction,
                host_load=res.host_load,
                trained_parameters=res.trained_parameters,
                precision=res.precision,
                audio_seconds_trained=res.audio_seconds,
                loss_key=loss_key,
                loss=(res.losses or {}).get(loss_key) if loss_key else None,
                losses=res.losses,
            )
        rows.append(entry)
    return {
        "key": peer.key,
        "title": peer.title,
        "settings": peer.settings,
        "shims": peer.shims,
        "notes": peer.notes,
        "rows": rows,
        "same_settings": _ratio(by.get(SAME), ref, max_spread),
        "autopilot": _ratio(by.get(AUTO), by.get(SAME), max_spread),
        "total": _ratio(by.get(AUTO), ref, max_spread),
        "parameters_equal": _parameters_equal(rows),
        "profiles": peer.profiles,
        "quality": _quality_record(peer),
    }


def _quality_record(peer: PeerRun) -> dict[str, Any]:
    """The quality part of a peer's JSON: the plan (items, metrics, seeds) and each row's summary, or the note
    that says why this peer has none."""
    q = peer.quality
    if q is None:
        return {"note": peer.quality_note or "not scored"}
    return {
        "kind": q.kind,
        "items": q.items,
        "metrics": q.metrics,
        "seeds": q.seeds,
        "what": q.what,
        "rows": quality_summary(q),
    }


def _parameters_equal(rows: list[dict[str, Any]]) -> bool | None:
    counts = {r.get("trained_parameters") for r in rows if r.get("trained_parameters") is not None}
    return None if not counts else len(counts) == 1


def build_peer_report(
    peers: list[PeerRun],
    device: dict[str, Any],
    command: str = "",
    notes: list[str] | None = None,
    max_spread: float = 0.2,
) -> dict[str, Any]:
    """The report of ``bench/peers/run.py``: one summary per peer, and ``runs`` in the ladder report's shape
    (every measured row, its ratio to its peer) for the PNG."""
    runs = []
    for peer in peers:
        by = {r.variant.key: r for r in peer.rows}
        for key in ROW_KEYS:
            row = by.get(key)
            if row is not None and row.result is not None:
                runs.append(_run_record(peer, row, by.get(PEER), max_spread))
    notes = list(notes or [])
    cores = device.get("usable_cores") or device.get("cpu_count") or 1
    loads = [(foreign_load(r.get("host_load"), r.get("threads") or 0, cores), r.get("host_load")) for r in runs]
    loaded = [(extra, load) for extra, load in loads if extra is not None]
    if loaded:
        extra, load = max(loaded)
        notes.append(
            f"other processes loaded the machine (1-minute load average up to {load:.1f} on {cores} cores, "
            f"{extra:.1f} beyond the row's own threads): the rates and ratios are noise, not results; re-run on a "
            "quiet machine"
        )
    return {
        "device": device,
        "peers": [peer_summary(p, max_spread) for p in peers],
        "runs": runs,
        "command": command,
        "notes": notes,
    }


def _gib(n: Any) -> str:
    return "-" if n is None else f"{n / 2**30:.2f} GiB"


def _rate(x: float) -> str:
    """Audio-s/s with three significant digits below 100 (a GAN on a CPU trains well under 1 audio-s/s)."""
    return f"{x:.1f}" if x >= 100 else f"{x:.3g}"


def _loss(x: Any) -> str:
    return "-" if x is None else f"{x:.4f}"


def peers_markdown(report: dict[str, Any]) -> str:
    """One table per peer (its own trainer, speechtrain at its settings, speechtrain's autopilot) with the
    ratios under it, the commands, and what the bench supplied to the peer."""
    out: list[str] = []
    for p in report["peers"]:
        out += [f"### {p['title']}", "", f"Settings shared by the rows: {p['settings']}", ""]
        quality = p.get("quality") or {}
        headline = (quality.get("metrics") or ["quality"])[0]
        out.append(
            "| row | audio-s/s (range of passes) | vs the peer | peak memory | trained parameters | batch (mean) "
            f"| padding | data wait | loss after equal steps | quality after equal audio: {_metric_head(headline)} "
            "| load |"
        )
        out.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        ratios = {"peer": "reference", "same": ratio_text(p["same_settings"]), "autopilot": ratio_text(p["total"])}
        for r in p["rows"]:
            if "error" in r:
                out.append(f"| {r['label']} | - | - | - | - | - | - | - | - | - | {r['error']} |")
                continue
            spread = r.get("rate_spread") or {}
            rate = _rate(r["audio_seconds_per_second"])
            if spread.get("passes", 0) >= 2:
                rate += f" ({_rate(spread['low'])}-{_rate(spread['high'])})"
            params = "-" if r.get("trained_parameters") is None else f"{r['trained_parameters']:,}"
            loss = _loss(r.get("loss")) + (f" ({r['loss_key']})" if r.get("loss_key") else "")
            load = "-" if r.get("host_load") is None else f"{r['host_load']:.1f}"
            out.append(
                f"| {r['label']} | {rate} | {ratios.get(r['key'], '-')} | {_gib(r.get('peak_memory_bytes'))} | "
                f"{params} | {r.get('mean_batch_size', 0):.1f} | {r.get('padding_fraction', 0):.1%} | "
                f"{r.get('data_wait_fraction', 0):.1%} | {loss} | {_quality_cell(quality, r['key'], headline)} | "
                f"{load} |"
            )
        out.append("")
        out += _quality_lines(p)
        out.append(f"- same settings (speechtrain at the peer's settings / the peer): {ratio_text(p['same_settings'])}")
        out.append(f"- autopilot (the recipe's settings / speechtrain at the peer's): {ratio_text(p['autopilot'])}")
        out.append(f"- total (the recipe's settings / the peer): {ratio_text(p['total'])}")
        if p.get("parameters_equal") is False:
            counts = [r["trained_parameters"] for r in p["rows"] if r.get("trained_parameters") is not None]
            gap = max(counts) - min(counts)
            out.append(
                f"- **the rows train different parameter counts** ({min(counts):,} to {max(counts):,}, a difference "
                f"of {gap:,} or {gap / max(counts):.4%}): the models are not the same to the parameter"
            )
        for s in p.get("shims", []):
            out.append(f"- supplied by the bench: {s}")
        for n in p.get("notes", []):
            out.append(f"- {n}")
        out += _profile_lines(p)
        cmds = [r for r in p["rows"] if r.get("command")]
        if cmds:
            out.append("")
            out.append("```")
            out += [f"# {r['label']}\n{r['command']}" for r in cmds]
            out.append("```")
        out.append("")
    out += [f"- {n}" for n in report.get("notes", [])]
    return "\n".join(out) + "\n"


def _metric_head(name: str) -> str:
    spec = METRICS.get(name)
    if spec is None:
        return name
    unit = f" {spec.unit}" if spec.unit else ""
    return f"{name}{unit} ({'higher' if spec.mode == 'max' else 'lower'} is better)"


def _spread_text(s: dict[str, Any] | None, digits: int = 3) -> str:
    """``median (low-high)`` over the passes, the median alone for one pass, ``-`` for none."""
    if not s:
        return "-"
    text = f"{s['median']:.{digits}f}"
    return text + (f" ({s['low']:.{digits}f}-{s['high']:.{digits}f})" if s.get("passes", 0) >= 2 else "")


def _quality_cell(quality: dict[str, Any], key: str, metric: str) -> str:
    if "rows" not in quality:
        return "not scored" if quality else "-"
    row = quality["rows"].get(key)
    if row is None or not row["passes"]:
        return "no audio"
    return _spread_text(row["metrics"].get(metric))


def _quality_lines(p: dict[str, Any]) -> list[str]:
    """The quality after equal audio in full: every metric shown per row, median (range over the seeds), the
    verdict against the peer row; or the note that says why this peer has no quality column."""
    q = p.get("quality") or {}
    if "rows" not in q:
        return [f"- quality after equal audio: {q['note']}"] if q.get("note") else []
    labels = {r["key"]: r["label"] for r in p["rows"]}
    audio = {r["key"]: r.get("audio_seconds_trained") for r in p["rows"]}
    metrics = q["metrics"]
    out = [
        f"Quality after equal audio: {q['what']}; {len(q['items'])} held-out items ({', '.join(q['items'])}), "
        "trained on by no row; scored here by speechtrain.quality, the same code for every row; median (range) "
        f"over {len(q['seeds'])} passes, seeds {', '.join(map(str, q['seeds']))} (pass r: the same seed on every row):",
        "",
        "| row | audio s (timed steps) | "
        + " | ".join(_metric_head(m) for m in metrics)
        + " | passes scored | verdict |",
        "|---|---:|" + "---:|" * len(metrics) + "---:|---|",
    ]
    for key, row in q["rows"].items():
        cells = " | ".join(_spread_text(row["metrics"].get(m)) for m in metrics)
        trained = "-" if audio.get(key) is None else f"{audio[key]:.1f}"
        failed = "; ".join(f"{n}: {c} items without a value" for n, c in row["failed"].items() if n in metrics)
        out.append(
            f"| {labels.get(key, key)} | {trained} | {cells} | {row['passes']}/{len(q['seeds'])} | {row['verdict']}"
            + (f"; {failed}" if failed else "")
            + " |"
        )
    out.append("")
    return out


def _profile_lines(p: dict[str, Any]) -> list[str]:
    """Where each row's time goes: its top operators by self time, from one extra profiled run."""
    profiles = p.get("profiles") or {}
    if not profiles:
        return []
    labels = {r["key"]: r["label"] for r in p["rows"]}
    out = [
        "",
        "Where the time goes (one more run per row under torch.profiler, not ranked; self time per operator):",
        "",
    ]
    for key in ROW_KEYS:
        ops = profiles.get(key)
        if ops:
            top = ", ".join(f"{o['op']} {o['share']:.0%}" for o in ops)
            out.append(f"- {labels.get(key, key)}: {top}")
    return out


def write_peers_plot(report: dict[str, Any], path: str | Path) -> Path:
    """A PNG with one row of panels per peer: the speed-up of each row over the peer's own trainer (the bar: the
    ratio of medians; the line: the range of the per-pass ratios; the label: as the table, with the verdict) and
    its peak memory. Inconclusive rows are grey. Rates of different models are not drawn on one axis."""
    from speechtrain.bench.report import chart_label

    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        from speechtrain.errors import UserError

        raise UserError("--plot needs matplotlib: pip install matplotlib") from None
    peers = [p for p in report["peers"] if any("error" not in r for r in p["rows"])]
    if not peers:
        from speechtrain.errors import UserError

        raise UserError("nothing was measured, so there is nothing to plot")
    by_key = {r["key"]: r for r in report["runs"]}
    fig, axes = plt.subplots(len(peers), 2, figsize=(13, 2.2 * len(peers) + 0.8), squeeze=False)
    for (ax1, ax2), p in zip(axes, peers):
        runs = [by_key[f"{p['key']}:{r['key']}"] for r in p["rows"] if f"{p['key']}:{r['key']}" in by_key][::-1]
        labels = [r["name"].split(": ", 1)[-1] for r in runs]
        ratios = [r.get("speedup_vs_baseline") or 0.0 for r in runs]
        lows = [max(0.0, x - ((r.get("speedup_spread") or {}).get("low", x))) for x, r in zip(ratios, runs)]
        highs = [max(0.0, ((r.get("speedup_spread") or {}).get("high", x)) - x) for x, r in zip(ratios, runs)]
        grey = {Verdict.INCONCLUSIVE.value, Verdict.IMPLAUSIBLE.value}
        colours = ["#999999" if r.get("verdict") in grey else "#3b7dd8" for r in runs]
        bars = ax1.barh(labels, ratios, color=colours, xerr=[lows, highs], capsize=3, ecolor="#333333")
        for bar, r, up in zip(bars, runs, highs):
            ax1.text(bar.get_width() + up, bar.get_y() + bar.get_height() / 2, chart_label(r), va="center", fontsize=7)
        ax1.axvline(1.0, color="#333333", linewidth=0.8)
        ax1.set_xlim(0, max(x + h for x, h in zip(ratios, highs)) * 1.8 or 1.0)
        ax1.set_title(p["title"], fontsize=9, loc="left")
        ax1.set_xlabel("audio-s/s over the peer's own trainer (bar: median; line: range of the passes)", fontsize=8)
        ax2.barh(labels, [(r.get("peak_memory_bytes") or 0) / 2**30 for r in runs], color="#d8833b")
        ax2.set_yticklabels([])
        ax2.set_xlabel("peak memory, GiB (" + ("GPU" if report["device"].get("type") == "cuda" else "RSS") + ")")
    dev = report["device"]
    fig.suptitle(f"speechtrain vs the peers on {dev.get('name')} ({dev.get('date')})", fontsize=10)
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
