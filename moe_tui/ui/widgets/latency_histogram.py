"""LatencyHistogram: the distribution of one per-request latency (TTFT, E2E or ITL) of a run."""

from __future__ import annotations

from collections.abc import Sequence

from textual_plotext import PlotextPlot


class LatencyHistogram(PlotextPlot):
    def show(self, label: str, values_ms: Sequence[float]) -> None:
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        plt.title(f"{label} per request (ms), n={len(values_ms)}")
        if values_ms:
            plt.hist(list(values_ms), bins=min(40, max(5, len(values_ms) // 3)), color="cyan")
        self.refresh()
