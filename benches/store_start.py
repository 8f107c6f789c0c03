"""Fast start and disk that comes back (issue 34) at 1k / 10k / 100k runs, on stores shaped like a
team's history: one baseline profile holding half of all runs against 19 candidates, each run with
per-request samples (about `SAMPLE_KB` KB a run) and a real run's provenance and telemetry.

Per size, every timed figure the median of `--repeats` fresh processes (warm page cache):

- `open_s`: a writable `Store` open and close after a clean stop (what the TUI and then its runner
  each pay at start), beside `check_s`: `PRAGMA quick_check` of the same file, what each of those
  opens paid before (twice per start: TUI, then runner);
- `attach_s`: from the process's spawn (interpreter and imports included) to
  `moe-tui --attach`'s connection to a live runner of that store (`control.launch.connect`, as
  after an SSH drop); `paint_s`: to the control room's first paint (the real App, headless);
- `backup_s` / `backup_mb`: `moe-tui store backup` (the one copy kept);
- `archive --prune` of the baseline (half the store): its time, the file before and after and
  the share freed; then `moe-tui import` of that archive into an empty store: time and peak RSS
  (streamed: memory must not follow the archive's size).

The store is built once per size (1k through the store API the runner uses, larger ones by SQL
copies of it with shifted ids) and consumed by the prune. Writes benches/results/<stem>.md/.json.

    nice .venv/bin/python benches/store_start.py [--sizes 1000,10000,100000] [--repeats 3] [--dir /tmp/x]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# MOE_TUI_BENCH_TREE: a child measuring another checkout's code (--base), side by side with this one.
sys.path.insert(0, os.environ.get("MOE_TUI_BENCH_TREE") or str(ROOT))

BASELINE = "baseline"
CANDIDATES = tuple(f"cand-{i:02d}" for i in range(19))
SAMPLE_KB = int(os.environ.get("MOE_TUI_BENCH_SAMPLE_KB", "40"))
REQUESTS_PER_RUN = 40
BASE_RUNS = 1000


def _profile(name: str) -> dict:
    return {"name": name, "engine": "sim", "moe_runner_backend": "flashinfer_cutlass", "tp_size": 8,
            "model_path": "zai-org/GLM-5-NVFP4", "gpus": list(range(8)), "extra_args": ["--x"] * 10}


def _provenance(name: str, n: int) -> dict:
    return {"provenance_schema": 2, "queue_item": {"id": n, "attempt": 1}, "simulated": True,
            "server": {"engine": "sim", "sglang_version": "0.5.23-sim", "resolved_backend": "flashinfer_cutlass",
                       "resolved_args": {f"arg_{k}": k * 3 for k in range(60)}, "argv": ["--x"] * 30},
            "gpu": {"gpu_names": {str(i): "NVIDIA H200" for i in range(8)}, "driver_version": "580.65"},
            "host": {"hostname": "box", "python_version": "3.11.9"}, "client": {"name": "moe-tui"}}


def build(path: Path, n_runs: int) -> None:
    """`BASE_RUNS` runs through the runner's store API (half of them the baseline's, spec eras of
    four concurrencies), then SQL copies of them (ids shifted) up to `n_runs`."""
    from moe_tui.spec import BenchmarkSpec
    from moe_tui.store.db import Store

    rng = random.Random(34)
    itl_n = max(1, SAMPLE_KB * 1024 // REQUESTS_PER_RUN // 9)  # ~9 bytes a latency (to the microsecond)
    with Store(path) as store:
        store.set_keep_samples_runs(None)  # the history as it was stored: every run's samples
        for n in range(min(n_runs, BASE_RUNS)):
            name = BASELINE if n % 2 == 0 else CANDIDATES[(n // 2) % len(CANDIDATES)]
            spec = BenchmarkSpec.from_dict({"max_concurrency": (1, 8, 64, 256)[n % 4], "num_prompts": 64,
                                            "seed": 42 + (n * 4) // min(n_runs, BASE_RUNS)})
            start = store.record_server_start(profile_name=name, profile=_profile(name), argv=["sim"], env={},
                                              log_path="/dev/null", pid=1, state="ready")
            rid = store.create_run(profile_name=name, spec_json=spec.canonical_json(), fingerprint=spec.fingerprint,
                                   client="moe-tui", profile=_profile(name), provenance=_provenance(name, n),
                                   server_start_id=start)
            requests = [{"idx": i, "ok": True, "ttft": rng.uniform(0.05, 0.2), "latency": rng.uniform(2, 3),
                         "itl": [rng.uniform(0.008, 0.012) for _ in range(itl_n)]} for i in range(REQUESTS_PER_RUN)]
            failed = n % 50 == 49
            store.finish_run(rid, status="failed" if failed else "complete", requests=requests,
                             summary={"completed": 64, "output_throughput": 1000 * rng.uniform(0.95, 1.05)},
                             telemetry={"available": True, "gpus": {str(i): {"util": 90} for i in range(8)}},
                             gpu_samples=[(time.time() + i, {"0": {"util": 90}}) for i in range(10)])
    if n_runs <= BASE_RUNS:
        return
    import sqlite3

    conn = sqlite3.connect(path, isolation_level=None)
    run_cols = [r[1] for r in conn.execute("PRAGMA table_info(runs)") if r[1] != "id"]
    req_cols = [r[1] for r in conn.execute("PRAGMA table_info(requests)") if r[1] != "run_id"]
    k = 0
    while conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0] + BASE_RUNS <= n_runs:
        k += 1
        shift = BASE_RUNS * k
        conn.execute("BEGIN")
        picked = ", ".join(f"created_at + {k} * 0.001" if c == "created_at" else c for c in run_cols)
        conn.execute(f"INSERT INTO runs (id, {', '.join(run_cols)}) SELECT id + {shift}, {picked}"
                     f" FROM runs WHERE id <= {BASE_RUNS}")  # (a copy is another run: its own creation time)
        conn.execute(f"INSERT INTO requests (run_id, {', '.join(req_cols)}) SELECT run_id + {shift},"
                     f" {', '.join(req_cols)} FROM requests WHERE run_id <= {BASE_RUNS}")
        conn.execute(f"INSERT INTO gpu_samples (run_id, t, sample_json) SELECT run_id + {shift}, t, sample_json"
                     f" FROM gpu_samples WHERE run_id <= {BASE_RUNS}")
        conn.execute(f"UPDATE run_summaries SET facts_json = (SELECT o.facts_json FROM run_summaries o WHERE"
                     f" o.run_id = run_summaries.run_id - {shift}) WHERE run_id > {shift} AND facts_json IS NULL")
        conn.execute("COMMIT")
    conn.close()
    with Store(path):  # a clean close: the stamp a later open compares with
        pass


# -- children: each figure in a fresh process ----------------------------------------------------
def _since_start() -> float:
    """Seconds since the parent started this process (its clock just before the spawn: psutil's
    create time rests on a boot time in whole seconds, up to a second off)."""
    return time.time() - float(os.environ["MOE_TUI_BENCH_SPAWNED_AT"])


def child_open(path: str) -> dict:
    from moe_tui.store.db import Store

    t = time.monotonic()
    store = Store(Path(path))
    opened = time.monotonic() - t
    checked = getattr(store, "integrity_checked", "every writable open (before issue 34)")
    store.close()
    return {"open_s": opened, "checked": checked}


def child_check(path: str) -> dict:
    import sqlite3

    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    t = time.monotonic()
    rows = conn.execute("PRAGMA quick_check(20)").fetchall()
    return {"check_s": time.monotonic() - t, "ok": rows == [("ok",)]}


def child_attach(profiles: str) -> dict:
    from moe_tui.ui.launch import open_control_room

    room = open_control_room(Path(profiles), attach=True)
    attach_s = _since_start()

    async def paint() -> float:
        async with room.app.run_test(size=(160, 50)):
            painted = asyncio.get_running_loop().create_future()
            room.app.screen.call_after_refresh(lambda: painted.done() or painted.set_result(None))
            await painted
            return _since_start()

    paint_s = asyncio.run(paint())
    return {"attach_s": attach_s, "paint_s": paint_s}


def _child(kind: str, arg: str, env: dict[str, str], tree: str | None = None) -> dict:
    env = dict(env, MOE_TUI_BENCH_SPAWNED_AT=repr(time.time()))
    if tree:
        env["MOE_TUI_BENCH_TREE"] = tree
    out = subprocess.run([sys.executable, __file__, "--child", kind, arg], capture_output=True, text=True,
                         timeout=900, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"{kind} failed: {out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _cli(env: dict[str, str], *args: str) -> tuple[float, float, str]:
    """(wall s, peak RSS MB, stdout) of one `moe-tui` command."""
    t = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "moe_tui", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - t
    out = proc.stdout.read() if proc.stdout else ""
    err = proc.stderr.read() if proc.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"moe-tui {' '.join(args)} failed: {err[-2000:]}")
    return wall, usage.ru_maxrss / 1024, out


def _side_by_side(kind: str, arg: str, env: dict[str, str], repeats: int, tree: str | None) -> tuple[list, list]:
    """`repeats` children of this checkout and, with `tree`, as many of that one, alternating
    (A B, B A, ...) so that a shared box's load falls on both alike."""
    mine: list = []
    theirs: list = []
    for i in range(repeats):
        order = [None, tree] if i % 2 == 0 else [tree, None]
        for which in order:
            if which is None:
                mine.append(_child(kind, arg, env))
            elif tree:
                theirs.append(_child(kind, arg, env, tree))
    return mine, theirs


def measure(n: int, base: Path, repeats: int, tree: str | None = None) -> dict:
    from moe_tui.paths import bundled_demo_profiles_dir

    home = base / str(n)
    shutil.rmtree(home, ignore_errors=True)
    path = home / "data" / "moe-tui.sqlite3"
    t = time.monotonic()
    build(path, n)
    row: dict = {"runs": n, "build_s": time.monotonic() - t, "file_mb": path.stat().st_size / 1e6,
                 "load": [os.getloadavg()[0]]}
    print(f"{n:,} runs: {row['file_mb']:,.0f} MB built in {row['build_s']:.0f} s", flush=True)
    env = dict(os.environ, MOE_TUI_HOME=str(home), MOE_TUI_BACKUP_EVERY_H="0")
    opens, before = _side_by_side("open", str(path), env, repeats, tree)
    row["open_s"] = statistics.median(o["open_s"] for o in opens)
    row["open_checked"] = [o["checked"] for o in opens]
    if before:
        row["base_open_s"] = statistics.median(o["open_s"] for o in before)
    row["check_s"] = statistics.median(_child("check", str(path), env)["check_s"] for _ in range(repeats))
    profiles = home / "profiles"
    shutil.copytree(bundled_demo_profiles_dir(), profiles)
    subprocess.run([sys.executable, "-m", "moe_tui", "run", "--detach", "--profiles-dir", str(profiles)], env=env,
                   check=True, capture_output=True, timeout=300)
    try:
        attaches, before = _side_by_side("attach", str(profiles), env, repeats, tree)
    finally:
        subprocess.run([sys.executable, "-m", "moe_tui", "run", "--stop"], env=env, capture_output=True, timeout=300)
    row["attach_s"] = statistics.median(a["attach_s"] for a in attaches)
    row["paint_s"] = statistics.median(a["paint_s"] for a in attaches)
    if before:
        row["base_attach_s"] = statistics.median(a["attach_s"] for a in before)
        row["base_paint_s"] = statistics.median(a["paint_s"] for a in before)
    print(f"  open {row['open_s']:.3f} s (check {row['check_s']:.2f} s), attach {row['attach_s']:.2f} s, "
          f"paint {row['paint_s']:.2f} s", flush=True)
    wall, _, said = _cli(env, "store", "backup")
    row["backup_s"], row["backup_mb"], row["backup_said"] = wall, (path.parent / (path.name + ".backup")).stat().st_size / 1e6, said.strip()
    (path.parent / (path.name + ".backup")).unlink()
    archive = base / f"archive-{n}.jsonl"
    archive.unlink(missing_ok=True)
    before = path.stat().st_size
    wall, rss, said = _cli(env, "store", "archive", str(archive), "--profile", BASELINE, "--prune")
    after = path.stat().st_size + (Path(str(path) + "-wal").stat().st_size if Path(str(path) + "-wal").exists() else 0)
    row.update(prune_s=wall, prune_rss_mb=rss, prune_before_mb=before / 1e6, prune_after_mb=after / 1e6,
               prune_freed_pct=100 * (before - after) / before, prune_said=said.strip().splitlines()[-1],
               archive_mb=archive.stat().st_size / 1e6)
    print(f"  archive --prune {wall:.1f} s: {row['prune_said']}", flush=True)
    fresh = dict(env, MOE_TUI_HOME=str(base / f"import-{n}"))
    shutil.rmtree(fresh["MOE_TUI_HOME"], ignore_errors=True)
    wall, rss, said = _cli(fresh, "import", str(archive))
    row.update(import_s=wall, import_rss_mb=rss, import_said=said.strip().splitlines()[-1])
    print(f"  import {wall:.1f} s, peak {rss:,.0f} MB: {row['import_said']}", flush=True)
    archive.unlink()
    shutil.rmtree(fresh["MOE_TUI_HOME"], ignore_errors=True)
    shutil.rmtree(home, ignore_errors=True)
    row["load"].append(os.getloadavg()[0])
    return row


ROWS = (  # key, what, unit, goal
    ("file_mb", "store file", "MB", ""),
    ("open_s", "writable open after a clean stop (TUI, then runner: each)", "s", ""),
    ("base_open_s", "the same open, before (--base checkout)", "s", ""),
    ("check_s", "quick_check of the file: what each writable open paid before", "s", ""),
    ("attach_s", "re-attach: process start to connected to the runner", "s", "< 1 s"),
    ("base_attach_s", "the same re-attach, before (--base checkout)", "s", ""),
    ("paint_s", "process start to the control room's first paint", "s", "< 2 s"),
    ("base_paint_s", "the same first paint, before (--base checkout)", "s", ""),
    ("backup_s", "`store backup` (one copy kept)", "s", ""),
    ("backup_mb", "its size", "MB", ""),
    ("prune_s", "`store archive --profile baseline --prune` (half the runs)", "s", ""),
    ("prune_rss_mb", "its peak RSS", "MB", "flat"),
    ("prune_freed_pct", "of the file given back by it", "%", ">= 40%"),
    ("archive_mb", "the archive written", "MB", ""),
    ("import_s", "`import` of that archive into an empty store", "s", ""),
    ("import_rss_mb", "its peak RSS", "MB", "flat"),
)


def table(rows: list[dict]) -> list[str]:
    head = "| figure | " + " | ".join(f"{r['runs']:,} runs" for r in rows) + " | growth per 10x | goal |"
    out = [head, "|" + "---|" * (len(rows) + 3)]
    for key, what, unit, goal in ROWS:
        values = [r.get(key) for r in rows]
        if all(v is None for v in values):
            continue
        cells = [("-" if v is None else f"{v:,.3f}" if unit == "s" and v < 1 else f"{v:,.2f}" if unit == "s"
                  else f"{v:,.1f}") for v in values]
        growth = []
        for a, b in zip(values, values[1:], strict=False):
            growth.append(f"{b / a:.2f}x" if a and b else "-")
        out.append(f"| {what} ({unit}) | " + " | ".join(cells) + f" | {', '.join(growth) or '-'} | {goal} |")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", default=str(Path(tempfile.gettempdir()) / "moe-tui-store-start"))
    parser.add_argument("--out-stem", default="")
    parser.add_argument("--base", default=None, help="another checkout (e.g. main before this change), measured "
                                                      "alternately with this one for open, re-attach and paint")
    parser.add_argument("--child", nargs=2, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, arg = args.child
        print(json.dumps({"open": child_open, "check": child_check, "attach": child_attach}[kind](arg)))
        return 0
    base = Path(args.dir)
    base.mkdir(parents=True, exist_ok=True)
    rows = []
    for n in (int(x) for x in args.sizes.split(",")):
        rows.append(measure(n, base, args.repeats, args.base))
        write(args, rows)
    return 0


def write(args: argparse.Namespace, rows: list[dict]) -> None:
    date = datetime.date.today().isoformat()
    stem = args.out_stem or f"store_start-2core-{date}"
    results = ROOT / "benches" / "results"
    (results / f"{stem}.json").write_text(json.dumps(
        {"date": date, "host": platform.node(), "cpus": os.cpu_count(), "rows": rows}, indent=2) + "\n")
    sizes = ", ".join(f"{r['runs']:,}" for r in rows)
    md = [f"# Store start, backup, prune and import at {sizes} runs ({date})", "",
          f"Host {platform.node()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; "
          f"`nice .venv/bin/python benches/store_start.py --sizes {args.sizes} --repeats {args.repeats}"
          f"{' --base ' + args.base if args.base else ''}`; "
          f"timed figures are medians of {args.repeats} fresh processes, warm page cache; load average "
          + ", ".join(f"{r['load'][0]:.1f}-{r['load'][1]:.1f}" for r in rows) + ". Per-request samples about "
          f"{SAMPLE_KB} KB a run; half the runs are the baseline's.", "", *table(rows), "",
          "What the commands said:", ""]
    for r in rows:
        md += [f"- {r['runs']:,} runs: `{r['backup_said']}`; `{r['prune_said']}`; `{r['import_said']}`; "
               f"the opens checked: {sorted(set(r['open_checked'])) or ['']}"]
    (results / f"{stem}.md").write_text("\n".join(md) + "\n")
    print("\n".join(md), flush=True)


if __name__ == "__main__":
    sys.exit(main())
