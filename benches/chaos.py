"""Chaos bench: random SIGKILLs of the runner, its server, its benchmark child and store maintenance over a campaign.

A fresh MOE_TUI_HOME, two fast emulator profiles and one campaign are worked by `moe-tui run`
while this script kills, at random moments, one of: the runner itself, the emulator it started,
or its benchmark child (each found by the data-dir marker in its environment). A killed runner is
started again (its watchdog stops what it left first); a killed server or benchmark child fails
the item being measured (a server that dies skips its profile's items) and the runner goes on.
A fourth target is store maintenance run beside the runner, as a user would: `store archive`,
`store prune --yes` and `import` of an "old" profile's runs (an archive of this campaign's first runs
renamed, made once), `store vacuum`, `store keep-samples`, `store backup`; one is started and killed
part-way through (at a random point of the second half of the time that command took when first let
run; if it is done by then, it counts as finished, not as a kill).
Each tick picks uniformly among the targets alive at that moment. After the last kill the failed,
interrupted and skipped items are retried and a final runner drains the queue. Then it checks:

  - nothing lost: every item is done; every done item's run is `complete`, and no run is left
    `running`; every killed measurement is stored as `incomplete`/`failed`, never as complete;
  - nothing duplicated: exactly one complete run per item;
  - no process left: nothing carries the data dir's marker, no emulator on the campaign's ports,
    no watchdog of any of the runners;
  - the store passes `PRAGMA integrity_check`, and `moe-tui doctor` says it is sound;
  - maintenance is all-or-nothing: the old profile holds none or all of its runs (prune and import are
    one transaction each), and a killed archive left at most a `.partial` file, never a short archive.

    nice -n 10 .venv/bin/python benches/chaos.py --kills 50 [--seed 1] [--out benches/results/chaos-DATE.md]

Prints and writes a Markdown report with the figures; exits 1 if any check fails.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from runner_support import Env, free_port, runner_children, write_profile  # noqa: E402

TARGETS = ("runner", "server", "bench child", "maintenance")
OLD = "chaos-old"  # the profile whose runs store maintenance imports and prunes (never the campaign's)
SPEC = ["--num-prompts", "12", "--input-len", "32", "--output-len", "32", "--no-warmup-pass"]


def watchdogs(pids: set[int]) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmd = proc.info.get("cmdline") or []
        try:
            if "moe_tui.run.watchdog" in cmd and any(str(p) in cmd for p in pids) \
                    and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except psutil.Error:
            continue
    return found


def victim(kind: str, runner: subprocess.Popen, data_dir: Path) -> psutil.Process | None:
    if kind == "runner":
        return psutil.Process(runner.pid) if runner.poll() is None else None
    for proc in runner_children(data_dir):
        try:
            cmd = " ".join(proc.cmdline())
        except psutil.Error:
            continue
        if proc.pid == runner.pid:
            continue
        if kind == "server" and "moe_tui.sim" in cmd:
            return proc
        if kind == "bench child" and "moe_tui.sim" not in cmd and (
                " bench " in f" {cmd} " or ("moe_tui.bench.zygote" in cmd and _forked_client(proc))):
            return proc
    return None


class Maintenance:
    """Store maintenance beside the runner: one command at a time, killed after a random delay."""

    def __init__(self, env: Env, rng: random.Random):
        self.env, self.rng = env, rng
        self.folder = env.home.parent / "maintenance"
        self.folder.mkdir(mode=0o700, exist_ok=True)
        self.old: Path | None = None  # the old profile's runs, as an archive: made once there are runs
        self.old_runs = 0
        self.finished: Counter = Counter()
        self.killed: Counter = Counter()
        self.failed: list[str] = []
        self.n = 0
        self.took: dict[str, float] = {}  # how long each command took when it was let finish

    def _make_old(self) -> bool:
        """An archive of the campaign's complete runs so far, renamed to OLD, detached from the queue."""
        src = self.folder / "campaign.jsonl"
        if self.env.run("store", "archive", str(src), "--profile", "chaos-a").returncode != 0:
            return False
        lines = src.read_text().splitlines()
        out = [lines[0]]
        for line in lines[1:]:
            record = json.loads(line)
            run = record["run"]
            if run.get("status") != "complete":
                continue
            run.update(profile_name=OLD, queue_item_id=None, created_at=run["created_at"] - 86400 * 30)
            out.append(json.dumps(record))
        src.unlink()
        if len(out) < 3:
            return False
        self.old = self.folder / "old.jsonl"
        self.old.write_text("\n".join(out) + "\n")
        self.old_runs = len(out) - 1
        return True

    def command(self) -> tuple[str, list[str]]:
        self.n += 1
        choices = ["archive", "vacuum", "keep-samples", "backup"]
        if self.old is not None or self._make_old():
            choices += ["import", "prune"]
        what = self.rng.choice(choices)
        argv = {"archive": ["store", "archive", str(self.folder / f"archive-{self.n}.jsonl"), "--profile", "chaos-b"],
                "vacuum": ["store", "vacuum"], "keep-samples": ["store", "keep-samples", "3"],
                "backup": ["store", "backup"], "import": ["import", str(self.old)],
                "prune": ["store", "prune", "--profile", OLD, "--yes"]}[what]
        return what, argv

    def strike(self) -> str:
        """Start one command; kill it part-way if it still runs then. Returns what happened, in words."""
        what, argv = self.command()
        began = time.monotonic()
        proc = subprocess.Popen(self.env.argv(*argv), env=self.env.env, cwd=REPO, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
        self.env.procs.append(proc)
        # The first time a command is let finish (its time measured); after that the kill lands at a
        # random point of its second half, where the imports are done and the work is under way.
        first = what not in self.took
        try:
            out, _ = proc.communicate(timeout=120 if first else self.took[what] * self.rng.uniform(0.5, 0.98))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            self.killed[what] += 1
            return f"killed {what} ({' '.join(argv[:2])})"
        self.finished[what] += 1
        if first:
            self.took[what] = time.monotonic() - began
        # A refusal while the runner holds the store (vacuum, backup) or a prune with nothing to prune is
        # an answer; a traceback is not.
        if "Traceback" in out:
            self.failed.append(f"{what}: {out[-500:]}")
        return f"{what} finished first (exit {proc.returncode})"

    def check(self, env: Env) -> list[str]:
        problems = [f"maintenance traceback: {f}" for f in self.failed]
        old = env.query("SELECT COUNT(*) FROM runs WHERE profile_name = ?", (OLD,))[0][0]
        if old not in (0, self.old_runs):
            problems.append(f"the old profile holds {old} of its {self.old_runs} runs: a prune or import was partial")
        for archive in self.folder.glob("archive-*.jsonl"):  # a finished archive is whole: header count = lines
            lines = archive.read_text().splitlines()
            if not lines or json.loads(lines[0]).get("runs") != len(lines) - 1:
                problems.append(f"a short archive was left as if whole: {archive.name}")
        return problems

    def figures(self) -> dict:
        return {"maintenance_killed": dict(self.killed), "maintenance_finished_first": dict(self.finished),
                "partial_archives_left": len(list(self.folder.glob("*.partial*"))), "old_runs": self.old_runs}


def _forked_client(proc: psutil.Process) -> bool:
    """A benchmark client forked by the zygote (it shares the zygote's command line; its parent is
    the zygote): the process that measures, not the one that forks."""
    try:
        return "moe_tui.bench.zygote" in " ".join(proc.parent().cmdline())
    except (psutil.Error, AttributeError):
        return False


def start_runner(env: Env, n: int) -> subprocess.Popen:
    """A `moe-tui run --stay` whose output goes to a file (a pipe nobody reads would block it)."""
    with open(env.home.parent / f"runner-{n}.log", "wb") as log:
        proc = subprocess.Popen(env.argv("run", "--stay", "--profiles-dir", str(env.profiles)), env=env.env,
                                cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    env.procs.append(proc)
    return proc


def run_chaos(kills: int, seed: int, env: Env) -> dict:
    rng = random.Random(seed)
    env.env["MOE_TUI_STORE_BUSY_TIMEOUT_S"] = "10"
    names = []
    for name, backend in (("chaos-a", "flashinfer_cutlass"), ("chaos-b", "flashinfer_cutedsl")):
        port = free_port()
        env.ports.append(port)
        write_profile(env.profiles, name, backend, port, time_scale=20)
        names.append(name)
    repeats = max(2, kills // 4)
    add = env.run("queue", "add", "--profiles", ",".join(names), "--concurrency", "1,4", "--repeats", str(repeats),
                  "--profiles-dir", str(env.profiles), *SPEC)
    assert add.returncode == 0, add.stdout
    done_kills: Counter = Counter()
    missed: Counter = Counter()
    runner_pids: set[int] = set()
    cleanup_s: list[float] = []
    started = time.monotonic()
    maintenance = Maintenance(env, rng)
    runner = start_runner(env, 0)
    runner_pids.add(runner.pid)
    while sum(done_kills.values()) < kills:
        time.sleep(rng.uniform(1.0, 6.0))  # long enough to reach server starts and timed phases
        present = {k: p for k in TARGETS if (p := victim(k, runner, env.data_dir)) is not None}
        if env.query("SELECT COUNT(*) FROM runs WHERE status = 'complete'")[0][0] >= 2:
            present["maintenance"] = None  # always available once the store has runs to work on
        kind = rng.choice(sorted(present)) if present else "runner"
        if kind == "maintenance":
            said = maintenance.strike()
            if said.startswith("killed"):
                done_kills[kind] += 1
            else:
                missed[kind] += 1
            print(f"{time.strftime('%H:%M:%S')} {said}", flush=True)
            continue
        proc = present.get(kind)  # uniform over the targets alive right now
        if proc is None:
            missed[kind] += 1
            if runner.poll() is not None:  # it exited by itself (should not with --stay): start again
                runner = start_runner(env, len(runner_pids))
                runner_pids.add(runner.pid)
            continue
        try:
            proc.send_signal(signal.SIGKILL)
        except psutil.Error:
            missed[kind] += 1
            continue
        done_kills[kind] += 1
        print(f"{time.strftime('%H:%M:%S')} kill {sum(done_kills.values())}: {kind} pid {proc.pid} "
              f"(runner {runner.pid})", flush=True)
        if kind == "runner":
            runner.wait(30)
            t0 = time.monotonic()
            deadline = t0 + 60
            while runner_children(env.data_dir) and time.monotonic() < deadline:
                time.sleep(0.1)
            cleanup_s.append(time.monotonic() - t0)
            runner = start_runner(env, len(runner_pids))
            runner_pids.add(runner.pid)
            print(f"{time.strftime('%H:%M:%S')} started runner {runner.pid} after {cleanup_s[-1]:.1f} s", flush=True)
    # Let it settle: stop the runner, retry what the kills failed, drain with a final runner.
    deadline = time.monotonic() + 120  # a runner just started must hold the lock before --stop can see it
    while env.run("run", "--status").returncode != 0 and time.monotonic() < deadline:
        time.sleep(0.5)
    stop = env.run("run", "--stop", timeout=300)
    try:
        runner.wait(60)
    except subprocess.TimeoutExpired:
        log = (env.home.parent / f"runner-{len(runner_pids) - 1}.log").read_text(errors="replace")[-3000:]
        raise RuntimeError(f"runner {runner.pid} still running after run --stop ({stop.stdout}); its log:\n{log}") \
            from None
    for (item_id,) in env.query("SELECT id FROM queue_items WHERE state IN ('failed', 'interrupted', 'skipped')"):
        env.run("queue", "retry", str(item_id))
    final = env.run("run", "--profiles-dir", str(env.profiles), timeout=1800)
    runner_pids.add(-1)
    wall = time.monotonic() - started
    return check(env, final, done_kills, missed, cleanup_s, wall, runner_pids, repeats, maintenance)


def check(env: Env, final: subprocess.CompletedProcess, done_kills: Counter, missed: Counter,
          cleanup_s: list[float], wall: float, runner_pids: set[int], repeats: int, maintenance: Maintenance) -> dict:
    items = env.query("SELECT id, state, run_id, attempts FROM queue_items ORDER BY id")
    runs = env.query("SELECT id, queue_item_id, status FROM runs WHERE profile_name != ? ORDER BY id", (OLD,))
    complete_per_item = Counter(item for _, item, status in runs if status == "complete")
    status_of = {rid: status for rid, _, status in runs}
    problems = []
    if final.returncode != 0:
        problems.append(f"the final runner exited {final.returncode}: {final.stdout[-2000:]}")
    not_done = [(i, s) for i, s, _, _ in items if s != "done"]
    if not_done:
        problems.append(f"items not done: {not_done}")
    wrong_run = [(i, r, status_of.get(r)) for i, s, r, _ in items if s == "done" and status_of.get(r) != "complete"]
    if wrong_run:
        problems.append(f"done items whose run is not complete: {wrong_run}")
    dupes = {i: n for i, n in complete_per_item.items() if n != 1}
    missing = [i for i, _, _, _ in items if complete_per_item.get(i, 0) == 0]
    if dupes:
        problems.append(f"items with more than one complete run: {dupes}")
    if missing:
        problems.append(f"items with no complete run: {missing}")
    stuck = [rid for rid, _, status in runs if status == "running"]
    if stuck:
        problems.append(f"runs left running: {stuck}")
    time.sleep(1.0)
    left = [(p.pid, " ".join(p.cmdline())[:100]) for p in runner_children(env.data_dir)]
    left += [(p.pid, "emulator") for p in env.emulators()]
    left += [(p.pid, "watchdog") for p in watchdogs(runner_pids)]
    if left:
        problems.append(f"processes left: {left}")
    conn = sqlite3.connect(f"file:{env.db}?mode=ro", uri=True)
    integrity = conn.execute("PRAGMA integrity_check").fetchone()[0]
    conn.close()
    if integrity != "ok":
        problems.append(f"integrity_check: {integrity}")
    doctor = env.run("doctor")
    if doctor.returncode != 0 or "sound" not in doctor.stdout:
        problems.append(f"doctor: {doctor.stdout}")
    problems += maintenance.check(env)
    statuses = Counter(status for _, _, status in runs)
    return {**maintenance.figures(), "kills": dict(done_kills), "kills_total": sum(done_kills.values()), "no_victim_found": dict(missed),
            "items": len(items), "repeats": repeats, "runs_total": len(runs), "runs_by_status": dict(statuses),
            "retries": sum(max(0, a - 1) for *_, a in items), "runner_starts": len(runner_pids) - 1,
            "cleanup_after_runner_kill_s": {"max": round(max(cleanup_s), 2) if cleanup_s else None,
                                            "median": round(sorted(cleanup_s)[len(cleanup_s) // 2], 2)
                                            if cleanup_s else None},
            "integrity_check": integrity, "processes_left": len(left), "wall_s": round(wall, 1),
            "problems": problems}


def report(figures: dict, kills: int, seed: int) -> str:
    lines = [f"# Chaos bench, {dt.date.today().isoformat()}", "",
             f"`nice -n 10 .venv/bin/python benches/chaos.py --kills {kills} --seed {seed}` on the emulator "
             f"(2 profiles x concurrency 1,4 x {figures['repeats']} repeats = {figures['items']} items).", "",
             "| Figure | Value |", "|---|---|"]
    for key in ("kills_total", "kills", "no_victim_found", "maintenance_killed", "maintenance_finished_first",
                "old_runs", "partial_archives_left", "runner_starts", "items", "runs_total", "runs_by_status",
                "retries", "cleanup_after_runner_kill_s", "integrity_check", "processes_left", "wall_s"):
        lines.append(f"| {key.replace('_', ' ')} | {json.dumps(figures[key]) if isinstance(figures[key], dict) else figures[key]} |")
    verdict = ("PASS: no run lost or duplicated, no process left, store sound, maintenance all-or-nothing"
               if not figures["problems"] else None) or \
        "FAIL:\n" + "\n".join(f"- {p}" for p in figures["problems"])
    return "\n".join(lines + ["", verdict, ""])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=50)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", default=None, help="write the Markdown report here")
    parser.add_argument("--keep", action="store_true", help="keep the temporary home (logs, store) for a look")
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="moe-tui-chaos-")
    env = Env(Path(tmp))
    try:
        figures = run_chaos(args.kills, args.seed, env)
    finally:
        env.cleanup()
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print(f"kept {tmp}")
    text = report(figures, args.kills, args.seed)
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0 if not figures["problems"] else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
