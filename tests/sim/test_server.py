"""The emulator as a real process on loopback: endpoint shapes, errors, readiness, logs."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from tokenizers import Tokenizer

from tests.sim_helpers import SimProcess, http_status, sim_server, sse_events, stream_generate
from tests.support import loopback


@pytest.fixture(scope="module")
def sim():
    args = ["--moe-runner-backend", "flashinfer_cutedsl", "--quantization", "modelopt_fp4",
            "--tp-size", "8", "--ep-size", "8", "--enable-metrics", "--sim-time-scale", "100"]
    with sim_server(args) as proc:
        yield proc


@pytest.mark.integration
def test_stream_generate_shapes(sim):
    # The module's server is shared and tests run in duration order: another test's prompt may
    # share this one's first tokens, so the cache is emptied first (cached_tokens is asserted 0).
    assert loopback.post(sim.base_url + "/flush_cache", params={"timeout": "10"}, timeout=15).status_code == 200
    chunks = stream_generate(sim.base_url, {"text": "hello there general",
                                            "sampling_params": {"max_new_tokens": 5,
                                                                "temperature": 0.0,
                                                                "ignore_eos": True}})
    assert chunks[-1] == "[DONE]"
    data = chunks[:-1]
    assert [c["meta_info"]["completion_tokens"] for c in data] == [1, 2, 3, 4, 5]
    for c in data[:-1]:
        assert c["meta_info"]["finish_reason"] is None
        assert "e2e_latency" not in c["meta_info"]
    last = data[-1]
    assert last["meta_info"]["finish_reason"] == {"type": "length", "length": 5}
    assert last["meta_info"]["e2e_latency"] > 0
    assert last["meta_info"]["prompt_tokens"] == 3
    assert last["meta_info"]["cached_tokens"] == 0
    assert len({c["meta_info"]["id"] for c in data}) == 1
    # Text and ids are cumulative, and the text is what the shipped tokenizer decodes.
    assert data[1]["text"].startswith(data[0]["text"])
    assert len(last["output_ids"]) == 5 and last["output_ids"][:2] == data[1]["output_ids"]
    info = loopback.get(sim.base_url + "/model_info").json()
    tok = Tokenizer.from_file(info["tokenizer_path"] + "/tokenizer.json")
    assert tok.decode(last["output_ids"]) == last["text"]


@pytest.mark.integration
def test_generate_input_ids_non_stream(sim):
    r = loopback.post(sim.base_url + "/generate",
                   json={"input_ids": list(range(100)), "sampling_params": {"max_new_tokens": 7},
                         "lora_path": None, "return_logprob": False, "logprob_start_len": -1})
    assert r.status_code == 200
    body = r.json()
    assert body["meta_info"]["prompt_tokens"] == 100
    assert body["meta_info"]["completion_tokens"] == 7
    assert body["meta_info"]["finish_reason"] == {"type": "length", "length": 7}
    assert len(body["output_ids"]) == 7 and body["text"]


@pytest.mark.integration
def test_stream_interval_emits_every_n_tokens():
    with sim_server(["--stream-interval", "4", "--sim-time-scale", "200"]) as proc:
        chunks = stream_generate(proc.base_url, {"input_ids": [5, 6],
                                                 "sampling_params": {"max_new_tokens": 10}})
    counts = [c["meta_info"]["completion_tokens"] for c in chunks[:-1]]
    assert counts == [1, 4, 8, 10]


@pytest.mark.integration
def test_completions_stream_and_usage(sim):
    def run(extra):
        with loopback.stream("POST", sim.base_url + "/v1/completions",
                          json={"model": "x", "prompt": "one two three", "max_tokens": 4,
                                "stream": True} | extra) as r:
            return [e for e in sse_events(r.read().decode())]

    plain = run({})
    assert plain[-1] == "[DONE]"
    chunks = [json.loads(e) for e in plain[:-1]]
    assert all(c["object"] == "text_completion" and len(c["choices"]) == 1 for c in chunks)
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None, None, None, "length"]
    assert "".join(c["choices"][0]["text"] for c in chunks).count(" ") == 3  # 4 words
    with_usage = [json.loads(e) for e in run({"stream_options": {"include_usage": True}})[:-1]]
    assert with_usage[-1]["choices"] == []
    assert with_usage[-1]["usage"] == {"prompt_tokens": 3, "completion_tokens": 4,
                                       "total_tokens": 7, "prompt_tokens_details": None}
    r = loopback.post(sim.base_url + "/v1/completions", json={"prompt": [1, 2, 3], "max_tokens": 2})
    body = r.json()
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"]["completion_tokens"] == 2 and body["usage"]["prompt_tokens"] == 3


@pytest.mark.parametrize("path,body,expect", [
    ("/generate", b"{not json", "Invalid JSON"),
    ("/generate", b"[1, 2]", "JSON object"),
    ("/generate", b'{"sampling_params": {}}', "text or input_ids"),
    ("/generate", b'{"text": "a", "input_ids": [1]}', "text or input_ids"),
    ("/generate", b'{"input_ids": [1, -2]}', "input_ids"),
    ("/generate", b'{"text": "a", "sampling_params": {"max_new_tokens": -1}}', "max_new_tokens"),
    ("/generate", b'{"text": "a", "sampling_params": {"temperature": "hot"}}', "temperature"),
    ("/generate", b'{"text": "a", "sampling_params": {"max_new_tokens": 999999}}',
     "maximum context length"),
    ("/v1/completions", b"{", "Invalid JSON"),
    ("/v1/completions", b'{"prompt": 5}', "prompt"),
])
@pytest.mark.integration
def test_bad_requests_get_400_json(sim, path, body, expect):
    r = loopback.post(sim.base_url + path, content=body)
    assert r.status_code == 400
    payload = r.json()
    message = payload["error"]["message"] if "error" in payload else payload["message"]
    assert expect in message
    assert http_status(sim.base_url + "/health_generate") == 200  # still alive


@pytest.mark.integration
def test_server_info_model_info_models(sim):
    for path in ("/server_info", "/get_server_info"):
        info = loopback.get(sim.base_url + path).json()
        assert info["simulated"] is True
        assert info["moe_runner_backend"] == "flashinfer_cutedsl"
        assert info["tp_size"] == 8 and info["ep_size"] == 8
        assert info["quantization"] == "modelopt_fp4"
        assert info["disable_shared_experts_fusion"] is True
        assert info["version"].endswith("-sim")
        assert "--moe-runner-backend flashinfer_cutedsl" in info["launch_command"]
        assert {"load_weight", "cuda_graph", "total"} <= set(info["startup_time"])
        assert "last_gen_throughput" in info["internal_states"][0]
        assert "(simulated)" in info["served_model_name"]
    mi = loopback.get(sim.base_url + "/model_info").json()
    assert mi["is_generation"] is True and mi["architectures"]
    assert mi["served_model_name"].endswith("(simulated)")
    models = loopback.get(sim.base_url + "/v1/models").json()
    assert models["data"][0]["id"] == mi["served_model_name"]


@pytest.mark.integration
def test_metrics_and_flush_cache(sim):
    loopback.post(sim.base_url + "/generate", json={"input_ids": [1, 2, 3, 4],
                                                 "sampling_params": {"max_new_tokens": 3}})
    text = loopback.get(sim.base_url + "/metrics").text
    for name in ("sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage",
                 "sglang:gen_throughput", "sglang:prompt_tokens_total",
                 "sglang:generation_tokens_total", "sglang:time_to_first_token_seconds_bucket",
                 "sglang:inter_token_latency_seconds_count", "sglang:e2e_request_latency_seconds_sum"):
        assert name in text
    gen = [ln for ln in text.splitlines() if ln.startswith("sglang:generation_tokens_total")]
    assert float(gen[0].rsplit(" ", 1)[1]) >= 3
    r = loopback.post(sim.base_url + "/flush_cache")
    assert r.status_code == 200 and "Cache flushed" in r.text


@pytest.mark.integration
def test_metrics_absent_without_flag():
    with sim_server(["--sim-time-scale", "100"]) as proc:
        assert http_status(proc.base_url + "/metrics") == 404


@pytest.mark.integration
def test_readiness_order_and_log_lines():
    sim = SimProcess(["--sim-load-seconds", "1.0", "--sim-warmup-seconds", "0.3"])
    with sim:
        seen_models = None
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            models = http_status(sim.base_url + "/v1/models")
            health = http_status(sim.base_url + "/health_generate")
            if models == 200 and seen_models is None:
                seen_models = health
            if health == 200:
                break
            time.sleep(0.02)
        assert seen_models == 503, "/v1/models must answer while /health_generate is still 503"
        assert http_status(sim.base_url + "/model_info") == 200
        sim.wait_for_log("ready to roll", timeout=5)
        wanted = ["SIMULATED", "server_args=ServerArgs(", "Load weight begin", "Load weight end. elapsed=",
                  "Memory pool end.", "Capture target decode CUDA graph begin.",
                  "Capture target decode CUDA graph end.", "Engine startup timings (s):",
                  f"Uvicorn running on http://127.0.0.1:{sim.port}", "POST /generate",
                  "The server is fired up and ready to roll!"]
        lines = list(sim.lines)
        positions = [next(i for i, ln in enumerate(lines) if w in ln) for w in wanted]
        assert positions == sorted(positions), lines


@pytest.mark.integration
def test_cli_rejects_unknown_flags_like_sglang():
    for argv, msg in ((["--enable-piecewise-cuda-graph"], "error: unrecognized arguments"),
                      (["--cuda-graph-max-bs", "4"], "error: ambiguous option")):
        for cmd in ([sys.executable, "-m", "moe_tui.sim"], [sys.executable, "-m", "moe_tui.cli", "sim"]):
            r = subprocess.run(cmd + argv, capture_output=True, text=True, timeout=30)
            assert r.returncode == 2, (cmd, r.stderr)
            assert msg in r.stderr
