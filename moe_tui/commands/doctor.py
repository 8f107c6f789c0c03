"""`moe-tui doctor`: check the store, and restore it from its backup when it is damaged.

    moe-tui doctor              full integrity check of the store; its backup and spilled runs
    moe-tui doctor --backup     take a (checked, rolling) backup now
    moe-tui doctor --repair     a damaged store: moved aside, the backup put in its place, and
                                what the damaged file held beyond the backup listed as lost
    moe-tui doctor --box        the GPU box: driver/NVML, GPUs, SGLang and FlashInfer, the profiles
                                through SGLang's parser, ports, disk, explain's recorder mode,
                                throttling, the data dir; ok/warn/fail each with its fix, --json
                                (moe_tui/commands/doctor_box.py); exit 1 when a check fails

Exit status: 0 sound (or repaired), 1 damaged and not repaired, or the repair failed, or the store
file is not a regular file (a link is followed: a link to a named pipe is named, not waited on);
2 a runner is using the store (stop it first: `moe-tui run --stop`), another process holds its
lock (locked is not damaged: nothing is checked or changed) or has it open (never replaced under
it). Never writes into a damaged file; a repair keeps the replaced file beside the restored one.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str, help_text: str) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help=help_text, description=help_text)
    action = p.add_mutually_exclusive_group()
    action.add_argument("--repair", action="store_true",
                        help="restore a damaged store from its backup, listing what is lost")
    action.add_argument("--backup", action="store_true", help="take a checked backup of the store now")
    action.add_argument("--box", action="store_true",
                        help="check the GPU box for the profiles: driver, GPUs, SGLang, ports, disk (one line each)")
    from moe_tui.commands.common import add_format, add_profiles_dir

    add_format(p, "with --box: the checks as JSON")

    add_profiles_dir(p)
    p.set_defaults(run=run)
    return p


def _say(text: str) -> None:
    print(f"moe-tui doctor: {text}", flush=True)


def _check(path: Path) -> list[str]:
    from moe_tui.store.integrity import full_check

    return full_check(path)


def _store_file(path: Path) -> tuple[Path | None, str]:
    """(the file to check, its words): a link is followed to what it names, which must be a
    regular file. Opened non-blocking to look, so a link to a named pipe is named, never waited on."""
    import os
    import stat

    real = Path(os.path.realpath(path))
    shown = f"{path} (a link to {real})" if real != path else str(path)
    try:
        fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        return None, f"{shown} cannot be opened: {exc.strerror or exc}"
    try:
        mode = os.fstat(fd).st_mode
    finally:
        os.close(fd)
    if not stat.S_ISREG(mode):
        kind = "a named pipe" if stat.S_ISFIFO(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) \
            else "a folder" if stat.S_ISDIR(mode) else "not a regular file"
        return None, f"{shown} is {kind}, not a store file; nothing was changed: move it aside"
    return real, shown


def run(args: argparse.Namespace) -> int:
    from moe_tui import paths
    from moe_tui.run.rendezvous import WATCHDOG_SWEEP_WAIT_S, runner_is_running, wait_out_watchdog
    from moe_tui.store.integrity import StoreLocked, _age_words, backup_path

    if args.box:
        return _box(args)
    if args.json:
        _say("--json goes with --box")
        return 2
    data_dir = paths.data_dir()
    named = paths.store_path()
    if not os.path.lexists(named):
        _say(f"no store at {named} yet: nothing to check")
        return 0
    path, shown = _store_file(named)
    if path is None:
        _say(f"store {shown}")
        return 1
    if args.repair or args.backup:
        # a runner that just ended: its watchdog's sweep, then the lock is free
        sweeping = wait_out_watchdog(data_dir, say=_say)
        if sweeping:
            _say(f"the watchdog (pid {sweeping}) of a runner that ended still holds {shown} after "
                 f"{WATCHDOG_SWEEP_WAIT_S:.0f} s; nothing was changed: run doctor again once it is gone")
            return 2
    pid = runner_is_running(data_dir)
    if pid and (args.repair or args.backup):
        _say(f"a runner (pid {pid}) is using {shown}; stop it first (moe-tui run --stop)")
        return 2
    try:
        problems = _check(path)
    except StoreLocked as exc:  # locked is not damaged: never "repaired" by an older backup
        _say(f"store {shown}: LOCKED by another process, not checked ({exc}); nothing was changed: "
             f"run doctor again once it lets go")
        return 2
    backup = backup_path(named)  # the runner keeps it beside the store's name in the data dir
    age = _age_words(backup)
    _say(f"store {shown}: " + ("sound (integrity_check ok)" if not problems else
                              "DAMAGED: " + "; ".join(problems[:5])))
    _say(f"backup {backup}: {age}" if age else f"backup {backup}: none yet (the runner takes one daily; `moe-tui store backup` now)")
    _report_spill(named)
    if args.backup:
        return _backup(named, problems)
    if not problems:
        return 0
    if not args.repair:
        _say("nothing was changed; `moe-tui doctor --repair` restores the backup" if age else
             f"nothing was changed; there is no backup: copy the file aside and try `sqlite3 {path} .recover`")
        return 1
    return _repair(path, backup)


def _backup(path: Path, problems: list[str]) -> int:
    from moe_tui.store.db import Store
    from moe_tui.store.errors import StoreError
    from moe_tui.store.integrity import backup_store

    if problems:
        _say("no backup of a damaged store (it would replace the good one)")
        return 1
    try:
        with Store(path) as store:
            where = backup_store(store)
    except StoreError as exc:
        _say(str(exc))
        return 1
    _say(f"backup taken: {where.words() if where else 'none'}")
    return 0


def _repair(path: Path, backup: Path) -> int:
    from moe_tui.store.integrity import holders, restore

    held = holders(path)
    if held:  # a process with the file open would go on writing into the file moved aside
        _say(f"{path} is held open by {', '.join(held[:5])}: not replaced; stop it first, nothing was changed")
        return 2
    try:
        done = restore(path, backup)
    except (RuntimeError, OSError, sqlite3.Error) as exc:
        _say(f"repair failed, nothing changed: {exc}")
        return 1
    _say(f"the damaged store was moved to {done.damaged_to}")
    _say(f"restored {path} from {done.backup} ({done.backup_runs} runs)")
    _say("lost (held by the damaged file, not by the backup):")
    for line in done.lost_lines:
        print(f"  {line}", flush=True)
    from moe_tui.store.integrity import StoreLocked

    try:
        problems = _check(path)
    except StoreLocked as exc:
        _say(f"the restored store could not be checked: {exc}; run doctor again")
        return 1
    if problems:
        _say(f"the restored store fails its check: {'; '.join(problems[:3])}")
        return 1
    _say("the restored store is sound")
    return 0


def _report_spill(store_path: Path) -> None:
    spill = store_path.parent / "spill"
    waiting = sorted(spill.glob("run-*.json")) if spill.is_dir() else []
    aside = sorted(p for p in spill.glob("run-*.json.*")) if spill.is_dir() else []
    if waiting:
        _say(f"{len(waiting)} spilled run(s) wait in {spill}; the next runner start stores them")
    if aside:
        _say(f"{len(aside)} spill file(s) set aside as untrusted or unreadable in {spill}: look, then delete")


def _box(args: argparse.Namespace) -> int:
    from moe_tui.commands.common import profiles_dir_for
    from moe_tui.commands.doctor_box import report, run_checks
    from moe_tui.profiles import load_profiles

    folder = Path(profiles_dir_for(args.profiles_dir))
    loaded = load_profiles(folder) if folder.is_dir() else None
    if loaded is None:
        _say(f"{folder}: no such folder of profiles (--profiles-dir)")
        return 4
    if not args.json:
        _say(f"the GPU box, for the {len(loaded.profiles)} profile(s) in {folder}")
    return report(run_checks(loaded.profiles, [str(p) for p in loaded.problems]), args.json)
