"""The Train tab's plots as Vega-Lite charts of our own (shown by ``gr.Plot``), so that they read at a glance.

Gradio's LinePlot (6.31) builds its chart in the page and lets no one set what these plots need: its step axis
ticked at half steps (``1.5``; ``4.000000`` for a run with one logged step), and a line of one point, all an 8-step
run logs at first, draws nothing. Here the spec is ours:

- the step axis ticks at whole steps only (tick values computed here: Vega's ``tickMinStep`` still gives half steps
  over a span of two);
- a series of few rows (a short run, an eval every N steps) is drawn with a point at each row, besides its line;
- each series keeps its colour from the first time it appears (:data:`speechtrain.ui.page.PALETTE`), and the chart
  carries its own colour scale: another run's series draw under their own legend.

The chart is drawn as SVG (``usermeta.embedOptions``) so that what it shows can be read back from the page
(tests/test_ui_browser_charts.py)."""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

from gradio.components.plot import AltairPlotData

from speechtrain.ui.page import PALETTE

#: a series with at most this many rows is drawn with a point at each row (a line of one row draws nothing)
POINTS_UP_TO = 40
#: at most this many rows per series go to the page (evenly strided, the last kept): a long run stays light
MOST_ROWS = 1000
#: at most this many ticks on the step axis
MOST_TICKS = 8
VEGA_LITE = "https://vega.github.io/schema/vega-lite/v5.json"
#: small charts (``panels``): this many side by side, each this size in pixels
PANEL_COLUMNS = 3
PANEL_WIDTH = 150
PANEL_HEIGHT = 90


def whole_ticks(lo: int, hi: int, most: int = MOST_TICKS) -> list[int]:
    """Whole-number tick values between ``lo`` and ``hi`` at a step of 1, 2 or 5 times a power of ten: at most
    ``most`` of them, and at least one."""
    if hi <= lo:
        return [int(lo)]
    power = 1
    while True:
        for m in (1, 2, 5):
            step = m * power
            first = math.ceil(lo / step) * step
            if first > hi:  # no multiple of the step inside: the ends are the ticks
                return [int(lo), int(hi)]
            if (hi - first) // step + 1 <= most:
                return list(range(first, hi + 1, step))
        power *= 10


def _strided(rows: list[tuple[Any, str, float]]) -> list[tuple[Any, str, float]]:
    """At most :data:`MOST_ROWS` rows per series, evenly strided, each series' last row kept."""
    by_series: dict[str, list[tuple[Any, str, float]]] = {}
    for row in rows:
        by_series.setdefault(row[1], []).append(row)
    out: list[tuple[Any, str, float]] = []
    for series in by_series.values():
        stride = math.ceil(len(series) / MOST_ROWS)
        kept = series[::stride]
        if kept[-1] is not series[-1]:
            kept.append(series[-1])
        out.extend(kept)
    return sorted(out, key=lambda r: r[0])


def chart(
    rows: list[tuple[Any, str, float]], title: str, x: str = "step", height: int = 200, panels: bool = False
) -> AltairPlotData | None:
    """A chart of (x, series, value) rows, one coloured line per series (points too where it has few rows), or
    None while there are none. Whole-number x values (steps) get whole-number ticks. ``panels``: each series on a
    small chart of its own with its own y axis, in its own units (series of different scales: a loss of ~100 beside
    a mel L1 of ~2 laid the L1 flat on one axis, and dividing each by its first value hid a quality metric's change
    behind another's)."""
    if not rows:
        return None
    rows = _strided(rows)
    names = list(dict.fromkeys(r[1] for r in rows))
    counts = {name: 0 for name in names}
    for r in rows:
        counts[r[1]] += 1
    xs = [r[0] for r in rows]
    whole = all(float(v).is_integer() for v in xs)
    x_axis: dict[str, Any] = {"title": x, "labelFlush": True}
    if whole:
        x_axis |= {"values": whole_ticks(int(min(xs)), int(max(xs))), "format": "d"}
    values = [
        {x: int(v) if whole else float(v), "series": s, "value": float(y)} for v, s, y in rows if math.isfinite(y)
    ]
    encoding = {
        "x": {
            "field": x,
            "type": "quantitative",
            "scale": {"zero": False, "nice": not whole, "padding": 12},
            "axis": x_axis,
        },
        "y": {
            "field": "value",
            "type": "quantitative",
            "scale": {"zero": False, "padding": 8},
            # at most 4 significant digits, trailing zeros dropped: one point's axis read 1.000000
            "axis": {"title": None, "format": ".4~g", "tickCount": 4 if panels else 6},
        },
        "color": {
            "field": "series",
            "type": "nominal",
            "scale": {"domain": names, "range": [PALETTE[i % len(PALETTE)] for i in range(len(names))]},
            "legend": {"orient": "bottom", "title": None, "columns": 3, "labelLimit": 260},
        },
        "tooltip": [
            {"field": "series", "type": "nominal"},
            {"field": x, "type": "quantitative", **({"format": "d"} if whole else {})},
            {"field": "value", "type": "quantitative", "format": ".4g"},
        ],
    }
    # Gradio's theme (chart "line") recolours each layer's own colour encoding: ours is shared, the layers carry none
    layers: list[dict[str, Any]] = [{"mark": {"type": "line", "clip": True}, "name": "lines", "encoding": {}}]
    few = [name for name in names if counts[name] <= POINTS_UP_TO]
    if few:
        points = {"filter": {"field": "series", "oneOf": few}} if len(few) < len(names) else None
        layers.append(
            {
                "mark": {"type": "circle", "size": 45, "opacity": 1, "strokeWidth": 0, "clip": True},
                "name": "points",
                "encoding": {},
                **({"transform": [points]} if points else {}),
            }
        )
    spec: dict[str, Any] = {
        "$schema": VEGA_LITE,
        "usermeta": {"embedOptions": {"renderer": "svg", "actions": False}},
        "title": title,
        "background": "transparent",
        "data": {"values": values},
    }
    if panels:
        spec |= {
            "facet": {"field": "series", "type": "nominal", "sort": names, "columns": PANEL_COLUMNS,
                      "header": {"title": None, "labelLimit": PANEL_WIDTH + 40, "labelFontWeight": "bold"}},
            "spec": {"width": PANEL_WIDTH, "height": PANEL_HEIGHT, "encoding": encoding, "layer": layers},
            "resolve": {"scale": {"y": "independent"}, "axis": {"x": "independent"}},
            "encoding": {},  # what Gradio's theme reads (its colour), none of ours: the panels carry theirs
        }  # fmt: skip
    else:
        spec |= {"height": height, "encoding": encoding, "layer": layers}
    # Gradio's theme for a "line" chart walks the top-level layers, which a faceted spec has not; for "scatter" it
    # reads the top-level encoding only (empty here) and sets a default stroke that our encoding overrides
    return AltairPlotData(chart="scatter" if panels else "line", plot=json.dumps(spec, allow_nan=False))


def digest(plot: AltairPlotData | None) -> str | None:
    """What identifies a chart's content (None for no chart): the page redraws a chart only when this changes."""
    return None if plot is None else hashlib.sha1(plot.plot.encode()).hexdigest()
