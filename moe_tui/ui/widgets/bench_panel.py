"""BenchPanel: the benchmark running now, live.

Shows the queue item and profile, the spec's short fingerprint, a progress bar, a sparkline of
output tokens/s, TTFT and ITL p50/p99, errors, in-flight requests, the client-bound warning
(the load generator reporting its own lag) and a SIMULATED label when the server is the
emulator. When nothing runs it shows the last finished run; before any, what gets one going
(the queue's state and the keys), never an empty chart.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import ProgressBar, Sparkline, Static

from moe_tui.control import LiveState
from moe_tui.ui import render
from moe_tui.ui.widgets.repaint import put, titles

# The load generator reports how late it fires requests relative to plan; past this, the
# numbers describe the client as much as the server (the core flags the finished run itself).
CLIENT_LAG_WARN_MS = 50.0
# The head line must fit 80 columns with its SIMULATED badge: long profile names are cut in the middle.
PROFILE_WIDTH = 24
SPARK_EVERY_S = 1.0


def _put(widget: Static, content: object) -> None:
    # Every line here has a fixed height: repaint in place (and only when it changed), never re-lay out.
    put(widget, content)


BEFORE_A_RUN = frozenset({"starting-server", "benchmarking"})  # the controller's activities that precede a run


class BenchPanel(Vertical):
    # Fixed heights (head 1, bar 1, sparkline 3, stats 3) so 4 updates a second never change the
    # panel's size: a size change would re-lay out the whole screen (tens of ms on a slow core).
    DEFAULT_CSS = """
    BenchPanel { height: auto; }
    BenchPanel > #bench-head { height: 1; }
    BenchPanel > ProgressBar { height: 1; }
    BenchPanel > Sparkline { height: 3; margin: 0 1; }
    BenchPanel > #bench-stats { height: 3; }
    BenchPanel.-no-run > Sparkline { display: none; }
    """

    _spark_at = -1e9  # the run time (elapsed_s) the sparkline was last drawn at

    def compose(self) -> ComposeResult:
        yield Static("no benchmark running", id="bench-head")
        yield ProgressBar(total=1, show_eta=False, id="bench-progress")
        yield Sparkline([], id="bench-spark")
        yield Static("", id="bench-stats")

    def on_mount(self) -> None:
        self.border_title = "Live benchmark"

    def show(self, live: LiveState) -> None:
        bench = live.bench
        head = self.query_one("#bench-head", Static)
        stats = self.query_one("#bench-stats", Static)
        bar = self.query_one(ProgressBar)
        spark = self.query_one(Sparkline)
        run = bench.run
        running = run is not None and (bench.last_finished is None or bench.last_finished.run_id != run.run_id)
        if live.activity == "warmup" and bench.warmup is not None and not running:
            w = bench.warmup
            bar.display = True
            _put(head, render.join([Text("warmup pass", style="bold yellow"), Text(live.detail, style="dim"),
                                     Text("results discarded", style="dim")]))
            bar.update(total=max(w.total, 1), progress=w.completed)
            _put(stats, Text(f"{w.completed}/{w.total} requests  errors {w.errors}", style="dim"))
            titles(self, subtitle="")  # the last run's spec is not this pass's
            return
        bar.display = run is not None
        if run is None:
            titles(self, subtitle="")
            # Between a server start and its run the runner is already at work on the item (walk
            # 2026-12-05, finding 11: "no benchmark running" beside the queue line's "benchmarking: #5").
            busy = live.activity in BEFORE_A_RUN and live.detail
            last = bench.last_finished
            if busy:
                _put(head, Text(f"{live.activity.replace('-', ' ')}: {live.detail}", style="cyan"))
            else:
                _put(head, Text("no run yet", style="bold") if last is None and not _finished(live)
                     else Text("no benchmark running", style="dim"))
            self.set_class(last is None, "-no-run")
            _put(stats, Text(f"last run #{last.run_id} {render.middle_truncate(last.profile, PROFILE_WIDTH)}: "
                             f"{last.status}") if last else next_steps(live))
            return
        self.set_class(False, "-no-run")
        parts: list[Text | str] = [Text(f"run #{run.run_id}", style="bold")]
        if run.queue_item_id is not None:
            parts.append(f"item {run.queue_item_id}")
        parts.append(Text(render.middle_truncate(run.profile, PROFILE_WIDTH), style="cyan"))
        parts.append(Text(f"spec {run.fingerprint[:12]}", style="dim"))
        if live.is_simulated(run.profile):
            parts.append(render.badge("SIMULATED", "bold white on magenta"))
        if not running and bench.last_finished is not None:
            parts.append(render.state_text(bench.last_finished.status))
        _put(head, render.join(parts))
        titles(self, subtitle=run.spec_summary[:60])
        p = bench.progress
        if p is None or p.run_id != run.run_id:
            bar.update(total=1, progress=0)
            _put(stats, Text("starting…", style="dim"))
            return
        bar.update(total=max(p.total, 1), progress=p.completed)
        # The sparkline is two minutes of history: redrawn once a second of the run, not on each
        # of the 4 progress events a second (a 3-line redraw each).
        since = p.elapsed_s - self._spark_at
        if since >= SPARK_EVERY_S or since < 0:  # a second on, or a new run
            self._spark_at = p.elapsed_s
            spark.data = list(bench.tok_s)[-120:]
        line1 = render.join([
            Text.assemble(("out ", "dim"), (f"{p.output_tok_s:,.0f}", "bold"), " tok/s"),
            f"{p.completed}/{p.total}",
            Text.assemble(("in-flight ", "dim"), str(p.in_flight)),
            Text(f"errors {p.errors}", style="bold red" if p.errors else "dim"),
            Text("warmup", style="yellow") if p.phase == "warmup" else "",
        ])
        line2 = render.join([
            Text.assemble(("TTFT p50/p99 ", "dim"), f"{render.num(p.ttft_p50_ms)}/{render.num(p.ttft_p99_ms)} ms"),
            Text.assemble(("ITL p50/p99 ", "dim"), f"{render.num(p.itl_p50_ms, '{:.2f}')}/{render.num(p.itl_p99_ms, '{:.2f}')} ms"),
        ])
        lines = [line1, line2]
        if p.client_lag_ms is not None and p.client_lag_ms > CLIENT_LAG_WARN_MS:
            lines.append(Text(f"⚠ client-bound: the load generator is {p.client_lag_ms:.0f} ms behind; "
                              "numbers measure the client", style="bold yellow"))
        _put(stats, Text("\n").join(lines))


def _finished(live: LiveState) -> int:
    counts = live.queue_counts()
    return sum(counts.get(state, 0) for state in ("done", "failed", "interrupted"))


def next_steps(live: LiveState) -> Text:
    """Before a run to show: what the queue holds and the key that gets a run going."""
    counts = live.queue_counts()
    pending, finished = counts.get("pending", 0), _finished(live)
    if pending and live.paused:
        first = Text.assemble(f"{pending} item(s) queued, the queue is paused: ", ("r ", "bold"), "resumes it")
    elif pending:
        first = Text(f"{pending} item(s) queued: the runner works them in order")
    elif finished:
        first = Text(f"{finished} item(s) finished, none queued: ", style="dim")
        first.append_text(Text.assemble(("2 ", "bold"), "Queue, ", ("a ", "bold"), "adds a campaign"))
    else:
        first = Text.assemble("the queue is empty: ", ("2 ", "bold"), "opens the Queue, ", ("a ", "bold"),
                              "adds a campaign there")
    # Each key carries its trailing blank: SVG renderers drop a span's leading one.
    second = Text.assemble(("3 ", "bold"), "Compare shows the verdicts once both sides have runs · ",
                           ("? ", "bold"), "lists every key", style="dim")
    return Text("\n").join([first, second])
