"""Untrusted text stays text (issue 13): names that are Rich markup, stored by an older version
or edited into the store, are shown as written by the real TUI (in tmux) on every screen that
lists them, Compare included, and never crash it; the same names are refused at import
(`test_bounds.py`) and profile load."""

from __future__ import annotations

import shutil
import sys
import time

import pytest
from runner_support import REPO, write_profile

from tests.support.tmux import keys, screen, session, wait_screen  # the tests' own tmux server, never the user's

pytestmark = [pytest.mark.integration, pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")]

EVIL = ("evil[/]x", "[bold]loud[/bold]", "a[link=x]b")


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
    command = f"{sys.executable} -m moe_tui tui --in-process --no-gpu-sampling --profiles-dir {env.profiles}"
    with session("moe-untrusted", f"{command}; echo TUI-EXITED-$?; sleep 60", REPO,
                 {"MOE_TUI_HOME": str(env.home), "PYTHONPATH": str(REPO)}) as name:
        wait_screen(name, "GPUs", 60)
        keys(name, "3")
        wait_screen(name, "baseline ", 30)  # the grid's title (any width)
        keys(name, "Tab", "Enter")
        text = str(wait_screen(name, "evil[/]x", 30))
        assert "[bold]loud[/bold]" in text and "a[link=x]b" in text, text
        time.sleep(1.0)
        text = screen(name)
        assert "TUI-EXITED" not in text and "MarkupError" not in text and "Traceback" not in text, text
        assert "baseline " in text  # still running, still on Compare
