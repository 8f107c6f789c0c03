"""The throughput plot of a comparison grid (PNG + SVG bytes), matplotlib's object API on Agg.

Imported only when a plot is drawn, so rendering text never pays for matplotlib; no global
pyplot state is touched. Profile names are untrusted: `$` is escaped so mathtext never parses them.
"""

from __future__ import annotations

import io
from typing import Any, NamedTuple

from moe_tui.compare import ComparisonGrid, ThroughputSeries
from moe_tui.export.text import sim_clock_note


def plain(text: str) -> str:
    """Text matplotlib shows literally (no mathtext)."""
    return str(text).replace("\\", "\\\\").replace("$", r"\$")


class PlotPoint(NamedTuple):
    """One marker: filled where the grid shows a delta; hollow where it does not (not measured alike,
    a side missing, no verdict) and where only flagged runs measured it (their mean, no error bar)."""

    concurrency: int
    value: float
    error: float
    filled: bool
    flagged: bool


def plot_points(series: ThroughputSeries) -> list[PlotPoint]:
    """The markers of one side: the clean mean where there is one, else the flagged runs' mean."""
    flagged = series.flagged_mean or (None,) * len(series.concurrencies)
    out = []
    for c, m, s, ok, f in zip(series.concurrencies, series.mean, series.std, series.comparable, flagged):
        if m is not None:
            out.append(PlotPoint(c, m, s or 0.0, ok, False))
        elif f is not None:
            out.append(PlotPoint(c, f, 0.0, False, True))
    return out


def render_throughput_plot(grid: ComparisonGrid) -> tuple[bytes, bytes]:
    """Output throughput vs concurrency for both columns, as (PNG bytes, SVG bytes)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.5, 4.5), dpi=120)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    plotted: list[Any] = []
    values: list[float] = []
    refused_seen = flagged_seen = False
    for series, name, marker, color in ((grid.baseline_series, grid.baseline_name, "o", "tab:blue"),
                                        (grid.candidate_series, grid.candidate_name, "s", "tab:orange")):
        pts = plot_points(series)
        if not pts:
            continue
        xs, ys = [p.concurrency for p in pts], [p.value for p in pts]
        ax.errorbar(xs, ys, yerr=[p.error for p in pts], marker="none", capsize=3, color=color)
        for filled in (True, False):
            sel = [p for p in pts if p.filled == filled]
            if not sel:
                continue
            refused_seen = refused_seen or not filled
            flagged_seen = flagged_seen or any(p.flagged for p in sel)
            ax.plot([p.concurrency for p in sel], [p.value for p in sel], linestyle="none", marker=marker,
                    markersize=7, color=color, markerfacecolor=color if filled else "white",
                    label=plain(name) if filled or not any(p.filled for p in pts) else None)
        plotted.extend(xs)
        values.extend(y for y in ys if y > 0)
    if plotted and min(plotted) > 0 and max(plotted) / min(plotted) >= 4:
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted(set(plotted)))
        ax.set_xticklabels([str(x) for x in sorted(set(plotted))])
    if values and max(values) / min(values) >= 20:
        ax.set_yscale("log")
    if refused_seen:
        ax.text(0.99, 0.01, "hollow: not comparable here (no verdict: no delta"
                + ("; flagged runs only: their mean" if flagged_seen else "") + ")", transform=ax.transAxes,
                ha="right", va="bottom", fontsize=8)
    ax.set_xlabel("max concurrency")
    ax.set_ylabel("output throughput (tok/s)")
    title = f"{plain(grid.baseline_name)} vs {plain(grid.candidate_name)}"
    ax.set_title(("SIMULATED: " if grid.simulated else "") + title)
    if grid.simulated and sim_clock_note(grid):  # the tok/s drawn are on the emulator's clock
        fig.text(0.01, 0.005, plain(sim_clock_note(grid).split(": ")[0] + ": tok/s x the clock"), fontsize=7,
                 ha="left", va="bottom")
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


