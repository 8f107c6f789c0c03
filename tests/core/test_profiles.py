"""ServerProfile: loading, validation messages naming file and key, argv, diff, redaction."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from moe_tui.profiles import (
    REDACTED,
    ProfileError,
    ServerProfile,
    load_profile,
    load_profiles,
    profile_diff,
    profile_from_dict,
    redact_argv,
)

REPO = Path(__file__).resolve().parents[2]

GOOD = """
name = "p1"
engine = "sglang"
model_path = "/models/GLM-5-NVFP4"
moe_runner_backend = "flashinfer_cutlass"
tp_size = 8
ep_size = 8
quantization = "modelopt_fp4"
gpus = [0, 1, 2, 3, 4, 5, 6, 7]
port = 30000
extra_args = ["--trust-remote-code", "--enable-metrics"]
[env]
HF_TOKEN = "hf_secret"
NCCL_DEBUG = "WARN"
"""


def write(tmp_path: Path, text: str, name: str = "p.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_shipped_profiles_load_and_build_sglang_argv():
    profiles = load_profiles(REPO / "server_profiles")
    assert profiles.problems == []
    names = {p.name for p in profiles.profiles}
    assert names == {"glm5-nvfp4-flashinfer-cutlass", "glm5-nvfp4-flashinfer-cutedsl"}
    cutedsl = profiles.by_name("glm5-nvfp4-flashinfer-cutedsl")
    argv = cutedsl.argv(python="python3")
    assert argv[:3] == ["python3", "-m", "sglang.launch_server"]
    assert argv[argv.index("--moe-runner-backend") + 1] == "flashinfer_cutedsl"
    assert argv[argv.index("--tp-size") + 1] == "8" and argv[argv.index("--ep-size") + 1] == "8"
    assert argv[argv.index("--quantization") + 1] == "modelopt_fp4"
    assert cutedsl.launch_env()["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7"


def test_demo_profiles_launch_the_emulator_with_sim_flags():
    profiles = load_profiles(REPO / "server_profiles" / "demo")
    assert profiles.problems == []
    assert len(profiles.profiles) >= 2
    for profile in profiles.profiles:
        assert profile.engine == "sim"
        argv = profile.argv()
        assert argv[:3] == [sys.executable, "-m", "moe_tui.sim"]
        assert "--sim-time-scale" in argv


def test_argv_is_a_list_of_strings_never_a_shell_string(tmp_path):
    profile = load_profile(write(tmp_path, GOOD))
    argv = profile.argv()
    assert isinstance(argv, list) and all(isinstance(a, str) for a in argv)
    assert argv[-2:] == ["--trust-remote-code", "--enable-metrics"]


@pytest.mark.parametrize(
    "edit, key, fragment",
    [
        (('port = 30000', 'port = 80'), "port", "must be in [1024, 65535]"),
        (('port = 30000', 'port = "30000"'), "port", "expected int"),
        (('tp_size = 8', 'tp_size = 0'), "tp_size", "must be in [1, 1024]"),
        (('moe_runner_backend = "flashinfer_cutlass"', 'moe_runner_backend = "flashinfer_cutlas"'),
         "moe_runner_backend", "did you mean 'flashinfer_cutlass'"),
        (('engine = "sglang"', 'engine = "vllm"'), "engine", "must be one of sglang, sim"),
        (('gpus = [0, 1, 2, 3, 4, 5, 6, 7]', 'gpus = [0, 0, 1, 2, 3, 4, 5, 6]'), "gpus", "lists a GPU twice"),
        (('gpus = [0, 1, 2, 3, 4, 5, 6, 7]', 'gpus = [0, 1]'), "gpus", "tp_size is 8"),
        (('gpus = [0, 1, 2, 3, 4, 5, 6, 7]', 'gpus = [0, 1, 2, 3, 4, 5, 6, -7]'), "gpus", "integers >= 0"),
        (('extra_args = ["--trust-remote-code", "--enable-metrics"]', 'extra_args = ["--port", "1"]'),
         "extra_args", "set by the profile's own key"),
        (('port = 30000', 'port = 30000\nhost = "my host"'), "host", "not an IP address"),
        (('tp_size = 8', 'tp_sise = 8'), "tp_sise", "did you mean 'tp_size'"),
        (('model_path = "/models/GLM-5-NVFP4"', ''), "model_path", "is required"),
    ],
)
def test_bad_profiles_name_file_key_and_reason(tmp_path, edit, key, fragment):
    old, new = edit
    path = write(tmp_path, GOOD.replace(old, new))
    with pytest.raises(ProfileError) as info:
        load_profile(path)
    message = str(info.value)
    assert str(path) in message
    assert f"key '{key}'" in message
    assert fragment in message


def test_malformed_toml_names_the_file_and_position(tmp_path):
    path = write(tmp_path, "name = \n")
    with pytest.raises(ProfileError) as info:
        load_profile(path)
    assert str(path) in str(info.value) and "malformed TOML" in str(info.value)
    assert "line 1" in str(info.value)


def test_folder_load_lists_every_problem(tmp_path):
    write(tmp_path, GOOD, "good.toml")
    write(tmp_path, GOOD.replace('port = 30000', 'port = 22'), "bad1.toml")
    write(tmp_path, GOOD.replace('tp_size = 8', 'tp_sise = 8'), "bad2.toml")
    loaded = load_profiles(tmp_path)
    assert [p.name for p in loaded.profiles] == ["p1"]
    assert len(loaded.problems) == 2
    assert any("bad1.toml" in p and "port" in p for p in loaded.problems)
    assert any("bad2.toml" in p and "tp_sise" in p for p in loaded.problems)
    with pytest.raises(KeyError, match="did you mean 'p1'"):
        loaded.by_name("p2")


def test_secrets_are_redacted_in_snapshot_and_env_but_not_in_launch_env(tmp_path):
    profile = load_profile(write(tmp_path, GOOD))
    assert profile.launch_env()["HF_TOKEN"] == "hf_secret"  # the server needs it
    assert profile.redacted_env()["HF_TOKEN"] == REDACTED
    assert profile.snapshot()["env"]["HF_TOKEN"] == REDACTED
    assert "hf_secret" not in profile.snapshot_json()
    assert redact_argv(["x", "--api-key", "abc", "--hf-token=def", "--port", "1"]) == [
        "x", "--api-key", REDACTED, f"--hf-token={REDACTED}", "--port", "1"]


def test_profile_diff_lists_every_launch_setting_besides_backend():
    base = profile_from_dict({
        "name": "a", "engine": "sglang", "model_path": "/m", "moe_runner_backend": "flashinfer_cutlass",
        "tp_size": 8, "ep_size": 8, "extra_args": ["--mem-fraction-static", "0.85", "--enable-metrics"],
        "env": {"NCCL_DEBUG": "WARN"},
    })
    cand = profile_from_dict({
        "name": "b", "engine": "sglang", "model_path": "/m", "moe_runner_backend": "flashinfer_cutedsl",
        "tp_size": 8, "ep_size": 4, "port": 30001, "extra_args": ["--mem-fraction-static=0.80", "--enable-metrics"],
        "env": {"NCCL_DEBUG": "INFO"},
    })
    diffs = {d.key: d for d in profile_diff(base, cand)}
    assert diffs["moe_runner_backend"].kind == "backend"
    assert diffs["ep_size"].kind == "launch" and (diffs["ep_size"].baseline, diffs["ep_size"].candidate) == (8, 4)
    assert diffs["extra_args --mem-fraction-static"].baseline == "0.85"
    assert diffs["extra_args --mem-fraction-static"].candidate == "0.80"
    assert "extra_args --enable-metrics" not in diffs
    assert diffs["env NCCL_DEBUG"].kind == "launch"
    assert diffs["name"].kind == "identity" and diffs["port"].kind == "identity"
    assert profile_diff(base, base) == []


def test_binding_beyond_loopback_is_visible():
    p = ServerProfile(name="x", engine="sim", model_path="m", moe_runner_backend="auto", host="0.0.0.0")
    assert p.binds_beyond_loopback
    assert p.base_url == "http://127.0.0.1:30000"
    assert not ServerProfile(name="x", engine="sim", model_path="m", moe_runner_backend="auto").binds_beyond_loopback
