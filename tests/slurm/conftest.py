"""The Slurm tier: a real two-node Slurm cluster on this host per test module (`tests/slurm/cluster.py`).

Skipped, saying why, where the packages (`slurmctld slurmd slurm-client munge`, `.ci/run` installs
them) or root are missing. Each module starts its own cluster (about a second), so modules run on
separate xdist workers side by side; the tests of one module share it (conftest's module-fixture
grouping keeps them on one worker)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from tests.slurm import cluster as slurm_cluster


@pytest.fixture(scope="module")
def slurm():
    lacking = slurm_cluster.missing()
    if lacking:
        pytest.skip("the Slurm tier needs " + ", ".join(lacking) + " (apt-get install slurmctld slurmd "
                    "slurm-client munge, as root; .ci/run does)")
    root = Path(tempfile.mkdtemp(prefix="moe-tui-slurm-"))
    cluster = slurm_cluster.start(root)
    try:
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def slurm_idle(slurm):
    """The module's cluster with both nodes back up and idle and no job left from an earlier test."""
    for job in slurm.cmd("squeue", "-h", "-o", "%i", check=False).split():
        slurm.cmd("scancel", job, check=False)
    for node in slurm.nodes:
        slurm.cmd("scontrol", "update", f"nodename={node}", "state=resume", check=False)
    slurm.wait_idle()
    return slurm
