"""ThroughputChart: output tok/s per concurrency, baseline and candidate side by side.

Grouped bars of the core's `ThroughputSeries` means (textual-plotext). Bars rather than lines:
the concurrencies of a sweep (1, 2, 10, 64, ... 1024) are categories a person reads one by one,
and a missing side at a concurrency shows as a missing bar instead of a misleading line.
"""

from __future__ import annotations

from typing import Any

from textual_plotext import PlotextPlot

# Each series has its own glyph as well as its colour (a monochrome terminal still tells them apart).
SERIES_MARKERS = ("█", "▒")


class ThroughputChart(PlotextPlot):
    def show(self, grid: Any | None) -> None:
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        plt.title("Output tok/s by concurrency (mean of complete runs)")
        if grid is None:
            self.refresh()
            return
        concs = list(grid.baseline_series.concurrencies)
        base = [m or 0.0 for m in grid.baseline_series.mean]
        cand = [m or 0.0 for m in grid.candidate_series.mean]
        if concs:
            plt.multiple_bar([str(c) for c in concs], [base, cand],
                             labels=[grid.baseline_name[:30], grid.candidate_name[:30]],
                             color=["blue", "orange"], marker=list(SERIES_MARKERS))  # type: ignore[call-arg, arg-type]  # plotext's stubs lag its API
        self.refresh()
