"""Exports of a comparison grid: aligned text, Markdown, CSV, and a throughput plot (PNG + SVG).

Renderers take a `compare.ComparisonGrid` and only format what it already computed; the bytes of
the Markdown and CSV are a contract (golden-file tests), so nothing here depends on the clock,
the locale or the machine unless the caller passes it in (`generated_at`). Files are written
atomically (a temporary file in the same folder, then `os.replace`), so a reader never sees half
an export. The plot uses matplotlib's object API on the Agg canvas, imported only when a plot is
drawn, so rendering text never pays for matplotlib and no global pyplot state is touched.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

from moe_tui.compare import (
    BASELINE, BETTER, CANDIDATE, CONFIDENCE, CONTROL_CONFIDENCE, CONTROL_N1_THRESHOLD_PCT, DIFFERENT_SPEC,
    NO_DATA, NOISE_UNKNOWN, SETTLE_MAX_REPEATS, SETTLE_POWER, WITHIN_NOISE, WORSE, ComparisonGrid, GridCell,
)
from moe_tui.spec import BenchmarkSpec, SpecError

SIMULATED_BANNER = (
    "SIMULATED: at least one run in this comparison came from the SGLang emulator (moe_tui.sim); "
    "its numbers come from a performance model, not from a GPU."
)

CSV_COLUMNS = (
    "concurrency", "metric", "unit", "direction", "baseline_fingerprint", "candidate_fingerprint",
    "baseline_n", "baseline_mean", "baseline_std", "candidate_n", "candidate_mean", "candidate_std",
    "delta", "delta_pct", "ci_low", "ci_high", "ci_low_pct", "ci_high_pct", "welch_df", "verdict",
    "repeats_to_settle", "refusal", "baseline_flags", "candidate_flags",
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


# -- number formatting for machine-readable output --------------------------------------------------
def _num(x: float | None, digits: int = 4) -> str:
    if x is None:
        return ""
    if isinstance(x, float) and math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return f"{x:.{digits}f}"


def _md(text: Any) -> str:
    """A Markdown table cell: pipes escaped, newlines flattened."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def _side_name(grid: ComparisonGrid, side: str) -> str:
    return grid.baseline_name if side == BASELINE else grid.candidate_name


# -- CSV ------------------------------------------------------------------------------------------
def csv_rows(grid: ComparisonGrid) -> list[list[str]]:
    rows = []
    for c in grid.cells:
        pa, pb = grid.point(BASELINE, c.concurrency), grid.point(CANDIDATE, c.concurrency)
        rows.append([
            str(c.concurrency), c.metric, c.unit, "higher_is_better" if c.higher_is_better else "lower_is_better",
            pa.fingerprint or "", pb.fingerprint or "",
            str(c.baseline.n), _num(c.baseline.mean), _num(c.baseline.std),
            str(c.candidate.n), _num(c.candidate.mean), _num(c.candidate.std),
            _num(c.delta), _num(c.delta_pct), _num(c.ci_low), _num(c.ci_high), _num(c.ci_low_pct),
            _num(c.ci_high_pct), _num(c.df, 2), c.verdict,
            "" if c.repeats_needed is None else str(c.repeats_needed), c.refusal,
            " ".join(c.baseline_flags), " ".join(c.candidate_flags),
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
def _table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    rows = [list(r) for r in rows]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    line = lambda r: "  ".join(str(x).ljust(w) for x, w in zip(r, widths)).rstrip()  # noqa: E731
    return [line(header), line(["-" * w for w in widths]), *(line(r) for r in rows)]


def render_text(grid: ComparisonGrid) -> str:
    """The grid as an aligned plain-text table with verdicts, for a terminal."""
    out = [f"{grid.baseline_name} (baseline) vs {grid.candidate_name} (candidate)"]
    if grid.simulated:
        out.append("*** " + SIMULATED_BANNER + " ***")
    backend = next((d for d in grid.backend_diff), None)
    if backend is not None:
        out.append(f"compared: {backend.describe()}")
    out.append(grid.control.text)
    for w in grid.warnings:
        if w != grid.control.text:
            out.append(f"warning: {w}")
    out.append("")
    header = ["conc", "metric", f"B {grid.baseline_name}", f"C {grid.candidate_name}", "delta",
              f"{CONFIDENCE * 100:g}% CI", "verdict", "flags"]
    rows = []
    for c in grid.cells:
        rows.append([str(c.concurrency), f"{c.label} ({c.unit})", c.baseline.text, c.candidate.text,
                     c.delta_text or "-", c.ci_text or "-", c.verdict_text, c.flags_text])
    if rows:
        out.extend(_table(header, rows))
    else:
        out.append("no runs to compare")
    notes = _point_notes(grid)
    if notes:
        out.append("")
        out.extend(notes)
    from moe_tui.grid_extras import extras_lines  # issue 15: roofline % and correctness gate

    out.extend(["", *extras_lines(grid.extras)] if grid.extras is not None else [])
    return "\n".join(out) + "\n"


def _point_notes(grid: ComparisonGrid) -> list[str]:
    lines = []
    for conc in grid.concurrencies:
        for side in (BASELINE, CANDIDATE):
            p = grid.point(side, conc)
            for text in (*p.flag_notes, *p.notes):
                lines.append(f"- concurrency {conc}, {side} {_side_name(grid, side)}: {text}")
    return lines


# -- Markdown -------------------------------------------------------------------------------------
def _summary_counts(grid: ComparisonGrid) -> str:
    counts = grid.verdict_counts()
    shown = counts[BETTER] + counts[WORSE] + counts[WITHIN_NOISE] + counts[NOISE_UNKNOWN]
    refused = counts[DIFFERENT_SPEC] + counts[NO_DATA]
    return (f"{len(grid.cells)} cells; with a delta: {shown} (better {counts[BETTER]}, worse {counts[WORSE]}, "
            f"within noise {counts[WITHIN_NOISE]}, n=1 noise unknown {counts[NOISE_UNKNOWN]}); "
            f"no delta: {refused} (different spec {counts[DIFFERENT_SPEC]}, no data {counts[NO_DATA]})")


def _spec_fields(spec: dict[str, Any]) -> dict[str, Any]:
    try:
        canon = BenchmarkSpec.from_dict(spec).canonical_dict()
    except SpecError:
        canon = dict(spec)
    canon.pop("spec_schema", None)
    return canon


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "-"
    if v == "":
        return '""'
    if isinstance(v, (list, tuple, dict)):
        return json.dumps(v, sort_keys=True)
    return str(v)


def render_markdown(grid: ComparisonGrid, *, generated_at: str | None = None, plot_name: str | None = None,
                    version: str | None = None) -> str:
    """The whole comparison as Markdown. `plot_name` is the PNG beside it (SVG: same stem)."""
    b, c = grid.baseline_name, grid.candidate_name
    out: list[str] = [f"# moe-tui comparison: {b} vs {c}", ""]
    if grid.simulated:
        out += [f"> **{SIMULATED_BANNER}**", ""]
    by = f"moe-tui {version}" if version else "moe-tui"
    out += [f"Baseline **{b}**, candidate **{c}**. Generated by {by}" + (f" at {generated_at}." if generated_at else "."), ""]

    out += ["## Summary", "", f"- {_summary_counts(grid)}."]
    ctl = grid.control
    out.append(f"- Control check ({ctl.status}): {ctl.text}")
    if grid.flags:
        out.append(f"- Whole-comparison flags: {', '.join(grid.flags)}")
    out.append("")

    out += ["## Warnings", ""]
    out += [f"- {w}" for w in grid.warnings] or ["None."]
    out.append("")

    out += ["## Profiles", ""]
    if not grid.baseline_profile or not grid.candidate_profile:
        out += ["Profile snapshot not recorded for at least one side.", ""]
    out += ["| setting | baseline | candidate | kind |", "|---|---|---|---|"]
    for d in (*grid.backend_diff, *grid.launch_diff, *grid.identity_diff):
        kind = {"backend": "compared", "launch": "LAUNCH SETTING DIFFERS", "identity": "identity"}[d.kind]
        out.append(f"| {_md(d.key)} | {_md(_value(d.baseline))} | {_md(_value(d.candidate))} | {kind} |")
    same = [k for k in ("engine", "model_path", "tp_size", "ep_size", "quantization", "gpus", "extra_args")
            if k in grid.baseline_profile and grid.baseline_profile.get(k) == grid.candidate_profile.get(k)]
    for k in same:
        out.append(f"| {_md(k)} | {_md(_value(grid.baseline_profile[k]))} | {_md(_value(grid.candidate_profile[k]))} | same |")
    out.append("")
    if grid.launch_diff:
        out += [f"**{len(grid.launch_diff)} launch setting(s) besides the MoE backend differ**; "
                "a delta may come from them rather than from the backend.", ""]
    else:
        out += ["No launch setting besides the MoE backend differs.", ""]

    out += ["## Provenance", "", "| | baseline | candidate | |", "|---|---|---|---|"]
    for row in grid.provenance:
        out.append(f"| {_md(row.key)} | {_md(row.baseline)} | {_md(row.candidate)} | {'DIFFERS' if row.differs else ''} |")
    if not grid.provenance:
        out.append("| (none recorded) | | | |")
    out.append("")

    out += _markdown_specs(grid)

    if plot_name:
        stem = plot_name.rsplit(".", 1)[0]
        out += ["## Output throughput vs concurrency", "",
                f"![Output throughput vs concurrency]({plot_name})", "",
                "Error bars: one standard deviation over repeats. Hollow markers: no valid comparison at that "
                f"concurrency (different spec or one side missing). Vector version: [{stem}.svg]({stem}.svg).", ""]

    out += ["## Grid", "",
            f"B = {b} (baseline), C = {c} (candidate). Delta = C - B, in percent of B's mean; "
            f"CI = {CONFIDENCE * 100:g}% Welch confidence interval of the delta.", "",
            "| conc | metric | B mean ± std (n) | C mean ± std (n) | delta | CI | verdict | flags |",
            "|---:|---|---:|---:|---:|---|---|---|"]
    for cell in grid.cells:
        direction = "higher better" if cell.higher_is_better else "lower better"
        verdict = f"**{cell.verdict_text}**" if cell.verdict in (BETTER, WORSE) else cell.verdict_text
        out.append(
            f"| {cell.concurrency} | {_md(cell.label)} ({cell.unit}, {direction}) | {_md(cell.baseline.text)} | "
            f"{_md(cell.candidate.text)} | {_md(cell.delta_text or '-')} | {_md(cell.ci_text or '-')} | "
            f"{_md(verdict)} | {_md(cell.flags_text)} |"
        )
    if not grid.cells:
        out.append("| - | no runs | | | | | | |")
    out.append("")

    notes = _point_notes(grid)
    out += ["## Flags and notes per point", ""]
    out += notes or ["None."]
    out.append("")

    from moe_tui.grid_extras import extras_lines  # issue 15: roofline % and correctness gate

    if grid.extras is not None:
        out += ["## Roofline and correctness", "", *(f"- {_md(line.strip())}" for line in extras_lines(grid.extras)), ""]
    out += ["## Method", "",
            "- A delta is computed only where both sides ran the identical benchmark spec (same fingerprint); "
            "otherwise the cell names the spec fields that differ, with both values.",
            "- Only complete runs are averaged; incomplete and failed runs are counted and flagged.",
            f"- Verdict: better/worse when the {CONFIDENCE * 100:g}% Welch CI of the delta excludes 0 "
            "(direction per metric), else within noise. With one repeat on either side: no verdict (noise unknown).",
            f"- Repeats to settle: repeats per side for a {CONFIDENCE * 100:g}% Welch test to detect the observed "
            f"delta with {SETTLE_POWER * 100:g}% power, at the observed spreads (a rough guide; "
            f"not given beyond {SETTLE_MAX_REPEATS}).",
            f"- Control check: output throughput at concurrency 2 (else 1), where the MoE backend should barely "
            f"matter; environments differ if the {CONTROL_CONFIDENCE * 100:g}% CI excludes 0, or with n=1 if the "
            f"difference exceeds {CONTROL_N1_THRESHOLD_PCT:g}%.",
            ""]
    return "\n".join(out)


def _markdown_specs(grid: ComparisonGrid) -> list[str]:
    out = ["## Benchmark specs", ""]
    if not grid.specs:
        return out + ["No runs.", ""]
    fields = {fp: _spec_fields(dict(spec)) for fp, spec in grid.specs.items()}
    order = sorted(fields, key=lambda fp: (fields[fp].get("max_concurrency", 0), fp))
    names = list(dict.fromkeys(k for fp in order for k in fields[fp]))
    shared = [k for k in names if all(k in fields[fp] and fields[fp][k] == fields[order[0]].get(k) for fp in order)]
    varying = [k for k in names if k not in shared]
    out += ["Fields every spec shares:", "", "| field | value |", "|---|---|"]
    out += [f"| {_md(k)} | {_md(_value(fields[order[0]][k]))} |" for k in shared]
    out.append("")
    out += ["Each fingerprint (sha256 of the canonical spec) and the fields that vary:", ""]
    out.append("| fingerprint | used by | " + " | ".join(_md(k) for k in varying) + " |")
    out.append("|---|---|" + "---|" * len(varying))
    for fp in order:
        users = ", ".join(grid.spec_users.get(fp, ()))
        cells = " | ".join(_md(_value(fields[fp].get(k))) for k in varying)
        out.append(f"| `{fp[:12]}` | {users} | {cells} |" if varying else f"| `{fp[:12]}` | {users} |")
    out.append("")
    return out


# -- plot -----------------------------------------------------------------------------------------
def render_throughput_plot(grid: ComparisonGrid) -> tuple[bytes, bytes]:
    """Output throughput vs concurrency for both columns, as (PNG bytes, SVG bytes)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.5, 4.5), dpi=120)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    plotted, values, refused_seen = [], [], False
    for series, name, marker, color in ((grid.baseline_series, grid.baseline_name, "o", "tab:blue"),
                                        (grid.candidate_series, grid.candidate_name, "s", "tab:orange")):
        pts = [(c, m, s or 0.0, ok) for c, m, s, ok in
               zip(series.concurrencies, series.mean, series.std, series.comparable) if m is not None]
        if not pts:
            continue
        xs, ys, es, oks = zip(*pts)
        ax.errorbar(xs, ys, yerr=es, marker="none", capsize=3, color=color)
        # Filled markers where a delta is shown; hollow where the grid refuses one (the two points
        # were not measured alike, or one side is missing).
        for ok in (True, False):
            sel = [(x, y) for x, y, o in zip(xs, ys, oks) if o == ok]
            if not sel:
                continue
            refused_seen = refused_seen or not ok
            sx, sy = zip(*sel)
            ax.plot(sx, sy, linestyle="none", marker=marker, markersize=7, color=color,
                    markerfacecolor=color if ok else "white", label=name if ok or not any(oks) else None)
        plotted.extend(xs)
        values.extend(y for y in ys if y > 0)
    if plotted and min(plotted) > 0 and max(plotted) / min(plotted) >= 4:
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted(set(plotted)))
        ax.set_xticklabels([str(x) for x in sorted(set(plotted))])
    if values and max(values) / min(values) >= 20:
        ax.set_yscale("log")
    if refused_seen:
        ax.text(0.99, 0.01, "hollow: no valid comparison at this concurrency", transform=ax.transAxes,
                ha="right", va="bottom", fontsize=8)
    ax.set_xlabel("max concurrency")
    ax.set_ylabel("output throughput (tok/s)")
    title = f"{grid.baseline_name} vs {grid.candidate_name}"
    ax.set_title(("SIMULATED: " if grid.simulated else "") + title)
    ax.grid(True, alpha=0.3)
    if plotted:
        ax.legend()
    else:
        ax.text(0.5, 0.5, "no complete runs", transform=ax.transAxes, ha="center")
    fig.tight_layout()
    png, svg = io.BytesIO(), io.BytesIO()
    fig.savefig(png, format="png", metadata={"Software": None})
    fig.savefig(svg, format="svg", metadata={"Date": None})
    return png.getvalue(), svg.getvalue()


# -- everything at once ---------------------------------------------------------------------------
@dataclass(frozen=True)
class ExportPaths:
    markdown: Path
    csv: Path
    png: Path
    svg: Path

    def all(self) -> tuple[Path, ...]:
        return (self.markdown, self.csv, self.png, self.svg)


def export_stem(baseline: str, candidate: str) -> str:
    safe = lambda s: re.sub(r"[^A-Za-z0-9._-]+", "_", s)  # noqa: E731
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
        from moe_tui.grid_extras import extras_csv_rows

        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerows(extras_csv_rows(grid.extras))
        write_atomic(directory / f"{stem}-roofline.csv", buf.getvalue())
    write_atomic(paths.markdown, render_markdown(grid, generated_at=generated_at, plot_name=paths.png.name,
                                                 version=version))
    return paths
