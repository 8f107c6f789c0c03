"""The table of benches/scale.py's results: each figure per store size, its growth over the last step, the goal."""

from __future__ import annotations


def table(rows: list[dict], tui: bool = True, tui_only: bool = False) -> list[str]:
    head = ["operation", *(f"{r['runs']:,} runs" for r in rows), "growth per 10x (last step)", "goal at 100k"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    def line(label: str, value, fmt, goal: str) -> None:
        got = [value(r) for r in rows]
        growth = (f"{got[-1] / got[-2]:.2f}x" if len(got) > 1 and got[-2] else "-") if None not in got[-2:] else "-"
        lines.append("| " + " | ".join([label, *(fmt(v) if v is not None else "-" for v in got), growth, goal]) + " |")

    if tui_only:
        return _tui_lines(rows, lines, line)

    def cli(op: str, key: str):
        return lambda r: r["cli"].get(op, {}).get(key)

    for op, label in (("compare", "`moe-tui compare A B --format json`"), ("export", "`moe-tui export A B`"),
                      ("investigate", "`moe-tui investigate A B -c 64 --dry-run`"),
                      ("queue_add", "`moe-tui queue add --profiles A,B ... --dry-run`")):
        line(f"{label}, wall", cli(op, "s"), lambda v: f"{v:.2f} s", "< 2 s")
        line(f"{label}, peak RSS", cli(op, "mb"), lambda v: f"{v:.0f} MB", "< 300 MB")
    core = lambda key: lambda r: r["core"].get(key)  # noqa: E731
    line("a new run in an open grid: commit to the grid rebuilt (median)", core("new_run_grid_ms"),
         lambda v: f"{v:.0f} ms", "< 1 s")
    line("a new run in an open grid: longest event-loop stall meanwhile", core("new_run_stall_ms"),
         lambda v: f"{v:.1f} ms", "< 100 ms")
    line("the grid opened cold (worker thread, fresh handle)", core("open_grid_cold_ms"), lambda v: f"{v:.0f} ms", "")
    line("grid read + build, CPU in one process (cold)", core("grid_cpu_ms"), lambda v: f"{v:.0f} ms", "")
    line("the same grid again, no store change (cache)", core("grid_cached_ms"), lambda v: f"{v:.2f} ms", "")
    line("runs of the compared pair (baseline + candidate)", lambda r: r.get("pair_runs"),
         lambda v: f"{v:,.0f}", "")
    line("store file", lambda r: r["store_mb"], lambda v: f"{v:,.0f} MB", "")
    if not tui:
        return lines
    return _tui_lines(rows, lines, line)


def _tui_lines(rows: list[dict], lines: list[str], line) -> list[str]:
    tui = lambda key: lambda r: r["tui"].get(key)  # noqa: E731
    ms = lambda v: f"{v:.0f} ms"  # noqa: E731
    line("TUI: key `3` to the grid (built in the background after start)", tui("grid_key_ms"), ms, "< 1 s")
    line("TUI: every screen built and rendered off screen, after start", tui("prepared_s"), lambda v: f"{v:.2f} s", "")
    for key, what in (("start_stall_ms", "start incl. building the screens"), ("queue_visit_stall_ms",
                      "first visit to Queue"), ("queue_idle_stall_ms", "idle on Queue"),
                      ("grid_visit_stall_ms", "first visit to the grid")):
        line(f"TUI: event-loop stall, {what} (max)", tui(key), ms, "< 50 ms")
    line("TUI: key `2` (Queue) to screen", tui("queue_key_ms"), ms, "< 100 ms")
    line("TUI: idle CPU on the Queue screen", tui("queue_idle_cpu_pct"), lambda v: f"{v:.1f}%", "< 2%")
    line("TUI: peak RSS", tui("peak_rss_mb"), lambda v: f"{v:.0f} MB", "")
    return lines
