"""RunDetailScreen: one run's spec, provenance, summary metrics, flags and the per-request
latency distribution (h cycles TTFT / E2E latency / ITL)."""

from __future__ import annotations

import json
from typing import Any

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Header, Static

from moe_tui.control import RunView
from moe_tui.ui import render
from moe_tui.ui.room import Room, room
from moe_tui.ui.screens.base import LiveScreen
from moe_tui.ui.widgets.key_bar import KeyBar
from moe_tui.ui.widgets.latency_histogram import LatencyHistogram

HISTOGRAMS = (("ttft", "TTFT"), ("latency", "E2E latency"), ("itl", "ITL"))
SUMMARY_KEYS = (
    "completed", "duration", "request_throughput", "input_throughput", "output_throughput",
    "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "mean_itl_ms", "median_itl_ms",
    "p99_itl_ms", "mean_e2e_latency_ms", "median_e2e_latency_ms", "concurrency",
)


def kv_table(title: str, data: dict[str, Any], keys: tuple[str, ...] | None = None) -> Table:
    table = Table(title=title, title_justify="left", title_style="bold", show_header=False,
                  box=None, pad_edge=False, expand=True)
    table.add_column(style="dim", no_wrap=True)
    table.add_column(overflow="fold")
    for key in keys or tuple(sorted(data)):
        if key not in data:
            continue
        value = data[key]
        if isinstance(value, float):
            shown = f"{value:,.3f}"
        elif isinstance(value, (dict, list)):
            shown = json.dumps(value, sort_keys=True)
        else:
            shown = str(value)
        table.add_row(Text(str(key)), Text(shown))  # imported values: plain text, never markup
    return table


class RunDetailScreen(LiveScreen):
    BINDINGS = [
        Binding("h", "next_histogram", "Histogram", id="detail.histogram",
                tooltip="Cycle the histogram: TTFT, E2E latency, ITL"),
        Binding("escape", "close", "Back", id="detail.close", tooltip="Back to the previous screen"),
    ]

    def __init__(self, run_id: int) -> None:
        super().__init__()
        self.run_id = run_id
        self.run: RunView | None = None
        self.histogram = 0

    @property
    def control(self) -> Room:
        return room(self.app)

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False, icon="◆")
        yield Static(f"run #{self.run_id}: loading…", id="detail-head", classes="panel")
        with Horizontal(id="detail-body"):
            with VerticalScroll(id="detail-left", classes="panel"):
                yield Static("", id="detail-summary")
                yield Static("", id="detail-roofline")  # issue 15: the decode ceiling's terms
                yield Static("", id="detail-spec")
                yield Static("", id="detail-provenance")
            yield LatencyHistogram(id="detail-histogram", classes="panel")
        yield KeyBar()

    def on_mount(self) -> None:
        self.control.call_core(f"read run {self.run_id}", self.control.client.run_view, self.run_id, done=self._show)

    def _show(self, run: RunView | None) -> None:
        if run is None:
            self.query_one("#detail-head", Static).update(Text(f"run #{self.run_id}: not in the store", style="red"))
            return
        self.run = run
        head = render.join([
            Text(f"run #{run.id}", style="bold"),
            Text(run.profile, style="cyan"),
            render.state_text(run.status),
            Text(f"spec {run.fingerprint[:12]}", style="dim"),
            render.badge("SIMULATED", "bold white on magenta") if run.simulated else "",
        ])
        if run.flags:
            head.append("\n⚑ " + ", ".join(run.flags), style="yellow")
        if run.error:
            head.append("\n" + run.error, style="red")
        self.query_one("#detail-head", Static).update(head)
        self.query_one("#detail-summary", Static).update(kv_table("Metrics", run.summary, SUMMARY_KEYS))
        roofline = dict(run.roofline)
        self.query_one("#detail-roofline", Static).update(kv_table("Roofline (decode ceiling)", roofline, tuple(roofline)))
        self.query_one("#detail-spec", Static).update(kv_table("Spec", run.spec))
        self.query_one("#detail-provenance", Static).update(kv_table("Provenance", run.provenance))
        self._show_histogram()

    def _show_histogram(self) -> None:
        if self.run is None:
            return
        key, label = HISTOGRAMS[self.histogram]
        self.query_one(LatencyHistogram).show(label, self.run.latencies_ms.get(key, ()))

    def action_next_histogram(self) -> None:
        self.histogram = (self.histogram + 1) % len(HISTOGRAMS)
        self._show_histogram()

    def action_close(self) -> None:
        self.app.pop_screen()
