"""`moe-tui server start|stop|status|logs`: profile servers without the TUI.

`start PROFILE` launches the profile's server, waits until it is ready, prints the resolved MoE
backend and whether it differs from the profile (a silent fallback), then stays in the
foreground until Ctrl-C / SIGTERM and stops the server (with `--keep` it returns at once and
leaves the server running; `server stop` stops it later, from any shell). `status` and `stop`
work from the store's record of each start (PID plus the start's environment marker, so a
reused PID is never mistaken for the server). Profiles come from `--profiles DIR` (default
`./server_profiles`), then the bundled demo profiles.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from moe_tui.commands.common import EXIT_NOT_FOUND, add_exit_codes, add_format, add_profiles_dir
from moe_tui.judgement import is_live
from moe_tui.records import ServerStartRow

if TYPE_CHECKING:
    from moe_tui.events import Event
    from moe_tui.profiles import ServerProfile
    from moe_tui.store.db import Store


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str, help_text: str) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help=help_text, description=help_text)
    add_exit_codes(p)
    verbs = p.add_subparsers(dest="server_command", metavar="VERB")

    def profiles_arg(q: argparse.ArgumentParser) -> None:
        add_profiles_dir(q, "--profiles")  # --profiles: the old spelling, kept working

    start = verbs.add_parser("start", help="start a profile's server and wait until it is ready")
    start.add_argument("profile", help="profile name")
    profiles_arg(start)
    start.add_argument("--force", action="store_true",
                       help="start even if a foreign process holds the profile's GPUs")
    start.add_argument("--keep", action="store_true",
                       help="return once ready and leave the server running (stop it with `server stop`)")
    start.add_argument("--timeout", type=float, default=None, metavar="S",
                       help="override the profile's startup_timeout_s")
    start.add_argument("--quiet", action="store_true", help="do not print the server's log lines")

    stop = verbs.add_parser("stop", help="stop a running profile server (any moe-tui process started it)")
    stop.add_argument("profile", nargs="?", help="profile name (omit with --all)")
    stop.add_argument("--all", action="store_true", help="stop every recorded server that is still running")
    stop.add_argument("--grace", type=float, default=None, metavar="S",
                      help="seconds between SIGTERM and SIGKILL (default: 20 for sglang, 3 for sim)")

    status = verbs.add_parser("status", help="recorded servers and whether they still run")
    add_format(status, "JSON")
    status.add_argument("--all", action="store_true", help="every recorded start, not only the latest per profile")

    logs = verbs.add_parser("logs", help="print the log of a profile's latest start")
    logs.add_argument("profile")
    logs.add_argument("-n", "--lines", type=int, default=50, help="last N lines (0: all)")
    logs.add_argument("-f", "--follow", action="store_true", help="keep printing new lines until Ctrl-C")

    p.set_defaults(run=run, server_parser=p)
    return p


def run(args: argparse.Namespace) -> int:
    verb = getattr(args, "server_command", None)
    if verb is None:
        args.server_parser.print_help()
        return 2
    from moe_tui.store.errors import StoreError

    try:
        return {"start": _start, "stop": _stop, "status": _status, "logs": _logs}[verb](args)
    except StoreError as exc:  # a corrupt or unwritable store: name the file, no traceback
        _err(str(exc))
        return 1


def _err(message: str) -> None:
    print(f"moe-tui server: {message}", file=sys.stderr)


def find_profile(name: str, directory: str | None) -> ServerProfile:
    """The named profile by the one lookup rule (`commands.common`): DIR as given, else the
    config's folder, ./server_profiles, then the bundled demo folder. Raises KeyError (not found,
    naming the folders looked in and a close name) or ProfileError (the profile has problems)."""
    from moe_tui.commands.common import profile_folders
    from moe_tui.profiles import ProfileError, load_profiles

    folders = profile_folders(directory)
    known: list[str] = []
    for folder in folders:
        if not folder.is_dir():
            if directory:
                raise ProfileError(str(folder), None, "is not a folder of profiles")
            continue
        found = load_profiles(folder)
        for profile in found.profiles:
            if profile.name == name:
                return profile
        known += [p.name for p in found.profiles]
        bad = [problem for problem in found.problems if f"/{name}." in problem or f"'{name}'" in problem]
        if bad:
            raise ProfileError(bad[0], None, "this profile has problems")
    import difflib

    hint = difflib.get_close_matches(name, known, n=1)
    extra = f"; did you mean '{hint[0]}'?" if hint else f"; known: {', '.join(sorted(set(known))) or 'none'}"
    raise KeyError(f"no profile named '{name}' in {', '.join(map(str, folders))}{extra}")


def _start(args: argparse.Namespace) -> int:
    import asyncio
    import dataclasses

    from moe_tui import servers
    from moe_tui.events import Notice, ServerLogLine, ServerStateChanged
    from moe_tui.profiles import ProfileError
    from moe_tui.store.db import Store
    from moe_tui.trust import terminal_text

    try:
        profile = find_profile(args.profile, args.profiles_dir)
    except (KeyError, ProfileError) as exc:  # not found (4), or found with problems (2)
        _err(str(exc.args[0] if isinstance(exc, KeyError) else exc))
        return EXIT_NOT_FOUND if isinstance(exc, KeyError) else 2
    if args.timeout is not None:
        if args.timeout <= 0:
            _err(f"--timeout must be > 0 seconds, got {args.timeout}")
            return 2
        profile = dataclasses.replace(profile, startup_timeout_s=args.timeout)

    def show(event: Event) -> None:  # log lines and reasons carry the server's text: no escape codes
        if isinstance(event, ServerLogLine):
            if not args.quiet:
                print(terminal_text(f"  | {event.line}"), flush=True)
        elif isinstance(event, ServerStateChanged):
            phase = f" [{event.phase}]" if event.phase and event.state == "starting" else ""
            print(terminal_text(f"{profile.name}: {event.state}{phase}: {event.reason}"), flush=True)
            if event.state == "failed" and args.quiet and event.log_tail:
                print(terminal_text("\n".join(f"  | {line}" for line in event.log_tail)), flush=True)
        elif isinstance(event, Notice):
            print(f"{event.level.upper()}: {event.message}", file=sys.stderr, flush=True)

    servers.install_exit_handlers()
    store = Store.open_default()

    async def main() -> int:
        server = servers.ManagedServer(profile, store=store, keep_running=args.keep)
        server.subscribe(show)
        try:
            await server.start(force=args.force)
            await server.wait_ready()
        except servers.ServerStartError as exc:
            _err(str(exc))
            return 1
        except servers.ServerFailed as exc:
            _err(str(exc))
            return 1
        print(f"ready: {profile.name} at {server.base_url} (pid {server.pid})")
        print(f"profile moe_runner_backend:  {profile.moe_runner_backend}")
        print(f"resolved moe_runner_backend: {server.resolved_backend or 'UNKNOWN'}")
        print(f"sglang version:              {server.sglang_version or 'unknown'}")
        if server.server_info_error:
            print(f"backend check:               UNVERIFIED ({server.server_info_error})")
        else:
            print(f"backend check:               {'MISMATCH (silent fallback)' if server.backend_mismatch else 'ok'}")
        print(f"log:                         {server.log_path}")
        if args.keep:
            print(f"left running; stop it with: moe-tui server stop {profile.name}")
            return 0
        print("serving; Ctrl-C stops the server", flush=True)
        done = asyncio.Event()
        server.subscribe(lambda e: done.set()
                         if isinstance(e, ServerStateChanged) and e.state in ("failed", "stopped") else None)
        try:
            await done.wait()
        finally:
            await server.stop("moe-tui server start ended")
        return 1 if server.state == "failed" else 0

    try:
        return asyncio.run(main())
    except KeyboardInterrupt:
        servers.stop_all_managed("interrupted (Ctrl-C)")
        return 130
    finally:
        store.close()


def _latest_starts(store: Store, all_rows: bool = False) -> list[ServerStartRow]:
    rows = store.server_starts(limit=1000)
    if all_rows:
        return rows
    latest: dict[str, ServerStartRow] = {}
    for row in rows:  # newest first
        latest.setdefault(row["profile_name"], row)
    return sorted(latest.values(), key=lambda r: r["profile_name"])


def _stop(args: argparse.Namespace) -> int:
    import time

    from moe_tui import servers
    from moe_tui.store.db import Store

    if not args.profile and not args.all:
        _err("name a profile, or use --all")
        return 2
    with Store.open_default() as store:
        rows = store.server_starts(profile_name=args.profile, limit=1000) if args.profile else store.server_starts(limit=1000)
        if args.profile and not rows:
            _err(f"no recorded start of profile '{args.profile}' in {store.path}")
            return EXIT_NOT_FOUND
        # Every start still alive, not only the latest: an older one may have been left behind.
        targets = [r for r in rows if servers.recorded_server_alive(r)]
        if not targets:
            print(f"{args.profile or 'no server'}: not running")
            for row in rows:
                if is_live(row["state"]):
                    store.update_server_start(row["id"], state="stopped", stopped_at=time.time(),
                                              reason=row["reason"] + "; found gone by `server stop`")
            return 0
        status = 0
        for row in targets:
            report = servers.stop_recorded_server(row, grace_s=args.grace)
            state = "stopped" if report.clean else row["state"]
            store.update_server_start(row["id"], state=state, stopped_at=time.time(),
                                      reason=f"stopped by `moe-tui server stop`; {report.describe()}")
            print(f"{row['profile_name']} (start {row['id']}, pid {row['pid']}): {report.describe()}")
            if not report.clean:
                status = 1
        return status


def _status(args: argparse.Namespace) -> int:
    import json

    from moe_tui import servers
    from moe_tui.export.records import ServerStatusJson
    from moe_tui.store.db import Store

    with Store.open_for_reading() as store:
        rows = _latest_starts(store, args.all)
    out: list[ServerStatusJson] = []
    for row in rows:
        alive = servers.recorded_server_alive(row)
        state = row["state"]
        if is_live(state) and not alive:
            state = f"gone (recorded {state})"
        elif alive and not is_live(state):
            state = f"{state} but STILL RUNNING"
        out.append({
            "start_id": row["id"], "profile": row["profile_name"], "state": state, "alive": alive,
            "pid": row["pid"], "port": (row["profile"] or {}).get("port"),
            "profile_backend": (row["profile"] or {}).get("moe_runner_backend"),
            "resolved_backend": row["resolved_backend"], "backend_mismatch": row["backend_mismatch"],
            "sglang_version": row["sglang_version"], "reason": row["reason"], "log_path": row["log_path"],
        })
    if args.json:
        print(json.dumps(out, indent=2, sort_keys=True))
        return 0
    if not out:
        print("no server starts recorded")
        return 0
    cols = ["profile", "state", "pid", "port", "backend", "start"]
    table = []
    for o in out:
        backend = o["resolved_backend"] or "-"
        if o["backend_mismatch"]:
            backend += f" (MISMATCH: profile {o['profile_backend']})"
        table.append([o["profile"], o["state"], str(o["pid"] or "-"), str(o["port"] or "-"), backend, str(o["start_id"])])
    widths = [max(len(c), *(len(r[i]) for r in table)) for i, c in enumerate(cols)]
    print("  ".join(c.ljust(w) for c, w in zip(cols, widths)).rstrip())
    for r in table:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip())
    return 0


def _logs(args: argparse.Namespace) -> int:
    import codecs
    import os
    import time

    from moe_tui.store.db import Store

    with Store.open_for_reading() as store:
        rows = store.server_starts(profile_name=args.profile, limit=1)
    if not rows:
        _err(f"no recorded start of profile '{args.profile}'")
        return EXIT_NOT_FOUND
    path = Path(rows[0]["log_path"])
    from moe_tui.servers.logtail import READ_CHUNK, tail_lines
    from moe_tui.trust import open_regular, terminal_text

    try:  # the path is a stored record's: a regular file of ours, never a link, pipe or device
        fd = open_regular(path, follow_links=False, own=True)
    except OSError as exc:
        _err(f"cannot read log {path}: {exc.strerror or exc}")
        return 1
    text = codecs.getincrementaldecoder("utf-8")("replace").decode  # a character split over two reads stays whole
    try:  # the log is the server's text: escape codes are stripped before they reach the terminal
        if args.lines > 0:  # from the end, in bounded memory: never the whole file
            sys.stdout.write(terminal_text("".join(line + "\n" for line in tail_lines(fd, args.lines))))
        else:
            while chunk := os.read(fd, READ_CHUNK):
                sys.stdout.write(terminal_text(text(chunk)))
        sys.stdout.flush()
        if not args.follow:
            return 0
        try:
            while True:
                chunk = os.read(fd, READ_CHUNK)
                if chunk:
                    sys.stdout.write(terminal_text(text(chunk)))
                    sys.stdout.flush()
                else:
                    time.sleep(0.2)
        except KeyboardInterrupt:
            return 0
    finally:
        os.close(fd)
