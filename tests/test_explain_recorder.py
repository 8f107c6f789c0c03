"""Which servers `explain` may ask for expert load: SGLang 0.5.23's recorder mode read from a
profile's extra_args (any spelling its parser takes, set by EPLB too) or the live /server_info."""

from __future__ import annotations

from moe_tui.explain.recorder import recorder_mode, server_recorder_mode, why_not_recorded
from moe_tui.run.profiled import admin_headers


def test_recorder_mode_from_extra_args():
    assert recorder_mode(["--trust-remote-code", "--enable-metrics"]) is None  # the shipped GLM-5 profiles
    assert recorder_mode(["--expert-distribution-recorder-mode", "stat"]) == "stat"
    assert recorder_mode(["--expert-distribution-recorder-mode=per_token"]) == "per_token"
    assert recorder_mode(["--expert-distribution-recorder-m", "stat"]) == "stat"  # argparse abbreviation
    assert recorder_mode(["--enable-eplb"]) == "stat"  # server_args sets it with EPLB
    assert recorder_mode(["--expert-distribution-recorder-buffer-size", "100"]) is None


def test_server_info_wins_when_it_says():
    assert server_recorder_mode({"expert_distribution_recorder_mode": None}, ["--enable-eplb"]) is None
    assert server_recorder_mode({"expert_distribution_recorder_mode": "stat"}, []) == "stat"
    assert server_recorder_mode({}, ["--expert-distribution-recorder-mode", "stat"]) == "stat"
    assert server_recorder_mode(None, []) is None


def test_why_names_the_variant_and_the_admin_calls_carry_the_key():
    text = why_not_recorded("glm5-nvfp4-flashinfer-cutlass")
    assert "glm5-nvfp4-flashinfer-cutlass-expert-stat" in text and "--expert-distribution-recorder-mode" in text
    from moe_tui.servers.keys import register

    # the admin calls carry the key the server manager registered for that server (the profile's
    # api_key, or the start's own key: moe_tui.servers.server_key)
    register("http://127.0.0.1:39999", "k-1")
    assert admin_headers("http://127.0.0.1:39999/") == {"Authorization": "Bearer k-1"}
    assert admin_headers("http://127.0.0.1:39998") is None
