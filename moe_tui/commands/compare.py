"""`moe-tui compare BASELINE CANDIDATE`: print the comparison grid of two profiles from the store.

Text (an aligned table, every cell's state in words), JSON (`{"control": {...}, "cells": [...]}`,
the machine contract), Markdown or CSV, to stdout or to a file (`-o`, written atomically).
`--vary FIELD[,FIELD]` names what the comparison varies (default moe_runner_backend): any other
difference confounds. `--include-flagged` averages flagged runs in (their cells then say
unreliable); `--min-effect PCT` sets the minimum practical effect; `--accept-uncontrolled` shows
verdicts the control did not back, labelled "uncontrolled". Exit 0 on success, 2 when a
profile has no runs or an option is invalid (the message says which), 1 when the store cannot be read.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import TYPE_CHECKING, Any

from moe_tui.commands.common import add_json_alias, add_profiles_dir

if TYPE_CHECKING:
    from moe_tui.compare.model import CompareSettings

FORMATS = ("text", "json", "markdown", "csv")


def add_pair_arguments(p: argparse.ArgumentParser) -> None:
    """BASELINE CANDIDATE [--fingerprint FP] [--vary ...] [--include-flagged] [--min-effect]: compare and export."""
    from moe_tui import judgement as J

    p.add_argument("baseline", metavar="BASELINE", help="profile name of the baseline column")
    p.add_argument("candidate", metavar="CANDIDATE", help="profile name of the candidate column")
    p.add_argument("--fingerprint", metavar="FP", default=None,
                   help="only the concurrencies with runs of this spec fingerprint (6+ leading characters)")
    p.add_argument("--vary", metavar="FIELD[,FIELD]", default=",".join(sorted(J.DEFAULT_VARY)),
                   help="the field(s) this comparison varies; every other difference confounds "
                        "(default: %(default)s)")
    p.add_argument("--include-flagged", action="store_true",
                   help="average flagged runs in too (their cells are then unreliable, never a verdict)")
    p.add_argument("--min-effect", metavar="PCT", type=float, default=J.MIN_EFFECT_PCT,
                   help="minimum practical effect for better/worse, percent of the baseline (default %(default)g)")
    p.add_argument("--accept-uncontrolled", action="store_true",
                   help="show verdicts the control check did not back (absent, inconclusive, differs, or sides "
                        "apart in time), each labelled 'uncontrolled'; by default such cells say uncontrolled "
                        "and show no verdict and no delta")


def settings_from_args(args: argparse.Namespace) -> CompareSettings:
    from moe_tui.compare import CompareSettings

    vary = frozenset(v.strip() for v in str(args.vary).split(",") if v.strip())
    return CompareSettings(vary=vary, include_flagged=bool(args.include_flagged),
                           min_effect_pct=float(args.min_effect),
                           accept_uncontrolled=bool(getattr(args, "accept_uncontrolled", False)))


def load_grid(args: argparse.Namespace, command: str) -> tuple[Any, int]:
    """(grid, 0), or (None, exit code) after printing why: 4 for a profile without runs, 2 for options, 1 for the store."""
    from moe_tui.commands.common import EXIT_NOT_FOUND, EXIT_USAGE
    from moe_tui.compare import CompareError
    from moe_tui.grids.pair import build_grid
    from moe_tui.store.db import Store
    from moe_tui.store.errors import StoreError

    missing: list[str] = []
    if args.baseline == args.candidate:
        print(f"moe-tui {command}: baseline and candidate are both {args.baseline!r}: name two different profiles",
              file=sys.stderr)
        return None, EXIT_USAGE
    try:
        settings = settings_from_args(args)
        with Store.open_for_reading() as store:
            from moe_tui.control.direction import waiting_profiles
            from moe_tui.store.queue import RunQueue

            known = set(store.profile_names_with_runs())
            # a campaign's profile with no run yet (its first sweep) is not unknown: its side is empty
            waiting = waiting_profiles(RunQueue(store).campaigns(), known)
            missing = [n for n in (args.baseline, args.candidate) if n not in known and n not in waiting]
            return build_grid(store, args.baseline, args.candidate, fingerprint=args.fingerprint,
                              settings=settings, queued=waiting), 0
    except CompareError as exc:
        print(f"moe-tui {command}: {exc}{_not_run_yet(missing, getattr(args, 'profiles_dir', None))}", file=sys.stderr)
        return None, EXIT_NOT_FOUND if missing else EXIT_USAGE
    except StoreError as exc:
        print(f"moe-tui {command}: {exc}", file=sys.stderr)
        return None, 1


def _not_run_yet(missing: list[str], profiles_dir: str | None) -> str:
    """'; X is a profile in DIR with no run yet: queue it ...' for the missing names the profile folders hold."""
    from moe_tui.commands.common import profile_folders, profile_locations

    found = profile_locations(profile_folders(profiles_dir))
    named = [n for n in missing if n in found]
    return "".join(f"; {n!r} is a profile in {found[n]} with no run yet: queue it (moe-tui queue add --profiles "
                   f"{shlex.quote(n)} --profiles-dir {shlex.quote(str(found[n]))})" for n in named)


def terminal_width() -> int | None:
    """$COLUMNS, else the terminal's width; None when stdout is not a terminal and COLUMNS is unset
    (a script reading the text gets whole lines)."""
    import os
    import shutil

    if "COLUMNS" not in os.environ and not sys.stdout.isatty():
        return None
    return shutil.get_terminal_size().columns


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str, help_text: str) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help=help_text, description=help_text)
    add_pair_arguments(p)
    # The grid reads stored runs only; the folder says which names are profiles not run yet (walk
    # 2026-12-05, finding 14: the flag `queue add` and `run` take was refused here).
    add_profiles_dir(p)
    p.add_argument("--format", choices=FORMATS, default="text", help="output format (default: text)")
    add_json_alias(p)
    p.add_argument("-o", "--output", metavar="FILE", default=None, help="write to FILE instead of stdout")
    p.set_defaults(run=run)
    return p


def run(args: argparse.Namespace) -> int:
    from moe_tui.export.formats import render_csv, render_json, render_markdown, render_text, write_atomic

    grid, code = load_grid(args, "compare")
    if grid is None:
        return code
    if args.format == "markdown":
        from moe_tui import __version__

        text = render_markdown(grid, version=__version__)
    elif args.format == "csv":
        text = render_csv(grid)
    elif args.format == "json":
        text = render_json(grid)
    else:
        text = render_text(grid, width=None if args.output else terminal_width())
    if args.output:
        try:
            path = write_atomic(args.output, text)
        except OSError as exc:
            print(f"moe-tui compare: cannot write {args.output}: {exc.strerror or exc}", file=sys.stderr)
            return 1
        print(path)
    else:
        sys.stdout.write(text)
    return 0
