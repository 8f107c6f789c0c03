"""Profiles checked for every resolved value: SGLang's parser takes aliases and abbreviations, so
extra_args can reach a setting the profile owns under another spelling. moe-tui's loader refuses
that with both spellings named (from the 0.5.23 flag table); SGLang 0.5.23's real parser (torch
stubbed, in the light client env) checks every shipped profile, and `moe-tui profiles check`
runs it in a profile's own interpreter."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from moe_tui.profiles import ProfileError, profile_from_dict
from moe_tui.sglang_flags import resolve

ROOT = Path(__file__).resolve().parents[2]
BASE = {"name": "p", "engine": "sglang", "model_path": "/models/GLM-5-NVFP4", "moe_runner_backend": "flashinfer_cutlass",
        "tp_size": 8, "ep_size": 8}


@pytest.mark.parametrize(("extra", "spelling", "canonical", "key"), [
    (["--tensor-parallel-size", "2"], "--tensor-parallel-size", "--tp-size", "tp_size"),
    (["--model", "/models/other"], "--model", "--model-path", "model_path"),
    (["--moe-runner", "triton"], "--moe-runner", "--moe-runner-backend", "moe_runner_backend"),
    (["--expert-parallel=4"], "--expert-parallel", "--ep-size", "ep_size"),
    (["--tp", "8"], "--tp", "--tp-size", "tp_size"),
])
def test_a_setting_reached_by_another_spelling_is_refused_naming_both(extra, spelling, canonical, key):
    with pytest.raises(ProfileError) as err:
        profile_from_dict(BASE | {"extra_args": ["--enable-metrics", *extra]}, "x.toml")
    text = str(err.value)
    assert text.startswith("x.toml: key 'extra_args': ") and spelling in text and canonical in text
    assert f"profile's own key '{key}'" in text


def test_other_flags_and_ambiguous_prefixes_pass_the_loader():
    assert profile_from_dict(BASE | {"extra_args": ["--enable-metrics", "--mem-fraction-static", "0.8"]})
    # ambiguous in 0.5.23: the loader names no owned setting; SGLang's own parser rejects it (below)
    assert resolve("--cuda-graph-max-bs").ambiguous and resolve("--cuda-graph-max-bs").dest is None


@pytest.mark.integration
@pytest.mark.sglang_client
def test_real_parser_check_passes_every_shipped_profile_and_the_flag_table(sglang_client):
    proc = subprocess.run([str(sglang_client.python), "tools/sglang_parser/check.py"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "sglang 0.5.23 parser:" in proc.stdout and " 0 problem(s)" in proc.stdout


@pytest.mark.integration
@pytest.mark.sglang_client
def test_real_parser_names_both_spellings_of_a_contradicting_value(sglang_client):
    # A profile object built past the loader (as a newer alias unknown to the table would slip by):
    # the real parser's resolved tp_size is 2, the profile says 8.
    code = (
        "import sys; sys.path[:0] = ['.', 'tools/sglang_parser']\n"
        "import check\n"
        "from moe_tui.profiles import ServerProfile\n"
        "from moe_tui import sglang_stub\n"
        "parser, _ = sglang_stub.sglang_parser()\n"
        "p = ServerProfile(name='p', engine='sglang', model_path='/m', moe_runner_backend='flashinfer_cutlass',\n"
        "                  tp_size=8, ep_size=8, extra_args=('--tensor-parallel-size', '2'), source='p.toml')\n"
        "print('\\n'.join(check.check_profile(parser, p)))\n"
    )
    proc = subprocess.run([str(sglang_client.python), "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "--tensor-parallel-size (SGLang's --tp-size)" in proc.stdout
    assert "tp_size = 2" in proc.stdout and "'tp_size' says 8" in proc.stdout


@pytest.mark.integration
@pytest.mark.sglang_client
def test_profiles_check_runs_sglangs_parser_in_the_profiles_interpreter(sglang_client, tmp_path):
    shipped = (ROOT / "server_profiles" / "glm5-nvfp4-flashinfer-cutlass.toml").read_text()
    python = f'python = "{sglang_client.python}"\n'
    (tmp_path / "good.toml").write_text(shipped.replace("port = 30000\n", "port = 30000\n" + python))
    (tmp_path / "bad.toml").write_text(
        shipped.replace('name = "glm5-nvfp4-flashinfer-cutlass"', 'name = "bad"')
        .replace("port = 30000\n", "port = 30001\n" + python)
        .replace('"--enable-metrics"]', '"--enable-metrics", "--cuda-graph-max-bs", "8"]'))
    proc = subprocess.run([sys.executable, "-m", "moe_tui", "profiles", "check", str(tmp_path)],
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "good.toml: accepted by SGLang's parser (0.5.23, the version moe-tui was checked against)" in proc.stdout
    assert "bad.toml: SGLang's parser rejects the launch args" in proc.stderr
    assert "ambiguous option: --cuda-graph-max-bs could match" in proc.stderr
