"""SGLang's own benchmark client (sglang.bench_serving, unmodified) and moe-tui's adapter for it.

Pure tests: spec -> flag mapping, JSONL parsing and its errors, spec recovery from a record.
Client tests (fixture `sglang_client`): the flags we emit exist in the installed client, and a real
run of the client against the emulator (a real process on loopback) agrees with the emulator's
performance model.
"""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

import pytest

from moe_tui.bench.sglang_adapter import (
    CLIENT_NAME,
    RESULT_FIELDS,
    SPEC_FIELDS_NOT_IN_RECORD,
    BenchServingError,
    RecordError,
    bench_serving_args,
    client_env,
    parse_bench_serving_jsonl,
    spec_fields_from_record,
)
from moe_tui.spec import BenchmarkSpec

REPO_ROOT = Path(__file__).resolve().parents[1]
SIM_TOKENIZER = REPO_ROOT / "moe_tui" / "sim" / "tokenizer"


def _flag_value(argv: list[str], flag: str) -> str:
    assert argv.count(flag) == 1, f"{flag} appears {argv.count(flag)} times in {argv}"
    return argv[argv.index(flag) + 1]


# -- flag mapping ---------------------------------------------------------------------------------
def test_spec_maps_to_bench_serving_flags():
    spec = BenchmarkSpec(
        client=CLIENT_NAME, api="generate", input_len=512, output_len=64, range_ratio=1.0,
        num_prompts=40, max_concurrency=8, request_rate=math.inf, seed=7, warmup_requests=2,
        ignore_eos=True, temperature=0.0, flush_cache=False,
    )
    argv = bench_serving_args(spec, base_url="http://127.0.0.1:31000", output_file="/tmp/o.jsonl",
                              tokenizer="/tok")
    expected = {
        "--backend": "sglang", "--base-url": "http://127.0.0.1:31000", "--dataset-name": "random-ids",
        "--random-input-len": "512", "--random-output-len": "64", "--random-range-ratio": "1.0",
        "--num-prompts": "40", "--max-concurrency": "8", "--request-rate": "inf", "--seed": "7",
        "--warmup-requests": "2", "--temperature": "0.0", "--output-file": "/tmp/o.jsonl",
        "--tokenizer": "/tok",
    }
    for flag, value in expected.items():
        assert _flag_value(argv, flag) == value, flag
    assert "--disable-ignore-eos" not in argv
    assert "--flush-cache" not in argv
    assert "--disable-tqdm" in argv
    assert argv.count("--tokenize-prompt") == 1  # exact ids reach the server, not re-tokenized text


def test_spec_switches_map_to_their_flags():
    spec = BenchmarkSpec(api="completions", request_rate=2.5, ignore_eos=False, flush_cache=True,
                         range_ratio=0.5)
    argv = bench_serving_args(spec, base_url="http://h:1", output_file="o", output_details=True,
                              disable_tqdm=False)
    assert _flag_value(argv, "--backend") == "sglang-oai"
    assert _flag_value(argv, "--request-rate") == "2.5"
    assert _flag_value(argv, "--random-range-ratio") == "0.5"
    assert "--disable-ignore-eos" in argv and "--flush-cache" in argv and "--output-details" in argv
    assert "--disable-tqdm" not in argv and "--tokenizer" not in argv
    assert "--tokenize-prompt" not in argv  # 0.5.23 rejects it with --backend sglang-oai


def test_unsupported_spec_values_are_refused_by_name():
    fields = BenchmarkSpec().to_dict()
    with pytest.raises(BenchServingError, match="'dataset'.*'random'"):
        bench_serving_args({**fields, "dataset": "random"}, base_url="http://h:1", output_file="o")
    with pytest.raises(BenchServingError, match="'api'"):
        bench_serving_args({**fields, "api": "chat"}, base_url="http://h:1", output_file="o")
    without_seed = {k: v for k, v in fields.items() if k != "seed"}
    with pytest.raises(BenchServingError, match="'seed'"):
        bench_serving_args(without_seed, base_url="http://h:1", output_file="o")


def test_spec_naming_another_client_or_version_is_refused(tmp_path):
    from moe_tui.bench.sglang_adapter import SglangClient, run_bench_serving

    client = SglangClient(kind="repo-env", python=Path("/nonexistent/python"), version="0.5.23")
    common = dict(base_url="http://127.0.0.1:9", output_file=tmp_path / "o.jsonl",
                  log_file=tmp_path / "c.log", client=client)
    with pytest.raises(BenchServingError, match="'client': 'moe-tui'"):
        run_bench_serving(BenchmarkSpec(client="moe-tui"), **common)
    with pytest.raises(BenchServingError, match="'client_version'.*'0.5.22'.*sglang 0.5.23"):
        run_bench_serving(BenchmarkSpec(client=CLIENT_NAME, client_version="0.5.22"), **common)
    assert not (tmp_path / "c.log").exists()


def test_client_env_is_offline():
    env = client_env({"PATH": "/bin", "HF_HUB_OFFLINE": "0"})
    assert env["HF_HUB_OFFLINE"] == "1" and env["TRANSFORMERS_OFFLINE"] == "1"


# -- JSONL parsing ----------------------------------------------------------------------------
def _record(**overrides) -> dict:
    """A bench_serving 0.5.23 result line as it writes one (values made up, shape real)."""
    rec = {
        "tag": None, "backend": "sglang", "dataset_name": "random-ids", "request_rate": math.inf,
        "max_concurrency": 4, "sharegpt_output_len": None, "random_input_len": 128,
        "random_output_len": 32, "random_range_ratio": 1.0,
        "server_info": {"moe_runner_backend": "flashinfer_cutlass", "version": "0.5.23"},
        "duration": 2.0, "completed": 12, "total_input_tokens": 1536, "total_input_text_tokens": 1536,
        "total_input_vision_tokens": 0, "total_output_tokens": 384,
        "total_output_tokens_retokenized": 384, "request_throughput": 6.0, "input_throughput": 768.0,
        "output_throughput": 192.0, "total_throughput": 960.0, "concurrency": 3.9,
        "accept_length": None, "max_output_tokens_per_s": 200.0, "max_concurrent_requests": 4,
    }
    for i, metric in enumerate(("e2e_latency", "ttft", "tpot", "itl")):
        for j, stat in enumerate(("mean", "median", "std", "p90", "p95", "p99")):
            rec[f"{stat}_{metric}_ms"] = float(10 * i + j)
    rec.update(overrides)
    return rec


def _write_jsonl(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_parse_jsonl_normalizes_records(tmp_path):
    # json.dumps writes inf as the bare token Infinity, exactly as bench_serving does.
    details = {"input_lens": [128] * 13, "output_lens": [32] * 12 + [0], "ttfts": [0.1] * 13,
               "itls": [[]] * 13, "generated_texts": [""] * 13, "errors": [""] * 12 + ["boom"]}
    path = _write_jsonl(tmp_path / "r.jsonl", [
        json.dumps(_record()), "", json.dumps(_record(request_rate=4, max_concurrency=None,
                                                      completed=12.0, **details)),
    ])
    first, second = parse_bench_serving_jsonl(path)
    assert set(RESULT_FIELDS) <= set(first)
    assert first["request_rate"] == math.inf and first["max_concurrency"] == 4
    assert first["mean_tpot_ms"] == 20.0 and first["p99_itl_ms"] == 35.0
    assert first["server_info"]["moe_runner_backend"] == "flashinfer_cutlass"
    assert "errors" not in first
    assert second["request_rate"] == 4.0 and isinstance(second["request_rate"], float)
    assert second["max_concurrency"] is None
    assert second["completed"] == 12 and isinstance(second["completed"], int)
    assert second["errors"][-1] == "boom"


def test_parse_jsonl_fills_fields_an_older_client_did_not_write(tmp_path):
    rec = _record()
    del rec["max_output_tokens_per_s"], rec["p90_itl_ms"]
    (parsed,) = parse_bench_serving_jsonl(_write_jsonl(tmp_path / "old.jsonl", [json.dumps(rec)]))
    assert parsed["max_output_tokens_per_s"] is None and parsed["p90_itl_ms"] is None


def test_corrupt_line_error_names_file_and_line(tmp_path):
    path = _write_jsonl(tmp_path / "bad.jsonl", [json.dumps(_record()), '{"backend": "sglang", "dur'])
    with pytest.raises(RecordError) as err:
        parse_bench_serving_jsonl(path)
    assert f"{path}:2:" in str(err.value)


@pytest.mark.parametrize("line, needle", [
    ("[1, 2]", "expected a JSON object"),
    (json.dumps({"backend": "sglang"}), "missing dataset_name, duration, completed, output_throughput"),
    (json.dumps(_record(output_throughput="fast")), "'output_throughput'"),
    (json.dumps(_record(completed=True)), "'completed'"),
])
def test_wrong_records_error_names_line_and_field(tmp_path, line, needle):
    path = _write_jsonl(tmp_path / "x.jsonl", ["", line])
    with pytest.raises(RecordError, match=f"x.jsonl:2: .*{needle}"):
        parse_bench_serving_jsonl(path)


def test_unreadable_file_error_names_file(tmp_path):
    with pytest.raises(RecordError, match="nope.jsonl: cannot read"):
        parse_bench_serving_jsonl(tmp_path / "nope.jsonl")


# -- spec recovery ------------------------------------------------------------------------------
def test_spec_fields_from_record_round_trip(tmp_path):
    spec = BenchmarkSpec(client=CLIENT_NAME, api="completions", input_len=128, output_len=32,
                         range_ratio=1.0, num_prompts=13, max_concurrency=4, request_rate=2.0)
    rec = _record(backend="sglang-oai", request_rate=2.0, errors=[""] * 13)
    (parsed,) = parse_bench_serving_jsonl(_write_jsonl(tmp_path / "r.jsonl", [json.dumps(rec)]))
    fields = spec_fields_from_record(parsed)
    assert not set(fields) & set(SPEC_FIELDS_NOT_IN_RECORD)
    rebuilt = BenchmarkSpec.from_dict(fields)
    assert rebuilt.diff(spec) == []
    # Without --output-details the prompt count is only known as `completed`.
    assert spec_fields_from_record(_record())["num_prompts"] == 12


def test_spec_fields_refuse_a_foreign_backend():
    with pytest.raises(RecordError, match="'vllm'"):
        spec_fields_from_record(_record(backend="vllm"))


# -- the installed client ---------------------------------------------------------------------
@pytest.mark.integration
@pytest.mark.sglang_client
def test_emitted_flags_exist_in_the_installed_client(sglang_client):
    """Every flag the adapter can emit is one the installed bench_serving accepts."""
    help_text = subprocess.run(
        [*sglang_client.argv_prefix, "--help"], capture_output=True, text=True, timeout=120,
        env=client_env(client=sglang_client), check=True,
    ).stdout
    spec = BenchmarkSpec(api="completions", ignore_eos=False, flush_cache=True)
    argv = bench_serving_args(spec, base_url="http://h:1", output_file="o", tokenizer="t",
                              output_details=True, tag="x")
    argv += bench_serving_args(spec.replace(api="generate"), base_url="http://h:1", output_file="o")
    flags = sorted({a for a in argv if a.startswith("--")})
    assert "--tokenize-prompt" in flags
    missing = [f for f in flags if f"{f} " not in help_text and f"{f}\n" not in help_text]
    assert not missing, f"flags unknown to sglang.bench_serving {sglang_client.version}: {missing}"
    assert "sglang-oai" in help_text and "random-ids" in help_text


# -- a real run against the emulator ------------------------------------------------------------
# Fixed-length workload, closed loop: 4 waves of 8 requests, 64 output tokens each. At time scale
# 10 a decode step of batch 8 is ~22 ms, so the timed phase is ~6 s; the client's own start
# (imports, tokenizer, warmup) adds ~5 s.
AGREEMENT_BACKEND = "flashinfer_cutlass"
AGREEMENT_TIME_SCALE = 10.0
AGREEMENT_SPEC = dict(client=CLIENT_NAME, client_version="0.5.23", api="generate", input_len=128,
                      output_len=64, range_ratio=1.0, num_prompts=32, max_concurrency=8,
                      request_rate=math.inf, seed=42, warmup_requests=1)


@pytest.mark.integration
@pytest.mark.sglang_client
def test_sglang_client_agrees_with_emulator_model(sglang_client, tmp_path):
    from moe_tui.bench.sglang_adapter import run_bench_serving
    from moe_tui.sim.launch import start_sim
    from moe_tui.sim.model import predict_steady_state

    spec = BenchmarkSpec(**AGREEMENT_SPEC)
    sim = start_sim(["--moe-runner-backend", AGREEMENT_BACKEND,
                     "--sim-time-scale", str(AGREEMENT_TIME_SCALE)], log_path=tmp_path / "sim.log")
    try:
        record = run_bench_serving(
            spec, base_url=sim.base_url, output_file=tmp_path / "out.jsonl",
            log_file=tmp_path / "client.log", tokenizer=SIM_TOKENIZER, client=sglang_client,
            output_details=True, timeout_s=120,
        )
    finally:
        sim.stop()

    # Every request succeeded and produced exactly the fixed output length.
    assert record["completed"] == spec.num_prompts, record["errors"]
    assert all(not e for e in record["errors"]), record["errors"]
    assert record["output_lens"] == [spec.output_len] * spec.num_prompts
    assert record["total_output_tokens"] == spec.num_prompts * spec.output_len
    # The record carries the server's resolved backend and rebuilds the spec it ran.
    assert record["server_info"]["moe_runner_backend"] == AGREEMENT_BACKEND
    rebuilt = BenchmarkSpec.from_dict({**spec_fields_from_record(record), "client_version": "0.5.23"})
    assert rebuilt.diff(spec) == []

    predicted = predict_steady_state(
        AGREEMENT_BACKEND, spec.max_concurrency, spec.input_len, spec.output_len,
        time_scale=AGREEMENT_TIME_SCALE, num_prompts=spec.num_prompts,
    )
    assert record["output_throughput"] == pytest.approx(predicted.output_throughput, rel=0.05), (
        f"SGLang's client measured {record['output_throughput']:.1f} tok/s, model predicts "
        f"{predicted.output_throughput:.1f}")
    assert record["mean_tpot_ms"] == pytest.approx(predicted.mean_tpot_ms, rel=0.05), (
        f"SGLang's client measured TPOT {record['mean_tpot_ms']:.2f} ms, model predicts "
        f"{predicted.mean_tpot_ms:.2f}")


@pytest.mark.integration
@pytest.mark.sglang_client
def test_failed_client_run_reports_exit_and_log_tail(sglang_client, tmp_path):
    from moe_tui.bench.sglang_adapter import run_bench_serving
    from moe_tui.sim.launch import start_sim

    spec = BenchmarkSpec(**{**AGREEMENT_SPEC, "num_prompts": 2, "output_len": 4})
    # Every generation answers HTTP 500: bench_serving's warmup fails and it exits non-zero.
    sim = start_sim(["--sim-error-rate", "1.0", "--sim-time-scale", "50"])
    try:
        with pytest.raises(BenchServingError, match=r"(?s)bench_serving exited [1-9].*Warmup failed"):
            run_bench_serving(spec, base_url=sim.base_url, output_file=tmp_path / "out.jsonl",
                              log_file=tmp_path / "client.log", tokenizer=SIM_TOKENIZER,
                              client=sglang_client, timeout_s=120)
    finally:
        sim.stop()
    assert not (tmp_path / "out.jsonl").exists()
