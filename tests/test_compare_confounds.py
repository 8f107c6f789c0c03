"""Confounders of the comparison grid: launch settings, drivers, Python versions and SGLang's resolved server
arguments that differ between the sides confound the cells they touch; what the emulator's /server_info
carries per start (and what the backend derives) never does."""

from __future__ import annotations

import dataclasses

from compare_data import SNAP_B, golden_runs, grid_of, make_run, provenance, runs, snapshot

from moe_tui.compare import (
    BETTER,
    CONFOUNDED,
    WORSE,
)


def test_launch_setting_and_driver_differences_confound_every_cell_they_touch():
    a, b = golden_runs()
    snap = snapshot("glm5-cutedsl", "flashinfer_cutedsl", port=30001,
                    extra_args=("--enable-metrics", "--cuda-graph-max-bs", "256"))
    b = [make_run(r.id, r.profile_name, concurrency=r.spec["max_concurrency"], summary=r.summary, status=r.status,
                  flags=tuple(r.flags), spec_changes={k: r.spec[k] for k in ("output_len", "num_prompts")},
                  profile=snap, prov=provenance(driver="580.82.07", resolved_backend="flashinfer_cutedsl"))
         for r in b]
    g = grid_of(a, b)
    assert [d.key for d in g.backend_diff] == ["moe_runner_backend"]
    assert [d.key for d in g.launch_diff] == ["extra_args --cuda-graph-max-bs"]
    assert {d.key for d in g.identity_diff} == {"name", "port"}
    c = g.cell(10, "output_throughput")
    assert c.verdict == CONFOUNDED and c.delta_text == "" and c.ci_text == ""
    fields = {x.field: x for x in c.confounders}
    assert fields["extra_args --cuda-graph-max-bs"].candidate == "256"
    assert fields["driver_version"].describe() == "driver_version: 580.65.06 vs 580.82.07"
    assert g.warnings[0].startswith("confounded: ")
    rows = {r.key: r for r in g.provenance}
    assert rows["driver_version"].differs and rows["gpu_names"].baseline == "8 x NVIDIA RTX PRO 6000 Blackwell"
    assert not g.simulated


def test_python_counts_and_identity_does_not():
    a = runs("a", 64, [200.0, 201.0, 199.0], 1)
    b = runs("b", 64, [260.0, 261.0, 259.0], 10, snapshot("b", "flashinfer_cutedsl", port=39999, description="x"))
    assert grid_of(a, b).cell(64, "output_throughput").verdict == BETTER
    b = runs("b", 64, [260.0, 261.0, 259.0], 10, snapshot("b", "flashinfer_cutedsl", python="/opt/other/python"))
    c = grid_of(a, b).cell(64, "output_throughput")
    assert c.verdict == CONFOUNDED and c.confounders[0].field == "python"


def test_resolved_server_args_confound_with_an_explicit_ignore_list():
    """The issue's attack: imported records differing in resolved args got "-30.0% worse", no warning."""
    from moe_tui.compare import CompareSettings

    def prov(**args):
        base = {"moe_runner_backend": "flashinfer_cutlass", "model_path": "m", "tp_size": 8, "max_running_requests": 1024,
                "port": 30000, "random_seed": 1, "startup_time": {"load_weight": 3.0}}
        return {"server_info": dict(base, **args)}

    a = runs("a", 64, [200.0, 201.0, 199.0], 1, prov=prov())
    b = runs("b", 64, [140.0, 141.0, 139.0], 10, SNAP_B,
             prov=prov(moe_runner_backend="flashinfer_cutedsl", max_running_requests=8, port=30001, random_seed=99,
                       startup_time={"load_weight": 9.0}))
    c = grid_of(a, b).cell(64, "output_throughput")
    assert c.verdict == CONFOUNDED and [x.describe() for x in c.confounders] == ["max_running_requests: 1024 vs 8"]
    # Declared as what is varied, the same difference is the comparison itself.
    s = CompareSettings(vary=frozenset({"moe_runner_backend", "max_running_requests"}))
    assert grid_of(a, b, settings=s).cell(64, "output_throughput").verdict == WORSE


def test_emulator_per_start_values_and_backend_derived_args_do_not_confound():
    """What the emulator's /server_info really carries per start (its children's pids, the start's
    drawn speed factors) and what SGLang derives from the backend itself (shared-experts fusion is
    off for flashinfer_cutedsl) are not second differences; the demo showed every cell confounded
    by them. A real second setting in the same args still confounds."""
    def info(backend, start, fusion_off, **extra):
        return {"server": {"resolved_args": {
            "moe_runner_backend": backend, "max_running_requests": 1024, "tp_size": 8,
            "disable_shared_experts_fusion": fusion_off, **extra,
            "sim": {"sim_time_scale": 20.0, "detokenizer_pid": 1000 + start, "scheduler_pids": [2000 + start],
                    "perf_factor_start": 1.0 + start / 100, "perf_factor_drift": 0.999 + start / 1000,
                    "perf_factor_run": 1.001, "runs_seen": start, "foreign_gpu_pid": None, "gpus_lost": []}}}}

    a = [dataclasses.replace(r, provenance=info("flashinfer_cutlass", i, False), server_start_id=i)
         for i, r in enumerate(runs("a", 64, [200.0, 201.0, 199.0], 1))]
    b = [dataclasses.replace(r, provenance=info("flashinfer_cutedsl", 10 + i, True), server_start_id=10 + i)
         for i, r in enumerate(runs("b", 64, [230.0, 231.0, 229.0], 10, SNAP_B))]
    cell = grid_of(a, b).cell(64, "output_throughput")
    assert cell.verdict == BETTER, (cell.verdict, cell.reasons)
    b8 = [dataclasses.replace(r, provenance=info("flashinfer_cutedsl", 10 + i, True, max_running_requests=8))
          for i, r in enumerate(b)]
    cell = grid_of(a, b8).cell(64, "output_throughput")
    assert cell.verdict == CONFOUNDED and [c.field for c in cell.confounders] == ["max_running_requests"]


def _on_hosts(name: str, backend: str, hosts: list[str], tok_s: float, first_id: int) -> list:
    """One run per server start at concurrency 64, start k on hosts[k] (a node-blocked campaign's shape)."""
    from compare_data import make_run, provenance, snapshot, summary

    snap = snapshot(name, backend)
    runs = []
    for k, host in enumerate(hosts):
        prov = provenance()
        prov["host"] = {**prov["host"], "hostname": host}
        runs.append(make_run(first_id + k, name, concurrency=64, summary=summary(tok_s + k), profile=snap,
                             prov=prov, start=first_id + k))
    return runs


def test_machines_in_unequal_shares_of_the_starts_confound_the_cell():
    """Both sides on node1 and node2, but the baseline's starts 3:1 and the candidate's 1:3: a faster node2
    would weigh on the candidate alone. The same sets of machines passed as 'balanced' before; now the shares
    of the starts (the unit) must match, as node blocks make them."""
    from moe_tui.compare.confound import confounders

    balanced = confounders(_on_hosts("a", "flashinfer_cutlass", ["node1", "node2", "node1", "node2"], 100, 1),
                           _on_hosts("b", "flashinfer_cutedsl", ["node2", "node1", "node2", "node1"], 110, 11),
                           ("moe_runner_backend",))
    assert not [c for c in balanced if "hostname" in c.field], balanced
    skewed = confounders(_on_hosts("a", "flashinfer_cutlass", ["node1", "node1", "node1", "node2"], 100, 1),
                         _on_hosts("b", "flashinfer_cutedsl", ["node1", "node2", "node2", "node2"], 110, 11),
                         ("moe_runner_backend",))
    (machines,) = [c for c in skewed if "hostname" in c.field]
    assert machines.describe() == ("machines in unequal shares (hostname): node1 75%, node2 25% of the starts vs "
                                   "node1 25%, node2 75% of the starts"), machines.describe()
