"""The test cluster itself (tests/slurm/cluster.py): stopping it leaves nothing of it running, even with a
job mid-step. A slurmstepd is slurmd's daemon, not its child, so stopping the daemons alone used to
leave a `slurmstepd: [N.batch]` behind the test session."""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import pytest
from runner_support import scaled

from tests.slurm import cluster as slurm_cluster

pytestmark = [pytest.mark.integration, pytest.mark.slurm]


def test_stopping_the_cluster_mid_job_leaves_no_process_of_it():
    lacking = slurm_cluster.missing()
    if lacking:
        pytest.skip("the Slurm tier needs " + ", ".join(lacking))
    root = Path(tempfile.mkdtemp(prefix="moe-tui-slurm-stop-"))
    cluster = slurm_cluster.start(root)
    try:
        cluster.cmd("sbatch", "-N1", "-o", str(root / "job.out"), "--wrap", "sleep 300")
        deadline = time.monotonic() + scaled(30)
        while time.monotonic() < deadline and "RUNNING" not in cluster.cmd("squeue", "-h", "-o", "%T"):
            time.sleep(0.2)
        running = cluster.strays()
        assert running, "the job's step should be running under the cluster's slurm.conf"
        cluster.stop()
        assert cluster.strays() == [], f"left running after stop: {cluster.strays()}"
    finally:
        if cluster.procs:  # a failed assertion above: stop it here
            cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
