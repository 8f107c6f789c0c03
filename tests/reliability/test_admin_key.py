"""A server moe-tui starts answers its admin routes only to moe-tui (issue 36, item 3).

With the shipped profiles (no api key) every start gets a key of its own, handed to the server in
a 0600 `--config` YAML of that start under the data dir (never on the argv `ps` shows everyone):
another local user (uid nobody, a setuid child) cannot start the profiler, the expert recorder or
a cache flush, blind or guessing, and cannot read the file; whoever holds the key (moe-tui:
`run.profiled.admin_headers`) can; the file is gone when the server stops. The test reads the key
from the file the server's argv names, so it holds whether the key is an admin or an api key. The emulator reads
`--config` as SGLang 0.5.23 does (command-line flags win).
"""

from __future__ import annotations

import json
import os
import signal
import stat
from pathlib import Path

import pytest
import yaml
from runner_support import wait_for
from test_api_key import _status  # one HTTP status probe for both key tests

NOBODY = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user (uid nobody)")


def _as_nobody(base: str, config: str, trace_dir: str) -> dict:
    """What uid nobody gets from the server and the config file (a forked child that drops to nobody)."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(read_fd)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            out = {
                "start_profile": _status(f"{base}/start_profile", {"output_dir": trace_dir, "num_steps": 1}),
                "start_profile_guess": _status(f"{base}/start_profile", {"output_dir": trace_dir}, key="moe-tui-"),
                "expert_record": _status(f"{base}/start_expert_distribution_record", {}),
                "flush_cache": _status(f"{base}/flush_cache", {}),
            }
            try:
                open(config).close()
                out["config"] = "read"
            except OSError as exc:
                out["config"] = type(exc).__name__
            os.write(write_fd, json.dumps(out).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as fh:
        data = fh.read()
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
    return json.loads(data)


@pytest.mark.integration
@needs_root
def test_another_user_cannot_drive_the_profiler_of_a_server_moe_tui_started(env, tmp_path):
    """Shipped profile (no api key): uid nobody gets 401 on the profiler, the expert recorder and flush_cache; the key is off argv, in a 0600 file nobody cannot read; moe-tui's key works; the file goes at stop."""
    import psutil

    from moe_tui.profiles import load_profile
    from moe_tui.run.profiled import admin_headers

    name = env.profile("sim-adm", "flashinfer_cutlass")
    profile = load_profile(env.profiles / f"{name}.toml")
    assert not profile.api_key
    cli = env.popen("server", "start", name, "--profiles-dir", str(env.profiles))
    base = profile.base_url
    wait_for(lambda: _status(f"{base}/health") == 200, 90, "the server moe-tui started")
    (server,) = [p for p in psutil.Process(cli.pid).children(recursive=True) if "moe_tui.sim" in p.cmdline()]
    argv = server.cmdline()
    assert "--config" in argv, argv
    config = Path(argv[argv.index("--config") + 1])
    keys = yaml.safe_load(config.read_text())
    key = keys.get("admin-api-key") or keys.get("api-key")  # either closes the admin routes
    assert key and config.resolve().is_relative_to(env.data_dir.resolve()), (config, keys)
    assert key not in " ".join(argv) and "--admin-api-key" not in argv and "--api-key" not in argv
    assert key.encode() not in open(f"/proc/{server.pid}/environ", "rb").read()
    assert stat.S_IMODE(config.stat().st_mode) == 0o600 and stat.S_IMODE(config.parent.stat().st_mode) == 0o700

    trace_dir = tmp_path / "planted-traces"
    trace_dir.mkdir(mode=0o777)
    trace_dir.chmod(0o777)
    got = _as_nobody(base, str(config), str(trace_dir))
    assert got["start_profile"] == 401 and got["start_profile_guess"] == 401, got
    assert got["expert_record"] == 401 and got["flush_cache"] == 401, got
    assert got["config"] == "PermissionError", got
    assert list(trace_dir.iterdir()) == []

    # the key's holder (what moe-tui's profiled runs send) is answered
    assert _status(f"{base}/flush_cache", {}, key=key) == 200
    from moe_tui.servers.keys import register

    register(base, key)  # as the runner's ManagedServer does at launch
    assert admin_headers(base) == {"Authorization": f"Bearer {key}"}

    os.killpg(cli.pid, signal.SIGTERM)
    cli.communicate(timeout=60)
    assert not config.exists()


def test_the_emulator_reads_config_yaml_as_sglang_does(tmp_path):
    """`--config` YAML: its flags apply, command-line flags win, bools as store_true, a file not .yaml/.yml is refused."""
    from moe_tui.sim.args import parse_args

    cfg = tmp_path / "args.yaml"
    cfg.write_text("admin-api-key: adm-1\nport: 31000\nenable_metrics: true\ndisable-radix-cache: false\n")
    args = parse_args(["--config", str(cfg), "--port", "32000"])
    assert args.admin_api_key == "adm-1" and args.port == 32000 and args.enable_metrics is True
    assert args.disable_radix_cache is False
    json_cfg = tmp_path / "json.yaml"
    json_cfg.write_text(json.dumps({"api-key": "k-2"}) + "\n")  # what moe-tui writes: JSON is YAML
    assert parse_args(["--config", str(json_cfg)]).api_key == "k-2"
    bad = tmp_path / "args.toml"
    bad.write_text("port = 1\n")
    with pytest.raises((SystemExit, ValueError)):  # SGLang: ValueError "Config file must be YAML format"
        parse_args(["--config", str(bad)])
