"""Text every renderer shares: escaping for Markdown, CSV and the terminal, the simulated banner,
a spec's fields and values as words, and the notes under a grid's points.

Kept apart from `formats` so that `markdown` and `formats` both import it and neither imports the other.
"""

from __future__ import annotations

import html
import json
import re
from typing import Any

from moe_tui.compare import BASELINE, CANDIDATE, ComparisonGrid
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


def _spec_fields(spec: dict[str, Any]) -> dict[str, Any]:
    try:
        canon = BenchmarkSpec.from_dict(spec).canonical_dict()
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
