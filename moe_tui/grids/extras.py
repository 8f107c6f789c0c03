"""What the comparison grid adds from issue 15: % of roofline per concurrency and the gate verdict.

Kept apart from `compare.py` (which builds the grid proper) so either can change alone:
- `roofline_cells(runs)`: per concurrency, the decode ceiling of the runs' model on their GPUs
  and the measured mean output tok/s as a % of it (pure, from stored RunRecords);
- `gate_verdict(store, baseline, candidate)`: the candidate's latest stored greedy outputs judged
  against the baseline's (`correctness.compare_gate`);
- `build_extras(store, baseline, candidate)`: both, as one `GridExtras`;
- `apply_gate(grid, extras)`: the grid with every candidate cell flagged `output_differs` and its
  speed verdict withheld when the gate says the outputs differ (a fast wrong kernel is no win);
- `extras_lines` / `extras_csv_rows` + `gate_csv_rows` / `extras_json`: the same facts for text, Markdown, CSV, JSON.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from moe_tui.gate.correctness import NOT_COMPARABLE, GateVerdict, compare_gate
from moe_tui.judgement import BETTER, FLAG_OUTPUT_DIFFERS, UNRELIABLE, WITHIN_NOISE, WORSE, flag_words
from moe_tui.records import Options
from moe_tui.records.grid import GridExtrasJson, RooflineCellJson
from moe_tui.roofline.decode import Roofline, RooflineError, percent_of_roofline
from moe_tui.roofline.inputs import RooflineInputError, RooflineSetup, mean_decode_context, roofline_setup

if TYPE_CHECKING:
    from moe_tui.store.db import Store

SPEED_VERDICTS = (BETTER, WORSE, WITHIN_NOISE, "within noise")  # judgement's and compare.py's spelling


@dataclass(frozen=True)
class RooflineCell:
    """One side at one concurrency: its ceiling, its measured mean and the ratio (or why not)."""

    concurrency: int
    ceiling: Roofline | None
    measured_tok_s: float | None
    n: int
    pct: float | None
    why_not: str = ""  # words when there is no ceiling

    @property
    def text(self) -> str:
        if self.ceiling is None:
            return f"no roofline: {self.why_not}"
        measured = "no complete run" if self.pct is None else f"{self.pct:.1f}% of"
        if self.pct is not None and self.pct > 100:  # a measurement above a ceiling: wrong inputs
            measured = f"{self.pct:.1f}% (above the ceiling: check the GPU, model config and KV dtype) of"
        return f"{measured} {self.ceiling.ceiling_tok_s:,.0f} tok/s ({self.ceiling.bound}-bound)"


@dataclass(frozen=True)
class GridExtras:
    gate: GateVerdict
    baseline_roofline: Mapping[int, RooflineCell] = field(default_factory=dict)
    candidate_roofline: Mapping[int, RooflineCell] = field(default_factory=dict)

    @property
    def output_differs(self) -> bool:
        return self.gate.output_differs

    def to_json(self) -> GridExtrasJson | None:
        return extras_json(self)


_RUN_FIELDS = ("status", "spec", "created_at", "fingerprint", "summary", "profile", "provenance")


def _as_run(run: Any) -> Any:
    """A RunRecord, or a mapping with the same names (as compare.build_grid_from_runs takes)."""
    if not isinstance(run, Mapping):
        return run
    from types import SimpleNamespace

    return SimpleNamespace(**{k: run.get(k) for k in _RUN_FIELDS} | {"spec": run.get("spec") or {},
                                                                    "created_at": run.get("created_at") or 0.0})


def _nvml_names(run: Any) -> list[str]:
    names = ((run.provenance or {}).get("gpu") or {}).get("gpu_names") or {}
    return [str(v) for _, v in sorted(names.items()) if v] if isinstance(names, Mapping) else []


def _setup_key(run: Any) -> str:
    resolved = ((run.provenance or {}).get("server") or {}).get("resolved_args") or {}
    return json.dumps([run.profile, _nvml_names(run), resolved.get("kv_cache_dtype"),
                       resolved.get("enable_dp_attention"), run.spec.get("input_len"),
                       run.spec.get("output_len")], sort_keys=True, default=str)


def run_setup(run: Any) -> RooflineSetup:
    """The roofline inputs of one stored run (its profile snapshot, GPUs, KV dtype, spec).
    Raises RooflineInputError saying why there are none."""
    resolved = ((run.provenance or {}).get("server") or {}).get("resolved_args") or {}
    context = mean_decode_context(int(run.spec.get("input_len", 0)), int(run.spec.get("output_len", 0)))
    return roofline_setup(run.profile or {}, context=context, nvml_names=_nvml_names(run), resolved_args=resolved)


def run_roofline(run: Any) -> Roofline:
    """The ceiling of one stored run at its concurrency (for run detail)."""
    return run_setup(run).at(int(run.spec.get("max_concurrency", 1)))


def run_roofline_terms(run: Any) -> tuple[tuple[str, str], ...]:
    """(term, value) lines of one run's ceiling and its % of it, or why there is none (run detail)."""
    try:
        ceiling = run_roofline(run)
    except (RooflineInputError, RooflineError) as exc:
        return (("roofline", f"not available: {exc}"),)
    measured = (run.summary or {}).get("output_throughput")
    pct = percent_of_roofline(measured, ceiling) if isinstance(measured, (int, float)) else None
    shown = f"{pct:.1f}% ({measured:,.2f} of {ceiling.ceiling_tok_s:,.1f} tok/s)" if pct is not None else "no measurement"
    return (("% of roofline", shown), *ceiling.terms(), *((f"note {i + 1}", n) for i, n in enumerate(ceiling.notes)))


def roofline_cells(runs: Sequence[Any], fingerprints: Mapping[int, str] | None = None) -> dict[int, RooflineCell]:
    """Per concurrency: the ceiling and % of it for complete runs (of the grid's fingerprint at
    that concurrency when given; else the most recent fingerprint there)."""
    by_conc: dict[int, list[Any]] = {}
    for run in map(_as_run, runs):
        if run.status == "complete":
            by_conc.setdefault(int(run.spec.get("max_concurrency", 1)), []).append(run)
    out: dict[int, RooflineCell] = {}
    cache: dict[str, Any] = {}
    for conc, group in sorted(by_conc.items()):
        wanted = (fingerprints or {}).get(conc) or max(group, key=lambda r: r.created_at).fingerprint
        chosen = [r for r in group if r.fingerprint == wanted]
        if not chosen:
            continue
        values = [float(r.summary["output_throughput"]) for r in chosen
                  if isinstance((r.summary or {}).get("output_throughput"), (int, float))]
        mean = sum(values) / len(values) if values else None
        key = _setup_key(chosen[-1])
        if key not in cache:
            try:
                cache[key] = run_setup(chosen[-1])
            except RooflineInputError as exc:
                cache[key] = str(exc)
        setup = cache[key]
        try:
            ceiling = setup if isinstance(setup, str) else setup.at(conc)
        except RooflineError as exc:
            ceiling = str(exc)
        if isinstance(ceiling, str):
            out[conc] = RooflineCell(conc, None, mean, len(values), None, ceiling)
        else:
            out[conc] = RooflineCell(conc, ceiling, mean, len(values), percent_of_roofline(mean, ceiling))
    return out


def gate_verdict(store: Store, baseline: str, candidate: str, *, campaign_id: int | None = None,
                 starts: Mapping[str, Sequence[int | None]] | None = None) -> GateVerdict:
    """The candidate's latest gate pass judged against the baseline's (same campaign if given). With
    `starts` (per profile, the server starts of the runs the grid averaged), a side's pass is the
    latest one taken on one of those starts, so a pass from a start whose runs the grid left out
    (flagged, refused, cold) does not speak for the cell; a side with none there falls back to its
    latest pass."""
    from moe_tui.gate.probe import stored_samples

    def latest(name: str) -> Any:
        ids = sorted({s for s in (starts or {}).get(name, ()) if s is not None})
        row = store.gate_samples(name, campaign_id=campaign_id, server_start_ids=ids) if ids else None
        return row if row is not None else store.gate_samples(name, campaign_id=campaign_id)

    base, cand = latest(baseline), latest(candidate)
    if base is None and cand is None:
        return GateVerdict(NOT_COMPARABLE, "no correctness gate run for either profile (moe-tui gate PROFILE)")
    return compare_gate(stored_samples(base), stored_samples(cand),
                        baseline_set=(base or {}).get("prompt_set", ""),
                        candidate_set=(cand or {}).get("prompt_set", ""))


def build_extras(store: Store, baseline: str, candidate: str, *, campaign_id: int | None = None,
                 fingerprints: Mapping[int, str] | None = None,
                 runs: Mapping[str, Sequence[Any]] | None = None) -> GridExtras:
    """`runs`: per profile, the runs the grid averaged (`grids.averaged_runs`): the roofline and the
    gate pass are taken from those (their server starts); None reads each profile's complete runs."""
    starts = None
    if runs is None:
        runs = {name: store.runs(profile_name=name, statuses=("complete",)) for name in (baseline, candidate)}
    else:
        starts = {name: [getattr(r, "server_start_id", None) for r in side] for name, side in runs.items()}
    return GridExtras(
        gate=gate_verdict(store, baseline, candidate, campaign_id=campaign_id, starts=starts),
        baseline_roofline=roofline_cells(runs[baseline], fingerprints),
        candidate_roofline=roofline_cells(runs[candidate], fingerprints),
    )


def apply_gate(grid: Any, extras: GridExtras) -> Any:
    """The grid carrying `extras`; when the outputs differ every candidate cell carries the flag
    and no speed verdict. Works on any frozen dataclass grid with GridCell-like cells."""
    if not extras.output_differs:
        return dataclasses.replace(grid, extras=extras) if _has(grid, "extras") else grid
    why = f"no speed verdict: {extras.gate.words}"
    cells = []
    for cell in grid.cells:
        changes: Options = {}
        if _has(cell, "candidate_flags") and FLAG_OUTPUT_DIFFERS not in cell.candidate_flags:
            changes["candidate_flags"] = (*cell.candidate_flags, FLAG_OUTPUT_DIFFERS)
        if _has(cell, "flags_text"):
            changes["flags_text"] = "; ".join(p for p in (cell.flags_text, f"C: {FLAG_OUTPUT_DIFFERS}") if p)
        if _has(cell, "reasons"):
            changes["reasons"] = (*cell.reasons, why)
        if cell.verdict in SPEED_VERDICTS:
            changes["verdict"] = UNRELIABLE
            if _has(cell, "verdict_text"):
                changes["verdict_text"] = "output differs: no verdict"
        cells.append(dataclasses.replace(cell, **changes))
    grid_changes: Options = {"cells": tuple(cells)}
    if _has(grid, "flags"):
        grid_changes["flags"] = (*grid.flags, FLAG_OUTPUT_DIFFERS)
    if _has(grid, "warnings"):
        grid_changes["warnings"] = (why, *grid.warnings)
    if _has(grid, "extras"):
        grid_changes["extras"] = extras
    return dataclasses.replace(grid, **grid_changes)


def _has(obj: Any, name: str) -> bool:
    return any(f.name == name for f in dataclasses.fields(obj))


def extras_lines(extras: GridExtras | None) -> list[str]:
    """Plain lines for the text and Markdown grids (no markup: callers escape as they need)."""
    if extras is None:
        return []
    gate = extras.gate
    head = f"correctness gate: {gate.words}"
    if gate.output_differs:
        head += f" [{flag_words(FLAG_OUTPUT_DIFFERS)}]"
    lines = [head, "% of decode roofline (measured output tok/s / ceiling):"]
    for conc in sorted(set(extras.baseline_roofline) | set(extras.candidate_roofline)):
        b, c = extras.baseline_roofline.get(conc), extras.candidate_roofline.get(conc)
        lines.append(f"  conc {conc}: baseline {b.text if b else 'no run'}; candidate {c.text if c else 'no run'}")
    return lines


def extras_compact_lines(extras: GridExtras | None) -> list[str]:
    """Two lines for a narrow panel: the gate verdict, and % of roofline per concurrency (B/C)."""
    if extras is None:
        return []

    def pct(cell: RooflineCell | None) -> str:
        if cell is None or cell.pct is None:
            return "-"
        return f"{cell.pct:.1f}%" + ("!" if cell.pct > 100 else "")

    cells = [*extras.baseline_roofline.values(), *extras.candidate_roofline.values()]
    if cells and all(c.ceiling is None for c in cells):
        return [f"correctness gate: {extras.gate.words}", f"% of decode roofline: none: {cells[0].why_not}"]
    concs = sorted(set(extras.baseline_roofline) | set(extras.candidate_roofline))
    parts = [f"{c}: {pct(extras.baseline_roofline.get(c))} / {pct(extras.candidate_roofline.get(c))}" for c in concs]
    above = any(c.pct is not None and c.pct > 100 for c in cells)
    return [f"correctness gate: {extras.gate.words}",
            "% of decode roofline, baseline / candidate, per concurrency: " + (" · ".join(parts) or "no complete runs")
            + (" (! above the ceiling: the GPU, model config or KV dtype it assumes must be wrong)" if above else "")]


def extras_csv_rows(extras: GridExtras | None) -> list[list[str]]:
    """Rows: concurrency, side, ceiling tok/s, bound, measured tok/s, % of roofline (the gate has
    its own table, `gate_csv_rows`)."""
    if extras is None:
        return []
    rows = [["concurrency", "side", "roofline_tok_s", "bound", "measured_tok_s", "pct_of_roofline"]]
    for side, cells in (("baseline", extras.baseline_roofline), ("candidate", extras.candidate_roofline)):
        for conc, cell in sorted(cells.items()):
            rows.append([str(conc), side,
                         f"{cell.ceiling.ceiling_tok_s:.1f}" if cell.ceiling else "",
                         cell.ceiling.bound if cell.ceiling else cell.why_not,
                         f"{cell.measured_tok_s:.3f}" if cell.measured_tok_s is not None else "",
                         f"{cell.pct:.2f}" if cell.pct is not None else ""])
    return rows


def gate_csv_rows(extras: GridExtras | None) -> list[list[str]]:
    """The correctness gate as a table of its own (one table per CSV: its words are no number)."""
    if extras is None:
        return []
    return [["gate_status", "gate_words"], [extras.gate.status, extras.gate.words]]


def extras_json(extras: GridExtras | None) -> GridExtrasJson | None:
    if extras is None:
        return None

    def side(cells: Mapping[int, RooflineCell]) -> dict[str, RooflineCellJson]:
        return {str(conc): {"ceiling": cell.ceiling.to_dict() if cell.ceiling else None,
                            "measured_tok_s": cell.measured_tok_s, "n": cell.n,
                            "pct_of_roofline": cell.pct, "why_not": cell.why_not or None}
                for conc, cell in sorted(cells.items())}

    return {"gate": extras.gate.to_dict(), "roofline": {"baseline": side(extras.baseline_roofline),
                                                       "candidate": side(extras.candidate_roofline)}}
