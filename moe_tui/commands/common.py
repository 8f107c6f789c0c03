"""What every subcommand shares: one rule for where profiles are found, and one set of exit codes.

Profiles: `--profiles-dir DIR` on every command that reads profiles. Given, DIR is used as is.
Not given, the first of these that holds every profile the command names (or, naming none, the
first that is a folder): `profiles_dir` in the config file, ./server_profiles, the bundled demo
profiles. So `server start`, `queue add`, `profiles show` and `investigate` find the same profiles.

Exit codes (every command's --help says them): 0 ok; 1 failed (a run, a check, the store);
2 usage (a bad option or value); 4 not found (no such profile, item, run, campaign or file).
`gate` alone also exits 3: the outputs differ (a verdict, not an error).
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from pathlib import Path

# 3 is the gate's "outputs differ" (a verdict a script branches on); not found is 4 everywhere.
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_NOT_FOUND = 0, 1, 2, 4
EXIT_CODES_HELP = ("exit codes: 0 ok; 1 failed (a run, a check, the store); 2 usage (a bad option or value); "
                   "4 not found (no such profile, item, run, campaign or file); gate only: 3 outputs differ")
PROFILES_DIR_HELP = ("folder of profile TOML files (default: the config file's profiles_dir, else ./server_profiles, "
                     "else the bundled demo profiles; the first that holds the named profiles)")


class NotFound(LookupError):
    """A named thing (profile, item, run, file) does not exist; the message says where it looked."""


class _Format(argparse.Action):
    """`--format text|json` into the same yes/no as `--json`: one grammar on every command."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: str | None = None) -> None:
        setattr(namespace, self.dest, values == "json")


def add_format(p: argparse.ArgumentParser, what: str = "machine-readable output") -> None:
    """`--format {text,json}` (the default text) with `--json` as its alias (`args.json`)."""
    p.add_argument("--format", dest="json", choices=("text", "json"), action=_Format, default=False,
                   help=f"json: {what} (default: text)")
    p.add_argument("--json", dest="json", action="store_true", help="the same as --format json")


def add_json_alias(p: argparse.ArgumentParser) -> None:
    """`--json` for a command whose `--format` has more choices than text and json."""
    p.add_argument("--json", dest="format", action="store_const", const="json", help="the same as --format json")


def add_profiles_dir(p: argparse.ArgumentParser, *aliases: str) -> None:
    """`--profiles-dir DIR` (old spellings as `aliases`, kept working)."""
    p.add_argument("--profiles-dir", *aliases, dest="profiles_dir", metavar="DIR", default=None, help=PROFILES_DIR_HELP)


def add_exit_codes(p: argparse.ArgumentParser) -> None:
    """The exit codes at the end of the command's --help (once)."""
    if p.epilog and EXIT_CODES_HELP in p.epilog:
        return
    p.epilog = (p.epilog + "\n\n" if p.epilog else "") + EXIT_CODES_HELP


def profile_folders(value: str | Path | None, *, bundled: bool = True) -> list[Path]:
    """The folders the rule tries, in order."""
    import tomllib

    from moe_tui import paths

    if value:
        return [Path(value).expanduser().resolve()]
    folders: list[Path] = []
    config = paths.config_file()
    if config.exists():
        try:
            configured = tomllib.loads(config.read_text()).get("profiles_dir")
        except (OSError, tomllib.TOMLDecodeError):
            configured = None  # the TUI reports a broken config file
        if isinstance(configured, str) and configured:
            folders.append(Path(configured).expanduser().resolve())
    folders.append(Path("server_profiles").resolve())
    if bundled:
        folders.append(paths.bundled_demo_profiles_dir().resolve())
    return folders


def profile_locations(folders: Iterable[Path]) -> dict[str, Path]:
    """Each profile name the folders hold, with the first folder (in the rule's order) that holds it."""
    from moe_tui.profiles import load_profiles

    where: dict[str, Path] = {}
    for folder in folders:
        if folder.is_dir():
            for profile in load_profiles(folder).profiles:
                where.setdefault(profile.name, folder)
    return where


def unknown_profile(name: str, value: str | Path | None, *, bundled: bool = True) -> str:
    """'no profile named X in A, B; did you mean 'Y' (in B)?': the close names come from every
    folder the rule searched (a sim name's typo must not suggest the real-GPU profile of the first)."""
    import difflib

    folders = profile_folders(value, bundled=bundled)
    where = profile_locations(folders)
    hint = difflib.get_close_matches(name, list(where), n=1, cutoff=0.5)
    extra = (f"; did you mean '{hint[0]}' (in {where[hint[0]]})?" if hint
             else f"; known: {', '.join(sorted(where)) or 'none'}")
    return f"no profile named '{name}' in {', '.join(map(str, folders))}{extra}"


def profiles_dir_for(value: str | Path | None, names: Iterable[str] = (), *, bundled: bool = True) -> Path:
    """The one folder a command uses (see the module docstring). With no folder holding every
    named profile, the first existing one: the command then says which profile is missing there."""
    from moe_tui.profiles import load_profiles

    folders = profile_folders(value, bundled=bundled)
    wanted = set(names)
    existing = [f for f in folders if f.is_dir()]
    if value or not existing:
        return folders[0]
    for folder in existing:
        if not wanted or wanted <= {p.name for p in load_profiles(folder).profiles}:
            return folder
    return existing[0]
