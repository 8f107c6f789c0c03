"""Issue 23 item 2: `moe-tui compare`'s text fits the terminal ($COLUMNS); piped, lines stay whole."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from test_compare_cli import home  # noqa: F401 (the golden store, a module-scoped fixture)

from moe_tui.export.formats import render_text


def _compare(home_dir, **env_extra: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    env.update(MOE_TUI_HOME=str(home_dir), **env_extra)
    return subprocess.run([sys.executable, "-m", "moe_tui", "compare", "glm5-cutlass", "glm5-cutedsl"], env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.integration  # the real command line in a subprocess
def test_compare_text_fits_columns(home):  # noqa: F811
    wide = _compare(home)
    assert wide.returncode == 0, wide.stderr
    assert max(len(line) for line in wide.stdout.splitlines()) > 100  # piped: whole lines, as before
    for columns in (80, 100):
        res = _compare(home, COLUMNS=str(columns))
        assert res.returncode == 0, res.stderr
        lines = res.stdout.splitlines()
        assert max(len(line) for line in lines) <= columns, [ln for ln in lines if len(ln) > columns]
        # Nothing is lost: every verdict sentence of the wide table is still there, wrapped.
        flat = " ".join(" ".join(lines).split())
        for word in ("better", "within noise", "control:"):
            assert (word in wide.stdout) == (word in flat)


def test_render_text_moves_what_does_not_fit_under_its_row():
    from moe_tui.compare.build import build_grid_from_runs
    from tests.ui.fakes import demo_runs

    a, b = demo_runs()
    grid = build_grid_from_runs(a, b, baseline_name="sim-flashinfer-cutlass", candidate_name="sim-flashinfer-cutedsl")
    text = render_text(grid, width=80)
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "    verdict: " in text  # the verdict words, under the row they belong to
    assert render_text(grid) == render_text(grid, width=None)
