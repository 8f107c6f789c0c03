"""The test loop keeps a flake's cause: a test that fails once and passes on its rerun, under
parallel workers as `make test` runs them, still prints its first failure's traceback in the
summary (tests/conftest.py turns on pytest-rerunfailures' --rerun-show-tracebacks)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration  # runs pytest with xdist workers: real processes

REPO = Path(__file__).resolve().parents[2]

FLAKY = '''
import pytest
from pathlib import Path

@pytest.mark.flaky(reruns=1)
def test_fails_once(tmp_path_factory):
    mark = Path({mark!r})
    if not mark.exists():
        mark.write_text("failed once")
        raise AssertionError("first attempt's cause: port 4711 was taken")
'''


def test_a_flake_that_passes_on_rerun_prints_its_first_failure(tmp_path):
    (tmp_path / "test_flaky.py").write_text(FLAKY.format(mark=str(tmp_path / "attempted")))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:cacheprovider", "-q", "-n", "2", "-rfER",
         str(tmp_path / "test_flaky.py")],
        cwd=REPO, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "1 passed, 1 rerun" in out, out
    assert "first attempt's cause: port 4711 was taken" in out, out
