"""GpuPanel: one compact row per GPU, from the latest NVML snapshot and the recent history.

Columns: index and name; utilization bar and a sparkline of the last minutes; memory bar, used
GiB and its sparkline; power, temperature, SM clock; NVML's clock event (a red badge for a stress
reason, LOST when NVML says the GPU fell off the bus, `idle`, `none` when NVML reports no event, i.e.
clocks as high as they go, `n/a` when it reports nothing; the legend is in the panel's subtitle); the processes holding the GPU (a
managed server's profile when the PID belongs to its family, a highlighted name:pid when foreign).
A machine without the driver shows one clean line saying so instead of an empty table; the
emulator's simulated GPUs say SIMULATED in the panel title.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static

from moe_tui.control import SUSPECT_CLOCK_EVENTS, GpuSample, TelemetrySnapshot
from moe_tui.ui import render
from moe_tui.ui.widgets.keyed_table import KeyedTable
from moe_tui.ui.widgets.repaint import put, titles

SPARK_WIDTH = 8
PROCS_WIDTH = 15
BAR_WIDTH = 6

# Sized so 8 GPUs and every column fit a 120-column terminal; narrower ones scroll sideways.
COLUMNS = (
    ("gpu", "GPU", 14),
    ("util", "Util", BAR_WIDTH + 5),
    ("util_hist", "util 3m", SPARK_WIDTH),
    ("mem", "Mem", BAR_WIDTH + 5),
    ("mem_gib", "GiB", 7),
    ("mem_hist", "mem 3m", SPARK_WIDTH),
    ("power", "Power", 5),
    ("temp", "Temp", 4),
    ("clock", "MHz", 4),
    ("events", "Clock", 8),
    ("procs", "Held by", PROCS_WIDTH),
)

# Narrow terminals (80 columns): one line per GPU with what matters most: load, memory, power,
# temperature, stress and who holds it. Fits 80 columns with the panel border.
COMPACT_COLUMNS = ("gpu", "util", "mem_gib", "power", "temp", "events", "procs")

NO_GPU_HINT = "simulated GPUs appear here when a simulated server runs"

SHORT_EVENTS = {
    "sw_power_cap": "PWR CAP", "hw_slowdown": "HW SLOW", "sw_thermal": "THERMAL",
    "hw_thermal": "HW THERM", "hw_power_brake": "PWR BRK",
    # configuration, not stress (shown dim)
    "applications_clocks": "app clk", "sync_boost": "sync", "display_clocks": "display",
    "board_limit": "board", "reliability": "reliab.",
}
# NVML's clock event reasons, bitmask 0 (nvmlClocksEventReasonNone): clocks as high as they can go.
CLOCK_LEGEND = "Clock: NVML's clock event; none = clocks at their highest"
# The whole legend, for the Dashboard's `?` (80x24 draws no panel subtitle).
CLOCK_HELP = ("GPUs' Clock: NVML's clock event. none: no reason, clocks at their highest · idle: nothing "
              "to run · n/a: not reported · red: slowed by power or heat · GPU LOST: off the bus")


def gpu_cells(gpu: GpuSample, util_hist: Sequence[float], mem_hist: Sequence[float],
              owners: Mapping[int, str]) -> tuple[object, ...]:
    name = (gpu.name or "GPU").replace("NVIDIA ", "")
    stress = [e for e in gpu.clock_events if e in SUSPECT_CLOCK_EVENTS]
    if gpu.lost:
        events: Text | str = Text("GPU LOST", style="bold white on red")
    elif stress:
        events = Text(SHORT_EVENTS.get(stress[0], stress[0])[:8], style="bold white on red")
    elif gpu.clock_event_bits is None:
        events = Text(render.NA, style="dim")  # NVML did not say (not supported, or not asked)
    elif "gpu_idle" in gpu.clock_events:
        events = Text("idle", style="dim")
    elif gpu.clock_events:
        events = Text(SHORT_EVENTS.get(gpu.clock_events[0], gpu.clock_events[0])[:8], style="dim")
    else:
        events = Text("none", style="dim")
    procs = holders_text(gpu, owners)
    total = gpu.mem_total_bytes
    if total and total >= 100 * 2**30 and gpu.mem_used_bytes is not None:
        # A 141 GB card: whole GiB, else "122.3/140" would not fit the column.
        mem_gib: str = f"{gpu.mem_used_bytes / 2**30:.0f}/{total / 2**30:.0f}"
    else:
        mem_gib = f"{render.gib(gpu.mem_used_bytes)}/{total / 2**30:.0f}" if total else render.NA
    return (
        Text.assemble((f"{gpu.index} ", "bold"), name[:12], no_wrap=True, overflow="ellipsis"),
        render.bar(gpu.util_gpu_pct, BAR_WIDTH),
        Text(render.sparkline(render.downsample(util_hist, SPARK_WIDTH), SPARK_WIDTH, hi=100.0), style="green"),
        render.bar(gpu.mem_used_pct, BAR_WIDTH),
        mem_gib,
        Text(render.sparkline(render.downsample(mem_hist, SPARK_WIDTH), SPARK_WIDTH, hi=100.0), style="magenta"),
        render.num(gpu.power_w, "{:.0f}", "W"),
        render.num(gpu.temperature_c, "{:.0f}", "°"),
        render.num(gpu.sm_clock_mhz, "{:.0f}"),
        events,
        procs,
    )


def holders_text(gpu: GpuSample, owners: Mapping[int, str]) -> Text:
    """Who holds the GPU, in PROCS_WIDTH cells: foreign processes first (highlighted name:pid),
    then each managed profile once, its name cut in the middle (its tail tells profiles apart)."""
    procs = Text()
    if gpu.processes is None:
        procs.append("lost" if gpu.lost else "n/a", style="dim")
        return procs
    if not gpu.processes:
        procs.append("—", style="dim")
        return procs
    # Foreign processes first: in a narrow cell they are what must not be cut off.
    entries: list[tuple[str, str]] = []
    for proc in sorted(gpu.processes, key=lambda p: owners.get(p.pid) is not None):
        owner = owners.get(proc.pid)
        entry = (owner, "cyan") if owner else (f"{proc.name or '?'}:{proc.pid}", "bold black on yellow")
        if entry not in entries:  # a server's workers on one GPU: its profile once
            entries.append(entry)
    shown, more = entries[:3], len(entries) - 3
    suffix = f" +{more}" if more > 0 else ""
    room = max(PROCS_WIDTH - len(suffix) - (len(shown) - 1), len(shown))
    for n, (label, style) in enumerate(shown):
        if n:
            procs.append(" ")
        width = room // len(shown) + (1 if n < room % len(shown) else 0)
        procs.append(render.middle_truncate(label, width) if style == "cyan" else label, style=style)
    if suffix:
        procs.append(suffix, style="dim")
    procs.truncate(PROCS_WIDTH, overflow="ellipsis")
    return procs


class GpuPanel(Vertical):
    """Attributes down: the screen calls `show(...)` with the App's live state; `set_compact`
    switches the table to its compact columns (narrow terminals)."""

    DEFAULT_CSS = """
    GpuPanel { height: auto; }
    GpuPanel > #gpu-unavailable { color: $text-muted; padding: 0 1; }
    GpuPanel > KeyedTable { height: auto; max-height: 10; }
    """

    def compose(self) -> ComposeResult:
        yield Static("waiting for the first GPU sample…", id="gpu-unavailable")
        yield KeyedTable(COLUMNS, id="gpu-table", show_cursor=False, cursor_type="none")

    def on_mount(self) -> None:
        self.border_title = "GPUs"
        self.query_one(KeyedTable).display = False

    def set_compact(self, compact: bool) -> None:
        self.query_one(KeyedTable).show_columns(COMPACT_COLUMNS if compact else None)

    def show(self, snapshot: TelemetrySnapshot | None, util: Mapping[int, Sequence[float]],
             mem: Mapping[int, Sequence[float]], owners: Mapping[int, str]) -> None:
        note = self.query_one("#gpu-unavailable", Static)
        table = self.query_one(KeyedTable)
        if snapshot is None:
            return
        if not snapshot.available or not snapshot.gpus:
            reason = snapshot.reason or "no GPUs reported by NVML"
            put(note, Text.assemble(("GPU telemetry unavailable: ", "bold"), reason, "\n", (NO_GPU_HINT, "dim")),
                layout=True)
            note.display = True
            table.display = False
            titles(self, subtitle="")
            return
        note.display = False
        table.display = True
        if snapshot.simulated:
            titles(self, "GPUs — SIMULATED", f"{CLOCK_LEGEND} · emulator, not NVML")
        else:
            driver = f"driver {snapshot.driver_version}" if snapshot.driver_version else ""
            cuda = f"CUDA {snapshot.cuda_driver_version}" if snapshot.cuda_driver_version else ""
            titles(self, "GPUs", " · ".join(p for p in (CLOCK_LEGEND, " ".join(p for p in (driver, cuda) if p)) if p))
        table.sync({
            str(g.index): gpu_cells(g, util.get(g.index, ()), mem.get(g.index, ()), owners)
            for g in snapshot.gpus
        })
