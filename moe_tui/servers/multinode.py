"""A server over several nodes of a Slurm allocation: one `srun` step, one rank per node.

A profile with `nnodes = N > 1` starts only inside a Slurm job of N nodes (`moe-tui run --executor
slurm` asks for them). The job (`executors/job.py`) fixes the start's `Placement` before the server
starts: the nodes (the job's own node, where the batch step and the benchmark run, first: it is rank
0, the head), the rendezvous address (the head's `NodeAddr` as Slurm knows it and a port free there)
and where the other ranks write their logs; it hands it over in `PLACEMENT_ENV`.

`launch_argv` wraps the profile's argv in one `srun --nodes=N --ntasks-per-node=1` step; on each node
`python -m moe_tui.servers.rank` appends that rank's `--node-rank r --dist-init-addr HOST:PORT` (SGLang
0.5.23's own flags; `--nnodes N` is in the profile's argv) and execs the server. Rank 0's output is
the step's output (the server log moe-tui follows; readiness is the head's /health_generate only:
the other ranks serve no API); rank r's goes to `rank-r.log` in the job's folder. `--kill-on-bad-exit`
ends the step when one rank fails.

Teardown: SIGTERM to srun, which forwards it to every rank (SGLang's rank 0 then stops the others), the
usual escalation on this node (servers/teardown.py), then `sweep`: a second step over the same nodes
that looks on each node for processes carrying this start's marker, kills them and says what it
found. A failure names the nodes Slurm reports lost (`lost_nodes`: down, failing or not responding).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from moe_tui.servers.base import SERVER_ID_ENV, ServerStartError

if TYPE_CHECKING:
    from moe_tui.profiles import ServerProfile
    from moe_tui.servers.teardown import StopReport

PLACEMENT_ENV = "MOE_TUI_PLACEMENT"
SLURM_TIMEOUT_S = 30.0
SWEEP_TIMEOUT_S = 60.0
# sinfo's node states that mean the node is gone for its jobs ('*' appended: not responding).
LOST_STATES = frozenset({"down", "fail", "failing", "unknown", "future", "power_down", "powered_down", "inval"})


@dataclass(frozen=True)
class Placement:
    """Where one multi-node start runs (see the module docstring)."""

    nodes: tuple[str, ...]  # rank order: nodes[0] is the head
    dist_init_addr: str  # HOST:PORT of the head's rendezvous
    rank_log_dir: str = ""

    @property
    def head(self) -> str:
        return self.nodes[0]

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Placement:
        data = json.loads(text)
        return cls(tuple(str(n) for n in data["nodes"]), str(data["dist_init_addr"]), str(data.get("rank_log_dir", "")))

    def describe(self) -> dict[str, object]:
        return {"nnodes": len(self.nodes), "nodes": list(self.nodes), "head": self.head,
                "dist_init_addr": self.dist_init_addr}


def _run(argv: Sequence[str], timeout: float = SLURM_TIMEOUT_S, env: dict[str, str] | None = None) -> str:
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, env=env)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ServerStartError(f"{argv[0]}: {exc}") from None
    if done.returncode != 0:
        raise ServerStartError(f"{' '.join(argv[:3])} failed: {(done.stderr or done.stdout).strip()[:300]}")
    return done.stdout


def slurm_placement(nnodes: int, rank_log_dir: str, port: int) -> Placement:
    """This Slurm job's placement for an `nnodes` server: this node first, the rendezvous at its
    NodeAddr and `port`. Raises ServerStartError naming what the job lacks."""
    job = os.environ.get("SLURM_JOB_ID")
    here = os.environ.get("SLURMD_NODENAME")
    if not job or not here:
        raise ServerStartError(f"nnodes = {nnodes}: a multi-node server starts only inside a Slurm job of {nnodes} "
                               "nodes (moe-tui run --executor slurm submits one)")
    nodes = _run(["scontrol", "show", "hostnames", os.environ.get("SLURM_JOB_NODELIST", here)]).split()
    if len(nodes) < nnodes:
        raise ServerStartError(f"nnodes = {nnodes}, but Slurm job {job} holds {len(nodes)} node(s): {', '.join(nodes)}")
    others = [n for n in nodes if n != here][: nnodes - 1]
    fields = dict(f.split("=", 1) for f in _run(["scontrol", "-o", "show", "node", here]).split() if "=" in f)
    addr = fields.get("NodeAddr") or here
    return Placement((here, *others), f"{addr}:{port}", rank_log_dir)


def current_placement(nnodes: int) -> Placement:
    """The placement the job fixed for this start (PLACEMENT_ENV), checked against the profile."""
    text = os.environ.get(PLACEMENT_ENV)
    if not text:
        raise ServerStartError(f"nnodes = {nnodes}: a multi-node server starts only inside a Slurm job of {nnodes} "
                               "nodes (moe-tui run --executor slurm submits one)")
    placement = Placement.from_json(text)
    if len(placement.nodes) != nnodes:
        raise ServerStartError(f"nnodes = {nnodes}, but this job placed the server on {len(placement.nodes)} node(s)")
    return placement


def launch_argv(argv: Sequence[str], placement: Placement, python: str | None = None) -> list[str]:
    """One srun step over the placement's nodes, each rank through `moe_tui.servers.rank`."""
    n = len(placement.nodes)
    return ["srun", f"--nodes={n}", f"--ntasks={n}", "--ntasks-per-node=1", f"--nodelist={','.join(placement.nodes)}",
            "--kill-on-bad-exit=1", "--overlap",
            python or sys.executable, "-m", "moe_tui.servers.rank", "--dist-init-addr", placement.dist_init_addr,
            "--head", placement.head, "--rank-log-dir", placement.rank_log_dir, "--", *argv]


def server_argv(profile: ServerProfile, python: str | None) -> tuple[list[str], Placement | None]:
    """A profile's server argv and, over several nodes, its placement: the argv wrapped in one srun step
    over the job's nodes (refused outside such a job). One node: the argv as it is, no placement."""
    argv = profile.argv(python)
    if profile.nnodes <= 1:
        return argv, None
    placement = current_placement(profile.nnodes)
    return launch_argv(argv, placement, python), placement


def swept(report: StopReport, placement: Placement | None, server_id: str | None, python: str | None) -> StopReport:
    """A stop's report with what `sweep` found on the placement's nodes (a one-node start: as it is)."""
    if placement is None or server_id is None:
        return report
    return dataclasses.replace(report, remote_left=tuple(sweep(placement, server_id, python)))


def sweep(placement: Placement, server_id: str, python: str | None = None) -> list[str]:
    """After a stop: on every node of the placement, kill what still carries this start's marker;
    one line per node that had something left (empty: nothing was left anywhere)."""
    n = len(placement.nodes)
    env = {k: v for k, v in os.environ.items() if k != SERVER_ID_ENV}
    try:
        out = _run(["srun", f"--nodes={n}", f"--ntasks={n}", "--ntasks-per-node=1", "--overlap",
                    f"--nodelist={','.join(placement.nodes)}", python or sys.executable, "-m", "moe_tui.servers.rank",
                    "--sweep", server_id], timeout=SWEEP_TIMEOUT_S, env=env)
    except ServerStartError as exc:
        return [f"cannot look on the nodes: {exc}"]
    return [line.strip() for line in out.splitlines() if line.strip() and " left" in line and " 0 left" not in line]


def lost_nodes(nodes: Sequence[str] | str, env: dict[str, str] | None = None) -> list[str]:
    """'NODE (STATE: REASON)' for each of `nodes` (names or one Slurm hostlist) that Slurm reports
    down, failing or not responding; empty when none is, or Slurm cannot be asked."""
    names = nodes if isinstance(nodes, str) else ",".join(nodes)
    if not names:
        return []
    try:
        return lost_in_sinfo(_run(["sinfo", "-h", "-N", "-n", names, "-o", "%N|%T|%E"], env=env))
    except ServerStartError:
        return []


def lost_in_sinfo(out: str) -> list[str]:
    """The lost nodes in `sinfo -h -N -o '%N|%T|%E'` output (see `lost_nodes`)."""
    lost: dict[str, str] = {}
    for line in out.splitlines():
        parts = line.strip().split("|")
        if len(parts) != 3:
            continue
        node, state, reason = parts
        base = state.lower().rstrip("*~#!%$@^-+")
        if state.endswith("*") or base in LOST_STATES:
            why = f"{state.lower()}: {reason}" if reason and reason != "none" else state.lower()
            lost[node] = f"{node} ({why})"
    return list(lost.values())


def lost_note(placement: Placement | None) -> str:
    """'; node X lost (...)' when Slurm reports one of a multi-node start's nodes lost, else ''."""
    lost = lost_nodes(placement.nodes) if placement is not None else []
    return f"; node {', '.join(lost)} lost" if lost else ""


def rank_log(placement: Placement, rank: int) -> Path | None:
    return Path(placement.rank_log_dir) / f"rank-{rank}.log" if placement.rank_log_dir else None
