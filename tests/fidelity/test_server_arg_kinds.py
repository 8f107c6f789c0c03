"""Resolved server args in three kinds (judgement.server_arg_kind): the emulator serves SGLang's
derived scheduler values (max_total_num_tokens, max_req_input_len) with a KV pool that differs by
MoE backend, as real memory use makes it; the grid still gives verdicts across them and shows the
pool difference beside the grid, while a real setting that differs still confounds."""

from __future__ import annotations

import pytest
from compare_data import make_run, provenance, snapshot, summary
from sim_helpers import sim_server

from moe_tui import judgement as J
from moe_tui.compare import CompareSettings
from moe_tui.compare.build import build_grid_from_runs
from moe_tui.sim.launch import FAST_START
from tests.support import loopback

# These grids hold one concurrency and no control cells (the control gate has its own tests):
# the verdict checked here is about which server args confound.
SETTINGS = CompareSettings(accept_uncontrolled=True)


def test_each_key_has_one_kind():
    assert J.server_arg_kind("max_total_num_tokens") == J.DERIVED
    assert J.server_arg_kind("max_req_input_len") == J.DERIVED
    assert J.server_arg_kind("disable_shared_experts_fusion") == J.DERIVED
    assert J.server_arg_kind("chunked_prefill_size") == J.SETTING
    assert J.server_arg_kind("a_flag_of_a_newer_sglang") == J.SETTING  # unknown: the safe side
    for noise in ("port", "startup_time.load_weight", "internal_states", "sim.scheduler_pids", "pid"):
        assert J.server_arg_kind(noise) == J.PER_START, noise
    # The three tables never overlap, and each derived key names its SGLang source.
    assert not set(J.SERVER_ARGS_DERIVED) & set(J.SERVER_ARGS_PER_START)
    assert all(".py" in why for why in J.SERVER_ARGS_DERIVED.values())


def _server_info(backend: str) -> dict:
    with sim_server(["--moe-runner-backend", backend, "--sim-exact", *FAST_START]) as sim:
        return loopback.get(sim.base_url + "/server_info", timeout=10).json()


def _side(name: str, backend: str, info: dict, base: float, first_id: int, **settings: object) -> list:
    prov = provenance(engine="sim", resolved_backend=backend)
    prov["server"]["resolved_args"] = {**info, **settings}
    snap = snapshot(name, backend, engine="sim")
    return [make_run(first_id + i, name, concurrency=8, summary=summary(base + (i % 2) * 0.5), profile=snap,
                     prov=prov) for i in range(4)]


@pytest.mark.integration
def test_grid_gives_verdicts_across_backend_kv_pools():
    info_a, info_b = _server_info("flashinfer_cutlass"), _server_info("flashinfer_cutedsl")
    pool_a, pool_b = info_a["max_total_num_tokens"], info_b["max_total_num_tokens"]
    # The emulator derives the pool from the memory each backend's workspace leaves.
    assert pool_a > pool_b > 0 and info_a["max_req_input_len"] > 0
    a = _side("a", "flashinfer_cutlass", info_a, 100.0, 1)
    b = _side("b", "flashinfer_cutedsl", info_b, 130.0, 20)
    grid = build_grid_from_runs(a, b, settings=SETTINGS)
    cell = grid.cell(8, "output_throughput")
    assert cell.verdict == J.BETTER, (cell.verdict, cell.reasons)
    assert not grid.confounders
    note = next(w for w in grid.warnings if "max_total_num_tokens" in w)
    assert f"{pool_a} vs {pool_b}" in note and "not a confounder" in note and "run at once" in note
    row = next(r for r in grid.provenance if r.key == "max_total_num_tokens")
    assert row.differs and row.baseline == str(pool_a)


@pytest.mark.integration
def test_a_setting_that_differs_in_server_args_still_confounds():
    info = _server_info("flashinfer_cutlass")
    a = _side("a", "flashinfer_cutlass", info, 100.0, 1)
    b = _side("b", "flashinfer_cutedsl", info | {"moe_runner_backend": "flashinfer_cutedsl"}, 130.0, 20,
              chunked_prefill_size=4096)
    grid = build_grid_from_runs(a, b, settings=SETTINGS)
    assert grid.cell(8, "output_throughput").verdict == J.CONFOUNDED
    assert [c.field for c in grid.confounders] == ["chunked_prefill_size"]


@pytest.mark.integration
def test_a_pool_that_moves_between_starts_is_shown_not_warned_about():
    info = _server_info("flashinfer_cutlass")
    pool = info["max_total_num_tokens"]
    # two starts of the baseline profile left slightly different pools (memory profiling varies)
    a = _side("a", "flashinfer_cutlass", info, 100.0, 1)[:2] + _side(
        "a", "flashinfer_cutlass", info | {"max_total_num_tokens": pool - 640}, 100.0, 3)[:2]
    b = _side("b", "flashinfer_cutedsl", info | {"moe_runner_backend": "flashinfer_cutedsl"}, 130.0, 20)
    grid = build_grid_from_runs(a, b, settings=SETTINGS)
    assert grid.cell(8, "output_throughput").verdict == J.BETTER
    assert not any("disagree among themselves" in w for w in grid.warnings), grid.warnings
    note = next(w for w in grid.warnings if "max_total_num_tokens" in w)
    assert f"{pool - 640} | {pool} vs {pool}" in note
