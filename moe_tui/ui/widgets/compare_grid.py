"""CompareGrid: the comparison grid as a keyed table (row key = "concurrency/metric").

Every string comes from the core's `GridCell` (`moe_tui.compare`); only colour and layout are
decided here: every judgement.VERDICTS state in its words (better green, worse red, confounded
naming the fields, refused naming the spec fields, unreliable, interim, spec unverified ...), a
flagged side marked ⚑. The verdict column is short;
the highlighted cell's full verdict, refusal and flags are shown under the grid (`cell_detail`).
"""

from __future__ import annotations

from typing import Any

from rich.text import Text

from moe_tui import judgement as J
from moe_tui.ui.widgets.keyed_table import KeyedTable

# Column widths include one trailing space (the table is drawn without cell padding so all
# seven columns fit 120 terminal columns).
COLUMNS = (
    ("conc", "Conc", 5),
    ("metric", "Metric", 13),
    ("baseline", "Baseline", 21),  # "10.36 ± 0.00206 (n=2)"
    ("candidate", "Candidate", 21),
    ("delta", "Delta", 22),  # "-36.4% (-400.1 tok/s)"
    ("ci", "CI (family-corr.)", 23),  # "[-22.9%, +18.5%] 98.3%": the interval the verdict used
    ("verdict", "Verdict", None),
)

VERDICT_STYLES = {
    J.BETTER: "bold green",
    J.WORSE: "bold red",
    J.WITHIN_NOISE: "dim",
    J.NOISE_UNKNOWN: "italic",
    J.INTERIM: "italic cyan",
    J.REFUSED: "yellow",
    J.CONFOUNDED: "bold yellow",
    J.UNRELIABLE: "bold magenta",
    J.UNVERIFIED: "yellow",
    J.NO_DATA: "dim",
}


def short_verdict(cell: Any) -> Text:
    """The state in words (judgement.VERDICT_WORDS); user text stays plain Text, never markup."""
    style = VERDICT_STYLES.get(cell.verdict, "")
    if cell.verdict == J.REFUSED and cell.spec_diffs:
        return Text("≠ " + ", ".join(d.field for d in cell.spec_diffs), style=style)
    if cell.verdict == J.CONFOUNDED and cell.confounders:
        return Text("confounded: " + ", ".join(c.field for c in cell.confounders), style=style)
    # The column is narrow; the detail line under the grid spells the reasons out.
    text = Text(J.VERDICT_WORDS.get(cell.verdict, cell.verdict), style=style)
    if getattr(cell, "uncontrolled", ""):  # shown only because uncontrolled verdicts are accepted (`u`)
        text.append(" (uncontrolled)", style="magenta")
    if cell.flagged:
        text.append(" ⚑", style="bold yellow")
    if getattr(cell, "investigation", ""):
        text.append(" ⌕", style="bold cyan")  # under investigation, or investigated
    return text


def cell_cells(cell: Any, first_of_concurrency: bool) -> tuple[object, ...]:
    style = VERDICT_STYLES.get(cell.verdict, "")
    base = Text(cell.baseline.text)
    cand = Text(cell.candidate.text)
    if cell.baseline_flags:
        base.append(" ⚑", style="bold yellow")
    if cell.candidate_flags:
        cand.append(" ⚑", style="bold yellow")
    return (
        Text(str(cell.concurrency), style="bold") if first_of_concurrency else "",
        Text(cell.label),
        base,
        cand,
        Text(cell.delta_text or "—", style=style if cell.comparable else "dim"),
        Text(cell.ci_text or "—", style="" if cell.ci_text else "dim"),
        short_verdict(cell),
    )


def cell_detail(cell: Any) -> Text:
    """The highlighted cell in full: verdict or refusal with the spec fields, flags in words."""
    style = VERDICT_STYLES.get(cell.verdict, "")
    text = Text.assemble((f"conc {cell.concurrency} {cell.label}", "bold"), " ",
                         (f"({'higher' if cell.higher_is_better else 'lower'} is better)", "dim"), ": ")
    text.append(cell.verdict_text, style=style)
    for reason in cell.reasons:
        text.append(f"\n· {reason}", style="dim")
    if cell.flags_text:
        text.append(f"\n⚑ {cell.flags_text}", style="yellow")
    if getattr(cell, "investigation", ""):
        text.append(f"\n⌕ {cell.investigation}", style="cyan")
    return text


class CompareGrid(KeyedTable):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(COLUMNS, zebra_stripes=False, cell_padding=0, **kwargs)
        self._cells_by_key: dict[str, Any] = {}

    def show(self, grid: Any | None) -> None:
        if grid is None:
            self._cells_by_key = {}
            self.sync({})
            return
        rows: dict[str, tuple[object, ...]] = {}
        last_conc = None
        self._cells_by_key = {}
        for cell in grid.cells:
            key = f"{cell.concurrency}/{cell.metric}"
            rows[key] = cell_cells(cell, cell.concurrency != last_conc)
            self._cells_by_key[key] = cell
            last_conc = cell.concurrency
        self.sync(rows)

    @property
    def highlighted_cell(self) -> Any | None:
        key = self.highlighted_key
        return self._cells_by_key.get(key) if key else None
