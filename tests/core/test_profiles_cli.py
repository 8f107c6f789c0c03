"""`moe-tui profiles check`: every problem listed, non-zero exit, file and key named."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration  # starts real processes

REPO = Path(__file__).resolve().parents[2]


def moe_tui(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "moe_tui", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=120)


def test_shipped_folders_pass(tmp_path):
    """Checked as shipped but for the port: the check also refuses a port some other process holds,
    and a second test run beside this one may be running the demo on 31000 right now. Each copy
    gets a claimed free port instead; every other line is the shipped file's."""
    from moe_tui.sim.launch import free_port

    for folder in ("server_profiles", "server_profiles/demo"):
        copy = tmp_path / folder.replace("/", "-")
        copy.mkdir()
        for shipped in sorted((REPO / folder).glob("*.toml")):
            lines = shipped.read_text().splitlines(keepends=True)
            ports = [i for i, line in enumerate(lines) if re.fullmatch(r"port = \d+\n?", line)]
            assert len(ports) == 1, shipped
            lines[ports[0]] = f"port = {free_port()}\n"
            (copy / shipped.name).write_text("".join(lines))
        proc = moe_tui("profiles", "check", str(copy), "--no-sglang")
        assert proc.returncode == 0, proc.stderr
        assert "0 problem(s)" in proc.stdout


def test_bad_folder_lists_every_problem_and_fails(tmp_path):
    good = (REPO / "server_profiles" / "demo" / "sim-flashinfer-cutlass.toml").read_text()
    (tmp_path / "ok.toml").write_text(good)
    (tmp_path / "port.toml").write_text(good.replace("port = 31000", "port = 443").replace(
        'name = "sim-flashinfer-cutlass"', 'name = "x1"'))
    (tmp_path / "typo.toml").write_text(good.replace("tp_size", "tp_sz").replace(
        'name = "sim-flashinfer-cutlass"', 'name = "x2"'))
    (tmp_path / "broken.toml").write_text("name = [\n")
    proc = moe_tui("profiles", "check", str(tmp_path))
    assert proc.returncode == 1
    err = proc.stderr
    assert f"{tmp_path / 'port.toml'}: key 'port'" in err
    assert f"{tmp_path / 'typo.toml'}: key 'tp_sz': unknown key; did you mean 'tp_size'?" in err
    assert f"{tmp_path / 'broken.toml'}: malformed TOML" in err
    assert "3 problem(s)" in proc.stdout


def test_show_unknown_profile_suggests_a_name():
    proc = moe_tui("profiles", "show", "sim-flashinfer-cutlas", "--dir", "server_profiles/demo")
    assert proc.returncode == 4  # not found (commands.common)
    assert "did you mean 'sim-flashinfer-cutlass'" in proc.stderr


def test_emulator_parser_rejects_a_flag_sglang_0_5_23_rejects(tmp_path):
    good = (REPO / "server_profiles" / "demo" / "sim-flashinfer-cutlass.toml").read_text()
    # 0.5.23 rejects --cuda-graph-max-bs as ambiguous: the profile check must say so before a launch.
    (tmp_path / "p.toml").write_text(good.replace('extra_args = ["--enable-metrics"]',
                                                  'extra_args = ["--enable-metrics", "--cuda-graph-max-bs", "256"]'))
    proc = moe_tui("profiles", "check", str(tmp_path))
    assert proc.returncode == 1
    assert f"{tmp_path / 'p.toml'}: the emulator rejects the launch args" in proc.stderr
    assert "ambiguous option: --cuda-graph-max-bs" in proc.stderr
