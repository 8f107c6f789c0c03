"""`moe-tui explain`'s refusals and its queue prompt, as subprocesses over the golden store of
tests/test_compare_cli.py (its `home` fixture)."""

from __future__ import annotations

import pytest
from test_compare_cli import _cli
from test_compare_cli import home as compare_home

home = compare_home  # the same module-scoped fixture: the golden scenario in a temporary store
pytestmark = pytest.mark.integration  # starts real processes


def test_explain_refuses_bad_cells_and_options_and_queues_on_yes(home, tmp_path):
    bad = _cli(home, "explain", "glm5-cutlass", "nope", "-c", "64")
    assert bad.returncode == 2 and "nope" in bad.stderr
    cell = _cli(home, "explain", "glm5-cutlass", "glm5-cutedsl", "-c", "3")
    assert cell.returncode == 2 and "no cell at concurrency 3" in cell.stderr
    plot = _cli(home, "explain", "glm5-cutlass", "glm5-cutedsl", "-c", "64", "--plot", "bars.gif")
    assert plot.returncode == 2 and ".png or .svg" in plot.stderr
    refused = _cli(home, "explain", "glm5-cutlass", "glm5-cutedsl", "-c", "64")  # the sides ran other specs
    assert refused.returncode == 2 and "no common spec" in refused.stderr
    asked = _cli(home, "explain", "glm5-cutlass", "glm5-cutedsl", "-c", "10")  # no terminal, no --yes
    assert asked.returncode == 0 and "pass --yes" in asked.stdout and "never averaged into the cell" in asked.stdout
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    missing = _cli(home, "explain", "glm5-cutlass", "glm5-cutedsl", "-c", "10", "--yes", "--profiles-dir",
                   str(profiles))
    assert missing.returncode == 2 and "the runner could not start it" in missing.stderr
    still = _cli(home, "explain", "glm5-cutlass", "glm5-cutedsl", "-c", "10")
    assert "pass --yes" in still.stdout  # nothing was queued by the refused attempts
