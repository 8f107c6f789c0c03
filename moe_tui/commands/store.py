"""`moe-tui store ...`: what months of runs cost, and keeping the store in bounds.

    moe-tui store usage [--json]                        size per profile and per campaign
    moe-tui store archive FILE [SELECTORS] [--prune]    runs to a file `moe-tui import FILE` reads back
    moe-tui store prune [SELECTORS] --yes [--archive FILE]
    moe-tui store vacuum [--full]                       give freed pages back to the file system
    moe-tui store keep-samples N|all                    per-request samples for the last N runs only
    moe-tui store backup                                renew the one checked backup beside the store

SELECTORS (every one given must hold): --older-than DAYS, --profile NAME, --campaign ID. A running
run is never selected. `prune` needs at least one selector and --yes, deletes the runs (their
requests and GPU samples with them) in one transaction, then frees the space. `archive --prune`
deletes only after the whole archive was written and flushed to disk.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from moe_tui.commands.common import add_format

if TYPE_CHECKING:
    from moe_tui.store.db import Store

DAY_S = 86400.0


def _selectors(p: argparse.ArgumentParser) -> None:
    p.add_argument("--older-than", type=float, metavar="DAYS", default=None,
                   help="runs finished more than DAYS days ago")
    p.add_argument("--profile", default=None, help="runs of this profile")
    p.add_argument("--campaign", type=int, metavar="ID", default=None, help="runs of this campaign's items")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str, help_text: str) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help=help_text, description=help_text)
    actions = p.add_subparsers(dest="store_action", metavar="ACTION")
    usage = actions.add_parser("usage", help="runs and bytes per profile and per campaign")
    add_format(usage, "machine-readable output")
    archive = actions.add_parser("archive", help="write runs to a file that `moe-tui import` reads back")
    archive.add_argument("file", help="the archive to write (JSON lines; refused if it exists)")
    _selectors(archive)
    archive.add_argument("--prune", action="store_true", help="then delete the archived runs and free the space")
    prune = actions.add_parser("prune", help="delete runs (with their requests and GPU samples), then vacuum")
    _selectors(prune)
    prune.add_argument("--archive", metavar="FILE", default=None, help="archive them to FILE first")
    prune.add_argument("--yes", action="store_true", help="really delete (without it: say what would go)")
    vacuum = actions.add_parser("vacuum", help="give freed pages back to the file system")
    vacuum.add_argument("--full", action="store_true", help="VACUUM (rewrites the whole file; needs its size free)")
    keep = actions.add_parser("keep-samples", help="keep per-request samples for the last N runs only")
    keep.add_argument("runs", help="N (0 keeps none), or 'all' (the default: keep every run's)")
    actions.add_parser("backup", help="renew the one checked backup beside the store (doctor --repair restores it)")
    p.set_defaults(run=run)
    return p


def run(args: argparse.Namespace) -> int:
    from moe_tui.store.archive import ArchiveError
    from moe_tui.store.db import Store
    from moe_tui.store.errors import StoreError

    action = getattr(args, "store_action", None)
    if action is None:
        print("moe-tui store: say what to do: usage, archive, prune, vacuum, keep-samples or backup", file=sys.stderr)
        return 2
    from moe_tui.commands.common import EXIT_NOT_FOUND, NotFound

    try:
        opened = Store.open_for_reading if action == "usage" else Store.open_default  # usage only reads
        with opened() as store:
            return int(ACTIONS[action](store, args))
    except NotFound as exc:
        print(f"moe-tui store {action}: {exc}", file=sys.stderr)
        return EXIT_NOT_FOUND
    except (StoreError, ArchiveError, ValueError, OSError) as exc:
        print(f"moe-tui store {action}: {exc}", file=sys.stderr)
        return 1


def _mb(n: float | None) -> str:
    return f"{(n or 0) / 1e6:,.1f} MB"


def _usage(store: Store, args: argparse.Namespace) -> int:
    usage = store.usage()
    if args.json:
        from moe_tui.store.space import bytes_by_kind

        print(json.dumps({**usage.to_dict(), "bytes_by_kind": bytes_by_kind(store),
                          "keep_samples_runs": store.keep_samples_runs()}, indent=2, sort_keys=True))
        return 0
    print(f"store {store.path}: {_mb(usage.file_bytes)} on disk ({_mb(usage.free_bytes)} free pages), "
          f"{usage.runs:,} runs")
    print(f"{'profile':<32} {'runs':>8} {'requests':>10} {'gpu samples':>12} {'stored':>12}")
    for p in usage.profiles:
        print(f"{p['name'][:32]:<32} {p['runs']:>8,} {p['requests'] or 0:>10,} {p['gpu_samples'] or 0:>12,} "
              f"{_mb(p['bytes']):>12}")
    if usage.campaigns:
        print(f"\n{'campaign':<40} {'items':>7} {'runs':>7} {'stored':>12}")
        for c in usage.campaigns:
            print(f"{('#' + str(c['id']) + ' ' + (c['name'] or ''))[:40]:<40} {c['items']:>7,} {c['runs']:>7,} "
                  f"{_mb(c['bytes']):>12}")
    _growth(store, usage.runs)
    from moe_tui.store.backup import backup_words

    print(backup_words(store.path))
    return 0


def _growth(store: Store, runs: int) -> None:
    """What grows with every run, and what is bounded (issue 34: per-run bytes grew without a limit)."""
    from moe_tui.store.retention import DEFAULT_KEEP_SAMPLES_RUNS
    from moe_tui.store.space import bytes_by_kind

    kinds = bytes_by_kind(store)
    keep = store.keep_samples_runs()
    default = " (the default)" if keep == DEFAULT_KEEP_SAMPLES_RUNS else ""
    bound = ("every run's: grows with every run" if keep is None else
             f"the last {keep:,} runs'{default}: bounded")
    print("\nwhat grows (pages on disk):")
    print(f"  {'runs, summaries, starts':<26} {_mb(kinds['runs']):>12}  {kinds['runs'] / max(runs, 1) / 1e3:,.1f} KB "
          "per run, every run adds it (`store archive --prune` removes old runs)")
    print(f"  {'per-request samples':<26} {_mb(kinds['samples']):>12}  kept: {bound} (`store keep-samples N|all`)")
    print(f"  {'queue and campaigns':<26} {_mb(kinds['queue']):>12}  `queue clear --finished` removes finished items")
    print(f"  {'free pages':<26} {_mb(kinds['free']):>12}  `store vacuum` gives them back")


def _selected(store: Store, args: argparse.Namespace) -> list[int]:
    if args.older_than is None and args.profile is None and args.campaign is None:
        raise ValueError("name the runs: --older-than DAYS, --profile NAME and/or --campaign ID")
    if args.older_than is not None and not args.older_than >= 0:
        raise ValueError(f"--older-than {args.older_than}: days must be >= 0")
    from moe_tui.commands.common import NotFound

    if args.profile is not None and args.profile not in store.profile_names_with_runs():
        raise NotFound(f"--profile {args.profile}: no such profile in store file {store.path} (it has no runs)")
    if args.campaign is not None:
        from moe_tui.store.queue import QueueNotFound, RunQueue

        try:
            RunQueue(store).campaign(args.campaign)
        except QueueNotFound:
            raise NotFound(f"--campaign {args.campaign}: no such campaign in store file {store.path}") from None
    return store.select_run_ids(older_than_s=None if args.older_than is None else args.older_than * DAY_S,
                                profile=args.profile, campaign_id=args.campaign)


def _write_archive(store: Store, ids: list[int], file: str) -> None:
    """The archive is written to a new file of ours beside `file` (mkstemp: O_EXCL, 0600, an
    unguessable name, so a `.partial` link planted there is never followed), flushed, then linked
    to `file` (which fails if `file` appeared meanwhile: never overwritten). Any failure removes
    the partial file and names the archive and the reason."""
    import tempfile

    path = Path(file)
    if os.path.lexists(path):
        raise ValueError(f"{path} exists: an archive is never overwritten (name a new file)")
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent or ".")
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            store.archive_runs(ids, out)
            out.flush()
            os.fsync(out.fileno())
        _publish(tmp, path)  # a whole archive or none: an interrupted one never looks complete
    except FileExistsError:
        raise ValueError(f"{path} appeared while the archive was written: never overwritten; nothing archived") from None
    except OSError as exc:
        raise OSError(f"writing archive {path} failed ({exc.strerror or exc}); nothing archived, "
                      f"no partial file left") from None
    finally:
        tmp.unlink(missing_ok=True)
    print(f"archived {len(ids):,} run(s) to {path} ({_mb(path.stat().st_size)}); `moe-tui import {path}` restores them")


def _publish(tmp: Path, path: Path) -> None:
    """`tmp` under the name `path`, never over an existing `path`: a hard link (fails if it exists);
    on a file system without hard links, a rename after one more look."""
    import errno

    try:
        os.link(tmp, path)
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.EMLINK):
            raise
        if os.path.lexists(path):
            raise FileExistsError(path) from None
        os.rename(tmp, path)


def _prune_ids(store: Store, ids: list[int]) -> None:
    before = store.file_bytes()
    deleted = store.delete_runs(ids)
    print(f"deleted {deleted:,} run(s) with their requests and GPU samples; "
          f"store {store.reclaim(before=before).words()}")


def _archive(store: Store, args: argparse.Namespace) -> int:
    ids = _selected(store, args)
    if not ids:
        print("no run matches: nothing archived")
        return 0
    _write_archive(store, ids, args.file)
    if args.prune:
        _prune_ids(store, ids)
    return 0


def _prune(store: Store, args: argparse.Namespace) -> int:
    ids = _selected(store, args)
    if not ids:
        print("no run matches: nothing deleted")
        return 0
    if not args.yes:
        print(f"{len(ids):,} run(s) match (ids {ids[0]}..{ids[-1]}); nothing deleted: add --yes to delete them"
              + ("" if args.archive else " (--archive FILE keeps a copy)"))
        return 1
    if args.archive:
        _write_archive(store, ids, args.archive)
    _prune_ids(store, ids)
    return 0


def _vacuum(store: Store, args: argparse.Namespace) -> int:
    print(f"store {store.path}: {store.reclaim(full=args.full).words()}")
    return 0


def _keep_samples(store: Store, args: argparse.Namespace) -> int:
    text = str(args.runs).strip().lower()
    if text == "all":
        store.set_keep_samples_runs(None)
        print("per-request samples: kept for every run")
        return 0
    try:
        n = int(text)
    except ValueError:
        raise ValueError(f"keep-samples {args.runs!r}: a whole number of runs, or 'all'") from None
    before = store.file_bytes()
    store.set_keep_samples_runs(n)
    dropped = store.apply_sample_retention()
    print(f"per-request samples: kept for the last {n} run(s); dropped from {dropped:,} older run(s) "
          f"(their summaries and flags stay); store {store.reclaim(before=before).words()}")
    return 0


def _backup(store: Store, args: argparse.Namespace) -> int:
    from moe_tui.store.backup import backup_store

    taken = backup_store(store)
    print(taken.words() if taken else "no backup taken")
    return 0


ACTIONS = {"usage": _usage, "archive": _archive, "prune": _prune, "vacuum": _vacuum, "keep-samples": _keep_samples,
           "backup": _backup}
