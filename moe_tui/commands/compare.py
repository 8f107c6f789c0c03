"""`moe-tui compare BASELINE CANDIDATE`: print the comparison grid of two profiles from the store.

Text (an aligned table with verdicts), Markdown or CSV, to stdout or to a file (`-o`, written
atomically). A delta appears only where both profiles ran the identical benchmark spec; every
other cell says why not. Exit 0 on success, 2 when a profile has no runs (the message names the
profiles that do), 1 when the store cannot be read.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

FORMATS = ("text", "markdown", "csv")


def add_pair_arguments(p: argparse.ArgumentParser) -> None:
    """BASELINE CANDIDATE [--fingerprint FP]: shared by `compare` and `export`."""
    p.add_argument("baseline", metavar="BASELINE", help="profile name of the baseline column")
    p.add_argument("candidate", metavar="CANDIDATE", help="profile name of the candidate column")
    p.add_argument("--fingerprint", metavar="FP", default=None,
                   help="only the concurrencies with runs of this spec fingerprint (6+ leading characters)")


def load_grid(args: argparse.Namespace, command: str) -> tuple[Any, int]:
    """(grid, 0), or (None, exit code) after printing why: 2 for unknown profiles, 1 for the store."""
    from moe_tui.compare import CompareError, build_grid
    from moe_tui.store import Store, StoreError

    try:
        with Store.open_default() as store:
            return build_grid(store, args.baseline, args.candidate, fingerprint=args.fingerprint), 0
    except CompareError as exc:
        print(f"moe-tui {command}: {exc}", file=sys.stderr)
        return None, 2
    except StoreError as exc:
        print(f"moe-tui {command}: {exc}", file=sys.stderr)
        return None, 1


def add_parser(sub: Any, name: str, help_text: str) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help=help_text, description=help_text)
    add_pair_arguments(p)
    p.add_argument("--format", choices=FORMATS, default="text", help="output format (default: text)")
    p.add_argument("-o", "--output", metavar="FILE", default=None, help="write to FILE instead of stdout")
    p.set_defaults(run=run)
    return p


def run(args: argparse.Namespace) -> int:
    from moe_tui.export import render_csv, render_markdown, render_text, write_atomic

    grid, code = load_grid(args, "compare")
    if grid is None:
        return code
    if args.format == "markdown":
        from moe_tui import __version__

        text = render_markdown(grid, version=__version__)
    elif args.format == "csv":
        text = render_csv(grid)
    else:
        text = render_text(grid)
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
