"""Months of campaigns (issue 26): the store, the grid and the TUI at 1k / 10k / 100k runs.

Each store is built by `benches/scale_store.py` through the runner's own store and queue API: the
compared pair has the same 24 runs at every size, everything else is other profiles' campaigns
(per-request data cut to ~40 KB a run so that 100k runs fit). Then, on that store:

- CLI, each a fresh process, median of `--repeats` (wall s, peak RSS MB from wait4):
  `moe-tui compare A B --format json`, `moe-tui export A B`, `moe-tui investigate A B -c 64 --dry-run`;
- TUI, the real MoeTuiApp headless (Textual's test driver) on the real store reads
  (`control.reads.StoreReads`: the queue view, the comparison grid), in a fresh process:
  the longest event-loop stall from start until every screen has been built off screen (the App
  prepares them in idle slices after its first paint; `prepared_s` says when that was done) and
  over the whole session (a 5 ms heartbeat's largest gap), key `2` to the Queue screen painted (the key posted as a
  terminal delivers it; the time until the screen is shown and painted), idle CPU on the Queue
  screen over `--idle-s` seconds while GPU telemetry and controller status arrive at 1 Hz (the
  heartbeat paused: it costs ~3% of a slow core by itself; the idle stalls are taken after, with it), key `3`
  to the comparison grid shown (the grid built cold after the key), peak RSS.

Writes benches/results/scale-<date>.md and .json (`--out-stem` names them otherwise; `--tui-only`
measures the TUI rows alone).

    nice .venv/bin/python benches/scale.py [--sizes 1000,10000] [--repeats 3] [--idle-s 10] [--dir /tmp/scale]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# MOE_TUI_BENCH_TREE: measure another checkout's code with this bench (benches/scale_tui_vs.py).
sys.path.insert(0, os.environ.get("MOE_TUI_BENCH_TREE") or str(ROOT))
sys.path.append(str(ROOT))  # tests.support (the measuring helpers) from this tree whatever is measured

from benches.scale_store import PAIR  # noqa: E402

GOALS = {"compare_s": 2.0, "compare_mb": 300.0, "export_s": 3.0, "investigate_s": 3.0, "grid_key_ms": 1000.0,
         "stall_ms": 50.0, "queue_idle_cpu_pct": 2.0, "queue_key_ms": 100.0}


def _child(argv: list[str], home: Path) -> str:
    env = dict(os.environ, MOE_TUI_HOME=str(home))
    out = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
    return out.stdout


def _rss_child(argv: list[str], home: Path) -> tuple[float, float, str]:
    """(wall s, peak RSS MB, stdout tail) of one fresh process, measured by a wrapper process
    whose only child it is (so the peak is that command's alone)."""
    code = ("import os,resource,subprocess,sys,time,json;t=time.monotonic();"
            "p=subprocess.run(sys.argv[1:],capture_output=True,text=True);"
            "w=time.monotonic()-t;r=resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss/1024;"
            "print(json.dumps([p.returncode,w,r,p.stdout[-200:],p.stderr[-2000:]]))")
    out = _child([sys.executable, "-c", code, *argv], home)
    rc, wall, rss, tail, err = json.loads(out)
    if rc != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {rc}: {err}")
    return wall, rss, tail


def cli_figures(home: Path, repeats: int, out_dir: Path) -> dict[str, dict[str, float]]:
    a, b = PAIR
    moe = [sys.executable, "-m", "moe_tui"]
    ops = {
        "compare": [*moe, "compare", a, b, "--format", "json"],
        "export": [*moe, "export", a, b, "--dir", str(out_dir)],
        "investigate": [*moe, "investigate", a, b, "-c", "64", "--dry-run"],
    }
    figures = {}
    for name, argv in ops.items():
        walls, rss = [], []
        for _ in range(repeats):
            w, r, _ = _rss_child(argv, home)
            walls.append(w)
            rss.append(r)
        figures[name] = {"s": statistics.median(walls), "mb": max(rss)}
    return figures


# -- the core's reads, CPU time in one process (less moved by a loaded box than wall time) ----------
def _core(store_path: Path, repeats: int) -> dict[str, float]:
    from moe_tui.control.reads import StoreReads
    from moe_tui.grids import pair as grids
    from moe_tui.investigate.store import investigations
    from moe_tui.store.db import Store

    def cpu_ms(fn) -> float:
        times = []
        for _ in range(repeats):
            with Store(store_path, readonly=True) as store:  # a fresh handle: no cached grid
                t = time.process_time()
                fn(store)
                times.append((time.process_time() - t) * 1000)
        return statistics.median(times)

    def queue_view(store: Store) -> None:  # what the Queue screen reads: its first page, then the last
        reads = StoreReads()
        reads.store = store
        first = reads.queue_window()
        reads.queue_window(offset=first.total)

    return {"grid_cpu_ms": cpu_ms(lambda s: grids.build_grid(s, *PAIR)), **latest_pair_grid(store_path, repeats),
            "grid_cached_ms": _cached_ms(store_path, repeats),
            "investigations_cpu_ms": cpu_ms(lambda s: investigations(s, *PAIR)),
            "queue_view_cpu_ms": cpu_ms(queue_view)}


def latest_pair_grid(store_path: Path, repeats: int) -> dict[str, float]:
    """The grid of the latest campaign's two profiles (thousands of runs a side at 100k: what the Compare
    screen opens with), CPU of a cold grid in a warm process (the fixed pair's grid built first: the
    statistics' imports are a process's, not a grid's), with the runs it read."""
    from moe_tui.grids import pair as grids
    from moe_tui.store.db import Store

    with Store(store_path, readonly=True) as store:
        grids.build_grid(store, *PAIR)
        rows = store.query("SELECT definition_json FROM campaigns ORDER BY id DESC LIMIT 1")
        pair = json.loads(rows[0][0])["profiles"][:2] if rows else list(PAIR)
        runs = sum(len(store.run_summaries(profile_name=n, statuses=grids.RUN_STATUSES, exclude_diagnostic=True))
                   for n in pair)
    times = []
    for _ in range(repeats):
        with Store(store_path, readonly=True) as store:  # a fresh handle: no cached grid
            t = time.process_time()
            grids.build_grid(store, *pair)
            times.append((time.process_time() - t) * 1000)
    return {"latest_pair_grid_cpu_ms": statistics.median(times), "latest_pair_runs": float(runs)}


def _cached_ms(store_path: Path, repeats: int) -> float:
    """The second build_grid of one handle with nothing committed between: the cache's answer."""
    from moe_tui.grids import pair as grids
    from moe_tui.store.db import Store

    times = []
    with Store(store_path, readonly=True) as store:
        grids.build_grid(store, *PAIR)
        for _ in range(repeats):
            t = time.process_time()
            grids.build_grid(store, *PAIR)
            times.append((time.process_time() - t) * 1000)
    return statistics.median(times)


def core_figures(store_path: Path, repeats: int) -> dict[str, float]:
    out = subprocess.run([sys.executable, __file__, "--core", str(store_path), "--repeats", str(repeats)],
                         capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        raise RuntimeError(f"core measurement failed: {out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


# -- the TUI, in its own process -------------------------------------------------------------------
async def _tui(store_path: Path, idle_s: float) -> dict[str, float]:
    import resource

    from moe_tui.control.reads import StoreReads
    from moe_tui.events import ControllerStatus, ServerMetrics
    from moe_tui.store.db import Store
    from moe_tui.ui.app import MoeTuiApp
    from moe_tui.ui.messages import CoreEventArrived
    from moe_tui.ui.screens.compare import CompareScreen
    from moe_tui.ui.screens.queue import QueueScreen
    from tests.support.pilot import key_to_screen
    from tests.ui.fakes import RecordingAdapter, gpu_snapshot, telemetry_message

    store = Store(store_path, readonly=True)

    class StoreAdapter(StoreReads, RecordingAdapter):  # real reads of the big store, no-op commands
        profiles: list = []

        def __init__(self) -> None:
            RecordingAdapter.__init__(self)
            self.store = store

        def snapshot(self):  # type: ignore[override]
            from dataclasses import replace

            # (the queue's first page; a tree from before issue 26's pages carried every item)
            first = self.queue_window() if hasattr(self, "queue_window") else self.queue_rows()
            return replace(RecordingAdapter.snapshot(self), queue=first, current_item=None)

    gaps: list[float] = []
    marks: dict[str, float] = {}
    longest = _time_loop_callbacks()

    beating = asyncio.Event()  # the heartbeat costs ~3% of a slow core itself: paused while CPU is measured
    beating.set()

    async def heartbeat() -> None:
        last = time.monotonic()
        while True:
            if not beating.is_set():
                await beating.wait()
                last = time.monotonic()
            await asyncio.sleep(0.005)
            now = time.monotonic()
            gaps.append(now - last - 0.005)
            last = now

    app = MoeTuiApp(StoreAdapter())
    beat = asyncio.create_task(heartbeat())
    async with app.run_test(size=(160, 50)) as pilot:
        t0 = time.monotonic()
        while not (_queue_size(app) and app.preparer.done) and time.monotonic() - t0 < 120:
            await pilot.pause(0.01)
        marks["prepared_s"] = time.monotonic() - t0
        await pilot.pause(0.3)
        marks["start_stall_ms"] = max(gaps) * 1000
        marks["start_slice_cpu_ms"] = longest.take()
        gaps.clear()  # (the first-visit figures below once included the start's stalls)
        marks["queue_key_ms"] = await key_to_screen(
            app, "2", lambda: isinstance(app.screen, QueueScreen) and app.screen.query_one("#queue-table").row_count)
        await pilot.pause(1.0)
        marks["queue_visit_stall_ms"] = max(gaps) * 1000
        marks["queue_visit_slice_cpu_ms"] = longest.take()
        gaps.clear()

        async def idle(seconds: float) -> None:
            tick, start = 0, time.monotonic()
            while time.monotonic() - start < seconds:
                app.post_message(telemetry_message(gpu_snapshot(t=time.time(), util=50.0 + tick % 40)))
                app.post_message(CoreEventArrived(ServerMetrics(profile=PAIR[0], healthy=True, running_requests=0,
                                                                queued_requests=0)))
                app.post_message(CoreEventArrived(ControllerStatus(activity="idle", detail="queue empty")))
                tick += 1
                await asyncio.sleep(1.0)

        # Idle means idle: the start's background reads (the grid of the pair the Compare screen
        # opens with: at 100k runs the latest campaign's two profiles, seconds of CPU) finish first.
        t1 = time.monotonic()
        while any(w.is_running for w in app.workers) and time.monotonic() - t1 < 300:
            await asyncio.sleep(0.05)
        marks["background_done_s"] = time.monotonic() - t0
        beating.clear()  # CPU without the bench's own 5 ms heartbeat (it was most of the figure)
        wall0, cpu0 = time.monotonic(), time.process_time()
        await idle(idle_s)
        marks["queue_idle_cpu_pct"] = 100 * (time.process_time() - cpu0) / (time.monotonic() - wall0)
        beating.set()  # then the stalls, with the heartbeat, over a shorter idle spell
        await idle(min(idle_s, 4.0))
        marks["queue_idle_stall_ms"] = max(gaps) * 1000
        longest.take()
        gaps.clear()
        marks["grid_key_ms"] = await key_to_screen(
            app, "3", lambda: isinstance(app.screen, CompareScreen) and getattr(app.screen, "grid", None) is not None)
        await pilot.pause(0.5)
        marks["grid_visit_stall_ms"] = max(gaps) * 1000
        marks["grid_visit_slice_cpu_ms"] = longest.take()
    beat.cancel()
    marks["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    marks["queue_rows"] = float(_queue_size(app))
    store.close()
    return marks


def _queue_size(app) -> int:
    queue = app.live.queue
    return queue.total if hasattr(queue, "total") else len(queue)


class _Longest:
    """The longest CPU time (this thread's) one event-loop callback took since the last `take`: a
    stall the program made, apart from the time a loaded box did not run it at all (which the
    heartbeat's wall-clock gaps include)."""

    def __init__(self) -> None:
        self.longest = 0.0

    def take(self) -> float:
        longest, self.longest = self.longest, 0.0
        return longest * 1000


def _time_loop_callbacks() -> _Longest:
    from asyncio import events

    longest = _Longest()
    run = events.Handle._run

    def timed(handle: events.Handle) -> None:
        cpu = time.thread_time()
        run(handle)
        longest.longest = max(longest.longest, time.thread_time() - cpu)

    events.Handle._run = timed  # type: ignore[method-assign]
    return longest


def tui_figures(store_path: Path, idle_s: float, tree: Path | None = None) -> dict[str, float]:
    env = dict(os.environ, MOE_TUI_HOME=tempfile.mkdtemp(prefix="moe-tui-scale-tui-"))
    if tree is not None:  # another checkout's code, measured by this bench
        env["MOE_TUI_BENCH_TREE"] = str(tree)
    out = subprocess.run([sys.executable, __file__, "--tui", str(store_path), "--idle-s", str(idle_s)],
                         capture_output=True, text=True, timeout=1800, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"TUI measurement failed: {out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


CLONE_ABOVE = 10_000  # larger stores are cloned from this one (scale_store.py --clone)


def build_store(n: int, base: Path) -> tuple[Path, dict]:
    home = base / f"{n}"
    path = home / "data" / "moe-tui.sqlite3"
    if not path.exists():
        how = [str(n), str(path)]
        if n > CLONE_ABOVE:
            source, _ = build_store(CLONE_ABOVE, base)
            how = ["--clone", str(source / "data" / "moe-tui.sqlite3"), *how]
        out = subprocess.run([sys.executable, str(ROOT / "benches" / "scale_store.py"), *how],
                             capture_output=True, text=True, check=True)
        info = json.loads(out.stdout)
        (home / "build.json").write_text(json.dumps(info))
    import sqlite3

    from moe_tui.store.db import Store
    from moe_tui.store.schema import SCHEMA_VERSION

    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
    finally:
        conn.close()
    if version < SCHEMA_VERSION:  # a store kept from an older build is upgraded once (the figures open
        Store(path).close()  # it read-only); not otherwise: a writable open quick-checks 6 GB first
    return home, json.loads((home / "build.json").read_text())


def table(rows: list[dict], tui: bool = True, tui_only: bool = False) -> list[str]:
    head = ["operation", *(f"{r['runs']:,} runs" for r in rows), "goal"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    def line(label: str, fmt, goal: str) -> None:
        lines.append("| " + " | ".join([label, *(fmt(r) for r in rows), goal]) + " |")

    if tui_only:
        return _tui_lines(rows, lines, line)
    line("grid read + build, CPU in one process (cold)", lambda r: f"{r['core']['grid_cpu_ms']:.0f} ms", "")
    ref = min(rows, key=lambda r: abs(r["runs"] - 10_000))  # growth is read against the 10k store
    line("grid CPU, x the 10k store's (same pair, same 24 runs)",
         lambda r: f"{r['core']['grid_cpu_ms'] / ref['core']['grid_cpu_ms']:.2f}x", "< 1.5x at 100k")
    line("grid of the latest campaign's pair, CPU, cold grid in a warm process",
         lambda r: f"{r['core']['latest_pair_grid_cpu_ms']:.0f} ms ({r['core']['latest_pair_runs']:,.0f} runs)"
         if "latest_pair_grid_cpu_ms" in r["core"] else "-", "TUI grid < 1 s")
    line("the same grid again, no store change (cache)", lambda r: f"{r['core']['grid_cached_ms']:.2f} ms", "")
    line("investigations of the pair, CPU", lambda r: f"{r['core']['investigations_cpu_ms']:.1f} ms", "")
    line("Queue view read (first and last page of 100 items), CPU", lambda r: f"{r['core']['queue_view_cpu_ms']:.0f} ms", "")
    line("load average (1 min) before / after", lambda r: "{:.1f} / {:.1f}".format(*r["load"]), "")
    line("store file", lambda r: f"{r['store_mb']:,.0f} MB" + (" (cloned)" if r.get("cloned") else ""), "")
    line("`moe-tui compare A B --format json`", lambda r: f"{r['cli']['compare']['s']:.2f} s, "
         f"{r['cli']['compare']['mb']:.0f} MB", "< 2 s, < 300 MB")
    line("`moe-tui export A B`", lambda r: f"{r['cli']['export']['s']:.2f} s", "< 3 s")
    line("`moe-tui investigate A B -c 64 --dry-run`", lambda r: f"{r['cli']['investigate']['s']:.2f} s", "< 3 s")
    if not tui:
        return lines
    return _tui_lines(rows, lines, line)


def _tui_lines(rows: list[dict], lines: list[str], line) -> list[str]:
    line("TUI: key `3` to the grid (built in the background after start)", lambda r: f"{r['tui']['grid_key_ms']:.0f} ms", "< 1 s")
    line("TUI: every screen built and rendered off screen, after start",
         lambda r: f"{r['tui']['prepared_s']:.2f} s" if "prepared_s" in r["tui"] else "-", "")
    line("TUI: event-loop stall, start incl. building the screens (max)",
         lambda r: f"{r['tui']['start_stall_ms']:.0f} ms", "< 50 ms")
    line("TUI: event-loop stall, first visit to Queue (max)", lambda r: f"{r['tui']['queue_visit_stall_ms']:.0f} ms",
         "< 50 ms")
    line("TUI: event-loop stall, idle on Queue (max)", lambda r: f"{r['tui']['queue_idle_stall_ms']:.0f} ms", "< 50 ms")
    line("TUI: event-loop stall, first visit to the grid (max)", lambda r: f"{r['tui']['grid_visit_stall_ms']:.0f} ms",
         "< 50 ms")
    for key, what in (("start_slice_cpu_ms", "start incl. building the screens"),
                      ("queue_visit_slice_cpu_ms", "first visit to Queue"), ("grid_visit_slice_cpu_ms", "first visit to the grid")):
        line(f"TUI: longest event-loop callback, CPU, {what}",
             lambda r, key=key: f"{r['tui'][key]:.0f} ms" if key in r["tui"] else "-", "")
    line("TUI: key `2` (Queue) to screen", lambda r: f"{r['tui']['queue_key_ms']:.0f} ms", "< 100 ms")
    line("TUI: idle CPU on the Queue screen", lambda r: f"{r['tui']['queue_idle_cpu_pct']:.1f}% "
         f"({r['tui']['queue_rows']:,.0f} items)", "< 2% at 10k items")
    line("TUI: peak RSS", lambda r: f"{r['tui']['peak_rss_mb']:.0f} MB", "")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--idle-s", type=float, default=10.0)
    parser.add_argument("--dir", default=str(Path(tempfile.gettempdir()) / "moe-tui-scale"))
    parser.add_argument("--tui", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--core", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--grid-pair", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--tag", default="", help="results file name part: scale-<tag>-<date>.md (e.g. h200host)")
    parser.add_argument("--suffix", default="", help="after the date: scale-<date>-<suffix>.md (e.g. w4)")
    parser.add_argument("--no-tui", action="store_true", help="store, core and CLI figures only")
    parser.add_argument("--tui-only", action="store_true", help="only the TUI rows (no CLI or core figures)")
    parser.add_argument("--out-stem", default="", help="result file name without suffix (default scale-<date>)")
    args = parser.parse_args()
    if args.tui:
        print(json.dumps(asyncio.run(_tui(Path(args.tui), args.idle_s))))
        return 0
    if args.core:
        print(json.dumps(_core(Path(args.core), max(args.repeats, 3))))
        return 0
    if args.grid_pair:  # benches/scale_grid_vs.py: this process measures the checkout MOE_TUI_BENCH_TREE names
        import moe_tui

        print(json.dumps({**latest_pair_grid(Path(args.grid_pair), args.repeats), "tree": moe_tui.__file__}))
        return 0
    base = Path(args.dir)
    rows = []
    for n in (int(x) for x in args.sizes.split(",")):
        home, info = build_store(n, base)
        load_before = os.getloadavg()[0]
        print(f"store of {info['runs']:,} runs: {info['bytes'] / 1e6:,.0f} MB, built in {info['build_s']} s", flush=True)
        core = {} if args.tui_only else core_figures(home / "data" / "moe-tui.sqlite3", args.repeats)
        print(f"  core: {core}", flush=True)
        cli = {} if args.tui_only else cli_figures(home, args.repeats, base / "exports")
        print(f"  cli: {cli}", flush=True)
        tui = {} if args.no_tui else tui_figures(home / "data" / "moe-tui.sqlite3", args.idle_s)
        print(f"  tui: {tui}", flush=True)
        rows.append({"runs": info["runs"], "store_mb": info["bytes"] / 1e6, "build_s": info["build_s"],
                     "cloned": "cloned_from" in info, "load": (load_before, os.getloadavg()[0]),
                     "core": core, "cli": cli, "tui": tui})
        write_results(args, rows)  # after each size: a run cut short keeps the sizes it finished
    return 0


def write_results(args: argparse.Namespace, rows: list[dict]) -> None:
    date = datetime.date.today().isoformat()
    results = ROOT / "benches" / "results"
    stem = args.out_stem or "-".join(p for p in ("scale", args.tag, date, args.suffix) if p)
    (results / f"{stem}.json").write_text(json.dumps(
        {"date": date, "host": platform.node(), "cpus": os.cpu_count(), "python": platform.python_version(),
         "goals": GOALS, "rows": rows}, indent=2) + "\n")
    sizes = ", ".join(f"{r['runs']:,}" for r in rows)
    md = [f"# Scale: the store, the grid and the TUI at {sizes} runs ({date})",
          "", f"Host: {platform.node()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; "
          f"`nice .venv/bin/python benches/scale.py --sizes {args.sizes} --repeats {args.repeats}"
          f"{' --no-tui' if args.no_tui else ''}{' --tui-only' if args.tui_only else ''}`. CLI figures are "
          f"medians of {args.repeats} fresh processes (peak RSS the largest); TUI figures one fresh process.", "",
          *table(rows, tui=not args.no_tui, tui_only=args.tui_only), ""]
    (results / f"{stem}.md").write_text("\n".join(md))
    print("\n".join(md), flush=True)


if __name__ == "__main__":
    sys.exit(main())
