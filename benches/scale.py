"""Months of campaigns (issues 26, 34): the grid, its CLI readers and an open grid at 1k / 10k / 100k runs.

Each store is shaped like a team's history (`benches/history_store.py`, through the runner's store and
queue API): one baseline against 19 candidates in turn over months (the baseline about half of all
runs), four spec eras, investigations, one run in 50 failed. The compared pair is the baseline and the
latest campaign's candidate (its grid reads half the store's profiles' runs before issue 34). Built once
under `--dir` (default /tmp/moe-tui-scale) and kept there. Then, on that store:

- CLI, each a fresh process, median of `--repeats` (wall s, peak RSS MB from wait4):
  `moe-tui compare A B --format json`, `moe-tui export A B`, `moe-tui investigate A B -c 64 --dry-run`,
  `moe-tui queue add --profiles A,B ... --dry-run`;
- core, in one process: a grid open on the pair, then a new run committed by another handle (the
  runner's) and the grid built again in a worker thread while a 5 ms heartbeat runs on the asyncio loop:
  the time to the new grid (the new run in its cell) and the loop's longest stall; the cold grid's CPU;
- TUI (without `--no-tui`): the real MoeTuiApp headless on the store (`_tui`: stalls, key `3` to the
  grid, key `2` to Queue, idle CPU, peak RSS).

Each figure with its growth over the previous size. Writes benches/results/scale-<date>.md and .json
(`--out-stem` names them otherwise).

    nice .venv/bin/python benches/scale.py [--sizes 1000,10000,100000] [--repeats 3] [--no-tui] [--dir /tmp/scale]
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

from benches import history_store  # noqa: E402
from benches.scale_open_grid import new_run_in_open_grid  # noqa: E402
from benches.scale_table import table  # noqa: E402

# The compared pair: the baseline and the latest campaign's candidate of the history store (set by
# main for its children through the environment; the baseline holds about half of all runs).
PAIR = tuple(os.environ.get("MOE_TUI_SCALE_PAIR", f"{history_store.BASELINE},{history_store.CANDIDATES[-1]}").split(","))

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
        "queue_add": [*moe, "queue", "add", "--profiles", f"{a},{b}", "--concurrency",
                      ",".join(map(str, history_store.CONCS)), "--repeats", str(history_store.REPEATS),
                      "--order", "interleaved", "--profiles-dir", str(home / "profiles"), "--dry-run", "--yes"],
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

    return {"grid_cpu_ms": cpu_ms(lambda s: grids.build_grid(s, *PAIR)), **new_run_in_open_grid(store_path, repeats, PAIR),
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


def build_store(n: int, base: Path) -> tuple[Path, dict]:
    """The history-shaped store of `n` runs under `base` (built once, kept: 100k takes minutes)."""
    home = base / f"{n}"
    path = home / "data" / "moe-tui.sqlite3"
    if not (home / "build.json").exists():
        out = subprocess.run([sys.executable, str(ROOT / "benches" / "history_store.py"), str(n), str(path)],
                             capture_output=True, text=True, check=True)
        (home / "build.json").write_text(out.stdout.strip().splitlines()[-1])
    history_store.write_profiles(home / "profiles")
    import sqlite3

    from moe_tui.store.db import Store
    from moe_tui.store.schema import SCHEMA_VERSION

    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
    finally:
        conn.close()
    if version < SCHEMA_VERSION:  # a store kept from an older build is upgraded once (the figures open
        Store(path).close()  # it read-only)
    return home, json.loads((home / "build.json").read_text())


def _pair_runs(path: Path) -> int:
    import sqlite3

    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return int(conn.execute("SELECT COUNT(*) FROM runs WHERE profile_name IN (?, ?)", PAIR).fetchone()[0])
    finally:
        conn.close()


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
        global PAIR
        PAIR = tuple(info["pair"])
        os.environ["MOE_TUI_SCALE_PAIR"] = ",".join(PAIR)  # the children's pair
        load_before = os.getloadavg()[0]
        print(f"store of {info['runs']:,} runs: {info['bytes'] / 1e6:,.0f} MB, built in {info['build_s']} s", flush=True)
        core = {} if args.tui_only else core_figures(home / "data" / "moe-tui.sqlite3", args.repeats)
        print(f"  core: {core}", flush=True)
        cli = {} if args.tui_only else cli_figures(home, args.repeats, base / "exports")
        print(f"  cli: {cli}", flush=True)
        tui = {} if args.no_tui else tui_figures(home / "data" / "moe-tui.sqlite3", args.idle_s)
        print(f"  tui: {tui}", flush=True)
        rows.append({"runs": info["runs"], "store_mb": info["bytes"] / 1e6, "build_s": info["build_s"],
                     "pair": PAIR, "pair_runs": _pair_runs(home / "data" / "moe-tui.sqlite3"),
                     "load": (load_before, os.getloadavg()[0]),
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
