"""The correctness gate end to end: real emulator processes answer SGLang-shaped greedy outputs with
logprobs; `moe-tui gate` stores them and judges a faithful backend (passed) and a drifting one
(output differs); a headless campaign stores a gate pass before each profile's first timed run."""

from __future__ import annotations

import json
import re

import pytest
from sim_helpers import sim_server

from moe_tui.gate.probe import GATE_MAX_NEW_TOKENS, GATE_PROMPTS, GateError, parse_answer, request_body
from tests.support import loopback

SIM = ["--model-path", "GLM-5-NVFP4", "--tp-size", "8", "--ep-size", "8", "--quantization", "modelopt_fp4"]


def _generate(url: str, body: dict) -> dict:
    resp = loopback.post(url + "/generate", json=body, timeout=30, trust_env=False)
    assert resp.status_code == 200, resp.text
    return resp.json()


@pytest.mark.integration
def test_emulator_answers_return_logprob_in_sglang_shape_deterministically():
    with sim_server(SIM + ["--moe-runner-backend", "flashinfer_cutlass"]) as sim:
        body = request_body("Hello there, emulator.", 16)
        first = _generate(sim.base_url, body)
        meta = first["meta_info"]
        pairs = meta["output_token_logprobs"]
        assert len(pairs) == 16 == meta["output_token_logprobs_length"] == meta["completion_tokens"]
        assert [p[1] for p in pairs] == first["output_ids"]
        assert all(p[0] <= 0 and p[2] is None for p in pairs)
        assert meta["finish_reason"] == {"type": "length", "length": 16}
        assert meta["input_token_logprobs"] == [] and meta["prompt_tokens"] > 0
        assert _generate(sim.base_url, body)["output_ids"] == first["output_ids"]
        other = _generate(sim.base_url, request_body("A different prompt.", 16))
        assert other["output_ids"] != first["output_ids"]
        texts = _generate(sim.base_url, body | {"return_text_in_logprobs": True})
        assert all(isinstance(p[2], str) and p[2] for p in texts["meta_info"]["output_token_logprobs"])
        plain = _generate(sim.base_url, {"text": "Hello", "sampling_params": {"max_new_tokens": 4}})
        assert "output_token_logprobs" not in plain["meta_info"]  # the engine's own path, untouched
        bad = loopback.post(sim.base_url + "/generate", trust_env=False, timeout=30,
                         json=request_body("x", 4) | {"sampling_params": {"max_new_tokens": -1}})
        assert bad.status_code == 400 and "max_new_tokens" in bad.json()["error"]["message"]


@pytest.mark.integration
def test_drift_fault_changes_tokens_from_n_on_only():
    with sim_server(SIM + ["--moe-runner-backend", "flashinfer_cutlass"]) as good, \
         sim_server(SIM + ["--moe-runner-backend", "flashinfer_cutedsl", "--sim-fault-output-drift-after", "5"]) as bad:
        body = request_body("Drift check", 12)
        a, b = _generate(good.base_url, body), _generate(bad.base_url, body)
        assert a["output_ids"][:5] == b["output_ids"][:5]
        assert all(x != y for x, y in zip(a["output_ids"][5:], b["output_ids"][5:]))
        info = loopback.get(bad.base_url + "/server_info", trust_env=False, timeout=10).json()
        assert info["sim"]["sim_fault_output_drift_after"] == 5


def test_parse_answer_refuses_unusable_answers():
    with pytest.raises(GateError, match="prompt 'p': the answer has no meta_info.output_token_logprobs"):
        parse_answer("p", {"text": "x", "meta_info": {}})
    with pytest.raises(GateError, match=r"output_token_logprobs\[0\]"):
        parse_answer("p", {"meta_info": {"output_token_logprobs": [["x"]]}})
    with pytest.raises(GateError, match="disagree"):
        parse_answer("p", {"output_ids": [9], "meta_info": {"output_token_logprobs": [[-0.1, 1, None]]}})
    ok = parse_answer("p", [{"output_ids": [1], "meta_info": {"output_token_logprobs": [[None, 1, None]],
                                                              "finish_reason": {"type": "stop"}}}])
    assert ok.token_ids == (1,) and ok.logprobs == (None,) and ok.finish_reason == "stop"


@pytest.mark.integration
def test_gate_cli_passes_faithful_and_flags_drifting_backend(env):
    base = env.profile("gate-base", "flashinfer_cutlass")
    good = env.profile("gate-good", "flashinfer_cutedsl")
    drift = env.profile("gate-drift", "flashinfer_cutedsl")
    with sim_server(SIM + ["--moe-runner-backend", "flashinfer_cutlass"]) as s_base, \
         sim_server(SIM + ["--moe-runner-backend", "flashinfer_cutedsl"]) as s_good, \
         sim_server(SIM + ["--moe-runner-backend", "flashinfer_cutedsl",
                           "--sim-fault-output-drift-after", "8"]) as s_drift:
        dirs = ["--profiles-dir", str(env.profiles)]
        stored = env.run("gate", base, "--url", s_base.base_url, *dirs)
        assert stored.returncode == 0, stored.stdout
        assert f"gate pass #1 of {base} stored: {len(GATE_PROMPTS)} prompts" in stored.stdout
        assert "backend flashinfer_cutlass" in stored.stdout
        passed = env.run("gate", good, "--url", s_good.base_url, "--against", base, *dirs)
        assert passed.returncode == 0, passed.stdout
        assert "same output within tolerance: 100.0% identical tokens over 8 prompts" in passed.stdout
        differs = env.run("gate", drift, "--url", s_drift.base_url, "--against", base, *dirs)
        assert differs.returncode == 3, differs.stdout
        assert "output differs: prompt" in differs.stdout
        assert "diverges at token 8 where the baseline was sure" in differs.stdout
        assert "first divergence at token 8" in differs.stdout
    rows = env.query("SELECT profile_name, resolved_backend, samples_json FROM gate_samples ORDER BY id")
    assert [r[0] for r in rows] == [base, good, drift]
    samples = json.loads(rows[0][2])
    assert len(samples) == len(GATE_PROMPTS) and len(samples[0]["token_ids"]) == GATE_MAX_NEW_TOKENS
    # judging what is stored needs no server; a profile without a pass is not comparable
    again = env.run("gate", drift, "--against", base, "--no-send", *dirs)
    assert again.returncode == 3 and "output differs" in again.stdout
    none = env.run("gate", base, "--against", "gate-nothing", "--no-send", *dirs)
    assert none.returncode == 2 and "no gate samples for the baseline" in none.stdout


@pytest.mark.integration
def test_gate_cli_names_an_unreachable_server(env):
    name = env.profile("gate-down", "flashinfer_cutlass")
    out = env.run("gate", name, "--profiles-dir", str(env.profiles))  # nothing listens on its port
    assert out.returncode == 1
    assert "moe-tui gate: gate prompt 'arith'" in out.stdout and "/generate" in out.stdout
    assert env.query("SELECT COUNT(*) FROM gate_samples")[0][0] == 0


@pytest.mark.integration
def test_campaign_gates_each_profile_before_its_first_timed_run(env):
    a = env.profile("sim-ga", "flashinfer_cutlass")
    b = env.profile("sim-gb", "flashinfer_cutedsl", fault_output_drift_after=4)
    # --no-control: the subject is the gate (once per profile per campaign, before the first timed
    # run); the control's 8 planned starts a side would add 14 server starts and no claim.
    added = env.run("queue", "add", "--profiles", f"{a},{b}", "--concurrency", "1,2", "--no-warmup-pass",
                    "--no-control", "--profiles-dir", str(env.profiles), "--num-prompts", "2", "--input-len", "16",
                    "--output-len", "4")
    assert added.returncode == 0, added.stdout
    done = env.run("run", "--profiles-dir", str(env.profiles), timeout=150)
    assert done.returncode == 0, done.stdout
    gates = env.query("SELECT profile_name, campaign_id, created_at FROM gate_samples ORDER BY id")
    assert [(g[0], g[1]) for g in gates] == [(a, 1), (b, 1)]  # once per profile per campaign
    for name, _, gated_at in gates:
        first_run = env.query("SELECT MIN(started_at) FROM runs WHERE profile_name = ?", (name,))[0][0]
        assert gated_at < first_run
    verdict = env.run("gate", b, "--against", a, "--no-send", "--profiles-dir", str(env.profiles))
    assert verdict.returncode == 3 and "diverges at token 4" in verdict.stdout
    grid = env.run("compare", a, b)
    assert grid.returncode == 0, grid.stdout
    assert "correctness gate: output differs: prompt" in grid.stdout
    # One repeat per side: no verdict to withhold, the flag shows (beside any other flag a loaded
    # machine may add to the same runs, e.g. a server stall).
    # (The text is wrapped to the terminal's width: read it as one line.)
    flat = " ".join(grid.stdout.split())
    assert re.search(r"C: [^·]*output_differs", flat), grid.stdout
    assert "conc 1: baseline" in grid.stdout and "% of" in grid.stdout and "(memory-bound)" in grid.stdout
    assert " better " not in grid.stdout
