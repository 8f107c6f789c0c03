"""Text every renderer shares: escaping for Markdown, CSV and the terminal, the simulated banner,
a spec's fields and values as words, and the notes under a grid's points.

Kept apart from `formats` so that `markdown` and `formats` both import it and neither imports the other.
"""

from __future__ import annotations

import html
import json
import re

from moe_tui.compare import BASELINE, CANDIDATE, ComparisonGrid
from moe_tui.records import SpecOverrides, StoredSpec
from moe_tui.spec import BenchmarkSpec, SpecError

SIMULATED_BANNER = (
    "SIMULATED: at least one run in this comparison came from the SGLang emulator (moe_tui.sim); "
    "its numbers come from a performance model, not from a GPU."
)


# -- escaping untrusted text ------------------------------------------------------------------------
_CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f-\x9f]")


_MD_SPECIAL = re.compile(r"([\\`\[\]|])")


def plain_text(text: object) -> str:
    """One line for a terminal: control characters (ANSI escapes, CR, newlines) become spaces."""
    return _CONTROL_CHARS.sub(" ", str(text))


def md(text: object) -> str:
    """Untrusted text as inert Markdown: no table break, no heading, no code span, link or HTML."""
    s = html.escape(plain_text(text), quote=False)
    s = _MD_SPECIAL.sub(r"\\\1", s)
    return "\\" + s if s.lstrip().startswith(("#", ">")) else s


def csv_text(text: object) -> str:
    """A CSV text cell a spreadsheet will not run as a formula."""
    s = str(text)
    return "'" + s if s[:1] in ("=", "+", "-", "@", "\t", "\r") else s


def _point_notes(grid: ComparisonGrid) -> list[str]:
    lines = []
    for conc in grid.concurrencies:
        for side in (BASELINE, CANDIDATE):
            p = grid.point(side, conc)
            for text in (*p.flag_notes, *p.notes):
                lines.append(f"- concurrency {conc}, {side} {_side_name(grid, side)}: {text}")
    lines += [f"- concurrency {c.concurrency}, {c.label}: {c.investigation}" for c in grid.cells if c.investigation]
    return lines


def _spec_fields(spec: StoredSpec) -> StoredSpec:
    try:
        canon: SpecOverrides = dict(BenchmarkSpec.from_dict(spec).canonical_dict())
    except SpecError:
        canon = dict(spec)
    canon.pop("spec_schema", None)
    return canon


def _value(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "-"
    if v == "":
        return '""'
    if isinstance(v, (list, tuple, dict)):
        return json.dumps(v, sort_keys=True)
    return str(v)


def _side_name(grid: ComparisonGrid, side: str) -> str:
    return grid.baseline_name if side == BASELINE else grid.candidate_name


def sim_clocks(grid: ComparisonGrid) -> dict[int, float]:
    """Concurrency -> the emulator clock (times real time) its runs ran at, for a simulated grid
    whose clock is not real time: the profiles' `[sim] time_scale`, slowed per cell where one client
    could not keep up (`judgement.sim_cell_time_scale`, the rule the runner applied). Empty otherwise."""
    from moe_tui.judgement import SIM_ENGINE, sim_cell_time_scale, sim_time_scale
    from moe_tui.profiles import _flag_map

    sims = [p for p in (grid.baseline_profile, grid.candidate_profile) if p and p.get("engine") == SIM_ENGINE]
    if not sims:
        return {}
    out: dict[int, float] = {}
    for conc in grid.concurrencies:
        scales = set()
        for prof in sims:
            raw = _flag_map(tuple(str(a) for a in prof.get("extra_args") or ())).get("--stream-interval")
            interval = max(1, int(str(raw))) if str(raw).isdigit() else 1
            scales.add(sim_cell_time_scale(sim_time_scale(prof), conc, interval))
        out[conc] = max(scales)
    return {} if all(s == 1 for s in out.values()) else out


def sim_clock_note(grid: ComparisonGrid) -> str:
    """The emulator clock in words, where simulated numbers are shown: tok/s read x N (latencies
    / N) against the modelled box; "" for a real or real-time grid."""
    clocks = sim_clocks(grid)
    if not clocks:
        return ""
    common = max(set(clocks.values()), key=list(clocks.values()).count)
    odd = ", ".join(f"{c} at x{s:g}" for c, s in clocks.items() if s != common)
    return (f"emulator clock x{common:g}" + (f" (concurrency {odd})" if odd else "")
            + ": simulated tok/s are the modelled box's times the clock, latencies divided by it; "
              "both sides of a cell ran on one clock, so deltas and verdicts are unaffected")
