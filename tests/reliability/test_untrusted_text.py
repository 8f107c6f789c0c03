"""Untrusted text stays text (issue 13): names that are Rich markup, stored by an older version
or edited into the store, are shown as written by the real TUI (in tmux) on every screen that
lists them, Compare included, and never crash it; the same names are refused at import
(`test_bounds.py`) and profile load."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import sys
import time
import uuid

import pytest
from runner_support import REPO, speed_factor, write_profile

from tests.tmux_support import TMUX  # a tmux server of the tests' own (-L), never the user's

pytestmark = [pytest.mark.integration, pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")]

EVIL = ("evil[/]x", "[bold]loud[/bold]", "a[link=x]b")


def _screen(session: str) -> str:
    return subprocess.run([*TMUX, "capture-pane", "-p", "-t", session], capture_output=True, text=True).stdout


def _wait_screen(session: str, needle: str, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = _screen(session)
        if needle in text:
            return text
        time.sleep(0.3)
    raise AssertionError(f"{needle!r} never shown; screen:\n{_screen(session)}")


def test_markup_names_in_the_store_show_as_text_in_the_tui(env, seeded_store):
    """Profile/backend names with [/] and [bold] in the store: the TUI's Compare screen lists them as written and does not exit."""
    from moe_tui.spec import BenchmarkSpec
    from moe_tui.store.db import Store

    spec = BenchmarkSpec.from_dict({"num_prompts": 4, "input_len": 32, "output_len": 8})
    with Store(seeded_store) as store:
        for name in EVIL:
            store.import_run(profile_name=name, spec_json=spec.canonical_json(), fingerprint=spec.fingerprint,
                             client="moe-tui", summary={"output_throughput": 100.0}, provenance={"backend": name},
                             profile={"name": name, "moe_runner_backend": name})
    write_profile(env.profiles, "ok", "flashinfer_cutlass", 30016)
    session = f"moe-untrusted-{uuid.uuid4().hex[:8]}"
    command = f"{sys.executable} -m moe_tui tui --in-process --no-gpu-sampling --profiles-dir {env.profiles}"
    subprocess.run([*TMUX, "new-session", "-d", "-s", session, "-x", "120", "-y", "40", "-c", str(REPO),
                    f"-eMOE_TUI_HOME={env.home}", "-eTERM=xterm-256color", f"-ePYTHONPATH={REPO}",
                    f"{command}; echo TUI-EXITED-$?; sleep 60"], check=True)
    try:
        _wait_screen(session, "GPUs", 60 * speed_factor())
        subprocess.run([*TMUX, "send-keys", "-t", session, "3"], check=True)
        _wait_screen(session, "baseline ", 30 * speed_factor())  # the grid's title (any width)
        subprocess.run([*TMUX, "send-keys", "-t", session, "Tab"], check=True)
        subprocess.run([*TMUX, "send-keys", "-t", session, "Enter"], check=True)
        text = _wait_screen(session, "evil[/]x", 30 * speed_factor())
        assert "[bold]loud[/bold]" in text and "a[link=x]b" in text, text
        time.sleep(1.0)
        text = _screen(session)
        assert "TUI-EXITED" not in text and "MarkupError" not in text and "Traceback" not in text, text
        assert "baseline " in text  # still running, still on Compare
    finally:
        with contextlib.suppress(Exception):
            subprocess.run([*TMUX, "kill-session", "-t", session], capture_output=True)
