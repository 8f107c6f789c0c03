"""A SIGKILLed runner's server is stopped even when nothing in its environment says it is
moe-tui's (issue 36): a profile's launcher that runs the server under `env -i`, or that sets
moe-tui's markers to other values, hides the `MOE_TUI_RUNNER_DIR` / `MOE_TUI_SERVER_ID` markers
the sweep used to find servers by, and such a server outlived its runner for good (the next runner
then failed on the busy port). The watchdog now also finds the server by the session the runner
started it in (recorded pid + create time). A profile's own `env` naming the markers is refused at
load (tests/reliability/test_planted_files.py::test_a_profile_cannot_set_moe_tuis_own_markers)."""

from __future__ import annotations

import os
import signal
import sys

import pytest
from runner_support import wait_for, wait_gone

pytestmark = pytest.mark.integration

SPEC = ["--num-prompts", "200", "--input-len", "32", "--output-len", "64", "--no-warmup-pass",
        "--warmup-requests", "0"]
LAUNCHERS = {
    "env-i": 'exec env -i PATH="$PATH" "{python}" "$@"\n',
    "markers-overridden": 'exec env MOE_TUI_RUNNER_DIR=/elsewhere MOE_TUI_SERVER_ID=not-moe-tui "{python}" "$@"\n',
}


@pytest.mark.parametrize("launcher", sorted(LAUNCHERS))
def test_sigkilled_runners_server_is_stopped_whatever_its_launcher_does_to_the_environment(env, tmp_path, launcher):
    script = tmp_path / "launch.sh"
    script.write_text("#!/bin/sh\n" + LAUNCHERS[launcher].format(python=sys.executable))
    script.chmod(0o700)
    name = env.profile("sim-launched", "flashinfer_cutlass", time_scale=1)
    path = env.profiles / f"{name}.toml"
    path.write_text(path.read_text().replace("[sim]", f'python = "{script}"\n\n[sim]', 1))
    assert env.run("queue", "add", "--profiles", name, "--concurrency", "1", "--profiles-dir", str(env.profiles),
                   *SPEC).returncode == 0
    runner = env.popen("run", "--profiles-dir", str(env.profiles))
    wait_for(lambda: bool(env.emulators()), 90, "the launched emulator")
    (server,) = env.emulators()
    environ = server.environ()
    # the launcher really hid moe-tui's marks
    assert environ.get("MOE_TUI_RUNNER_DIR") != str(env.data_dir.resolve())
    wait_for(lambda: env.query("SELECT count(*) FROM runs")[0][0] > 0, 90, "the benchmark running")
    os.kill(runner.pid, signal.SIGKILL)
    runner.wait(10)
    wait_gone(env, 30)  # stopped by the dead runner's watchdog, not left for ever
    log = env.data_dir / "logs" / "watchdog.log"
    wait_for(lambda: log.exists() and f"(pid {server.pid}:" in log.read_text(), 30, "the watchdog naming the server")
