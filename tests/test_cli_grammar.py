"""Issue 23 item 7: one CLI grammar, as a script sees it (real `moe-tui` subprocesses).

`--profiles-dir` with one lookup rule (the bundled demo profiles included) on every command that
reads profiles, `--json` on what scripts call (queue add returns campaign and item ids, export
returns paths, profiles check/show), `run --status` in words by default, and the exit codes
(0 ok, 1 failed, 2 usage, 3 not found) in every --help."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from moe_tui.cli import COMMANDS
from moe_tui.commands.common import EXIT_CODES_HELP, EXIT_NOT_FOUND

pytestmark = pytest.mark.integration  # every test here runs the real command line

A, B = "sim-flashinfer-cutlass", "sim-flashinfer-cutedsl"


def cli(home: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    env["MOE_TUI_HOME"] = str(home)
    return subprocess.run([sys.executable, "-m", "moe_tui", *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=120)


def test_every_help_names_the_exit_codes(tmp_path):
    for name in set(COMMANDS) - {"sim"}:  # `sim` is the emulator: its flags and help are SGLang's server's
        res = cli(tmp_path, name, "--help")
        assert res.returncode == 0, (name, res.stderr)
        assert " ".join(EXIT_CODES_HELP.split()) in " ".join(res.stdout.split()), name
    res = cli(tmp_path, "queue", "add", "--help")
    assert "--profiles-dir" in res.stdout and "--json" in res.stdout and "exit codes" in res.stdout
    assert "--profiles-dir" in cli(tmp_path, "server", "start", "--help").stdout


def test_bundled_demo_profiles_are_found_by_every_command_from_anywhere(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()  # no ./server_profiles here
    show = cli(tmp_path, "profiles", "show", A, "--json", cwd=elsewhere)
    assert show.returncode == 0, show.stderr
    data = json.loads(show.stdout)
    assert data["name"] == A and data["argv"] and Path(data["profiles_dir"]).name == "demo"
    assert cli(tmp_path, "profiles", "show", "no-such-profile", cwd=elsewhere).returncode == EXIT_NOT_FOUND
    check = cli(tmp_path, "profiles", "check", "--profiles-dir", data["profiles_dir"], "--json", "--no-sglang")
    assert check.returncode == 0, check.stderr
    assert {A, B} <= set(json.loads(check.stdout)["profiles"])

    added = cli(tmp_path, "queue", "add", "--profiles", f"{A},{B}", "--concurrency", "1,4", "--repeats", "2",
                "--num-prompts", "8", "--no-control", "--json", cwd=elsewhere)
    assert added.returncode == 0, added.stderr
    answer = json.loads(added.stdout)  # stdout is one document; the plan went to stderr
    assert isinstance(answer["campaign_id"], int) and len(answer["item_ids"]) == 8
    listed = json.loads(cli(tmp_path, "queue", "list", "--json").stdout)
    assert [i["id"] for i in listed["items"]] == answer["item_ids"]
    # One fingerprint: the queue's is the one the answer gave, with the client's version in its spec.
    assert {i["fingerprint"] for i in listed["items"]} == {i["fingerprint"] for i in answer["items"]}
    assert all(i["spec"]["client_version"] for i in listed["items"])
    missing = cli(tmp_path, "queue", "add", "--profiles", "nope", "--concurrency", "1", cwd=elsewhere)
    assert missing.returncode == EXIT_NOT_FOUND and "nope" in missing.stderr


def test_compare_and_export_say_not_found_with_one_code_and_export_answers_json(tmp_path):
    from moe_tui import paths
    from moe_tui.store.db import Store
    from tests.support.stores import stored_row as _stored
    from tests.ui.fakes import demo_runs

    os.environ["MOE_TUI_HOME"] = str(tmp_path)
    try:
        with Store(paths.store_path()) as store:
            a, b = demo_runs()
            store.import_runs([_stored(r) for r in a + b])
    finally:
        del os.environ["MOE_TUI_HOME"]
    for command in ("compare", "export"):
        res = cli(tmp_path, command, A, "no-such-profile")
        assert res.returncode == EXIT_NOT_FOUND and "no-such-profile" in res.stderr, (command, res.stderr)
    assert cli(tmp_path, "compare", A, B, "--min-effect", "200").returncode == 2  # usage, not "not found"
    out = cli(tmp_path, "export", A, B, "--dir", str(tmp_path / "out"), "--json")
    assert out.returncode == 0, out.stderr
    written = json.loads(out.stdout)
    assert written["csv"].endswith(".csv") and all(Path(p).is_file() for p in written["all"])
    # One output flag on every command that writes: -o/--output (export's --dir kept as its old spelling).
    out = cli(tmp_path, "export", A, B, "-o", str(tmp_path / "out2"), "--format", "json")
    assert out.returncode == 0, out.stderr
    assert all(Path(p).parent == tmp_path / "out2" for p in json.loads(out.stdout)["all"])


def test_run_status_is_words_by_default_and_json_on_request(tmp_path):
    started = cli(tmp_path, "run", "--detach", "--stay")
    assert started.returncode == 0, started.stderr
    assert "attach with `MOE_TUI_HOME=" in started.stdout  # the exact command for this data dir
    try:
        words = cli(tmp_path, "run", "--status")
        assert words.returncode == 0, words.stderr
        assert words.stdout.startswith("runner pid ") and "queue:" in words.stdout and "{" not in words.stdout
        dump = cli(tmp_path, "run", "--status", "--json")
        assert json.loads(dump.stdout)["data_dir"] == str(tmp_path / "data")
    finally:
        assert cli(tmp_path, "run", "--stop").returncode == 0


def test_queue_add_warns_when_a_cell_cannot_reach_its_concurrency(tmp_path):
    res = cli(tmp_path, "queue", "add", "--profiles", A, "--concurrency", "1,64,1024", "--num-prompts", "100",
              "--no-control", "--dry-run", "--json")
    assert res.returncode == 0, res.stderr
    assert "warning: concurrency 1024 with num_prompts 100: fewer prompts than the concurrency" in res.stderr
    assert "concurrency 64 with" not in res.stderr
    assert json.loads(res.stdout)["dry_run"] is True  # stdout stays one JSON document


def test_exit_codes_as_the_readme_says_and_words_not_errnos(tmp_path):
    typo = cli(tmp_path, "queu", "list")
    assert typo.returncode == 2 and "unknown command 'queu'; did you mean 'queue'?" in typo.stderr, typo.stderr
    for bad in (("--concurrency", "1,x"), ("--concurrency", "1", "--num-prompts", "-4"),
                ("--concurrency", "1", "--repeats", "0")):
        res = cli(tmp_path, "queue", "add", "--profiles", A, *bad)
        assert res.returncode == 2, (bad, res.returncode, res.stderr)
    assert json.loads(cli(tmp_path, "queue", "list", "--json").stdout)["items"] == []  # nothing stored
    same = cli(tmp_path, "compare", A, A)
    assert same.returncode == 2 and "two different profiles" in same.stderr
    status = cli(tmp_path, "run", "--status")
    assert status.returncode == 1 and "no runner works" in status.stderr and "Errno" not in status.stderr
    assert " run --detach`" in status.stderr
    gpus = cli(tmp_path, "gpus")
    if "no NVIDIA driver" in gpus.stdout:  # this machine has no driver: the answer is a failure, not a reading
        assert gpus.returncode == 1


def test_ctrl_c_on_a_foreground_runner_exits_130(tmp_path):
    import signal
    import time

    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    env["MOE_TUI_HOME"] = str(tmp_path)
    proc = subprocess.Popen([sys.executable, "-m", "moe_tui", "run", "--stay"], env=env, cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "data" / "runner.json").exists():  # serving: the signal handlers are in place
            assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read() if proc.stdout else ""
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_queue_retry_takes_several_ids_a_campaign_or_all(tmp_path):
    added = cli(tmp_path, "queue", "add", "--profiles", A, "--concurrency", "1,2,4", "--no-control",
                "--no-warmup-pass", "--json")
    assert added.returncode == 0, added.stderr
    answer = json.loads(added.stdout)
    ids, campaign = answer["item_ids"], answer["campaign_id"]

    def states() -> list[str]:
        return [i["state"] for i in json.loads(cli(tmp_path, "queue", "list", "--json").stdout)["items"]]

    for item in ids:
        assert cli(tmp_path, "queue", "cancel", str(item)).returncode == 0
    every = cli(tmp_path, "queue", "retry", "--campaign", str(campaign))
    assert every.returncode == 0 and "retried 3 of 3 item(s)" in every.stdout, every.stdout + every.stderr
    assert states() == ["pending"] * 3
    for item in ids[:2]:
        assert cli(tmp_path, "queue", "cancel", str(item)).returncode == 0
    assert cli(tmp_path, "queue", "retry", "--all").returncode == 0 and states() == ["pending"] * 3
    assert cli(tmp_path, "queue", "retry", "--campaign", "999").returncode == EXIT_NOT_FOUND
    assert cli(tmp_path, "queue", "retry").returncode == 2
    assert cli(tmp_path, "queue", "cancel", str(ids[0])).returncode == 0
    both = cli(tmp_path, "queue", "retry", str(ids[0]), str(ids[1]))  # the second is pending: refused, not fatal
    assert both.returncode == 1 and "retried 1 of 2 item(s)" in both.stdout and states() == ["pending"] * 3


def _parsers(parser):
    import argparse

    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                yield from _parsers(child)


def test_format_json_everywhere_with_json_as_its_alias(tmp_path):
    from moe_tui.cli import build_parser

    with_json = [p for p in _parsers(build_parser()) if "--json" in p._option_string_actions]
    assert len(with_json) >= 12
    for p in with_json:
        assert "--format" in p._option_string_actions, p.prog
        assert "json" in p._option_string_actions["--format"].choices, p.prog
    for argv in (("queue", "list"), ("profiles", "show", A)):
        long, short = cli(tmp_path, *argv, "--format", "json"), cli(tmp_path, *argv, "--json")
        assert long.returncode == short.returncode == 0, (argv, long.stderr, short.stderr)
        assert json.loads(long.stdout) == json.loads(short.stdout)
    assert not cli(tmp_path, "queue", "list", "--format", "text").stdout.startswith("{")


def test_a_typo_gets_the_close_name_from_every_folder_searched(tmp_path):
    """From the repo root ./server_profiles holds the real-GPU profiles: a sim name's typo used to be
    offered 'glm5-nvfp4-flashinfer-cutlass', the close name of the first folder only."""
    root = Path(__file__).resolve().parents[1]
    for argv in (("queue", "add", "--profiles", "sim-flashinfer-cutlas", "--concurrency", "1"),
                 ("profiles", "show", "sim-flashinfer-cutlas")):
        res = cli(tmp_path, *argv, cwd=root)
        assert res.returncode == EXIT_NOT_FOUND, res.stderr
        assert "did you mean 'sim-flashinfer-cutlass' (in " in res.stderr and "glm5" not in res.stderr, res.stderr


def test_queue_add_on_simulated_profiles_starts_from_the_add_forms_defaults(tmp_path):
    """Issue 33: the CLI planned 1024/1024 tokens and n=100 on the sim where the form planned 128/32:
    one default (control.launch.campaign_defaults), so both queue one fingerprint."""
    from moe_tui.control.launch import campaign_defaults

    spec, ppc = campaign_defaults(simulated=True)
    res = cli(tmp_path, "queue", "add", "--profiles", f"{A},{B}", "--concurrency", "1,1024", "--dry-run", "--json")
    assert res.returncode == 0, res.stderr
    assert f"in={spec['input_len']} out={spec['output_len']} ratio=1 n={spec['num_prompts']}" in res.stderr
    assert f"conc=1024  n={max(spec['num_prompts'], ppc * 1024)} " in res.stderr
    assert "fewer prompts than the concurrency" not in res.stderr
