"""The test session's own home (tests/conftest.py): no test reads or writes the user's home, and the
quick tier passes on a machine where nothing ran before (no matplotlib font cache, an empty HOME)."""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def test_home_xdg_and_matplotlib_point_into_one_session_folder():
    from moe_tui import paths

    real_home = Path(pwd.getpwuid(os.getuid()).pw_dir).resolve()
    home = Path(os.environ["HOME"]).resolve()
    assert home != real_home and real_home not in home.parents
    assert home.name.startswith("moe-tui-test-home-")
    for name in ("XDG_DATA_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME", "MPLCONFIGDIR"):
        assert home in Path(os.environ[name]).resolve().parents, name
    assert "MOE_TUI_HOME" not in os.environ
    # The default data dir (where `moe-tui sim` writes its logs without MOE_TUI_HOME) is the session's.
    assert home in paths.data_dir().resolve().parents
    assert home in paths.config_dir().resolve().parents


@pytest.mark.integration
def test_a_plotting_unit_test_passes_with_an_empty_home_and_leaves_it_empty(tmp_path):
    """On a fresh machine matplotlib builds its font cache on first use by running fc-list, which the
    unit tier refuses; the session builds it in its own folder first, and writes nothing to HOME."""
    empty = tmp_path / "home"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("XDG_") and k not in ("MPLCONFIGDIR", "MOE_TUI_TEST_SESSION_HOME",
                                                     "PYTEST_XDIST_WORKER", "PYTEST_CURRENT_TEST")}
    env["HOME"] = str(empty)
    test = "tests/test_export.py::test_export_writes_markdown_csv_png_svg_side_by_side"
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", test],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "1 passed" in out.stdout
    assert list(empty.iterdir()) == [], sorted(str(p) for p in empty.rglob("*"))
