"""The throughput plot of a comparison grid (PNG + SVG bytes), matplotlib's object API on Agg.

Imported only when a plot is drawn, so rendering text never pays for matplotlib; no global
pyplot state is touched. Profile names are untrusted: `$` is escaped so mathtext never parses them.
"""

from __future__ import annotations

import io
from typing import Any

from moe_tui.compare import ComparisonGrid


def plain(text: str) -> str:
    """Text matplotlib shows literally (no mathtext)."""
    return str(text).replace("\\", "\\\\").replace("$", r"\$")


def render_throughput_plot(grid: ComparisonGrid) -> tuple[bytes, bytes]:
    """Output throughput vs concurrency for both columns, as (PNG bytes, SVG bytes)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.5, 4.5), dpi=120)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    plotted: list[Any] = []
    values: list[float] = []
    refused_seen = False
    for series, name, marker, color in ((grid.baseline_series, grid.baseline_name, "o", "tab:blue"),
                                        (grid.candidate_series, grid.candidate_name, "s", "tab:orange")):
        pts = [(c, m, s or 0.0, ok) for c, m, s, ok in
               zip(series.concurrencies, series.mean, series.std, series.comparable) if m is not None]
        if not pts:
            continue
        xs, ys, es, oks = zip(*pts)
        ax.errorbar(xs, ys, yerr=es, marker="none", capsize=3, color=color)
        # Filled markers where a delta is shown; hollow where the grid refuses one (the two points
        # were not measured alike, or one side is missing).
        for ok in (True, False):
            sel = [(x, y) for x, y, o in zip(xs, ys, oks) if o == ok]
            if not sel:
                continue
            refused_seen = refused_seen or not ok
            sx, sy = zip(*sel)
            ax.plot(sx, sy, linestyle="none", marker=marker, markersize=7, color=color,
                    markerfacecolor=color if ok else "white", label=plain(name) if ok or not any(oks) else None)
        plotted.extend(xs)
        values.extend(y for y in ys if y > 0)
    if plotted and min(plotted) > 0 and max(plotted) / min(plotted) >= 4:
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted(set(plotted)))
        ax.set_xticklabels([str(x) for x in sorted(set(plotted))])
    if values and max(values) / min(values) >= 20:
        ax.set_yscale("log")
    if refused_seen:
        ax.text(0.99, 0.01, "hollow: not comparable here (no verdict: no delta)", transform=ax.transAxes,
                ha="right", va="bottom", fontsize=8)
    ax.set_xlabel("max concurrency")
    ax.set_ylabel("output throughput (tok/s)")
    title = f"{plain(grid.baseline_name)} vs {plain(grid.candidate_name)}"
    ax.set_title(("SIMULATED: " if grid.simulated else "") + title)
    ax.grid(True, alpha=0.3)
    if plotted:
        ax.legend()
    else:
        ax.text(0.5, 0.5, "no complete runs", transform=ax.transAxes, ha="center")
    fig.tight_layout()
    png, svg = io.BytesIO(), io.BytesIO()
    fig.savefig(png, format="png", metadata={"Software": None})
    fig.savefig(svg, format="svg", metadata={"Date": None})
    return png.getvalue(), svg.getvalue()


