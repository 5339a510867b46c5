"""A chart reads at a glance: no two pieces of text overlap and none is cut off at the figure's edge
(issue 40: the demo's two x-axis titles ran into each other, long row labels into the memory panel).
Measured with matplotlib's own renderer, as the PNG is drawn."""

from __future__ import annotations

from typing import Any


def _texts(fig: Any) -> list[Any]:
    """Every visible, non-empty text of the figure: titles, axis labels, tick labels, annotations, legends."""
    found = list(fig.texts)
    if getattr(fig, "_suptitle", None) is not None:
        found.append(fig._suptitle)
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        found += [ax.title, ax._left_title, ax._right_title, ax.xaxis.label, ax.yaxis.label]
        found += list(ax.get_xticklabels()) + list(ax.get_yticklabels()) + list(ax.texts)
        legend = ax.get_legend()
        if legend is not None:
            found += list(legend.get_texts())
            found.append(legend.get_title())
    for legend in fig.legends:
        found += list(legend.get_texts())
    unique = {id(t): t for t in found}  # the suptitle is one of fig.texts too
    return [t for t in unique.values() if t.get_visible() and t.get_text().strip()]


def text_problems(fig: Any) -> list[str]:
    """``'a' overlaps 'b'`` and ``'a' is cut off`` for each fault of the figure's texts (none: it reads)."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    edge = fig.bbox
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in _texts(fig)]
    problems = []
    for i, (a, box_a) in enumerate(boxes):
        if box_a.x0 < edge.x0 - 1 or box_a.x1 > edge.x1 + 1 or box_a.y0 < edge.y0 - 1 or box_a.y1 > edge.y1 + 1:
            problems.append(f"{a!r} is cut off at the figure's edge")
        for b, box_b in boxes[i + 1 :]:
            if box_a.overlaps(box_b) and box_a.width > 0 and box_b.width > 0:
                inter_w = min(box_a.x1, box_b.x1) - max(box_a.x0, box_b.x0)
                inter_h = min(box_a.y1, box_b.y1) - max(box_a.y0, box_b.y0)
                if inter_w > 1 and inter_h > 1:  # touching edges are not an overlap
                    problems.append(f"{a!r} overlaps {b!r}")
    for ax in fig.axes:  # a note beside a bar stays inside its panel (it ran into the memory panel)
        inside = ax.get_window_extent(renderer)
        for t in ax.texts:
            box = t.get_window_extent(renderer)
            if t.get_visible() and (box.x1 > inside.x1 + 1 or box.x0 < inside.x0 - 1):
                problems.append(f"{t.get_text()!r} runs out of its panel")
    return problems
