"""Which server a process belongs to, read from the live process table with judgement's one rule.

`judgement.server_family` says a server is its leader, every descendant of it, and every process
carrying its start's `MOE_TUI_SERVER_ID` marker (with their descendants); `judgement.owner_of`
names the family holding a pid. This module only gathers the facts those rules need from psutil:

- `process_parents()`: pid -> parent pid of every visible process (the lifecycle's full sweep);
- `ancestry(pids)`: the same map restricted to the given pids and their ancestor chains (cheap:
  the dashboard asks about the handful of pids NVML lists, once a second);
- `marked_pids(markers, pids)`: which of those pids carry which server's marker (our own user's
  processes only: another user's environment is not readable, so it cannot be claimed);
- `server_families(...)` and `gpu_owners(...)`: the rule applied.

Works the same for the emulator's tree and for a real SGLang TP8 tree listed by NVML.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping

from moe_tui.judgement import SERVER_ID_ENV, owner_of, server_family


def process_parents() -> dict[int, int]:
    """pid -> ppid for every process psutil can see."""
    import psutil

    out: dict[int, int] = {}
    for proc in psutil.process_iter(["ppid"]):
        ppid = proc.info.get("ppid")
        if ppid is not None:
            out[proc.pid] = ppid
    return out


def ancestry(pids: Iterable[int]) -> dict[int, int]:
    """pid -> ppid for `pids` and all their ancestors (gone or invisible pids are left out)."""
    import psutil

    out: dict[int, int] = {}
    for pid in pids:
        current = int(pid)
        while current > 1 and current not in out:
            try:
                ppid = psutil.Process(current).ppid()
            except (psutil.Error, OSError):
                break
            out[current] = ppid
            current = ppid
    return out


def marker_of(pid: int) -> str | None:
    """The server marker in a process's environment (None: none, or not ours to read)."""
    import psutil

    with contextlib.suppress(psutil.Error, OSError):
        marker: str | None = psutil.Process(pid).environ().get(SERVER_ID_ENV)
        return marker
    return None


def marked_pids(markers: Iterable[str], pids: Iterable[int]) -> dict[str, set[int]]:
    """For each marker, which of `pids` carry it."""
    wanted = {m for m in markers if m}
    out: dict[str, set[int]] = {m: set() for m in wanted}
    if not wanted:
        return out
    for pid in pids:
        mark = marker_of(pid)
        if mark in wanted:
            out[mark].add(pid)
    return out


def server_families(leaders: Mapping[str, int | None], markers: Mapping[str, str | None] | None = None,
                    parent_of: Mapping[int, int] | None = None) -> dict[str, frozenset[int]]:
    """Each server's family (judgement.server_family) over `parent_of` (default: the whole table)."""
    parent_of = process_parents() if parent_of is None else parent_of
    markers = markers or {}
    marks = marked_pids([m for m in markers.values() if m], parent_of.keys()) if any(markers.values()) else {}
    return {name: server_family(leaders.get(name), parent_of, marks.get(markers.get(name) or "", ()))
            for name in set(leaders) | set(markers)}


def gpu_owners(pids: Iterable[int], leaders: Mapping[str, int | None],
               markers: Mapping[str, str | None] | None = None) -> dict[int, str]:
    """pid -> server name for the `pids` (e.g. every compute process NVML lists) that belong to a
    server; foreign ones are absent. Looks only at those pids and their ancestors."""
    pids = [int(p) for p in pids]
    if not pids:
        return {}
    parent_of = ancestry(pids)
    families = server_families(leaders, markers, parent_of)
    out = {}
    for pid in pids:
        name = owner_of(pid, families)
        if name is not None:
            out[pid] = name
    return out


def descendants_of(pids: Iterable[int]) -> set[int]:
    """The given pids and every live descendant (the run's "our pids"), by the same rule."""
    parent_of = process_parents()
    out: set[int] = set()
    for pid in pids:
        out |= server_family(int(pid), parent_of)
    return out
