"""What the user last saw of each grid cell, and why a verdict differs from it now.

A verdict can change with no new run of its own (another cell joined its multiple-comparison
family, the control check changed, an investigation's runs arrived): shown silently, that reads
as flicker. `SeenVerdicts` keeps, per (baseline, candidate, concurrency, metric), the cell as the
user last saw it; a grid whose verdict differs from that is a change, worded with what moved
(runs, means, the interval, the control check) until the user has looked at the cell again.
Plain Python over the core's grid cells; no Textual.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from moe_tui import judgement as J

DEFAULT_INTERVAL_LABEL = "CI"


@dataclass(frozen=True)
class SeenCell:
    verdict: str
    baseline_n: int
    candidate_n: int
    baseline_mean: float | None
    candidate_mean: float | None
    delta_text: str
    ci_text: str
    control: str

    @classmethod
    def of(cls, cell: Any, control: str) -> SeenCell:
        return cls(cell.verdict, cell.baseline.n, cell.candidate.n, cell.baseline.mean, cell.candidate.mean,
                   cell.delta_text, cell.ci_text, control)


def change_words(was: SeenCell, now: SeenCell, interval_label: str = DEFAULT_INTERVAL_LABEL) -> str:
    """'was worse (-5.1% (-2 tok/s), 95% CI [-9.0%, -1.2%], n=2 vs 2); why: ...'."""
    words = J.VERDICT_WORDS
    before = [w for w in (was.delta_text, f"{interval_label} {was.ci_text}" if was.ci_text else "") if w]
    before.append(f"n={was.baseline_n} vs {was.candidate_n}")
    why = []
    if (was.baseline_n, was.candidate_n) != (now.baseline_n, now.candidate_n):
        why.append(f"runs n={was.baseline_n}->{now.baseline_n} vs {was.candidate_n}->{now.candidate_n}")
    elif (was.baseline_mean, was.candidate_mean) != (now.baseline_mean, now.candidate_mean):
        why.append("the same number of runs with other means (a run was replaced or excluded)")
    if was.ci_text != now.ci_text and was.ci_text and now.ci_text:
        why.append(f"{interval_label} {was.ci_text} -> {now.ci_text}")
    if was.control != now.control:
        why.append(f"control check {J.CONTROL_WORDS.get(was.control, was.control)} -> "
                   f"{J.CONTROL_WORDS.get(now.control, now.control)}")
    if not why:
        why.append("same runs and means: the judgement around the cell changed (its multiple-comparison "
                   "family, a flag or a setting)")
    return (f"was {words.get(was.verdict, was.verdict)} ({', '.join(before)}), "
            f"now {words.get(now.verdict, now.verdict)}; why: {'; '.join(why)}")


class SeenVerdicts:
    """The cells as the user last saw them, per comparison direction."""

    def __init__(self) -> None:
        self._seen: dict[tuple[str, str, int, str], SeenCell] = {}

    @staticmethod
    def _key(grid: Any, cell: Any) -> tuple[str, str, int, str]:
        return (grid.baseline_name, grid.candidate_name, cell.concurrency, cell.metric)

    def changes(self, grid: Any, interval_label: str = DEFAULT_INTERVAL_LABEL) -> dict[tuple[int, str], str]:
        """(concurrency, metric) -> why its verdict is not the one the user last saw. A cell seen
        for the first time, with the verdict last seen, or that had no data then (new, not
        changed), is recorded as seen. `interval_label`: the interval as the grid names it."""
        control = grid.control.state
        label = interval_label
        out: dict[tuple[int, str], str] = {}
        for cell in grid.cells:
            key = self._key(grid, cell)
            now = SeenCell.of(cell, control)
            was = self._seen.get(key)
            if was is None or was.verdict in (now.verdict, J.NO_DATA):
                self._seen[key] = now
            else:
                out[(cell.concurrency, cell.metric)] = change_words(was, now, label)
        return out

    def acknowledge(self, grid: Any, cell: Any) -> None:
        """The user has looked at this cell (highlighted it): what it shows now is what they saw."""
        self._seen[self._key(grid, cell)] = SeenCell.of(cell, grid.control.state)
