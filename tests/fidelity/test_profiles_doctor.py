"""`moe-tui profiles check` as the doctor of a real box: it starts nothing, runs SGLang's own parser
in the profile's interpreter, says which SGLang it found against the one moe-tui was checked
against (and what is unknown for another), and finds what the start's own pre-flight would refuse
(a port in use, a missing interpreter) now instead of at queue time."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from moe_tui.commands.profiles import version_notes
from moe_tui.sglang_flags import CHECKED_VERSION, flag_table

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = (ROOT / "server_profiles" / "glm5-nvfp4-flashinfer-cutlass.toml").read_text()


def _profile(name: str, port: int, python: str) -> str:
    return (SHIPPED.replace('name = "glm5-nvfp4-flashinfer-cutlass"', f'name = "{name}"')
            .replace("port = 30000\n", f'port = {port}\npython = "{python}"\n'))


def _check(folder: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "moe_tui", "profiles", "check", str(folder)],
                          capture_output=True, text=True, timeout=180)


@pytest.mark.sglang_client
@pytest.mark.integration
def test_doctor_checks_each_profile_end_to_end_without_starting_it(sglang_client, tmp_path):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        busy = held.getsockname()[1]
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            free = s.getsockname()[1]
        (tmp_path / "ok.toml").write_text(_profile("ok", free, str(sglang_client.python)))
        (tmp_path / "busy.toml").write_text(_profile("busy", busy, str(sglang_client.python)))
        (tmp_path / "nopython.toml").write_text(_profile("nopython", free + 1 if free < 65535 else free - 1,
                                                         "/nonexistent/bin/python"))
        proc = _check(tmp_path)
    out, err = proc.stdout, proc.stderr
    assert proc.returncode == 1, out + err
    assert f"ok.toml: accepted by SGLang's parser ({CHECKED_VERSION}, the version moe-tui was checked against)" in out
    assert "busy.toml: a start now would be refused: " in err and str(busy) in err
    assert "nopython.toml: key 'python': cannot run /nonexistent/bin/python" in err
    assert "ok.toml: a start now would be refused" not in err
    assert "is not a local folder here" in out  # /models/GLM-5-NVFP4 does not exist on this machine


def test_another_sglang_version_is_named_with_what_moe_tui_cannot_vouch_for():
    flags = sorted(set(flag_table()) - {"--tp-size"} | {"--brand-new-flag"})
    (note,) = version_notes("p.toml", "0.6.0", flags)
    assert "SGLang 0.6.0 is installed; moe-tui was checked against 0.5.23" in note
    assert "/server_info keys" in note and "MoE backend list" in note
    assert "flags new since 0.5.23: 1 (--brand-new-flag)" in note and "gone: 1 (--tp-size)" in note
    assert version_notes("p.toml", CHECKED_VERSION, flags) == []
