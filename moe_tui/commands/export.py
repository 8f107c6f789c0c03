"""`moe-tui export BASELINE CANDIDATE`: write the comparison as Markdown, CSV and a plot.

Files: <baseline>-vs-<candidate>.md (spec, profile diff, provenance, grid with verdicts and flags,
control check, SIMULATED banner where it applies), .csv (one row per concurrency x metric) and
-throughput.png/.svg (output throughput vs concurrency, linked from the Markdown), in `--dir`
(default: the data dir's exports/), and for each cell with profiled runs (`moe-tui explain`) its
breakdown as -explain-c<C>.md/.csv/.json/.png/.svg. Each file is written atomically; their paths
are printed.
Exit 0 on success, 2 when a profile has no runs, 1 when the store or the folder fails.
"""

from __future__ import annotations

import argparse
import sys

from moe_tui.commands.common import add_format, add_profiles_dir


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str, help_text: str) -> argparse.ArgumentParser:
    from moe_tui.commands.compare import add_pair_arguments

    p = sub.add_parser(name, help=help_text, description=help_text)
    add_pair_arguments(p)
    add_profiles_dir(p)  # as on compare: which names are profiles not run yet
    p.add_argument("-o", "--output", "--dir", dest="dir", metavar="DIR", default=None,
                   help="folder for the files (default: data dir exports/); -o/--output as on compare and explain, "
                        "--dir its old spelling")
    add_format(p, '{"markdown", "csv", "png", "svg", "extra": [...], "all": [...]}')
    p.set_defaults(run=run)
    return p


def run(args: argparse.Namespace) -> int:
    import datetime

    from moe_tui import __version__
    from moe_tui.commands.compare import load_grid
    from moe_tui.export.formats import export_comparison
    from moe_tui.paths import exports_dir

    grid, code = load_grid(args, "export")
    if grid is None:
        return code
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    try:
        paths = export_comparison(grid, args.dir or exports_dir(), generated_at=now, version=__version__)
        from moe_tui.export.explained import export_explanations
        from moe_tui.store.db import Store

        with Store.open_for_reading() as store:
            explained = export_explanations(store, grid, args.dir or exports_dir())
    except OSError as exc:
        print(f"moe-tui export: cannot write into {args.dir or exports_dir()}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    if args.json:
        import json

        from moe_tui.export.records import ExportPathsJson

        written: ExportPathsJson = {  # the published contract: docs/schemas/export.schema.json
            "markdown": str(paths.markdown), "csv": str(paths.csv), "png": str(paths.png), "svg": str(paths.svg),
            "extra": [str(p) for p in [*paths.extra, *explained]], "all": [str(p) for p in [*paths.all(), *explained]]}
        print(json.dumps(written, sort_keys=True))
        return 0
    for path in [*paths.all(), *explained]:
        print(path)
    return 0
