"""`moe-tui run`: work the queue headless, or as a detached background runner.

    moe-tui run [--profiles-dir DIR] [--until-empty | --stay] [--no-retry-interrupted]
    moe-tui run --detach [--stay | --until-empty] [--profiles-dir DIR]   start a background runner
    moe-tui run ... [--request-timeout S] [--stall-timeout S]           per-request limits of every run
    moe-tui run --status                                                print the runner's snapshot
    moe-tui run --stop                                                  stop the background runner

In the foreground it prints one line per server state change, run start and result (output tok/s
and flags), notices, and benchmark progress every few seconds; it exits 0 when the queue is
drained (`--until-empty`, the default in the foreground). Ctrl-C or SIGTERM stops the running
benchmark, marks its item interrupted, stops the servers and exits. Items interrupted by an
earlier stop are requeued at start unless `--no-retry-interrupted`. `--detach` starts the same
runner in a new session (log in the data dir's logs/), staying up for new items unless
`--until-empty`; attach with the TUI or `moe-tui run --status`.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from typing import TYPE_CHECKING, Any, TextIO

from moe_tui.commands.common import add_format, add_profiles_dir, profiles_dir_for
from moe_tui.records import RunnerStatusJson

if TYPE_CHECKING:
    from pathlib import Path

    from moe_tui.run.batch import BatchFactory

PROGRESS_EVERY_S = 2.0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str, help_text: str) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help=help_text, description=help_text)
    add_profiles_dir(p)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--until-empty", action="store_true", default=None,
                      help="exit when no pending item is left (default in the foreground)")
    mode.add_argument("--stay", action="store_true",
                      help="keep running and wait for new items (default with --detach)")
    p.add_argument("--detach", action="store_true", help="run in the background (new session, log file)")
    p.add_argument("--no-retry-interrupted", action="store_true",
                   help="leave items interrupted by an earlier stop as they are")
    p.add_argument("--request-timeout", type=float, default=None, metavar="S",
                   help="seconds one request may take in every run (default: the client's, 600 s or more)")
    p.add_argument("--stall-timeout", type=float, default=None, metavar="S",
                   help="seconds a response may stay silent before its request fails as 'timeout' "
                        "(default: the client's, 120 s); frees the queue from a hung server")
    p.add_argument("--status", action="store_true",
                   help="print the running runner's state in words and exit (--json: its whole snapshot)")
    add_format(p, "with --status: the runner's snapshot as JSON")
    p.add_argument("--stop", action="store_true", help="stop the running runner (its servers too) and exit")
    p.add_argument("--executor", choices=("local", "slurm"), default="local",
                   help="where items run: this machine (default) or one Slurm job each (moe_tui.executors)")
    from moe_tui.commands.run_slurm import add_arguments

    add_arguments(p)
    p.set_defaults(run=run)
    return p


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from moe_tui import paths

    data_dir = paths.data_dir()
    if args.status:
        return _status(data_dir, as_json=args.json)
    if args.stop:
        return _stop(data_dir)
    import math

    for flag, value in (("--request-timeout", args.request_timeout), ("--stall-timeout", args.stall_timeout)):
        if value is not None and not (value > 0 and math.isfinite(value)):
            print(f"moe-tui run: {flag} must be > 0 seconds, got {value}", file=sys.stderr)
            return 2
    profiles_dir = Path(profiles_dir_for(args.profiles_dir, _queued_profiles()))
    from moe_tui.profiles import load_profiles

    duplicates = load_profiles(profiles_dir)
    if duplicates.duplicates:
        for name in sorted(duplicates.duplicates):
            print(f"moe-tui run: {duplicates.duplicate_message(name)}", file=sys.stderr)
        return 2
    if args.detach:
        return _detach(args, data_dir, profiles_dir)
    until_empty = not args.stay
    if args.executor == "slurm":  # the dispatcher hosted by the runner (`run.batch`): the TUI attaches to it
        from moe_tui.commands.run_slurm import slurm_batch

        batch = slurm_batch(args, data_dir, profiles_dir)
        if isinstance(batch, int):
            return batch
        return _foreground(data_dir, profiles_dir, until_empty, not args.no_retry_interrupted, batch=batch[0],
                           what=batch[1])
    return _foreground(data_dir, profiles_dir, until_empty, not args.no_retry_interrupted,
                       request_timeout=args.request_timeout, stall_timeout=args.stall_timeout)


def _foreground(data_dir: Path, profiles_dir: Path, until_empty: bool, retry_interrupted: bool, *,
                request_timeout: float | None = None, stall_timeout: float | None = None,
                batch: BatchFactory | None = None, what: str = "runner") -> int:
    """The runner in this process until the queue drains or a signal: items run here, or as batch jobs
    (`batch`, `run.batch`: the same control socket, so the TUI attaches to either)."""
    import asyncio

    from moe_tui.run.controller import Controller
    from moe_tui.run.rendezvous import RunnerBusy, RunnerUnavailable
    from moe_tui.run.runner import serve
    from moe_tui.servers import install_exit_handlers
    from moe_tui.store.db import Store
    from moe_tui.store.errors import StoreError

    install_exit_handlers(signals=())  # atexit only: serve() handles the signals itself
    printer = ProgressPrinter()
    try:
        store = Store.open_default(writer=True)  # the runner's open checks after an unclean stop
    except StoreError as exc:
        print(f"moe-tui run: {exc}", file=sys.stderr)
        return 1
    try:
        controller = Controller(store, profiles_dir, data_dir=data_dir, request_timeout_s=request_timeout,
                                stall_timeout_s=stall_timeout, batch=batch)
        limits = "".join(f"; {name} {value:g} s" for name, value in (("request timeout", request_timeout),
                                                                     ("stall timeout", stall_timeout))
                         if value is not None)
        printer.line(f"{what} pid {__import__('os').getpid()} on {data_dir}; profiles from {profiles_dir}; "
                     f"{'until the queue is empty' if until_empty else 'waiting for new items'}{limits}")
        # What the imports and the set-up made lives as long as the runner: out of every collection from
        # now on (the one between items among them: 20 ms each over ~65k objects, 1 ms after).
        gc.freeze()
        try:
            rc = asyncio.run(serve(controller, data_dir, until_empty=until_empty,
                                   retry_interrupted=retry_interrupted, on_event=printer))
        except (RunnerBusy, RunnerUnavailable, StoreError, OSError) as exc:
            print(f"moe-tui run: {exc}", file=sys.stderr)
            return 1
        session = ", ".join(f"{k} {v}" for k, v in controller.snapshot_session().items() if v) or "nothing run"
        try:
            queue = controller.queue.summary()
            counts = queue["counts"]
            state = (f"pending {counts['pending']}, running {counts['running']}, failed {counts['failed']}, "
                     f"interrupted {counts['interrupted']}" + (" (paused)" if queue["paused"] else ""))
        except StoreError as exc:
            state = f"unknown: {exc}"
        printer.line(f"finished: {session}; queue now: {state}")
        return rc
    finally:
        store.close()


def _detach(args: argparse.Namespace, data_dir: Path, profiles_dir: Path) -> int:
    from moe_tui import paths
    from moe_tui.run.client import spawn_detached
    from moe_tui.run.rendezvous import RunnerBusy, lock_holder_pid, runner_is_running

    if runner_is_running(data_dir):
        print(f"moe-tui run: {RunnerBusy(data_dir, lock_holder_pid(data_dir))}", file=sys.stderr)
        return 1
    argv = [sys.executable, "-m", "moe_tui", "run", "--profiles-dir", str(profiles_dir),
            "--until-empty" if args.until_empty else "--stay"]
    if args.no_retry_interrupted:
        argv.append("--no-retry-interrupted")
    if args.request_timeout is not None:
        argv += ["--request-timeout", repr(args.request_timeout)]
    if args.stall_timeout is not None:
        argv += ["--stall-timeout", repr(args.stall_timeout)]
    if args.executor != "local":  # the batch dispatcher, detached like the local runner (`run.batch`)
        from moe_tui.commands.run_slurm import forwarded

        argv += ["--executor", args.executor, *forwarded(args)]
    log_path = paths.logs_dir() / f"runner-{time.strftime('%Y%m%d-%H%M%S')}.log"
    try:
        pid = spawn_detached(argv, data_dir, log_path)
    except RuntimeError as exc:
        print(f"moe-tui run --detach: {exc}", file=sys.stderr)
        return 1
    print(f"runner started: pid {pid}, log {log_path}")
    from moe_tui.control.launch import attach_command, is_demo_home, moe_tui_command

    demo = is_demo_home() and profiles_dir == paths.bundled_demo_profiles_dir().resolve()
    print(f"data dir {data_dir}: attach with `{attach_command(profiles_dir, demo=demo)}`, "
          f"watch with `{moe_tui_command('run', '--status')}`, stop with `{moe_tui_command('run', '--stop')}`")
    return 0


def _queued_profiles() -> list[str]:
    """The profiles of the items a runner will work (pending, interrupted, running): the folder that
    holds them all is the one to run on (a demo's queue is on the bundled simulated profiles, even
    when ./server_profiles holds real ones). Nothing stored yet: none."""
    from moe_tui import paths
    from moe_tui.store.db import Store
    from moe_tui.store.errors import StoreError
    from moe_tui.store.queue import RunQueue

    try:
        path = paths.store_path(writable=False)
        if not path.exists():
            return []
        with Store(path) as store:
            items = RunQueue(store).items(states=("pending", "interrupted", "running"))
    except (paths.DataDirError, StoreError, OSError):
        return []
    return sorted({item.profile_name for item in items})


def _status(data_dir: Path, as_json: bool = False) -> int:
    from moe_tui.run.client import RunnerNotAnswering, RunnerOpError, call_runner_sync
    from moe_tui.run.rendezvous import RunnerUnavailable

    try:
        snap = call_runner_sync("snapshot", data_dir, timeout=STATUS_WAIT_S)
    except RunnerNotAnswering as exc:
        print(f"moe-tui run --status: {exc}", file=sys.stderr)
        return 1
    except (RunnerUnavailable, RunnerOpError) as exc:
        from moe_tui.control.launch import moe_tui_command
        from moe_tui.run.rendezvous import runner_is_running

        # Nothing answering is the usual case, said in words, not as an errno; a socket folder or a
        # runner of another user is a refusal, and its reason is said as it is.
        absent = "no moe-tui runner answers on "
        refused = not str(exc).startswith(absent)
        if runner_is_running(data_dir) is None and not refused:
            where = str(exc)[len(absent):].rsplit(": ", 1)[0]  # the socket asked, without the errno
            print(f"moe-tui run --status: no runner works {data_dir} (nothing answers on {where}; start one "
                  f"with `{moe_tui_command('run', '--detach')}`)", file=sys.stderr)
        elif refused:
            print(f"moe-tui run --status: {exc}", file=sys.stderr)
        else:
            print(f"moe-tui run --status: the runner of {data_dir} does not answer: {exc}", file=sys.stderr)
        return 1
    if as_json:
        print(json.dumps(snap, indent=2, sort_keys=True, default=str))
    else:
        print(status_text(snap))
    return 0


def status_text(snap: RunnerStatusJson) -> str:
    """The runner's snapshot as a person reads it: who, doing what, the queue, the servers."""
    queue = snap.get("queue") or {}
    counts = ", ".join(f"{k} {v}" for k, v in (queue.get("counts") or {}).items() if v) or "empty"
    lines = [f"runner pid {snap.get('pid', '?')} on {snap.get('data_dir', '?')}",
             f"doing:   {snap.get('activity') or 'idle'}" + (f" ({snap['detail']})" if snap.get("detail") else ""),
             f"queue:   {'PAUSED' if queue.get('paused') else 'active'}: {counts}"]
    item = snap.get("current_item")
    if item:
        spec = item.get("spec") or {}
        lines.append(f"item:    #{item.get('id')} {item.get('profile_name', '?')} conc {spec.get('max_concurrency', '?')}"
                     + (f", run {snap['current_run_id']}" if snap.get("current_run_id") else ""))
    progress = snap.get("last_progress") or {}
    if item and progress:
        lines.append(f"run:     {progress.get('completed', '?')}/{progress.get('total', '?')} requests, "
                     f"{progress.get('errors', 0)} errors")
    finished = snap.get("last_finished") or {}
    if finished:
        tok = finished.get("output_throughput")
        lines.append(f"last:    run {finished.get('run_id')} {finished.get('status')} ({finished.get('profile')}"
                     + (f", {tok:.1f} tok/s)" if isinstance(tok, int | float) else ")"))
    servers = snap.get("servers") or []
    lines.append(f"servers: {len(servers) or 'none'}")
    for server in servers:
        lines.append(f"  {server['profile']:<32} {server['state']:<9} port {server['port'] or '?'}")
    return "\n".join(lines)


# How long `run --stop` waits for the runner's answer on its socket, then for it to exit after
# the shutdown op or SIGTERM (its own watchdog exits hard STOP_DEADLINE_S after a signal), before
# SIGKILL. Then whatever a killed runner left (servers, load generator) is stopped too.
STOP_ASK_S = 4.0
STOP_WAIT_S = 100.0
UNRESPONSIVE_TERM_S = 2.0  # `run --stop` on a runner that does not answer: within 10 s in all
STOP_WAIT_ENV = "MOE_TUI_STOP_WAIT_S"  # tests shorten the wait before SIGKILL
STATUS_WAIT_S = 15.0


def _stop(data_dir: Path, wait_s: float | None = None) -> int:
    """Stop the runner: the shutdown op; if it does not answer, SIGTERM; if it does not exit, SIGKILL
    and stop what it left. Always ends with a clear line, never a traceback."""
    import os
    import signal

    if wait_s is None:
        try:
            wait_s = float(os.environ.get(STOP_WAIT_ENV) or STOP_WAIT_S)
        except ValueError:
            wait_s = STOP_WAIT_S

    from moe_tui.run.client import RunnerOpError, call_runner_sync
    from moe_tui.run.rendezvous import RunnerUnavailable, runner_is_running

    pid = runner_is_running(data_dir)
    if not pid:
        print("moe-tui run --stop: no runner is running")
        return 0
    try:
        call_runner_sync("shutdown", data_dir, timeout=STOP_ASK_S, reason="moe-tui run --stop")
    except (RunnerUnavailable, RunnerOpError) as exc:
        print(f"moe-tui run --stop: runner {pid} did not take the stop request ({exc}); sending SIGTERM",
              file=sys.stderr, flush=True)
        _signal(pid, signal.SIGTERM)
        # A runner that cannot answer its socket cannot stop cleanly either (frozen, or its loop
        # blocked): it gets a moment for the signal, not the clean shutdown's wait (106 s before).
        wait_s = 0.0 if _frozen(pid) else min(wait_s, UNRESPONSIVE_TERM_S)
    if _wait_gone(data_dir, wait_s):
        print(f"runner {pid} stopped")
        return 0
    print(f"moe-tui run --stop: runner {pid} still running after {wait_s:g} s; sending SIGKILL",
          file=sys.stderr, flush=True)
    _signal(pid, signal.SIGKILL)
    if not _wait_gone(data_dir, 10.0):
        print(f"moe-tui run --stop: runner {pid} survived SIGKILL (stuck in the kernel?)", file=sys.stderr)
        return 1
    from moe_tui.run.orphans import stop_orphans

    for line in stop_orphans(data_dir):
        print(line)
    print(f"runner {pid} killed; what it had started is stopped; its running item is recovered at the next start")
    return 0


def _signal(pid: int, sig: int) -> None:
    import os

    if pid > 0:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _frozen(pid: int) -> bool:
    """The process is stopped (SIGSTOP, a debugger): no signal but SIGKILL acts on it."""
    import psutil

    try:
        return bool(psutil.Process(pid).status() in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP))
    except psutil.Error:
        return False


def _wait_gone(data_dir: Path, wait_s: float) -> bool:
    from moe_tui.run.rendezvous import runner_is_running

    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if not runner_is_running(data_dir):
            return True
        time.sleep(0.2)
    return not runner_is_running(data_dir)


class ProgressPrinter:
    """Turns controller events into the headless progress lines."""

    def __init__(self, out: TextIO | None = None) -> None:
        self.out: TextIO | None = out or sys.stdout
        self._last_progress = 0.0

    def line(self, text: str) -> None:
        if self.out is None:
            return
        from moe_tui.trust import terminal_text

        try:  # server log tails, reasons and notices carry untrusted text: no escape codes
            print(f"{time.strftime('%H:%M:%S')} {terminal_text(text)}", file=self.out, flush=True)
        except (OSError, ValueError):
            # The terminal went away (SIGHUP is ignored so the campaign goes on): stop printing;
            # the store keeps the record.
            self.out = None

    def __call__(self, event: Any) -> None:  # Any: dispatched on the class name (isinstance would type it)
        kind = type(event).__name__
        if kind == "ServerStateChanged":
            extra = f" backend={event.resolved_backend}" if event.resolved_backend else ""
            extra += " BACKEND MISMATCH" if event.backend_mismatch else ""
            self.line(f"server {event.profile}: {event.state}{extra} - {event.reason}")
            if event.state == "failed" and event.log_tail:
                for tail_line in event.log_tail[-8:]:
                    self.line(f"  | {tail_line}")
        elif kind == "ControllerStatus":
            self.line(f"[{event.activity}] {event.detail}".rstrip())
        elif kind == "RunStarted":
            self.line(f"run {event.run_id} started: item #{event.queue_item_id} {event.profile} "
                      f"spec {event.fingerprint[:12]} ({event.spec_summary})")
        elif kind == "RunFinished":
            tok = "n/a" if event.output_throughput is None else f"{event.output_throughput:.1f}"
            flags = ", ".join(event.flags) or "none"
            err = f" error: {event.error.splitlines()[0][:120]}" if event.error else ""
            self.line(f"run {event.run_id} {event.status}: {event.profile} output {tok} tok/s; "
                      f"flags: {flags}{err}")
        elif kind == "Notice":
            self.line(f"{event.level}: {event.message}")
        elif kind == "BenchProgress":
            now = time.monotonic()
            if now - self._last_progress >= PROGRESS_EVERY_S:
                self._last_progress = now
                self.line(f"  {event.phase}: {event.completed}/{event.total} done, {event.errors} errors, "
                          f"{event.output_tok_s:.0f} tok/s, {event.elapsed_s:.1f} s")
