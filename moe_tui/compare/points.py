"""Which runs stand behind each (side, concurrency): the chosen spec, the runs averaged, and why.

`choose_fingerprints` picks one spec per side (forced, else shared, else most recent);
`side_point` splits that spec's runs into averaged, flagged and not-complete, in words.
Both choose from what any run key says (`Keyed`: a whole `Run`, or the store's `grid_rows.CellRow`,
read from an index), so a grid reads whole only the runs of the spec it chose (issue 34).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from moe_tui import judgement as J
from moe_tui.compare.model import SidePoint
from moe_tui.compare.runs import Run, run_flags_in_words, snapshot_text, unknown_spec_fields


class Keyed(Protocol):
    """What choosing a spec reads of a run."""

    @property
    def id(self) -> int: ...
    @property
    def fingerprint(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def order(self) -> tuple[float, int]: ...



@dataclass(frozen=True)
class SideRuns:
    """The runs of a side's chosen spec at one concurrency."""

    averaged: tuple[Run, ...]  # what the mean is over (clean; flagged too with include_flagged)
    complete: tuple[Run, ...]  # every complete run of the spec
    all: tuple[Run, ...]  # including incomplete and failed
    flagged: tuple[Run, ...]  # complete runs with a suspect flag


def _rank(runs: Sequence[Keyed]) -> tuple[bool, tuple[float, int]]:
    return (any(r.status == "complete" for r in runs), max(r.order for r in runs))


def choose_fingerprints(a: Sequence[Keyed], b: Sequence[Keyed], forced: str | None) -> tuple[str | None, str | None]:
    """Deterministic spec choice per side: the forced one, else a shared one, else the most recent."""
    ga: dict[str, list[Keyed]] = {}
    gb: dict[str, list[Keyed]] = {}
    for r in a:
        ga.setdefault(r.fingerprint, []).append(r)
    for r in b:
        gb.setdefault(r.fingerprint, []).append(r)

    def best(groups: dict[str, list[Keyed]]) -> str | None:
        return max(groups, key=lambda fp: (_rank(groups[fp]), fp)) if groups else None

    fa = fb = None
    if forced is not None:
        fa = next((fp for fp in sorted(ga) if fp.startswith(forced)), None)
        fb = next((fp for fp in sorted(gb) if fp.startswith(forced)), None)
    common = (set(ga) & set(gb))
    if fa is None and fb is not None and fb in ga:
        fa = fb
    if fb is None and fa is not None and fa in gb:
        fb = fa
    if fa is None and fb is None and common:
        def shared_rank(fp: str) -> tuple[Any, ...]:
            ra, rb = _rank(ga[fp]), _rank(gb[fp])
            return (ra[0] and rb[0], max(ra[1], rb[1]), fp)

        fa = fb = max(common, key=shared_rank)
    if fa is None:
        fa = best(ga)
    if fb is None:
        fb = best(gb)
    return fa, fb


def side_point(side: str, conc: int, runs: Sequence[Keyed], fp: str | None, other_has: str | None,
               include_flagged: bool, of_spec: Sequence[Run] = ()) -> tuple[SidePoint, SideRuns]:
    """`runs`: the side's runs at `conc` (keys); `of_spec`: those of `fp`, whole."""
    if fp is None:
        return SidePoint(side, conc, None, None, (), (), (), (), (), (), ()), SideRuns((), (), (), ())
    chosen = sorted(of_spec, key=lambda r: r.order)
    complete = [r for r in chosen if r.status == "complete"]
    words: dict[str, list[str]] = {}
    flagged = []
    for r in chosen:
        found = run_flags_in_words(r)
        for code, text in found:
            words.setdefault(code, []).append(text)
        if r.status == "complete" and any(code in J.SUSPECT_FLAGS for code, _ in found):
            flagged.append(r)
    flagged_ids = {r.id for r in flagged}
    averaged = [r for r in complete if include_flagged or r.id not in flagged_ids]
    averaged_ids = {r.id for r in averaged}
    excluded = [r for r in chosen if r.id not in averaged_ids]
    profiles = {snapshot_text(r.profile) for r in complete if r.profile}
    if len(profiles) > 1:
        words.setdefault(J.FLAG_PROFILE_CHANGED, []).append(
            f"the {len(complete)} runs used {len(profiles)} different profile snapshots")
    codes = tuple(sorted(words))
    point = SidePoint(
        side, conc, fp, dict(chosen[0].spec) if chosen else None, tuple(r.id for r in averaged),
        tuple(r.id for r in excluded), tuple(r.id for r in flagged), _other_specs(runs, fp), codes,
        tuple(w for code in codes for w in words[code]), _notes(runs, fp, other_has),
        tuple(sorted({f for r in complete for f in unknown_spec_fields(r)})),
    )
    return point, SideRuns(tuple(averaged), tuple(complete), tuple(chosen), tuple(flagged))


def _other_specs(runs: Sequence[Keyed], fp: str) -> tuple[str, ...]:
    return tuple(sorted({r.fingerprint for r in runs if r.fingerprint != fp}))


def _notes(runs: Sequence[Keyed], fp: str, other_has: str | None) -> tuple[str, ...]:
    others: dict[str, int] = {}
    for r in runs:
        if r.fingerprint != fp:
            others[r.fingerprint] = others.get(r.fingerprint, 0) + 1
    if not others:
        return ()
    why = "shared with the other side" if fp == other_has else "the most recent"
    listed = ", ".join(f"{o[:12]} ({k} run{'s' if k != 1 else ''})" for o, k in sorted(others.items()))
    return (f"other specs exist at this concurrency: {listed}; using {fp[:12]} ({why})",)
