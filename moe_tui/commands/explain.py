"""`moe-tui explain BASELINE CANDIDATE -c C`: where each side's decode step goes at one grid cell.

The first time (or with `--again`) it queues one short profiled run per side at the cell's
concurrency and workload (`moe_tui.explain.store.plan_explain`: after a warmup pass, SGLang's
profiler over `--steps` decode steps, the expert load recorded alongside), after a yes (`--yes`
answers for a script). `moe-tui run` works them. Once both are done it prints the breakdown side by
side: ms per decode step by kernel class, B-A and its share of the gap, the kernels that moved,
the MoE GEMM against its roofline, the per-layer expert load. `--format md|csv|json` and `-o FILE`
write the table; `--plot FILE.png|.svg` draws a stacked bar per side. A profiled run is never
averaged into a cell. Exit 0 on success (also "queued" and "still pending"), 4 for an unknown
profile or cell (or a profile missing from --profiles-dir), 2 for a bad option or a cell the two
sides ran with different specs, 1 for the store or unreadable traces.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from moe_tui.commands.common import EXIT_FAILED, EXIT_NOT_FOUND, EXIT_USAGE, add_json_alias

if TYPE_CHECKING:
    from moe_tui.compare.model import ComparisonGrid
    from moe_tui.explain.store import CellExplanation
    from moe_tui.store.db import Store

FORMATS = ("text", "md", "csv", "json")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str, help_text: str) -> argparse.ArgumentParser:
    from moe_tui.commands.compare import add_pair_arguments

    p = sub.add_parser(name, help=help_text, description=help_text)
    add_pair_arguments(p)
    p.add_argument("--concurrency", "-c", type=int, required=True, help="the cell's concurrency")
    p.add_argument("--steps", type=int, default=None, help="decode steps to profile a side (default 12)")
    p.add_argument("--again", action="store_true", help="queue new profiled runs even if the cell has some")
    p.add_argument("--prefill", action="store_true",
                   help="when queueing: profile from the benchmark's start, so the prefill (EXTEND) is kept too")
    p.add_argument("--stage", choices=("decode", "extend"), default="decode",
                   help="which stage's traces to break down (extend: the prefill, kept with --prefill)")
    from moe_tui.commands.common import add_profiles_dir

    add_profiles_dir(p)
    p.add_argument("--yes", "-y", action="store_true", help="queue without asking")
    p.add_argument("--format", choices=FORMATS, default="text", help="output format (default: text)")
    add_json_alias(p)
    p.add_argument("-o", "--output", metavar="FILE", default=None, help="write the table to FILE")
    p.add_argument("--plot", metavar="FILE", default=None, help="a stacked bar per side, .png or .svg")
    p.set_defaults(run=run)
    return p


def _fail(message: str, code: int) -> int:
    print(f"moe-tui explain: {message}", file=sys.stderr)
    return code


def run(args: argparse.Namespace) -> int:
    from moe_tui.commands.compare import load_grid
    from moe_tui.explain.store import DEFAULT_STEPS, ExplainQueueError, explain_cell, latest_explain
    from moe_tui.store.db import Store
    from moe_tui.store.errors import StoreError

    if args.plot and Path(args.plot).suffix.lower() not in (".png", ".svg"):
        return _fail(f"--plot {args.plot}: the file must end in .png or .svg", EXIT_USAGE)
    grid, code = load_grid(args, "explain")
    if grid is None:
        return code
    if args.concurrency not in grid.concurrencies:
        return _fail(f"no cell at concurrency {args.concurrency}; measured: "
                     f"{', '.join(map(str, grid.concurrencies)) or 'none'}", EXIT_NOT_FOUND)
    try:
        with Store.open_default() as store:
            existing = latest_explain(store, args.baseline, args.candidate, args.concurrency)
            if existing is None or args.again:
                return _queue(args, store, grid, args.steps or DEFAULT_STEPS)
            view = explain_cell(store, grid, args.concurrency, args.stage.upper())
    except ExplainQueueError as exc:
        return _fail(str(exc), EXIT_USAGE)
    except StoreError as exc:
        return _fail(str(exc), EXIT_FAILED)
    if view.state != "ready":
        print(view.message)
        return 1 if view.state == "failed" else 0
    return _show(args, view, grid.simulated)


def _show(args: argparse.Namespace, view: CellExplanation, simulated: bool) -> int:
    from moe_tui.explain.render import stacked_bars, text_lines, to_csv, to_json, to_markdown

    extras = list(view.extras) + (["SIMULATED: the emulator's kernel model, not a GPU"] if simulated else [])
    if args.format == "json":
        text = to_json(view.explanation, dict(view.data or {}) | {"extras": extras, "simulated": simulated})
    elif args.format == "md":
        text = to_markdown(view.explanation, extras)
    elif args.format == "csv":
        text = to_csv(view.explanation)
    else:
        text = "\n".join(text_lines(view.explanation, [""] + extras if extras else ()))
    if args.output:
        from moe_tui.export.formats import write_atomic

        write_atomic(Path(args.output), text.encode())
        print(f"wrote {args.output}")
    else:
        print(text)
    if args.plot:
        png, svg = stacked_bars(view.explanation)
        from moe_tui.export.formats import write_atomic

        write_atomic(Path(args.plot), png if args.plot.lower().endswith(".png") else svg)
        print(f"wrote {args.plot}", file=sys.stderr if args.format == "json" and not args.output else sys.stdout)
    return 0


def _queue(args: argparse.Namespace, store: Store, grid: ComparisonGrid, steps: int) -> int:
    from moe_tui.explain.store import enqueue_explain, plan_explain
    from moe_tui.profiles import load_profiles
    from moe_tui.spec import SpecError
    from moe_tui.store.queue import QueueError, RunQueue

    plan = plan_explain(grid, args.concurrency, steps=steps, prefill=args.prefill)
    spec = plan["items"][0]["spec"]
    print(f"{plan['name']}: one profiled run a side at concurrency {args.concurrency} "
          f"(input {spec.get('input_len')}, output {spec.get('output_len')}, {spec.get('num_prompts')} prompts), "
          f"{steps} decode steps{' (and the prefill)' if args.prefill else ''} under SGLang's profiler after a "
          f"warmup pass; never averaged into the cell")
    from moe_tui.commands.common import profiles_dir_for

    profiles_dir = Path(profiles_dir_for(args.profiles_dir, (args.baseline, args.candidate)))
    loaded = load_profiles(profiles_dir)
    from moe_tui.explain.recorder import recorder_mode, why_not_recorded

    missing: dict[str, str] = {}
    for name in (plan["baseline"], plan["candidate"]):
        try:
            prof = loaded.by_name(name)
        except KeyError as exc:
            missing[name] = str(exc.args[0])
            continue
        if recorder_mode(prof.extra_args) is None:  # the profiled run skips it; say so before asking
            print(why_not_recorded(name))
    if not args.yes:
        if not sys.stdin.isatty():
            print("not a terminal: pass --yes to queue them")
            return 0
        if input("queue these 2 runs? [y/N] ").strip().lower() not in ("y", "yes"):
            print("nothing queued")
            return 0
    if missing:
        why = next(iter(missing.values()))
        return _fail(f"{why} in {profiles_dir}: the runner could not start it (--profiles-dir)", EXIT_NOT_FOUND)
    try:
        campaign_id, items = enqueue_explain(RunQueue(store), plan, profiles_dir=str(profiles_dir))
    except (QueueError, SpecError) as exc:
        return _fail(str(exc), 1)
    print(f"queued campaign {campaign_id} ({plan['name']}): #{items[0].id}, #{items[-1].id}; `moe-tui run` works "
          f"them, then `moe-tui explain {args.baseline} {args.candidate} -c {args.concurrency}` shows the breakdown")
    return 0
