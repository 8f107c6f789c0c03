"""Run SGLang 0.5.23's real argument parser (torch stubbed) over every shipped profile.

    .venv-sglang-client/bin/python tools/sglang_parser/check.py [--write] [PROFILE_DIR ...]

For each profile in server_profiles/ (and its demo/ folder, and any folder given) the launch
argv moe-tui builds goes through `ServerArgs.add_cli_args`'s parser of the installed SGLang: a
flag it rejects (unknown, ambiguous, bad value) fails, and so does any resolved setting the
profile owns (model path, TP/EP size, MoE runner backend, quantization, host, port, served name)
whose parsed value is not the profile's, e.g. extra_args `--tensor-parallel-size 2` on a TP 8
profile. The check also compares moe_tui/sglang_flags_0_5_23.json (the flag table moe-tui uses
without SGLang) with the parser's option strings; `--write` rewrites that table from the parser.

Exit 0 when everything agrees, 1 on any problem, 3 when sglang cannot be imported here.
Needs the light client env (`make sglang-client`): sglang installed --no-deps, no torch.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from moe_tui import sglang_flags  # noqa: E402
from moe_tui import sglang_stub as stub_torch  # noqa: E402
from moe_tui.profiles import ProfileError, load_profile  # noqa: E402


class _Rejected(Exception):
    pass


def parse(parser, argv: list[str]):  # type: ignore[no-untyped-def]
    """SGLang's parse of `argv`, raising _Rejected with argparse's own message instead of exiting."""
    def error(message: str) -> None:
        raise _Rejected(message)
    parser.error = error
    return parser.parse_args(argv)


def table_of(parser) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {option: action.dest for action in parser._actions for option in action.option_strings
            if option.startswith("--")}


def expected_values(profile) -> dict[str, object]:  # type: ignore[no-untyped-def]
    want: dict[str, object] = {"model_path": profile.model_path, "tp_size": profile.tp_size,
                               "ep_size": profile.ep_size, "moe_runner_backend": profile.moe_runner_backend,
                               "host": profile.host, "port": profile.port}
    if profile.quantization:
        want["quantization"] = profile.quantization
    if profile.served_model_name:
        want["served_model_name"] = profile.served_model_name
    return want


def check_profile(parser, profile) -> list[str]:  # type: ignore[no-untyped-def]
    """Problems of one profile under SGLang's own parser (empty when it launches as described)."""
    argv = profile.argv()[3:]
    if profile.engine == "sim":  # the emulator's own --sim-* flags are not SGLang's
        argv = argv[:len(argv) - len(_sim_tail(profile))]
    try:
        ns = parse(parser, argv)
    except _Rejected as exc:
        return [f"{profile.source}: SGLang's parser rejects the launch args: {exc}"]
    problems = []
    for dest, want in expected_values(profile).items():
        got = getattr(ns, dest, None)
        if str(got) != str(want):
            spellings = [f"{r.spelling} (SGLang's {r.canonical})"
                         for key, r in sglang_flags.owned_reached(profile.extra_args) if key == dest]
            how = f"extra_args {' '.join(spellings)}" if spellings else "the launch args"
            problems.append(f"{profile.source}: {how} make SGLang run {dest} = {got!r}, but the profile's key "
                            f"'{dest}' says {want!r}")
    return problems


def _sim_tail(profile) -> list[str]:  # type: ignore[no-untyped-def]
    from moe_tui.profiles import sim_flags
    return sim_flags(profile.sim)


def main(argv: list[str]) -> int:
    started = time.monotonic()
    write = "--write" in argv
    dirs = [Path(a) for a in argv if not a.startswith("--")] or [ROOT / "server_profiles",
                                                                 ROOT / "server_profiles" / "demo"]
    try:
        parser, version = stub_torch.sglang_parser()
    except ImportError as exc:
        print(f"sglang parser check: cannot import sglang here ({exc}); run `make sglang-client`")
        return 3
    problems: list[str] = []
    if version != sglang_flags.CHECKED_VERSION:
        problems.append(f"installed sglang is {version}, moe-tui was checked against {sglang_flags.CHECKED_VERSION}")
    table = table_of(parser)
    if write:
        sglang_flags.FLAGS_FILE.write_text(json.dumps({"version": version, "flags": table}, indent=0) + "\n")
        sglang_flags.flag_table.cache_clear()
    elif table != sglang_flags.flag_table():
        ours = sglang_flags.flag_table()
        gone, new = sorted(set(ours) - set(table)), sorted(set(table) - set(ours))
        problems.append(f"{sglang_flags.FLAGS_FILE.name} differs from sglang {version}'s parser "
                        f"(missing there: {gone[:5]}, new: {new[:5]}); rerun with --write")
    count = 0
    for folder in dirs:
        for path in sorted(folder.glob("*.toml")):
            try:
                profile = load_profile(path)
            except ProfileError as exc:
                problems.append(str(exc))
                continue
            count += 1
            problems += check_profile(parser, profile)
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    print(f"sglang {version} parser: {count} profile(s), {len(table)} flags, {len(problems)} problem(s), "
          f"{time.monotonic() - started:.1f} s")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
