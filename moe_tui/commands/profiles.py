"""`moe-tui profiles check [DIR]` and `moe-tui profiles show NAME`: catch profile mistakes before a
10-minute model load. Every problem is listed; the exit code is non-zero if there is any.

`profiles check` is the pre-flight doctor of a real box; it starts nothing. Per profile:
- the loader's checks (keys, values, extra_args reaching a profile-owned setting by an alias or an
  abbreviation of SGLang 0.5.23's parser);
- the launch args through SGLang's own parser, in the profile's interpreter (its `python`, or this
  one; without torch the parser is read with torch stubbed, `moe_tui/sglang_stub.py`), and every
  resolved profile-owned value compared with the profile's key; emulator profiles through the
  emulator's parser, which mirrors it;
- the installed SGLang's version against the one moe-tui was checked against
  (`sglang_flags.CHECKED_VERSION`): for another version it says what moe-tui cannot vouch for and
  which flags are new or gone;
- the interpreter runs, a local model path exists, the port is free and the GPUs exist and are
  not held by another process (the start's own pre-flight, `servers.preflight`, with NVML where
  there is a driver; emulator profiles skip the GPU part).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from moe_tui.commands.common import EXIT_NOT_FOUND, add_exit_codes, add_format, add_profiles_dir, profiles_dir_for
from moe_tui.records import FreeForm

if TYPE_CHECKING:
    from moe_tui.export.records import ProfilesCheckJson, ProfilesShowJson
    from moe_tui.profiles import ServerProfile

STUB_FILE = Path(__file__).resolve().parent.parent / "sglang_stub.py"

# Run in the profile's interpreter: parse the launch args with SGLang's own parser, nothing more
# (ServerArgs.__post_init__ probes the GPU and is not wanted here).
# Without torch (a CPU machine with sglang installed --no-deps) the parser is read through
# moe_tui/sglang_stub.py, loaded by file path (argv[1]): the profile's interpreter may lack moe-tui.
_SGLANG_PARSE = """
import argparse, importlib.util, sys
stub_path = sys.argv.pop(1)
try:
    from sglang.srt.server_args import ServerArgs
except Exception as exc:
    if importlib.util.find_spec("torch") is not None or importlib.util.find_spec("sglang") is None:
        print("SGLANG-NOT-IMPORTABLE", type(exc).__name__, exc)
        sys.exit(3)
    for name in [m for m in sys.modules if m == "sglang" or m.startswith("sglang.")]:
        del sys.modules[name]
    spec = importlib.util.spec_from_file_location("moe_tui_sglang_stub", stub_path)
    stub = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(stub)
    stub.install()
    try:
        from sglang.srt.server_args import ServerArgs
    except Exception as exc:
        print("SGLANG-NOT-IMPORTABLE", type(exc).__name__, exc)
        sys.exit(3)
parser = argparse.ArgumentParser(prog="sglang serve")
ServerArgs.add_cli_args(parser)
ns = parser.parse_args(sys.argv[1:])
import json
from importlib.metadata import version
owned = ("model_path", "served_model_name", "tp_size", "ep_size", "moe_runner_backend", "quantization", "host", "port")
flags = sorted(o for a in parser._actions for o in a.option_strings if o.startswith("--"))
print("SGLANG-OK", json.dumps({"version": version("sglang"), "flags": flags,
                              "resolved": {k: getattr(ns, k, None) for k in owned}}))
"""


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str, help_text: str) -> None:
    p = sub.add_parser(name, help=help_text, description=__doc__.split("\n\n")[0])
    actions = p.add_subparsers(dest="profiles_action", metavar="ACTION")
    add_exit_codes(p)
    check = actions.add_parser("check", help="validate every profile in a folder")
    check.add_argument("directory", nargs="?", default=None, help="the same as --profiles-dir (kept working)")
    add_profiles_dir(check)
    check.add_argument("--no-sglang", action="store_true",
                       help="skip SGLang's own parser even where it is importable")
    add_format(check, "folder, profiles, problems, warnings, notes")
    show = actions.add_parser("show", help="print a profile's launch command and settings")
    show.add_argument("name")
    add_profiles_dir(show, "--dir")
    add_format(show, "argv, env (redacted), settings")
    for q in (check, show):
        add_exit_codes(q)
    p.set_defaults(run=run, _parser=p)


def run(args: argparse.Namespace) -> int:
    if args.profiles_action == "check":
        directory = profiles_dir_for(args.profiles_dir or args.directory)
        if not directory.is_dir():
            print(f"error: {directory}: no such folder of profiles", file=sys.stderr)
            return EXIT_NOT_FOUND
        return check(directory, use_sglang=not args.no_sglang, as_json=args.json)
    if args.profiles_action == "show":
        return show(args.name, profiles_dir_for(args.profiles_dir, [args.name]), as_json=args.json,
                    given=args.profiles_dir)
    args._parser.print_help()
    return 2


def check(directory: Path, use_sglang: bool = True, as_json: bool = False) -> int:
    from moe_tui.profiles import load_profiles
    from moe_tui.sglang_flags import CHECKED_VERSION

    loaded = load_profiles(directory)
    problems = list(loaded.problems)
    notes: list[str] = []
    warnings: list[str] = []
    for profile in loaded.profiles:
        where = profile.source
        argv = profile.argv()
        if profile.engine == "sim":
            problem, resolved = _check_with_emulator_parser(argv[3:])
            if problem:
                problems.append(f"{where}: the emulator rejects the launch args: {problem}")
            problems += contradictions(profile, resolved, "the emulator's parser")
        elif use_sglang:
            python = profile.python or sys.executable
            try:
                proc = subprocess.run([python, "-c", _SGLANG_PARSE, str(STUB_FILE), *argv[3:]],
                                      capture_output=True, text=True, timeout=120)
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
                found = json.loads(proc.stdout.strip().split("SGLANG-OK", 1)[1])
                problems += contradictions(profile, found["resolved"], f"SGLang {found['version']}'s parser")
                notes += version_notes(where, found["version"], found["flags"])
                same = found["version"] == CHECKED_VERSION
                notes.append(f"{where}: accepted by SGLang's parser ({found['version']}"
                             + (", the version moe-tui was checked against)" if same else ")"))
        found_problems, found_notes = _box_checks(profile)
        problems += found_problems
        notes += found_notes
        if profile.binds_beyond_loopback:
            warnings.append(f"{where}: key 'host': binds {profile.host}, so the server is reachable "
                            "beyond this machine (the default is 127.0.0.1)")
    if as_json:
        checked: ProfilesCheckJson = {"profiles_dir": str(directory), "profiles": [p.name for p in loaded.profiles],
                                      "problems": problems, "warnings": warnings, "notes": notes}
        print(json.dumps(checked, sort_keys=True))
        return 1 if problems else 0
    for note in notes:
        print(f"note: {note}")
    for warning in warnings:
        print(f"warning: {warning}")
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    print(f"{len(loaded.profiles)} profile(s) loaded from {directory}, {len(problems)} problem(s)")
    return 1 if problems else 0


def _box_checks(profile: ServerProfile) -> tuple[list[str], list[str]]:
    """What the start's own pre-flight would refuse, and the files the launch needs: found now,
    without starting anything."""
    import os

    from moe_tui.servers import ServerStartError, no_gpu_view, nvml_gpu_view
    from moe_tui.servers.preflight import preflight

    where = profile.source
    problems: list[str] = []
    notes: list[str] = []
    model = profile.model_path
    if profile.engine == "sglang" and not os.path.isdir(model):
        notes.append(f"{where}: key 'model_path': {model} is not a local folder here; SGLang will look it up "
                     "as a hub id (offline boxes fail at load)")
    probe = nvml_gpu_view if profile.engine == "sglang" else no_gpu_view
    try:
        for warning in preflight(profile, [], probe):
            if not (profile.binds_beyond_loopback and " binds " in warning):
                notes.append(f"{where}: {warning}")  # (that one is the check's own warning below)
    except ServerStartError as exc:
        problems.append(f"{where}: a start now would be refused: {exc}")
    return problems, notes


def _check_with_emulator_parser(args: list[str]) -> tuple[str | None, FreeForm]:
    """(the emulator parser's complaint or None, the values it resolved)."""
    try:
        from moe_tui.sim.args import build_parser
    except ModuleNotFoundError:
        return None, {}
    parser = build_parser()
    errors: list[str] = []
    def fail(message: str) -> NoReturn:
        errors.append(message)
        raise _ParseFailed

    parser.error = fail  # type: ignore[method-assign]  # argparse has no other hook for a usage error
    try:
        ns = parser.parse_args(args)
    except (_ParseFailed, SystemExit):
        return (errors[0] if errors else "rejected"), {}
    return None, vars(ns)


def contradictions(profile: ServerProfile, resolved: FreeForm, by: str) -> list[str]:
    """Each profile-owned setting the parser resolved to another value than the profile's key,
    naming the extra_args spelling that got there and SGLang's own name for it."""
    from moe_tui.sglang_flags import PROFILE_OWNED, owned_reached

    out = []
    for dest, key in PROFILE_OWNED.items():
        want = getattr(profile, key)
        if dest not in resolved or want in ("", None):
            continue
        got = resolved[dest]
        if str(got) != str(want):
            spelled = [f"{r.spelling} (SGLang's {r.canonical})" for k, r in owned_reached(profile.extra_args)
                       if k == key]
            how = f"extra_args {', '.join(spelled)}" if spelled else "the launch args"
            out.append(f"{profile.source}: {by} resolves {dest} = {got!r} through {how}, "
                       f"but the profile's key '{key}' says {want!r}")
    return out


def version_notes(where: str, version: str, flags: list[str]) -> list[str]:
    """What moe-tui cannot vouch for when the installed SGLang is not the one it was checked against."""
    from moe_tui.sglang_flags import CHECKED_VERSION, flag_table

    if version == CHECKED_VERSION:
        return []
    known = set(flag_table())
    new, gone = sorted(set(flags) - known), sorted(known - set(flags))
    return [f"{where}: SGLang {version} is installed; moe-tui was checked against {CHECKED_VERSION}. Unknown for "
            f"{version}: its /server_info keys (each unknown key counts as a setting), log phase lines, metric "
            f"names and MoE backend list; flags new since {CHECKED_VERSION}: {len(new)} ({', '.join(new[:6])}"
            f"{', ...' if len(new) > 6 else ''}), gone: {len(gone)} ({', '.join(gone[:6])}"
            f"{', ...' if len(gone) > 6 else ''})"]


class _ParseFailed(Exception):
    pass


def show(name: str, directory: Path, as_json: bool = False, given: str | None = None) -> int:
    from moe_tui.commands.common import unknown_profile
    from moe_tui.profiles import UnknownProfileError, load_profiles

    loaded = load_profiles(directory)
    try:
        profile = loaded.by_name(name)
    except UnknownProfileError as exc:
        if "did you mean" in str(exc) or "known:" in str(exc):  # not found: close names from every folder
            print(f"error: {unknown_profile(name, given)}", file=sys.stderr)
        else:
            print(f"error: {directory}: {exc}", file=sys.stderr)
        return EXIT_NOT_FOUND
    if as_json:
        shown: ProfilesShowJson = {"name": profile.name, "profiles_dir": str(directory), "argv": profile.argv(),
                                   "env": profile.redacted_env(), "settings": profile.snapshot()}
        print(json.dumps(shown, sort_keys=True))
        return 0
    print("argv:", json.dumps(profile.argv()))
    print("env: ", json.dumps(profile.redacted_env(), sort_keys=True))
    print(json.dumps(profile.snapshot(), indent=2, sort_keys=True))
    return 0
