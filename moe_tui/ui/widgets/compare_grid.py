"""CompareGrid: the comparison grid as a keyed table (row key = "concurrency/metric").

Every string comes from the core's `GridCell` (`moe_tui.compare`); only colour and layout are
decided here: every judgement.VERDICTS state in its words (better green, worse red, confounded
naming the fields, refused naming the spec fields, unreliable, interim, spec unverified ...), a
flagged side marked ⚑. The verdict column is short;
the highlighted cell's full verdict, refusal and flags are shown under the grid (`cell_detail`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from rich.text import Text

from moe_tui import judgement as J
from moe_tui.ui.widgets.keyed_table import KeyedTable

# Column widths include one trailing space (the table is drawn without cell padding so all
# seven columns fit 120 terminal columns). What a user reads first comes first (Conc, Metric,
# Delta, Verdict): on a narrow terminal only those show and the line under the grid gives the rest.
COLUMNS = (
    ("conc", "Conc", 5),
    ("metric", "Metric", 13),
    ("delta", "Delta", 20),  # "-2.2% (-2.12 tok/s)"; a longer one is whole in the detail line
    ("verdict", "Verdict", 17),  # "noise unknown ⚑ ⌕"; longer words are whole in the detail line
    ("ci", "CI (family)", 23),  # "[-22.9%, +18.5%] 98.3%": the interval the verdict used
    ("baseline", "Baseline", 19),  # "181.0 ± 0.835 (n=3)"; longer ones are whole in the detail line
    ("candidate", "Candidate", 18),
)  # 115 cells: a 120-column terminal less the panel's border and the scrollbar
WIDTHS = {key: width for key, _, width in COLUMNS}
# The interval as the grid labels it (the family-corrected one the verdict used), wherever it is named.
CI_LABEL = next(label for key, label, _ in COLUMNS if key == "ci")
# 80 columns: Conc, Metric, Delta and a verdict column as wide as what is left (borders and the
# scrollbar take 4).
NARROW_COLUMNS = {"conc": 5, "metric": 13, "delta": 21, "verdict": 33}

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
    if getattr(cell, "uncontrolled", "") and cell.verdict != J.UNCONTROLLED:  # shown only because accepted (`u`)
        text.append(" (uncontrolled)", style="magenta")
    if getattr(cell, "provisional", ""):  # runs are queued for the cell: the detail line says how many
        text.append(" (provisional)", style="italic")
    if cell.flagged:
        text.append(" ⚑", style="bold yellow")
    if getattr(cell, "investigation", ""):
        text.append(" ⌕", style="bold cyan")  # under investigation, or investigated
    return text


def cell_text(cell: Any) -> str:
    """What `/` matches a cell against: concurrency, metric, verdict in words, flags."""
    return (f"conc {cell.concurrency} {cell.concurrency} {cell.label} {cell.metric} "
            f"{J.VERDICT_WORDS.get(cell.verdict, cell.verdict)} {cell.verdict_text} {cell.flags_text}")


def cell_cells(cell: Any, first_of_concurrency: bool, changed: bool = False) -> tuple[object, ...]:
    """The row in COLUMNS order; `changed`: the verdict is not the one the user last saw (↻)."""
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
        Text(cell.delta_text or "—", style=style if cell.comparable else "dim"),
        Text.assemble(("↻ ", "bold cyan"), short_verdict(cell)) if changed else short_verdict(cell),
        Text(cell.ci_text or "—", style="" if cell.ci_text else "dim"),
        base,
        cand,
    )


def fit(text: Text, room: int) -> Text:
    """A cell cut to `room` cells, so that one blank always parts it from the next column (a cut
    with no mark read `2072.7 ± 83.02 (n=42265.7`, two numbers run together): the run count
    `(n=…)` goes first (the detail line under the grid has it), then the end, marked `…`."""
    if text.cell_len <= room:
        return text
    words = text.plain
    start = words.find(" (n=")
    end = words.find(")", start) if start > 0 else -1
    if end > 0:
        text = text[:start] + text[end + 1:]
        if text.cell_len <= room:
            return text
    out = text.copy()
    out.truncate(room, overflow="ellipsis")
    return out


def cell_detail(cell: Any, numbers: bool = False, change: str = "") -> Text:
    """The highlighted cell in full: verdict or refusal with the spec fields, flags in words;
    `numbers` adds the means and the interval (a narrow grid does not show their columns)."""
    style = VERDICT_STYLES.get(cell.verdict, "")
    text = Text.assemble((f"conc {cell.concurrency} {cell.label}", "bold"), " ",
                         (f"({'higher' if cell.higher_is_better else 'lower'} is better)", "dim"), ": ")
    text.append(cell.verdict_text, style=style)
    if numbers:  # the columns a narrow grid leaves out
        text.append(f"\n{CI_LABEL} {cell.ci_text or '—'} · baseline {cell.baseline.text} · candidate {cell.candidate.text}",
                    style="dim")
    for reason in cell.reasons:
        text.append(f"\n· {reason}", style="dim")
    if cell.flags_text:
        text.append(f"\n⚑ {cell.flags_text}", style="yellow")
    if getattr(cell, "investigation", ""):
        text.append(f"\n⌕ {cell.investigation}", style="cyan")
    if change:
        text.append(f"\n↻ changed since you last saw it: {change}", style="bold cyan")
    return text


class CompareGrid(KeyedTable):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(COLUMNS, zebra_stripes=False, cell_padding=0, **kwargs)
        self._cells_by_key: dict[str, Any] = {}

    def set_narrow(self, narrow: bool) -> None:
        self.show_columns(NARROW_COLUMNS if narrow else None)

    def _cell(self, key: str, value: Any) -> Any:
        text = super()._cell(key, value)
        width = self._widths.get(key) or WIDTHS.get(key)
        return fit(text, width - 1) if isinstance(text, Text) and width else text  # the last cell is the gap

    def show(self, grid: Any | None, changes: Mapping[tuple[int, str], str] | None = None,
             keep: Callable[[Any], bool] | None = None) -> None:
        """Paint `grid`; cells named in `changes` carry the ↻ mark (`control.seen`); `keep` (the
        `/` filter) leaves out the cells it refuses."""
        if grid is None:
            self._cells_by_key = {}
            self.sync({})
            return
        rows: dict[str, tuple[object, ...]] = {}
        last_conc = None
        self._cells_by_key = {}
        for cell in grid.cells:
            if keep is not None and not keep(cell):
                continue
            key = f"{cell.concurrency}/{cell.metric}"
            rows[key] = cell_cells(cell, cell.concurrency != last_conc, (cell.concurrency, cell.metric) in (changes or {}))
            self._cells_by_key[key] = cell
            last_conc = cell.concurrency
        self.sync(rows)

    @property
    def highlighted_cell(self) -> Any | None:
        key = self.highlighted_key
        return self._cells_by_key.get(key) if key else None
