"""The servers' pure parts: Prometheus text and /server_info parsing, the GPU checks (with an injected
GPU view), and the servers package never importing Textual."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from moe_tui.profiles import ServerProfile
from moe_tui.servers import (
    ForeignGpuProcessError,
    GpuConflictError,
    GpuView,
    ServerInfoError,
    check_gpus,
    metrics_event,
    parse_prometheus_text,
    parse_server_info,
)
from tests.support.servers import REPO


# -- pure parts ----------------------------------------------------------------------------------
def test_parse_prometheus_text_labels_comments_and_odd_lines():
    text = textwrap.dedent("""\
        # HELP sglang:num_running_reqs The number of running requests.
        # TYPE sglang:num_running_reqs gauge
        sglang:num_running_reqs{model_name="m",tp_rank="0"} 3
        sglang:num_running_reqs{model_name="m",tp_rank="1"} 4
        sglang:num_queue_reqs 7.0 1700000000000
        sglang:token_usage{model_name="a \\"quoted\\" name"} 0.25
        sglang:token_usage{model_name="b"} 0.75
        sglang:gen_throughput{model_name="m"} 1234.5
        sglang:cache_hit_rate{model_name="m"} NaN
        this line is garbage
        sglang:time_to_first_token_seconds_bucket{le="+Inf"} +Inf
    """)
    samples = parse_prometheus_text(text)
    names = [s.name for s in samples]
    assert names.count("sglang:num_running_reqs") == 2 and "this" not in names
    quoted = [s for s in samples if s.name == "sglang:token_usage"][0]
    assert quoted.labels["model_name"] == 'a "quoted" name'
    bucket = [s for s in samples if s.name.endswith("_bucket")][0]
    assert bucket.labels["le"] == "+Inf" and bucket.value == float("inf")
    event = metrics_event("p", samples, healthy=True)
    assert event.running_requests == 7 and event.queued_requests == 7.0
    assert event.token_usage == pytest.approx(0.5) and event.gen_throughput == 1234.5


@pytest.mark.parametrize("payload, words", [
    ("<html>Bad Gateway</html>", "not JSON"),
    ("[1, 2]", "JSON list"),
    ('{"version": "0.5.23"}', "no moe_runner_backend"),
    ('{"moe_runner_backend": null}', "no moe_runner_backend"),
])
def test_parse_server_info_garbage_gives_clear_error(payload, words):
    with pytest.raises(ServerInfoError, match=words):
        parse_server_info(payload)


def test_parse_server_info_reads_flat_and_nested():
    flat = parse_server_info('{"moe_runner_backend": "flashinfer_cutlass", "version": "0.5.23", "tp_size": 8}')
    assert (flat.resolved_backend, flat.version, flat.args["tp_size"]) == ("flashinfer_cutlass", "0.5.23", 8)
    nested = parse_server_info({"server_args": {"moe_runner_backend": "triton"}, "version": "x"})
    assert nested.resolved_backend == "triton"


def _sglang_profile(gpus) -> ServerProfile:
    return ServerProfile(name="real", engine="sglang", model_path="/m", moe_runner_backend="flashinfer_cutlass",
                         gpus=tuple(gpus), tp_size=len(gpus))


def test_gpu_index_beyond_machine_is_named():
    with pytest.raises(GpuConflictError, match=r"GPU index 8, 9.*reports 8 GPU"):
        check_gpus(_sglang_profile(range(2, 10)), [], GpuView(count=8), force=False)


def test_foreign_gpu_process_refused_unless_forced():
    view = GpuView(count=8, processes={3: ((4242, "python3"),), 5: ()})
    with pytest.raises(ForeignGpuProcessError, match=r"GPU 3: pid 4242 \(python3\)"):
        check_gpus(_sglang_profile(range(8)), [], view, force=False)
    warnings = check_gpus(_sglang_profile(range(8)), [], view, force=True)
    assert len(warnings) == 1 and "4242" in warnings[0] and "forced" in warnings[0]
    assert check_gpus(_sglang_profile([0, 1]), [], view, force=False) == []
    assert check_gpus(_sglang_profile(range(8)), [], None, force=False) == []  # no NVML: nothing to check


@pytest.mark.integration
def test_servers_module_does_not_import_textual():
    code = "import sys, moe_tui.servers, moe_tui.commands.server; assert 'textual' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)
