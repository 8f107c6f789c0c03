"""Exports of a comparison grid: aligned text, JSON, Markdown, CSV, and the throughput plot files.

Renderers take a `compare.ComparisonGrid` and only format what it already computed; every state is
shown in words from `judgement.VERDICT_WORDS` / `CONTROL_WORDS`. The bytes of the Markdown and CSV
are a contract (golden-file tests), so nothing here depends on the clock, the locale or the machine
unless the caller passes it in (`generated_at`). Text from profiles and imported files is untrusted:
Markdown escapes `|`, line breaks, a leading `#`, backticks, brackets and HTML; CSV text cells that
start like a formula (`= + - @`, tab, CR) get a leading `'`; the terminal text drops control
characters. Files are written atomically (a temporary file in the same folder, then `os.replace`).
The plot lives in `moe_tui.export.plot`.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import os
import re
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from moe_tui import judgement as J
from moe_tui.compare import BASELINE, CANDIDATE, ComparisonGrid
from moe_tui.export.text import SIMULATED_BANNER, _point_notes, csv_text, plain_text, sim_clock_note, sim_clocks

CSV_COLUMNS = (
    "concurrency", "metric", "unit", "direction", "family", "baseline_fingerprint", "candidate_fingerprint",
    "baseline_n", "baseline_mean", "baseline_std", "baseline_flagged_left_out", "candidate_n", "candidate_mean",
    "candidate_std", "candidate_flagged_left_out", "delta", "delta_pct", "ci_low", "ci_high", "ci_low_pct",
    "ci_high_pct", "welch_df", "p_value", "p_holm", "verdict", "verdict_words", "reasons", "repeats_to_settle",
    "baseline_flags", "candidate_flags", "ci_confidence", "baseline_starts", "candidate_starts", "uncontrolled",
    "sim_time_scale",  # the emulator clock the cell ran at (x real time; tok/s read x it); empty when real
)


# -- atomic files ---------------------------------------------------------------------------------
def write_atomic(path: str | Path, data: bytes | str) -> Path:
    """Write `data` to `path` through a temporary file in the same folder and `os.replace`."""
    path = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(payload)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _num(x: float | None, digits: int = 4) -> str:
    if x is None:
        return ""
    if isinstance(x, float) and math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return f"{x:.{digits}f}"


def _full(x: float | None) -> str:
    """A number in full precision (the shortest text that reads back as the same float): a p-value
    of 3e-09 is not "0.000000"."""
    if x is None:
        return ""
    return "inf" if x == math.inf else "-inf" if x == -math.inf else repr(float(x))


# -- JSON -----------------------------------------------------------------------------------------
def render_json(grid: ComparisonGrid) -> str:
    """The grid's JSON with the emulator clock each cell ran at (null when real), as text, CSV and
    Markdown say it: a script reading simulated tok/s must know they are x the clock."""
    data = grid.to_json_dict()
    clocks = sim_clocks(grid)
    for cell in data["cells"]:
        cell["sim_time_scale"] = clocks.get(cell["concurrency"])
    data["sim_clock"] = sim_clock_note(grid) or None
    return json.dumps(data, indent=2, allow_nan=False) + "\n"


# -- CSV ------------------------------------------------------------------------------------------
def csv_rows(grid: ComparisonGrid) -> list[list[str]]:
    rows, clocks = [], sim_clocks(grid)
    for c in grid.cells:
        pa, pb = grid.point(BASELINE, c.concurrency), grid.point(CANDIDATE, c.concurrency)
        rows.append([
            str(c.concurrency), c.metric, c.unit, "higher_is_better" if c.higher_is_better else "lower_is_better",
            c.family, pa.fingerprint or "", pb.fingerprint or "",
            str(c.baseline.n), _num(c.baseline.mean), _num(c.baseline.std), str(c.baseline.n_flagged_excluded),
            str(c.candidate.n), _num(c.candidate.mean), _num(c.candidate.std), str(c.candidate.n_flagged_excluded),
            _num(c.delta), _num(c.delta_pct), _num(c.ci_low), _num(c.ci_high), _num(c.ci_low_pct),
            _num(c.ci_high_pct), _num(c.df, 2), _full(c.p_value), _full(c.p_adjusted), c.verdict,
            csv_text(J.VERDICT_WORDS[c.verdict] + (" (uncontrolled)" if c.uncontrolled and c.verdict != J.UNCONTROLLED else "")
                     + (" (provisional)" if c.provisional else "")),
            csv_text(" | ".join(c.reasons)), "" if c.repeats_needed is None else str(c.repeats_needed),
            csv_text(" ".join(c.baseline_flags)), csv_text(" ".join(c.candidate_flags)), _num(c.ci_confidence),
            str(c.n_starts_baseline), str(c.n_starts_candidate), csv_text(c.uncontrolled),
            f"{clocks[c.concurrency]:g}" if c.concurrency in clocks else "",
        ])
    return rows


def render_csv(grid: ComparisonGrid) -> str:
    """One row per (concurrency, metric); numbers with 4 decimals; "\\n" line ends."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    writer.writerows(csv_rows(grid))
    return buf.getvalue()


# -- text -----------------------------------------------------------------------------------------
def _table(header: Sequence[str], rows: Iterable[Sequence[str]], width: int | None = None) -> list[str]:
    """An aligned table; with `width`, the columns that do not fit go under their row, wrapped."""
    rows = [list(r) for r in rows]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    keep = len(widths)
    if width is not None:
        while keep > 2 and sum(widths[:keep]) + 2 * (keep - 1) > width:
            keep -= 1

    def line(r: Sequence[str]) -> str:
        return "  ".join(str(x).ljust(w) for x, w in zip(r[:keep], widths[:keep])).rstrip()

    out = [line(header), line(["-" * w for w in widths])]
    for r in rows:
        out.append(line(r))
        rest = " · ".join(f"{h}: {x}" for h, x in zip(header[keep:], r[keep:]) if str(x) not in ("", "-"))
        if rest:
            out += wrap_lines(rest, width, indent="    ")
    return out


def wrap_lines(text: str, width: int | None, indent: str = "") -> list[str]:
    """`text` as lines of at most `width` cells (None: one line), continuation lines indented."""
    import textwrap

    if width is None:
        return [indent + text]
    return textwrap.wrap(text, width=max(width, 20), initial_indent=indent, subsequent_indent=indent + "  ",
                         break_on_hyphens=False) or [""]


def control_line(grid: ComparisonGrid) -> str:
    ctl = grid.control
    text = f"control: {J.CONTROL_WORDS[ctl.state]} ({ctl.text})"
    if ctl.environment_differences:
        text += "; environment beside it: " + "; ".join(ctl.environment_differences)
    return text


def render_text(grid: ComparisonGrid, width: int | None = None) -> str:
    """The grid as an aligned plain-text table with every cell's state in words, for a terminal;
    `width` (the terminal's columns) wraps long lines and moves the columns that do not fit
    (verdict words, flags) under their row."""
    t = plain_text
    out = [f"{t(grid.baseline_name)} (baseline) vs {t(grid.candidate_name)} (candidate)"]
    if grid.simulated:
        out.append("*** " + SIMULATED_BANNER + " ***")
        if sim_clock_note(grid):
            out.append(sim_clock_note(grid))
    for d in grid.backend_diff:
        out.append(f"compared: {t(d.describe())}")
    out.append(t(control_line(grid)))
    for w in grid.warnings:
        if w != grid.control.text:
            out.append(f"warning: {t(w)}")
    out.append(f"method: {t(grid.method[3])}" if len(grid.method) > 3 else "")
    out.append("")
    header = ["conc", "metric", f"B {t(grid.baseline_name)}", f"C {t(grid.candidate_name)}", "delta",
              "interval (family-corrected)", "verdict", "flags"]
    rows = [[str(c.concurrency), f"{c.label} ({c.unit})" + ("" if c.primary else " ²"), t(c.baseline.text),
             t(c.candidate.text), c.delta_text or "-", c.ci_text or "-", t(c.verdict_text), t(c.flags_text)]
            for c in grid.cells]
    if width is not None:  # a terminal: what is read first (delta, interval, verdict) comes first
        order = (0, 1, 4, 5, 6, 2, 3, 7)
        header, rows = [header[k] for k in order], [[r[k] for k in order] for r in rows]
    out.extend(_table(header, rows, width) if rows else ["no runs to compare"])
    out.append("")
    out.append("² secondary metric (all secondary cells form one family); output tok/s across concurrencies is the "
               "primary family. The interval is the family-corrected one the verdict used; a cell without a verdict "
               "shows no delta (its means stay).")
    notes = _point_notes(grid)
    if notes:
        out.append("")
        out.extend(t(n) for n in notes)
    if grid.extras is not None:  # roofline % and the correctness gate
        from moe_tui.grids.extras import extras_lines

        out.extend(["", *(t(line) for line in extras_lines(grid.extras))])
    if width is not None:
        out = [w for line in out for w in (wrap_lines(line, width) if len(line) > width else [line])]
    return "\n".join(out) + "\n"


def render_markdown(grid: ComparisonGrid, *, generated_at: str | None = None, plot_name: str | None = None,
                    version: str | None = None) -> str:
    """The whole comparison as Markdown (`moe_tui.export.markdown`)."""
    from moe_tui.export.markdown import render_markdown as render

    return render(grid, generated_at=generated_at, plot_name=plot_name, version=version)


def render_throughput_plot(grid: ComparisonGrid) -> tuple[bytes, bytes]:
    from moe_tui.export.plot import render_throughput_plot as render

    return render(grid)


# -- everything at once ---------------------------------------------------------------------------
@dataclass(frozen=True)
class ExportPaths:
    markdown: Path
    csv: Path
    png: Path
    svg: Path

    extra: tuple[Path, ...] = ()  # the roofline and gate CSVs, when the grid carries them

    def all(self) -> tuple[Path, ...]:
        return (self.markdown, self.csv, self.png, self.svg, *self.extra)


def export_stem(baseline: str, candidate: str) -> str:
    def safe(s: str) -> str:
        return re.sub(r"[^A-Za-z0-9._-]+", "_", s)

    return f"{safe(baseline)}-vs-{safe(candidate)}"


def export_comparison(grid: ComparisonGrid, directory: str | Path, *, stem: str | None = None,
                      generated_at: str | None = None, version: str | None = None) -> ExportPaths:
    """Write <stem>.md, <stem>.csv, <stem>-throughput.png and .svg into `directory`, atomically each."""
    directory = Path(directory)
    stem = stem or export_stem(grid.baseline_name, grid.candidate_name)
    paths = ExportPaths(directory / f"{stem}.md", directory / f"{stem}.csv",
                        directory / f"{stem}-throughput.png", directory / f"{stem}-throughput.svg")
    png, svg = render_throughput_plot(grid)
    # Plot first: the Markdown links to it, so it must not appear before what it links.
    write_atomic(paths.png, png)
    write_atomic(paths.svg, svg)
    write_atomic(paths.csv, render_csv(grid))
    if grid.extras is not None:  # issue 15: roofline % per concurrency and the gate, beside the grid CSV
        from moe_tui.grids.extras import extras_csv_rows, gate_csv_rows

        extra = []
        for name, table in (("roofline", extras_csv_rows(grid.extras)), ("gate", gate_csv_rows(grid.extras))):
            buf = io.StringIO()
            # The same rule as the grid CSV: a text cell (a reason naming a model path, the gate's
            # words) never starts like a formula; numbers stay numbers. One table per file.
            rows = [[c if _is_number(c) else csv_text(c) for c in row] for row in table]
            csv.writer(buf, lineterminator="\n").writerows(rows)
            write_atomic(directory / f"{stem}-{name}.csv", buf.getvalue())
            extra.append(directory / f"{stem}-{name}.csv")
        paths = dataclasses.replace(paths, extra=tuple(extra))
    write_atomic(paths.markdown, render_markdown(grid, generated_at=generated_at, plot_name=paths.png.name,
                                                 version=version))
    return paths
