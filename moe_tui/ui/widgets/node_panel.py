"""NodePanel: the batch jobs' nodes, one row per GPU, grouped by node (the dashboard, under the GPUs).

Rows come ready from the core (`ControlClient.node_rows`: `executors.nodes`): a node's freshness
(live, STALE with the age of its last sample, ended, waiting), its GPUs' load and which job and
item own each. The node's name and freshness head its first row (nvitop's per-host grouping, k9s's
status words); a stale or ended node's GPUs carry no figures, only dashes. Hidden while no batch
job has run lately, so a local-only control room looks as before.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical

from moe_tui.control import NodeGpuRow, NodeRow
from moe_tui.ui import render
from moe_tui.ui.widgets.keyed_table import KeyedTable
from moe_tui.ui.widgets.repaint import titles

BAR_WIDTH = 6

COLUMNS = (
    ("node", "Node", 12),
    ("status", "Status", 13),
    ("gpu", "GPU", 12),
    ("util", "Util", BAR_WIDTH + 5),
    ("mem", "GiB", 7),
    ("power", "Power", 5),
    ("temp", "Temp", 4),
    ("owner", "Job", 16),
)
# 80 columns: which node, how fresh, which GPU, its load and its owner.
COMPACT_COLUMNS = {"node": 8, "status": 11, "gpu": 8, "util": BAR_WIDTH + 5, "mem": 7, "owner": 14}

STATUS_STYLE = {"live": "green", "stale": "bold white on red", "ended": "dim", "waiting": "dim"}


def status_cell(node: NodeRow) -> Text:
    return Text(node.status_text, style=STATUS_STYLE.get(node.status, ""), no_wrap=True, overflow="ellipsis")


def gpu_row_cells(node: NodeRow, gpu: NodeGpuRow | None, first: bool) -> tuple[object, ...]:
    head = (Text(node.node, style="bold", no_wrap=True, overflow="ellipsis"), status_cell(node)) if first else ("", "")
    if gpu is None:
        return (*head, Text("—", style="dim"), "", "", "", "", "")
    return (
        *head,
        Text.assemble((f"{gpu.index} ", "bold"), gpu.name[:10], no_wrap=True, overflow="ellipsis"),
        render.bar(gpu.util_pct, BAR_WIDTH),
        gpu.mem_text or Text(render.NA, style="dim"),
        render.num(gpu.power_w, "{:.0f}", "W"),
        render.num(gpu.temperature_c, "{:.0f}", "°"),
        Text(gpu.owner_text, style="cyan" if gpu.job_id else "dim", no_wrap=True, overflow="ellipsis"),
    )


def node_table_rows(nodes: Sequence[NodeRow]) -> dict[str, tuple[object, ...]]:
    """Row key -> cells: each node's GPUs (a node without a sample yet: one row saying so)."""
    out: dict[str, tuple[object, ...]] = {}
    for node in nodes:
        if not node.gpus:
            out[f"{node.node}/-"] = gpu_row_cells(node, None, True)
        for n, gpu in enumerate(node.gpus):
            out[f"{node.node}/{gpu.index}"] = gpu_row_cells(node, gpu, n == 0)
    return out


class NodePanel(Vertical):
    """Attributes down: the screen calls `show(live.nodes)`; `set_compact` for narrow terminals."""

    DEFAULT_CSS = """
    NodePanel { height: auto; }
    NodePanel > KeyedTable { height: auto; max-height: 12; }
    """

    def compose(self) -> ComposeResult:
        yield KeyedTable(COLUMNS, id="node-table", show_cursor=False, cursor_type="none")

    def on_mount(self) -> None:
        self.border_title = "Nodes"
        self.display = False

    def set_compact(self, compact: bool) -> None:
        self.query_one(KeyedTable).show_columns(COMPACT_COLUMNS if compact else None)

    def show(self, nodes: Sequence[NodeRow]) -> None:
        self.display = bool(nodes)
        if not nodes:
            return
        live = sum(1 for n in nodes if n.status == "live")
        titles(self, "Nodes — batch jobs", f"{live} of {len(nodes)} live")
        self.query_one(KeyedTable).sync(node_table_rows(nodes))
