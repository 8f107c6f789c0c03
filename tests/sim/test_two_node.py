"""The emulator over two nodes (issue 37 item 5), as two real processes on loopback: rank 1 rendezvouses
with rank 0 at --dist-init-addr over TCP, only rank 0 serves the API, a rank that dies takes the
other down as NCCL would, and a rendezvous that never completes fails with torch's own words."""

from __future__ import annotations

import os
import signal

import pytest
from runner_support import scaled

from tests.sim_helpers import SimProcess, free_port, http_status

pytestmark = pytest.mark.integration  # starts real processes


def _ranks(addr: str, *extra: str) -> tuple[SimProcess, SimProcess]:
    common = ["--tp-size", "2", "--nnodes", "2", "--dist-init-addr", addr, "--sim-time-scale", "20", *extra]
    return SimProcess([*common, "--node-rank", "0"]), SimProcess([*common, "--node-rank", "1"])


def test_two_ranks_rendezvous_the_head_serves_and_a_clean_stop_ends_both():
    head, rank1 = _ranks(f"127.0.0.1:{free_port()}")
    with head, rank1:
        head.wait_ready(timeout=scaled(30))
        rank1.wait_ready(timeout=scaled(30))  # SGLang's dummy health server on the other node
        assert http_status(rank1.base_url + "/v1/models") == 404  # no API there
        assert http_status(head.base_url + "/v1/models") == 200
        rank1.wait_for_log(r"Init parallel ends\. elapsed=", timeout=1)
        os.kill(rank1.proc.pid, signal.SIGTERM)  # a non-zero rank waits for rank 0's ShutdownReq
        rank1.wait_for_log(r"SIGTERM received on node_rank 1; waiting for the rank-0 ShutdownReq", timeout=scaled(5))
        assert rank1.returncode() is None
        head.stop()
        assert rank1.wait_exit(timeout=scaled(10)) == 0


def test_a_rank_that_dies_takes_the_head_down_as_an_nccl_remote_error():
    head, rank1 = _ranks(f"127.0.0.1:{free_port()}")
    with head, rank1:
        head.wait_ready(timeout=scaled(30))
        rank1.wait_ready(timeout=scaled(30))
        os.killpg(rank1.proc.pid, signal.SIGKILL)  # the other node gone, its processes with it
        assert head.wait_exit(timeout=scaled(10)) == -signal.SIGKILL  # SGLang's kill of its own tree
        head.wait_for_log(r"ncclRemoteError: A call failed possibly due to a network error", timeout=1)
        head.wait_for_log(r"SIGQUIT received\. .*It usually means one child failed\.", timeout=1)


@pytest.mark.parametrize("rank, said", [
    ("0", r"DistStoreError: Timed out after 2 seconds waiting for clients\. 1/2 clients joined\."),
    ("1", r"DistNetworkError: The client socket has timed out after 1000ms while trying to connect to "
          r"\(127\.0\.0\.1, {port}\)\."),
])
def test_a_rendezvous_that_never_completes_fails_as_torch_says(rank, said):
    port = free_port()
    with SimProcess(["--tp-size", "2", "--nnodes", "2", "--node-rank", rank, "--dist-init-addr",
                     f"127.0.0.1:{port}", "--dist-timeout", "1"]) as alone:
        assert alone.wait_exit(timeout=scaled(15)) == -signal.SIGKILL
        alone.wait_for_log(said.format(port=port), timeout=1)
        assert http_status(alone.base_url + "/health") is None
