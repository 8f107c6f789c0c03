"""`moe-tui profiles check [DIR]` and `moe-tui profiles show NAME`: catch profile mistakes before a
10-minute model load. Every problem is listed; the exit code is non-zero if there is any.

Where SGLang is importable (in the profile's `python`, or this one), the profile's arguments also
go through SGLang's own server-args parser, so a flag typo or a flag the installed SGLang no longer
accepts is caught here. Emulator profiles go through the emulator's parser, which mirrors it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

# Run in the profile's interpreter: parse the launch args with SGLang's own parser, nothing more
# (ServerArgs.__post_init__ probes the GPU and is not wanted here).
_SGLANG_PARSE = """
import argparse, sys
try:
    from sglang.srt.server_args import ServerArgs
except Exception as exc:  # not installed here
    print("SGLANG-NOT-IMPORTABLE", type(exc).__name__, exc)
    sys.exit(3)
parser = argparse.ArgumentParser(prog="sglang serve")
ServerArgs.add_cli_args(parser)
parser.parse_args(sys.argv[1:])
import sglang
print("SGLANG-OK", getattr(sglang, "__version__", "?"))
"""


def add_parser(sub: argparse._SubParsersAction, name: str, help_text: str) -> None:
    p = sub.add_parser(name, help=help_text, description=__doc__.split("\n\n")[0])
    actions = p.add_subparsers(dest="profiles_action", metavar="ACTION")
    check = actions.add_parser("check", help="validate every profile in a folder")
    check.add_argument("directory", nargs="?", default="server_profiles",
                       help="folder of *.toml profiles (default: ./server_profiles)")
    check.add_argument("--no-sglang", action="store_true",
                       help="skip SGLang's own parser even where it is importable")
    show = actions.add_parser("show", help="print a profile's launch command and settings")
    show.add_argument("name")
    show.add_argument("--dir", default="server_profiles")
    p.set_defaults(run=run, _parser=p)


def run(args: argparse.Namespace) -> int:
    if args.profiles_action == "check":
        return check(Path(args.directory), use_sglang=not args.no_sglang)
    if args.profiles_action == "show":
        return show(args.name, Path(args.dir))
    args._parser.print_help()
    return 2


def check(directory: Path, use_sglang: bool = True) -> int:
    from moe_tui.profiles import load_profiles

    loaded = load_profiles(directory)
    problems = list(loaded.problems)
    notes: list[str] = []
    warnings: list[str] = []
    for profile in loaded.profiles:
        where = profile.source
        argv = profile.argv()
        if profile.engine == "sim":
            problem = _check_with_emulator_parser(argv[3:])
            if problem:
                problems.append(f"{where}: the emulator rejects the launch args: {problem}")
        elif use_sglang:
            python = profile.python or sys.executable
            try:
                proc = subprocess.run([python, "-c", _SGLANG_PARSE, *argv[3:]], capture_output=True,
                                      text=True, timeout=120)
            except (OSError, subprocess.TimeoutExpired) as exc:
                problems.append(f"{where}: key 'python': cannot run {python}: {exc}")
                continue
            if proc.returncode == 3:
                notes.append(f"{where}: SGLang is not importable by {python}; flags not checked "
                             "against SGLang's own parser (install the 'sglang' extra on the GPU box)")
            elif proc.returncode != 0:
                detail = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}"
                problems.append(f"{where}: SGLang's parser rejects the launch args: {detail}")
            else:
                notes.append(f"{where}: accepted by SGLang's parser ({proc.stdout.strip().split()[-1]})")
        if profile.binds_beyond_loopback:
            warnings.append(f"{where}: key 'host': binds {profile.host}, so the server is reachable "
                            "beyond this machine (the default is 127.0.0.1)")
    for note in notes:
        print(f"note: {note}")
    for warning in warnings:
        print(f"warning: {warning}")
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    print(f"{len(loaded.profiles)} profile(s) loaded from {directory}, {len(problems)} problem(s)")
    return 1 if problems else 0


def _check_with_emulator_parser(args: list[str]) -> str | None:
    try:
        from moe_tui.sim.args import build_parser
    except ModuleNotFoundError:
        return None
    parser = build_parser()
    errors: list[str] = []
    parser.error = lambda message: (errors.append(message), (_ for _ in ()).throw(_ParseFailed()))  # type: ignore[assignment]
    try:
        parser.parse_args(args)
    except (_ParseFailed, SystemExit):
        return errors[0] if errors else "rejected"
    return None


class _ParseFailed(Exception):
    pass


def show(name: str, directory: Path) -> int:
    from moe_tui.profiles import UnknownProfileError, load_profiles

    loaded = load_profiles(directory)
    try:
        profile = loaded.by_name(name)
    except UnknownProfileError as exc:
        print(f"error: {directory}: {exc}", file=sys.stderr)
        return 1
    print("argv:", json.dumps(profile.argv()))
    print("env: ", json.dumps(profile.redacted_env(), sort_keys=True))
    print(json.dumps(profile.snapshot(), indent=2, sort_keys=True))
    return 0
