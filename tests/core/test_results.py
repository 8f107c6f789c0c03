"""results.runs_frame: one tidy row per stored run, judgement from moe_tui.judgement."""

from __future__ import annotations

import pandas as pd

from moe_tui.export.results import runs_frame
from moe_tui.spec import BenchmarkSpec
from moe_tui.store.db import Store


def add_run(store: Store, profile: str, spec: BenchmarkSpec, *, status: str = "complete", flags=(),
            engine: str = "sglang", tok_s: float = 100.0) -> int:
    run_id = store.create_run(
        profile_name=profile, spec_json=spec.canonical_json(), fingerprint=spec.fingerprint, client="moe-tui 0.1.0",
        profile={"engine": engine, "moe_runner_backend": profile, "gpus": [0, 1]},
        provenance={"server": {"resolved_backend": profile, "resolved_args": {"huge": "x" * 100}},
                    "host": {"hostname": "box"}, "spec": {"dup": 1}},
    )
    store.finish_run(run_id, status=status, summary={"output_throughput": tok_s, "mean_ttft_ms": 12.5,
                                                     "percentiles": {"p99": 1}}, flags=flags)
    return run_id


def test_runs_frame_has_spec_provenance_metrics_and_judgement(tmp_path):
    store = Store(tmp_path / "s.sqlite3")
    a = add_run(store, "flashinfer_cutlass", BenchmarkSpec(max_concurrency=10), tok_s=38.5)
    b = add_run(store, "flashinfer_cutedsl", BenchmarkSpec(max_concurrency=10), flags=["clock_drop"])
    c = add_run(store, "sim-x", BenchmarkSpec(max_concurrency=64), engine="sim", status="incomplete")
    frame = runs_frame(store)

    assert list(frame.index) == [a, b, c]
    assert frame.loc[a, "spec.max_concurrency"] == 10 and frame.loc[c, "spec.max_concurrency"] == 64
    assert frame.loc[a, "metric.output_throughput"] == 38.5
    assert "metric.percentiles" not in frame.columns  # nested summaries stay out of a tidy row
    assert frame.loc[b, "prov.server.resolved_backend"] == "flashinfer_cutedsl"
    assert frame.loc[a, "prov.host.hostname"] == "box"
    assert not any(col.startswith("prov.server.resolved_args") or col.startswith("prov.spec")
                   for col in frame.columns)
    assert frame.loc[a, "profile.gpus"] == (0, 1)
    # Judgement is the core's: a suspect flag or a non-complete status makes a run unclean.
    assert frame["clean"].tolist() == [True, False, False]
    assert frame.loc[b, "suspect"] == ("clock_drop",)
    assert frame["simulated"].tolist() == [False, False, True]
    assert isinstance(frame.loc[a, "created_at"], pd.Timestamp)
    # Column blocks in a fixed order: identity, judgement, then spec., profile., prov., metric.
    cols = list(frame.columns)
    assert cols[0] == "run_id" and cols.index("clean") < cols.index("spec.max_concurrency")
    assert max(i for i, c in enumerate(cols) if c.startswith("spec.")) < min(
        i for i, c in enumerate(cols) if c.startswith("metric."))


def test_runs_frame_filters_and_empty_store(tmp_path):
    store = Store(tmp_path / "s.sqlite3")
    empty = runs_frame(store)
    assert empty.empty and "run_id" in empty.columns and "clean" in empty.columns
    add_run(store, "a", BenchmarkSpec())
    add_run(store, "b", BenchmarkSpec(), status="failed")
    assert runs_frame(store, profiles=["b"])["profile"].tolist() == ["b"]
    assert runs_frame(store, statuses=["complete"])["profile"].tolist() == ["a"]
    # A pivot a notebook would write: throughput per profile and concurrency.
    pivot = runs_frame(store).pivot_table(index="spec.max_concurrency", columns="profile",
                                          values="metric.output_throughput")
    assert list(pivot.columns) == ["a", "b"]
