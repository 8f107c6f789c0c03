"""A grid of thousands of runs a side (issue 26): its cost follows the pair's runs, each visited a bounded
number of times, and deriving once per source (`compare.memo`) changes nothing in the grid.

- Shape, on real stores written through the runner's write path: with 2 or 6 runs per server start
  (every run's provenance its own, as the runner writes it), the server args are flattened once per
  distinct start, not per run; each run's provenance values are computed once, not per cell and
  reader; `run_summaries` decodes a bounded number of JSON texts per run.
- Equality over random plain data (Hypothesis): the grid built with shared decoded dicts and the
  memo is byte-for-byte the JSON of the grid built the old way (every run's dicts its own, nothing
  cached), with server args of every JSON kind; and the cheap writer of a flat value is json.dumps.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import math
import types
from unittest import mock

import pytest
from compare_data import METRIC_KEYS, make_run, snapshot
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from moe_tui.compare import CompareSettings, confound, runs
from moe_tui.compare import build as build_mod
from moe_tui.compare.build import build_grid_from_runs
from moe_tui.export.formats import render_json
from moe_tui.grids.pair import RUN_STATUSES
from moe_tui.spec import BenchmarkSpec
from moe_tui.store import summaries
from moe_tui.store.db import Store

A, B = "sim-cutlass", "sim-cutedsl"
T0 = 1_790_000_000.0
STARTS = 3  # a side
CONCS = (2, 64)


def _provenance(backend: str, start: int, t: float) -> dict:
    return {"provenance_schema": 1, "simulated": True, "started_at": t, "finished_at": t + 5,
            "server": {"start_id": start, "pid": 4000 + start, "requested_backend": backend, "resolved_backend": backend,
                       "backend_mismatch": False, "sglang_version": "0.5.23", "engine": "sim",
                       "resolved_args": {"moe_runner_backend": backend, "kv_cache_dtype": "auto",
                                         "chunked_prefill_size": 8192, "mem_fraction_static": 0.85,
                                         "enable_metrics": True, "lora_paths": None, "random_seed": start,
                                         "speculative": {"num_steps": 3, "algorithm": None}}},
            "gpu": {"driver_version": "580.65", "gpu_names": {str(i): "NVIDIA H200" for i in range(8)},
                    "sm_clock_max_seen_mhz": 1980 - int(t) % 7},
            "host": {"hostname": "box", "platform": "Linux", "python_version": "3.11.9"}}


def _write(store: Store, per_start: int) -> int:
    """The pair, `STARTS` starts a side at each concurrency, `per_start` runs each, interleaved in time."""
    n = 0
    for k in range(STARTS):
        for conc in CONCS:
            for name, backend, start in ((A, "flashinfer_cutlass", 10 + k), (B, "flashinfer_cutedsl", 20 + k)):
                spec = BenchmarkSpec.from_dict({"client": "moe-tui", "client_version": "", "input_len": 128,
                                                "output_len": 64, "num_prompts": 200, "max_concurrency": conc})
                for r in range(per_start):
                    t = T0 + 100 * n
                    n += 1
                    prov = _provenance(backend, start, t)
                    rid = store.create_run(profile_name=name, spec_json=spec.canonical_json(),
                                           fingerprint=spec.fingerprint, client="moe-tui",
                                           profile=snapshot(name, backend, engine="sim"), provenance=prov,
                                           server_start_id=start)
                    value = 1000.0 * (1 + 0.01 * k + 0.003 * r)
                    store.finish_run(rid, status="complete", provenance=prov,
                                     summary={key: value for key in METRIC_KEYS} | {"completed": 200, "failed": 0,
                                                                                   "total_output_tokens": 12800},
                                     telemetry={"overall": {"sm_clock_drop_pct": 1.0}}, selfcheck={"client_bound": False})
    return n


class _Counts:
    def __init__(self) -> None:
        self.flattened = self.provenance = self.decoded = 0


@contextlib.contextmanager
def _counting():
    """Counts the expensive steps where they happen (the functions themselves, not a model of them)."""
    counts = _Counts()
    settings_of, provenance_values, loads = confound._settings_of, runs._provenance_values, json.loads

    def flatten(info):
        counts.flattened += 1
        return settings_of(info)

    def values(run):
        counts.provenance += 1
        return provenance_values(run)

    def decode(text, *args, **kwargs):
        counts.decoded += 1
        return loads(text, *args, **kwargs)

    with (mock.patch.object(confound, "_settings_of", flatten), mock.patch.object(runs, "_provenance_values", values),
          mock.patch.object(summaries, "json", types.SimpleNamespace(loads=decode, dumps=json.dumps))):
        yield counts


def _grid_counts(tmp_path, per_start: int) -> tuple[int, _Counts, str]:
    with Store(tmp_path / f"store-{per_start}.sqlite3") as store:
        n = _write(store, per_start)
        with _counting() as counts:
            every = {name: store.run_summaries(profile_name=name, statuses=RUN_STATUSES, exclude_diagnostic=True)
                     for name in (A, B)}
            grid = build_grid_from_runs(every[A], every[B], baseline_name=A, candidate_name=B)
    return n, counts, render_json(grid)


def test_server_args_are_flattened_per_start_and_each_run_is_visited_a_bounded_number_of_times(tmp_path):
    few_n, few, few_json = _grid_counts(tmp_path, per_start=2)
    many_n, many, _ = _grid_counts(tmp_path, per_start=6)
    assert (few_n, many_n) == (2 * STARTS * len(CONCS) * 2, 6 * STARTS * len(CONCS) * 2)
    # One flattening per distinct start's args (a side's starts differ by random_seed), whatever the runs.
    assert few.flattened == many.flattened == 2 * STARTS
    # Provenance values: once per run (the confounders, the environment lines and the provenance rows
    # all read them), not once per reader.
    assert few.provenance == few_n and many.provenance == many_n
    # Decodes in the read: a run's summary, flags and its own grid facts; spec and profile once per text
    # and profile (a spec per concurrency, one snapshot).
    per_profile = len(CONCS) + 1
    assert many.decoded == 3 * many_n + 2 * per_profile and few.decoded == 3 * few_n + 2 * per_profile
    assert many.decoded - few.decoded == 3 * (many_n - few_n)
    assert '"verdict"' in few_json  # a real grid came out


def _plain_grid(a: list, b: list, **kw) -> str:
    """The old path: every run's dicts its own (no shared object), nothing derived once."""
    copies = [[copy.deepcopy(r) for r in side] for side in (a, b)]
    with mock.patch.object(build_mod, "build_scope", contextlib.nullcontext):
        return render_json(build_grid_from_runs(copies[0], copies[1], **kw))


json_scalar = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=True),
                        st.text(max_size=6))
json_value = st.recursive(json_scalar, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                              st.dictionaries(st.text(max_size=4), inner, max_size=3)),
                          max_leaves=6)
start_args = st.dictionaries(st.sampled_from(["kv_cache_dtype", "chunked_prefill_size", "attention_backend",
                                              "speculative", "moe_a2a_backend", "cuda_graph_max_bs"]),
                             json_value, max_size=4)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(start_args, st.integers(1, 4), st.booleans()), min_size=2, max_size=4),
       st.lists(st.tuples(start_args, st.integers(1, 4), st.booleans()), min_size=2, max_size=4),
       st.booleans())
def test_the_grid_derived_once_per_source_is_the_grid_derived_per_run(starts_a, starts_b, vary_more):
    snaps = (snapshot(A, "flashinfer_cutlass"), snapshot(B, "flashinfer_cutedsl", port=30001))
    rid = iter(range(1, 10_000))
    sides: list[list] = [[], []]
    for side, (starts, snap, backend) in enumerate(((starts_a, snaps[0], "flashinfer_cutlass"),
                                                    (starts_b, snaps[1], "flashinfer_cutedsl"))):
        for s, (args, repeats, throttled) in enumerate(starts):
            # One decoded provenance per start, shared by its runs (what `store.summaries` hands over).
            prov = {"server": {"resolved_backend": backend, "resolved_args": {"moe_runner_backend": backend, **args}},
                    "gpu": {"driver_version": "580.65"}, "host": {"hostname": f"box{s % 2}"}}
            tel = {"overall": {"suspect_clock_events": ["hw_slowdown"] if throttled and s == 0 else []}}
            for k in range(repeats):
                i = next(rid)
                value = 1000.0 * (1 + 0.02 * s + 0.004 * k + 0.01 * side)
                run = make_run(i, snap["name"], concurrency=2 if k % 2 else 64, profile=snap, prov={},
                               summary={m: value for m in METRIC_KEYS}, when=T0 + 10 * i)
                sides[side].append(dataclasses.replace(run, provenance=prov, telemetry=tel, server_start_id=100 * side + s))
    kw = {"baseline_name": A, "candidate_name": B,
          "settings": CompareSettings(accept_uncontrolled=True,
                                      vary=frozenset({"moe_runner_backend", "kv_cache_dtype"}) if vary_more
                                      else frozenset({"moe_runner_backend"}))}
    fast = render_json(build_grid_from_runs(sides[0], sides[1], **kw))
    assert fast == _plain_grid(sides[0], sides[1], **kw)


def _old_text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, default=str)


@given(json_value)
def test_the_cheap_writer_of_a_flat_value_writes_what_json_dumps_writes(value):
    assert confound._text(value) == _old_text(value)


@pytest.mark.parametrize("value", [0, -1, 2**70, 0.1, 1e300, -0.0, 5e-324, math.inf, -math.inf, math.nan, True, False])
def test_numbers_at_the_edges_are_written_as_json_writes_them(value):
    assert confound._text(value) == _old_text(value)
