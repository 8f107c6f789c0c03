"""`moe-tui queue ...`: add a campaign, list and edit the persistent run queue.

    moe-tui queue add --profiles A,B --concurrency 1,2,10,64 --repeats 3 [--order grouped|interleaved|alternating]
                      [--input-len N --output-len N --range-ratio F --num-prompts N
                       --prompts-per-concurrency N --request-rate R --seed N --warmup-requests N
                       --api generate|completions --client moe-tui|sglang.bench_serving --no-warmup-pass]
                      [--profiles-dir DIR] [--dry-run]
    moe-tui queue list [--json] [--state STATE]
    moe-tui queue pause | resume
    moe-tui queue retry ID | cancel ID | skip ID | delete ID
    moe-tui queue move ID up|down|top|bottom
    moe-tui queue clear [--finished]

`add` prints the items and what each ordering policy costs in server starts. Edits go through the
running runner's control socket when there is one (so a running item can be skipped and attached
TUIs see the change at once); otherwise they are written to the store directly.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from moe_tui.commands.common import (
    EXIT_NOT_FOUND,
    EXIT_USAGE,
    add_exit_codes,
    add_format,
    add_profiles_dir,
    profiles_dir_for,
    unknown_profile,
)
from moe_tui.records import FreeForm, SpecOverrides

if TYPE_CHECKING:
    from pathlib import Path

    from moe_tui.export.records import QueueAddJson
    from moe_tui.store.db import Store
    from moe_tui.store.queue import CampaignPlan


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str, help_text: str) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help=help_text, description=help_text)
    add_exit_codes(p)
    actions = p.add_subparsers(dest="queue_action", metavar="ACTION")

    add = actions.add_parser("add", help="add a campaign: profiles x concurrencies x repeats")
    add_exit_codes(add)
    add.add_argument("--profiles", required=True, help="comma-separated profile names")
    add.add_argument("--concurrency", required=True, help="comma-separated max concurrencies, e.g. 1,2,10,64")
    add.add_argument("--repeats", type=int, default=1, help="runs of each (profile, concurrency) (default 1)")
    add.add_argument("--order", default="abba", choices=("abba", "interleaved", "grouped", "alternating"),
                     help="abba (default): A,B,B,A sweeps, each its own server start, counterbalanced "
                          "so drift and a disturbance in step with the sweeps fall on both sides alike; "
                          "interleaved: A,B,A,B sweeps; grouped: one server start per profile; "
                          "alternating: A,B item by item")
    add_profiles_dir(add)
    add.add_argument("--name", default=None, help="campaign name (default: built from the arguments)")
    add.add_argument("--input-len", type=int, help="spec fields not given: the spec's defaults; on simulated "
                     "profiles the add form's (the demo's: 128/32 tokens, max(16, 2 x concurrency) prompts)")
    add.add_argument("--output-len", type=int)
    add.add_argument("--range-ratio", type=float)
    add.add_argument("--num-prompts", type=int, help="prompts per run (the minimum with --prompts-per-concurrency)")
    add.add_argument("--prompts-per-concurrency", type=int, default=None,
                     help="num_prompts = max(--num-prompts, N x concurrency)")
    add.add_argument("--request-rate", type=str, help="requests/s or inf (default inf)")
    add.add_argument("--seed", type=int)
    add.add_argument("--warmup-requests", type=int)
    add.add_argument("--api", choices=("generate", "completions"))
    add.add_argument("--client", choices=("moe-tui", "sglang.bench_serving"),
                     help="who measures: moe-tui's own client (default) or SGLang's bench_serving")
    add.add_argument("--no-warmup-pass", action="store_true",
                     help="no warmup pass at each item's concurrency before its timed run")
    add.add_argument("--no-flush-cache", action="store_true",
                     help="do not POST /flush_cache before each timed run (default: flush, recorded in the spec, "
                          "so a repeat is never served from the previous repeat's radix cache)")
    add.add_argument("--no-control", action="store_true",
                     help="leave out the control concurrency (2) from the sweeps; every verdict of the "
                          "comparison then says uncontrolled (each cell is judged against it on its own starts)")
    add.add_argument("--dry-run", action="store_true", help="print the plan, add nothing")
    add_format(add, "campaign id and name, item ids and specs (the plan goes to stderr)")
    add.add_argument("--yes", action="store_true",
                     help=f"add a campaign larger than the cap (MOE_TUI_CAMPAIGN_CAP, default {CAMPAIGN_CAP})")

    ls = actions.add_parser("list", help=f"list the queue, a page at a time ({LIST_PAGE} items unless --limit/--all)")
    add_format(ls)
    ls.add_argument("--state", action="append", default=None, help="only items in this state (repeatable)")
    ls.add_argument("--campaign", type=int, metavar="ID", default=None, help="only this campaign's items")
    ls.add_argument("--profile", default=None, help="only this profile's items")
    ls.add_argument("--page", type=int, default=1, help="which page (1: the first)")
    ls.add_argument("--limit", type=int, default=LIST_PAGE, help=f"items per page (default {LIST_PAGE})")
    ls.add_argument("--all", action="store_true", help="every item the filters keep, no pages")

    actions.add_parser("pause", help="pause the queue (takes effect between items)")
    actions.add_parser("resume", help="resume the queue")
    retry = actions.add_parser("retry", help="put failed/interrupted/skipped/cancelled items back to pending")
    retry.add_argument("id", type=int, nargs="*", help="item ids (or --campaign / --all)")
    which = retry.add_mutually_exclusive_group()
    which.add_argument("--campaign", type=int, metavar="ID", help="every retryable item of this campaign")
    which.add_argument("--all", action="store_true", help="every retryable item in the queue")
    for verb, text in (("cancel", "withdraw an item (a running one is stopped)"),
                       ("skip", "pass over an item for now (a running one is stopped)"),
                       ("delete", "remove an item that is not running")):
        a = actions.add_parser(verb, help=text)
        a.add_argument("id", type=int)
    mv = actions.add_parser("move", help="reorder a pending item")
    mv.add_argument("id", type=int)
    mv.add_argument("direction", choices=("up", "down", "top", "bottom"))
    cl = actions.add_parser("clear", help="remove every item that is not running")
    cl.add_argument("--finished", action="store_true", help="only done/failed/skipped/cancelled/interrupted items")
    p.set_defaults(run=run, _parser=p)
    return p


CAMPAIGN_CAP = 2_000  # items; a typo (an extra zero in --repeats) must not queue a month of runs
CAP_ENV = "MOE_TUI_CAMPAIGN_CAP"
LIST_PAGE = 50  # `queue list` items per page unless --limit or --all (a queue of months holds 100,000)


def campaign_cap() -> int:
    import os

    raw = os.environ.get(CAP_ENV, "")
    return int(raw) if raw.isdigit() else CAMPAIGN_CAP


def _csv(text: str, kind: type, what: str) -> list[Any]:
    parts = [x.strip() for x in text.split(",") if x.strip()]
    try:
        return [kind(x) for x in parts]
    except ValueError:
        print(f"moe-tui queue add: {what} expects comma-separated {kind.__name__}s, got {text!r}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE) from None


def _spec_dict(args: argparse.Namespace) -> SpecOverrides:
    fields = {"input_len": args.input_len, "output_len": args.output_len, "range_ratio": args.range_ratio,
              "num_prompts": args.num_prompts, "request_rate": args.request_rate, "seed": args.seed,
              "warmup_requests": args.warmup_requests, "api": args.api, "client": args.client,
              "flush_cache": False if getattr(args, "no_flush_cache", False) else None}
    return {k: v for k, v in fields.items() if v is not None}


def run(args: argparse.Namespace) -> int:
    action = args.queue_action
    if action is None:
        args._parser.print_help()
        return 2
    from moe_tui.spec import SpecError
    from moe_tui.store.db import Store
    from moe_tui.store.errors import StoreError
    from moe_tui.store.queue import QueueError, QueueNotFound

    try:
        # list only reads: a current store opens read-only (no integrity pass over the whole file)
        with (Store.open_for_reading() if action == "list" else Store.open_default()) as store:
            if action == "add":
                return _add(args, store)
            if action == "list":
                return _list(args, store)
            return _edit(args, store)
    except (QueueError, SpecError, StoreError) as exc:
        print(f"moe-tui queue {action}: {exc}", file=sys.stderr)
        if isinstance(exc, QueueNotFound):
            return EXIT_NOT_FOUND
        return EXIT_USAGE if isinstance(exc, SpecError) else 1  # a bad value given is usage, as the README says


def _add(args: argparse.Namespace, store: Store) -> int:
    from pathlib import Path

    from moe_tui.profiles import load_profiles
    from moe_tui.store.queue import QueueError

    names = _csv(args.profiles, str, "--profiles")
    profiles_dir = Path(profiles_dir_for(args.profiles_dir, names))
    loaded = load_profiles(profiles_dir)
    for name in names:
        try:
            loaded.by_name(name)
        except KeyError as exc:
            # a name two files carry is named as such (which one is meant cannot be guessed); else the
            # close names from every folder searched
            why = exc.args[0] if name in loaded.duplicates else unknown_profile(name, args.profiles_dir)
            print(f"moe-tui queue add: {why}", file=sys.stderr)
            for problem in loaded.problems:
                print(f"  {problem}", file=sys.stderr)
            return EXIT_NOT_FOUND
    if all(loaded.by_name(n).engine == "sim" for n in names):
        _sim_defaults(args)
    try:
        plan = _plan(args, store, names, profiles_dir)
    except QueueError as exc:  # a value out of its range (repeats 0, an unknown order): usage
        print(f"moe-tui queue add: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return _queue_plan(args, store, plan, names, profiles_dir)


def _sim_defaults(args: argparse.Namespace) -> None:
    """On simulated profiles the spec fields not given start from the add form's defaults (the demo's,
    `control.launch.campaign_defaults`): one default, so a campaign queued here and one from the form
    share a fingerprint and compare (1024/1024 tokens, 100 prompts here and 128/32 there did not)."""
    from moe_tui.control.launch import campaign_defaults

    spec, ppc = campaign_defaults(simulated=True)
    given_prompts = args.num_prompts is not None
    for key in ("input_len", "output_len", "num_prompts", "range_ratio", "seed"):
        if getattr(args, key, None) is None and key in spec:
            setattr(args, key, spec[key])
    if args.prompts_per_concurrency is None and not given_prompts:  # a --num-prompts given is kept as given
        args.prompts_per_concurrency = ppc


def _plan(args: argparse.Namespace, store: Store, names: list[str], profiles_dir: Path) -> CampaignPlan:
    from moe_tui.spec import BenchmarkSpec
    from moe_tui.store.queue import CampaignPlan

    return CampaignPlan(
        profiles=tuple(names), concurrencies=tuple(_csv(args.concurrency, int, "--concurrency")),
        repeats=args.repeats, base_spec=BenchmarkSpec.from_dict(_spec_dict(args), "moe-tui queue add flags"),
        policy=args.order, prompts_per_concurrency=args.prompts_per_concurrency,
        warmup_pass=not args.no_warmup_pass, profiles_dir=str(profiles_dir), control=not args.no_control,
    )


def _queue_plan(args: argparse.Namespace, store: Store, plan: CampaignPlan, names: list[str],
                profiles_dir: Path) -> int:
    from moe_tui.store.queue import RunQueue

    cap = campaign_cap()
    if plan.size > cap and not args.yes and not args.dry_run:
        print(f"moe-tui queue add: this campaign is {plan.size:,} items ({len(names)} profile(s) x "
              f"{len(plan.concurrencies)} concurrency(ies) x {plan.repeats} repeat(s)), over the cap of {cap:,} "
              f"({CAP_ENV}); nothing added. Add --yes to queue it anyway", file=sys.stderr)
        return 1
    planned = plan.items()
    say = (lambda text: print(text, file=sys.stderr)) if args.json else print  # --json: stdout is one document
    say(f"campaign: {plan.default_name()}")
    say(f"base spec: {plan.base_spec.describe()}")
    rule = plan.definition()["num_prompts_rule"]["rule"]
    say(f"prompts: {rule}; warmup pass: {'yes' if plan.warmup_pass else 'no'}")
    say(f"control: {plan.control_plan()['why']}")
    short = sorted({(p.spec.max_concurrency, p.spec.num_prompts) for p in planned
                    if p.spec.num_prompts < p.spec.max_concurrency})
    if short:  # always to stderr: a script's stdout stays the plan or one JSON document
        cells = ", ".join(f"concurrency {c} with num_prompts {n}" for c, n in short)
        print(f"moe-tui queue add: warning: {cells}: fewer prompts than the concurrency, so those runs never "
              "reach it (raise --num-prompts, or --prompts-per-concurrency N for num_prompts = N x concurrency)",
              file=sys.stderr)
    costs = plan.start_costs()
    say("server starts: " + ", ".join(f"{k} {v}{' (chosen)' if k == plan.policy else ''}"
                                      for k, v in costs.items()))
    if args.dry_run:
        for n, p in enumerate(planned, start=1):
            say(f"  {n:>4}  {p.profile_name:<28} conc={p.spec.max_concurrency:<5} "
                f"n={p.spec.num_prompts:<6} rep={p.repeat_index}")
        say(f"{len(planned)} item(s) planned; nothing added (--dry-run)")
        if args.json:
            planned_json: QueueAddJson = {"dry_run": True, "campaign_id": None, "name": args.name or plan.default_name(),
                                          "item_ids": [], "planned": len(planned), "profiles_dir": str(profiles_dir)}
            print(json.dumps(planned_json))
        return 0
    campaign_id, items = RunQueue(store).add_campaign(plan, args.name)
    for item in items:
        say(f"  #{item.id:<5} {item.profile_name:<28} conc={item.spec.max_concurrency:<5} "
            f"n={item.spec.num_prompts:<6} rep={item.repeat_index}  spec {item.spec.short_fingerprint}")
    say(f"added campaign {campaign_id}: {len(items)} item(s)")
    if args.json:
        added_json: QueueAddJson = {
            "dry_run": False, "campaign_id": campaign_id, "name": args.name or plan.default_name(),
            "item_ids": [i.id for i in items], "profiles_dir": str(profiles_dir),
            "items": [{"id": i.id, "profile": i.profile_name, "concurrency": i.spec.max_concurrency,
                       "repeat": i.repeat_index, "fingerprint": i.fingerprint} for i in items]}
        print(json.dumps(added_json, sort_keys=True))
    return 0


def _list(args: argparse.Namespace, store: Store) -> int:
    """One page of the items the filters keep (a queue of months holds 100,000; all came out), with the
    batch job each ran as where an executor ran it (issue 37)."""
    from moe_tui.store.jobs import ExecutorJobs
    from moe_tui.store.queue import QueueError, RunQueue
    from moe_tui.store.queue_item import list_page

    if args.page < 1 or args.limit < 1:
        raise QueueError(f"queue list: --page and --limit must be at least 1 (got --page {args.page} "
                         f"--limit {args.limit})")
    queue = RunQueue(store)
    if args.campaign is not None:
        queue.campaign(args.campaign)  # QueueNotFound names it
    offset = 0 if args.all else (args.page - 1) * args.limit
    total, items = list_page(store, states=args.state, campaign_id=args.campaign, profile=args.profile,
                             offset=offset, limit=None if args.all else args.limit)
    more = offset + len(items) < total
    jobs = ExecutorJobs(store).latest_for_items([i.id for i in items])  # the page's batch jobs (issue 37)
    if args.json:
        print(json.dumps({"summary": queue.summary(), "items": [
            {**i.to_dict(), **({"job": jobs[i.id].to_dict()} if i.id in jobs else {})} for i in items],
            "total": total, "offset": offset, "more": more}, sort_keys=True))
        return 0
    summary = queue.summary()
    counts = ", ".join(f"{k} {v}" for k, v in summary["counts"].items() if v)
    print(f"queue {'PAUSED' if summary['paused'] else 'active'}: {counts or 'empty'}")
    if total and (more or offset):
        print(f"items {offset + 1 if items else offset}-{offset + len(items)} of {total:,}"
              + (f"; next: --page {args.page + 1} (or --all)" if more else ""))
    if items:
        print(f"{'id':>5}  {'state':<11} {'profile':<28} {'conc':>5} {'n':>6} {'rep':>3} {'try':>3} {'run':>5}  "
              + (f"{'job':<8} {'node':<10} {'slurm':<11} " if jobs else "") + "note")
    for i in items:
        note = (i.error.splitlines()[0] if i.error else "")[:70]
        job = jobs.get(i.id)
        where = ("" if not jobs else f"{'-':<8} {'-':<10} {'-':<11} " if job is None
                 else f"{job.job_id or '?':<8} {job.node or '-':<10} {job.state:<11} ")
        print(f"{i.id:>5}  {i.state:<11} {i.profile_name:<28} {i.spec.max_concurrency:>5} {i.spec.num_prompts:>6} "
              f"{i.repeat_index:>3} {i.attempts:>3} {i.run_id if i.run_id is not None else '-':>5}  {where}{note}")
    return 0


RETRYABLE = ("failed", "interrupted", "skipped", "cancelled")


def _retry(args: argparse.Namespace, store: Store) -> int:
    """`queue retry ID...`, `--campaign ID` or `--all`: each item as `queue retry ID` does it."""
    from moe_tui.store.queue import QueueError, QueueNotFound, RunQueue

    ids = list(args.id)
    if args.campaign is not None or args.all:
        if ids:
            print("moe-tui queue retry: give item ids or --campaign/--all, not both", file=sys.stderr)
            return EXIT_USAGE
        queue = RunQueue(store)
        if args.campaign is not None and args.campaign not in queue.campaign_names():
            print(f"moe-tui queue retry: no campaign {args.campaign} (moe-tui queue list shows them)", file=sys.stderr)
            return EXIT_NOT_FOUND
        ids = [i.id for i in queue.items(RETRYABLE, campaign_id=args.campaign)]
        if not ids:
            print("moe-tui queue retry: nothing to retry (no failed, interrupted, skipped or cancelled item"
                  + (f" in campaign {args.campaign})" if args.campaign is not None else ")"))
            return 0
    if not ids:
        print("moe-tui queue retry: give item ids, --campaign ID or --all", file=sys.stderr)
        return EXIT_USAGE
    worst, retried = 0, 0
    for item_id in ids:  # one item refused (not retryable, gone) does not stop the others
        args.item = item_id
        try:
            code = _edit(args, store)
        except QueueError as exc:
            print(f"moe-tui queue retry: {exc}", file=sys.stderr)
            code = EXIT_NOT_FOUND if isinstance(exc, QueueNotFound) else 1
        worst, retried = max(worst, code), retried + (code == 0)
    if len(ids) > 1:
        print(f"retried {retried} of {len(ids)} item(s)")
    return worst


def _edit(args: argparse.Namespace, store: Store) -> int:
    from moe_tui import paths
    from moe_tui.run.client import RunnerOpError, call_runner_sync
    from moe_tui.run.rendezvous import RunnerUnavailable, runner_is_running
    from moe_tui.store.queue import RunQueue

    action = args.queue_action
    if action == "retry" and not hasattr(args, "item"):
        return _retry(args, store)
    ops: dict[str, tuple[str, FreeForm]] = {  # action -> the runner's op and its arguments (per op)
        "pause": ("pause", {}), "resume": ("resume", {}),
        "retry": ("retry_item", {"item_id": getattr(args, "item", None)}),
        "cancel": ("cancel_item", {"item_id": getattr(args, "id", None)}),
        "skip": ("skip_item", {"item_id": getattr(args, "id", None)}),
        "delete": ("delete_item", {"item_id": getattr(args, "id", None)}),
        "move": ("move_item", {"item_id": getattr(args, "id", None), "direction": getattr(args, "direction", None)}),
        "clear": ("clear_queue", {"finished_only": bool(getattr(args, "finished", False))}),
    }
    op, op_args = ops[action]
    if runner_is_running(paths.data_dir()):
        try:
            reply = call_runner_sync(op, **op_args)
            print(_describe(action, reply))
            return 0
        except RunnerOpError as exc:
            print(f"moe-tui queue {action}: {exc}", file=sys.stderr)
            return EXIT_NOT_FOUND if exc.error_type == "QueueNotFound" else 1
        except RunnerUnavailable:
            pass  # the runner is starting or stopping: the store is still the truth
    queue = RunQueue(store)
    if action == "pause":
        queue.pause()
        result: Any = {"paused": True}
    elif action == "resume":
        queue.resume()
        result = {"paused": False}
    elif action == "retry":
        result = queue.retry(args.item).to_dict()
    elif action == "cancel":
        from moe_tui.store.jobs import ExecutorJobs

        job = ExecutorJobs(store).open_job_of(args.id)
        if job is not None:  # a batch job works it: its dispatcher cancels the job, then the item
            ExecutorJobs(store).ask_cancel(job.id)
            print(f"item #{args.id}: cancel asked; the {job.executor} dispatcher ends job {job.job_id or job.name}")
            return 0
        result = queue.cancel(args.id).to_dict()
    elif action == "skip":
        result = queue.skip(args.id).to_dict()
    elif action == "delete":
        queue.delete(args.id)
        result = {"deleted": args.id}
    elif action == "move":
        result = queue.move(args.id, args.direction).to_dict()
    else:
        result = queue.clear(finished_only=args.finished)
    print(_describe(action, result))
    return 0


def _describe(action: str, result: Any) -> str:
    if action in ("pause", "resume"):
        return "queue paused (takes effect between items)" if action == "pause" else "queue resumed"
    if action == "clear":
        return f"removed {result} item(s)"
    if action == "delete":
        return f"deleted item #{result['deleted']}"
    if isinstance(result, dict) and "id" in result:
        return f"item #{result['id']}: {result['state']}" + (f" (position {result['position']:g})" if action == "move" else "")
    if isinstance(result, dict) and "item_id" in result:
        return f"item #{result['item_id']}: {result['state']} (the running benchmark is being stopped)"
    return json.dumps(result)
