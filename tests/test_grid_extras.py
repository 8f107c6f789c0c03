"""The grid's issue-15 extras: % of roofline per concurrency, and no "better" verdict for a
candidate whose greedy outputs differ from the baseline's (store-backed, as `moe-tui compare`)."""

from __future__ import annotations

import json
import math

import pytest
from compare_data import make_run, provenance, snapshot, summary

from moe_tui.export.formats import export_comparison, render_markdown, render_text
from moe_tui.gate.correctness import GateSample
from moe_tui.gate.probe import prompt_set_id
from moe_tui.grids.extras import extras_json, roofline_cells
from moe_tui.grids.pair import build_grid
from moe_tui.judgement import BETTER, FLAG_OUTPUT_DIFFERS, UNRELIABLE
from moe_tui.store.db import Store

SURE = math.log(0.95)
BASE = snapshot("glm5-cutlass", "flashinfer_cutlass", engine="sim")
CAND = snapshot("glm5-cutedsl", "flashinfer_cutedsl", engine="sim", port=30001)


def _runs() -> tuple[list, list]:
    rid = iter(range(1, 100))
    a, b = [], []
    # The control (concurrency 2) agrees; runs interleaved in time (a, b, a, b), as a campaign makes them.
    for conc, base_vals, cand_vals in ((1, [10.36, 10.40, 10.31], [10.10, 10.05, 10.12]),
                                       (2, [19.29, 19.31, 19.22], [19.24, 19.30, 19.26]),
                                       (10, [38.46, 38.90, 38.12], [64.29, 64.64, 63.90])):
        for k, v in enumerate(base_vals):
            a.append(make_run(next(rid), "glm5-cutlass", concurrency=conc, summary=summary(v), profile=BASE,
                              prov={**provenance(engine="sim", resolved_backend="flashinfer_cutlass"),
                                    "server_start": f"a{k}"},  # one sweep a start, concurrency 2 inside
                              when=100.0 * conc + 2 * k))
        for k, v in enumerate(cand_vals):
            b.append(make_run(next(rid), "glm5-cutedsl", concurrency=conc, summary=summary(v), profile=CAND,
                              prov={**provenance(engine="sim", resolved_backend="flashinfer_cutedsl"),
                                    "server_start": f"b{k}"},
                              when=100.0 * conc + 2 * k + 1))
    return a, b


def _store(tmp_path, runs) -> Store:
    store = Store(tmp_path / "s.sqlite3")
    for r in runs:
        store.import_run(profile_name=r.profile_name, spec_json=json.dumps(r.spec), fingerprint=r.fingerprint,
                         client=r.client, summary=r.summary, provenance=r.provenance, profile=r.profile,
                         started_at=r.started_at, finished_at=r.finished_at)
    return store


def _gate(store: Store, name: str, drift_at: int | None) -> None:
    samples = []
    for p in range(4):
        ids = [100 + p * 10 + i for i in range(12)]
        if drift_at is not None:
            ids[drift_at:] = [9000 + i for i in range(12 - drift_at)]
        samples.append(GateSample(f"p{p}", tuple(ids), tuple([SURE] * 12)).to_dict())
    store.record_gate_samples(profile_name=name, prompt_set=prompt_set_id(), samples=samples)


def test_roofline_cells_give_percent_of_ceiling_per_concurrency():
    a, _ = _runs()
    cells = roofline_cells(a)
    assert sorted(cells) == [1, 2, 10]
    one = cells[1]
    # GLM-5-NVFP4 on 8 RTX PRO 6000 (NVML names in provenance), context 1024 + 1024/2, and the KV
    # cache SGLang 0.5.23 picks for DSA on Blackwell (fp8_e4m3) since the runs recorded none
    assert one.ceiling is not None and one.ceiling.ceiling_tok_s == pytest.approx(313.6, abs=0.5)
    assert one.measured_tok_s == pytest.approx(10.3567, abs=1e-3) and one.n == 3
    assert one.pct == pytest.approx(100 * 10.3567 / 313.6, abs=0.02)
    assert "3.3% of 314 tok/s (memory-bound)" in one.text


def test_roofline_cell_says_why_not_without_model_config():
    run = make_run(1, "x", concurrency=1, summary=summary(10.0),
                   profile=snapshot("x", "triton", model_path="/nowhere/GLM"), prov=provenance())
    cell = roofline_cells([run])[1]
    assert cell.ceiling is None and cell.pct is None
    assert "no model config at /nowhere/GLM/config.json" in cell.text


def test_output_differs_refuses_the_better_verdict(tmp_path):
    a, b = _runs()
    with _store(tmp_path, a + b) as store:
        clean = build_grid(store, "glm5-cutlass", "glm5-cutedsl")
        assert clean.cell(10, "output_throughput").verdict == BETTER  # without a gate: a real win
        assert clean.extras.gate.status == "not_comparable"

        _gate(store, "glm5-cutlass", None)
        _gate(store, "glm5-cutedsl", None)
        passed = build_grid(store, "glm5-cutlass", "glm5-cutedsl")
        assert passed.extras.gate.status == "passed"
        assert passed.cell(10, "output_throughput").verdict == BETTER

        _gate(store, "glm5-cutedsl", 3)  # the latest pass of the candidate drifts from token 3
        grid = build_grid(store, "glm5-cutlass", "glm5-cutedsl")
    cell = grid.cell(10, "output_throughput")
    assert grid.extras.output_differs
    assert cell.verdict == UNRELIABLE and cell.verdict_text == "output differs: no verdict"
    assert FLAG_OUTPUT_DIFFERS in cell.candidate_flags and "C: output_differs" in cell.flags_text
    assert all(c.verdict != BETTER for c in grid.cells)
    assert FLAG_OUTPUT_DIFFERS in grid.flags
    assert grid.warnings[0].startswith("no speed verdict: output differs: prompt p0 diverges at token 3")
    text = render_text(grid)
    row = next(line for line in text.splitlines() if line.startswith("10 ") and "Output tok/s" in line)
    assert "+67.0%" in row and "output differs: no verdict" in row and "better" not in row
    assert "correctness gate: output differs: prompt p0" in text
    # the ceiling at concurrency 10 is its own (expected 69.6 distinct experts per layer), not conc 1's
    assert "conc 10: baseline 4.0% of 956 tok/s (memory-bound); candidate 6.7% of 956 tok/s" in text
    md = render_markdown(grid)
    assert "## Roofline and correctness" in md
    data = extras_json(grid.extras)
    assert data["gate"]["status"] == "output_differs" and data["gate"]["first_divergence"] == 3
    assert data["roofline"]["candidate"]["10"]["pct_of_roofline"] > 0
    paths = export_comparison(grid, tmp_path / "out")
    rows = (paths.csv.parent / f"{paths.csv.stem}-roofline.csv").read_text().splitlines()
    assert rows[0] == "concurrency,side,roofline_tok_s,bound,measured_tok_s,pct_of_roofline"
    assert not any(r.startswith("gate") for r in rows)  # one table per CSV: the gate has its own
    gate = (paths.csv.parent / f"{paths.csv.stem}-gate.csv").read_text().splitlines()
    assert gate[0] == "gate_status,gate_words" and gate[1].startswith("output_differs,")
