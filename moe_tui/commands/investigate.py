"""`moe-tui investigate BASELINE CANDIDATE --concurrency C [--metric M]`: what to run next.

Prints the follow-up the grid proposes for one cell (each proposal's reason in words, its items,
its cost in server starts and estimated minutes from the runs already measured), then queues it
as one campaign (`investigate:<A>-vs-<B>:c=<C>:<metric>`) after a yes: `--yes` answers for a
script, `--dry-run` only prints. `--only repeats,control` keeps some proposals. Earlier
investigations of the cell are shown first with what they changed (`--report` shows only those).
Through the runner's socket when one runs, else straight into the store (the runner notices).
Exit 0 on success (or nothing to do), 2 for an unknown profile or cell, 1 for the store.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from moe_tui.commands.common import EXIT_NOT_FOUND, add_format

if TYPE_CHECKING:
    from moe_tui.investigate.model import InvestigationPlan
    from moe_tui.investigate.report import InvestigationReport
    from moe_tui.store.db import Store


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str, help_text: str) -> argparse.ArgumentParser:
    from moe_tui.commands.compare import add_pair_arguments

    p = sub.add_parser(name, help=help_text, description=help_text)
    add_pair_arguments(p)
    p.add_argument("--concurrency", "-c", type=int, required=True, help="the cell's concurrency")
    p.add_argument("--metric", "-m", default="output_throughput",
                   help="the cell's metric (default output_throughput)")
    p.add_argument("--only", default=None, metavar="KINDS",
                   help="comma-separated proposal kinds to keep: repeats,control,bisect,cold_warm,prefix_cache,restart")
    p.add_argument("--cap", type=int, default=None, help="most runs a side the repeats may reach (default 10)")
    from moe_tui.commands.common import add_profiles_dir

    add_profiles_dir(p)
    p.add_argument("--yes", "-y", action="store_true", help="queue without asking")
    p.add_argument("--dry-run", action="store_true", help="print the proposal, queue nothing")
    p.add_argument("--report", action="store_true", help="only show earlier investigations of this cell")
    add_format(p, "the plan (and reports) as JSON")
    p.set_defaults(run=run)
    return p


def _stderr(message: str) -> None:
    print(message, file=sys.stderr)


def _fail(message: str, code: int) -> int:
    print(f"moe-tui investigate: {message}", file=sys.stderr)
    return code


def run(args: argparse.Namespace) -> int:
    from moe_tui.commands.compare import load_grid
    from moe_tui.investigate.model import DEFAULT_CAP, KINDS, InvestigateError
    from moe_tui.investigate.planner import plan_investigation
    from moe_tui.investigate.report import report
    from moe_tui.investigate.store import evidence_from_grid, investigations
    from moe_tui.store.db import Store
    from moe_tui.store.errors import StoreError

    only = [k.strip() for k in args.only.split(",") if k.strip()] if args.only else None
    unknown = [k for k in only or () if k not in KINDS]
    if unknown:
        return _fail(f"--only: unknown kind {unknown[0]!r}; kinds: {', '.join(KINDS)}", 2)
    grid, code = load_grid(args, "investigate")
    if grid is None:
        return code
    if args.concurrency not in grid.concurrencies:  # not found (4), as `explain` says it
        return _fail(f"no cell at concurrency {args.concurrency}; measured: "
                     f"{', '.join(map(str, grid.concurrencies)) or 'none'}", EXIT_NOT_FOUND)
    try:
        opened = Store.open_for_reading if args.dry_run or args.report else Store.open_default
        with opened() as store:
            evidence = evidence_from_grid(grid, store)
            earlier = [report(store, r, evidence) for r in investigations(store, args.baseline, args.candidate)
                       if (r.concurrency, r.metric) == (args.concurrency, args.metric)]
            if args.report:
                _print_reports(earlier, args.json)
                return 0
            plan = plan_investigation(evidence, args.concurrency, args.metric, cap=args.cap or DEFAULT_CAP)
            if only is not None:
                plan = plan.only(only)
            _print_plan(plan, earlier, args.json, evidence.simulated)
            say = _stderr if args.json else print  # --json keeps stdout one JSON document
            if not plan.proposals or args.dry_run:
                if args.dry_run and plan.proposals:
                    say("nothing queued (--dry-run)")
                return 0
            if not args.yes and not _confirm(plan):
                say("nothing queued")
                return 0
            return _queue(args, store, plan)
    except InvestigateError as exc:
        return _fail(str(exc), 2)
    except StoreError as exc:
        return _fail(str(exc), 1)


def _print_reports(reports: list[InvestigationReport], as_json: bool) -> None:
    if as_json:
        print(json.dumps([{"name": r.name, "state": r.state, "before": r.before, "after": r.after,
                           "settled": r.settled, "flags": list(r.flags), "lines": list(r.lines)} for r in reports],
                         sort_keys=True, default=str))
        return
    if not reports:
        print("no earlier investigation of this cell")
    for r in reports:
        print(r.text() + ("\n  flags: " + ", ".join(r.flags) if r.flags else ""))


def _print_plan(plan: InvestigationPlan, earlier: list[InvestigationReport], as_json: bool, simulated: bool) -> None:
    if as_json:
        print(json.dumps(plan.to_dict(), sort_keys=True, default=str))
        return
    if earlier:
        print("earlier investigations of this cell:")
        _print_reports(earlier, False)
        print()
    from moe_tui.investigate.model import describe_cell

    print(f"{plan.name}{'  [SIMULATED]' if simulated else ''}")
    print(f"cell now: {describe_cell(plan.before)}; control: {plan.before.get('control')}")
    for caution in plan.cautions:
        print(f"caution: {caution}")
    n = 0
    for p in plan.proposals:
        minutes = f"~{p.minutes:g} min" if p.minutes is not None else "minutes unknown"
        print(f"\n[{p.kind}] {p.title}: {len(p.items)} run(s), {p.server_starts} server start(s), {minutes}")
        print(f"  why: {p.reason}")
        if p.expect:
            print(f"  tells: {p.expect}")
        for item in p.items:
            n += 1
            extra = "".join([", fresh server start" if item.fresh_start else "",
                             ", no warmup pass" if not item.warmup else ""])
            print(f"  {n:>3}. {item.profile:<28} conc={item.concurrency:<5} n={item.spec.get('num_prompts'):<6} "
                  f"{item.role}{extra}")
    if not plan.proposals:
        print("\nnothing to propose")
    for note in plan.notes:
        print(f"  (not proposed) {note}")
    total = f"~{plan.minutes:g} min" if plan.minutes is not None else "minutes unknown (a duration was never measured)"
    print(f"\ntotal: {len(plan.items)} run(s), {plan.server_starts} server start(s), {total}")


def _confirm(plan: InvestigationPlan) -> bool:
    if not sys.stdin.isatty():
        print("not a terminal: pass --yes to queue it")
        return False
    answer = input(f"queue these {len(plan.items)} run(s)? [y/N] ").strip().lower()
    return answer in ("y", "yes")


def _queue(args: argparse.Namespace, store: Store, plan: InvestigationPlan) -> int:
    from pathlib import Path

    from moe_tui import paths
    from moe_tui.investigate.store import enqueue_plan
    from moe_tui.profiles import load_profiles
    from moe_tui.run.client import RunnerOpError, call_runner_sync
    from moe_tui.run.rendezvous import RunnerUnavailable, runner_is_running
    from moe_tui.spec import SpecError
    from moe_tui.store.queue import QueueError, RunQueue

    say = _stderr if args.json else print  # --json: stdout is the plan alone (docs/schemas)
    if runner_is_running(paths.data_dir()):
        try:
            result = call_runner_sync("add_investigation", plan=plan.to_dict())
            say(f"queued campaign {result['campaign_id']} ({plan.name}): {len(result['item_ids'])} item(s) "
                  f"via the runner")
            return 0
        except RunnerOpError as exc:
            return _fail(str(exc), 1)
        except RunnerUnavailable:
            pass  # starting or stopping: the store is the truth
    from moe_tui.commands.common import profiles_dir_for

    profiles_dir = Path(profiles_dir_for(args.profiles_dir, (args.baseline, args.candidate)))
    loaded = load_profiles(profiles_dir)
    for name in {plan.baseline, plan.candidate}:
        try:
            loaded.by_name(name)
        except KeyError as exc:
            return _fail(f"{exc.args[0]} in {profiles_dir}: the runner could not start it (--profiles-dir)", 2)
    try:
        campaign_id, items = enqueue_plan(RunQueue(store), plan, profiles_dir=str(profiles_dir))
    except (QueueError, SpecError) as exc:
        return _fail(str(exc), 1)
    say(f"queued campaign {campaign_id} ({plan.name}): {len(items)} item(s), "
          f"#{items[0].id}..#{items[-1].id}; `moe-tui run` works them")
    return 0
