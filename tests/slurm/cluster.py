"""A real Slurm cluster of N nodes on this one host, for the Slurm test tier and the benches.

Debian 12's Slurm 22.05 is built with multiple-slurmd support: each node is its own `slurmd -N nodeK`
with its own `Port=`, all at `NodeAddr=127.0.0.1`. Each slurmd runs in its own UTS namespace
(`unshare --uts`) whose hostname is the node's name, so a job's `hostname` (and the provenance moe-tui
records) names the node it ran on, as on a real cluster; the network is the host's (loopback). One
`munged` with its own key, socket and state under the cluster's folder; nothing under /etc is used.
Needs root (slurmd, namespaces) and the packages `slurmctld slurmd slurm-client munge`.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.runner_support import processes_with

BINARIES = ("slurmctld", "slurmd", "munged", "mungekey", "sbatch", "squeue", "scontrol", "scancel", "unshare")


def missing() -> list[str]:
    """What this host lacks to run the cluster (empty: it can)."""
    out = [b for b in BINARIES if shutil.which(b) is None]
    if os.geteuid() != 0:
        out.append("root")
    return out


def _free_ports(n: int) -> list[int]:
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


@dataclass
class Cluster:
    root: Path
    nodes: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    def cmd(self, *argv: str, check: bool = True, timeout: float = 30) -> str:
        done = subprocess.run(list(argv), env=self.env, capture_output=True, text=True, timeout=timeout)
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()}")
        return done.stdout

    def node_states(self) -> dict[str, str]:
        out = self.cmd("sinfo", "-h", "-N", "-o", "%N %T", check=False)
        return dict(line.split()[:2] for line in out.splitlines() if len(line.split()) >= 2)

    def wait_idle(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            states = self.node_states()
            if len(states) == len(self.nodes) and all(s.rstrip("*") == "idle" for s in states.values()):
                return
            time.sleep(0.2)
        raise RuntimeError(f"nodes not idle after {timeout} s: {self.node_states()}; logs in {self.root}")

    # -- daemons --------------------------------------------------------------------------------
    def start_controller(self, clean: bool = True) -> None:
        argv = ["slurmctld", "-D", "-f", str(self.conf)] + (["-i"] if clean else ["-R"])
        self.procs["slurmctld"] = subprocess.Popen(argv, env=self.env, stdout=subprocess.DEVNULL,
                                                   stderr=open(self.root / "slurmctld.err", "ab"))

    def stop_controller(self) -> None:
        self._stop("slurmctld")

    def start_node(self, name: str) -> None:
        argv = ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec slurmd -D -f "$1" -N "$0"',
                name, str(self.conf)]
        self.procs[name] = subprocess.Popen(argv, env=self.env, stdout=subprocess.DEVNULL,
                                            stderr=open(self.root / f"slurmd-{name}.err", "ab"))

    def stop_node(self, name: str) -> None:
        self._stop(name)

    def _stop(self, key: str, sig: int = signal.SIGTERM) -> None:
        proc = self.procs.pop(key, None)
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(sig)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)

    def stop(self) -> None:
        """Cancel every job, let the job steps end, stop the daemons, then kill whatever of this cluster
        is left: a slurmstepd is slurmd's daemon, not its child, so stopping slurmd does not end it, and
        one stopped mid-cleanup used to outlive the test session."""
        jobs = self.cmd("squeue", "-h", "-o", "%i", check=False).split()
        for job in jobs:
            self.cmd("scancel", job, check=False)
        deadline = time.monotonic() + 15  # KillWait=5 plus the steps' own cleanup
        while jobs and time.monotonic() < deadline and self.cmd("squeue", "-h", "-o", "%i", check=False).split():
            time.sleep(0.2)
        for key in [*self.nodes, "slurmctld", "munged"]:
            self._stop(key)
        for pid in self.strays():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def strays(self) -> list[int]:
        """Processes started under this cluster's slurm.conf (job steps, their stepds, the jobs'
        children): each carries SLURM_CONF in its environment."""
        return [proc.pid for proc in processes_with("SLURM_CONF", {str(self.conf)})]


def start(root: Path, nodes: int = 2, cpus: int = 2) -> Cluster:
    """Write the configs, start munged, slurmctld and one slurmd per node; wait until all are idle."""
    root.mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o755)
    names = tuple(f"node{i + 1}" for i in range(nodes))
    munge_dir = root / "munge"
    munge_dir.mkdir(mode=0o700, exist_ok=True)
    key, sock = munge_dir / "munge.key", munge_dir / "munge.socket"
    if not key.exists():
        subprocess.run(["mungekey", "-c", "-k", str(key)], check=True, capture_output=True)
    os.chmod(key, 0o400)
    ctld_port, *node_ports = _free_ports(1 + nodes)
    lines = [
        "ClusterName=moetui", "SlurmctldHost=localhost", f"SlurmctldPort={ctld_port}",
        "AuthType=auth/munge", "CredType=cred/munge", f"AuthInfo=socket={sock}",
        "ProctrackType=proctrack/pgid", "TaskPlugin=task/none", "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core", "SlurmUser=root", "SlurmdUser=root", "ReturnToService=2", "MpiDefault=none",
        "JobAcctGatherType=jobacct_gather/none", "AccountingStorageType=accounting_storage/none",
        "SchedulerType=sched/backfill", "SchedulerParameters=sched_interval=1", "MinJobAge=300",
        "KillWait=5", "InactiveLimit=0", "SlurmctldTimeout=30", "SlurmdTimeout=30", "MessageTimeout=10",
        "OverTimeLimit=0", "GresTypes=gpu",
        # Preemption by partition priority: a job of `urgent` ends (CANCEL: Slurm's state PREEMPTED)
        # a job of the default partition holding the node it needs, as a higher-priority queue does
        # on a shared cluster (the Slurm tier's PREEMPTED test).
        "PreemptType=preempt/partition_prio", "PreemptMode=CANCEL",
        f"StateSaveLocation={root / 'state'}", f"SlurmdSpoolDir={root / 'spool'}/%n",
        f"SlurmctldPidFile={root / 'slurmctld.pid'}", f"SlurmdPidFile={root / 'slurmd'}-%n.pid",
        f"SlurmctldLogFile={root / 'slurmctld.log'}", f"SlurmdLogFile={root / 'slurmd'}-%n.log",
        "SlurmctldDebug=info", "SlurmdDebug=info",
    ]
    # Eight GPUs per node as GRES over plain files (scheduling only: the jobs run the emulator), so a
    # `--gres=gpu:N` job gets an allocation (`scontrol show job -d`: GRES=gpu:N(IDX:...)).
    (root / "gpus").mkdir(exist_ok=True)
    for i in range(8):
        (root / "gpus" / f"gpu{i}").touch()
    (root / "gres.conf").write_text(f"Name=gpu File={root / 'gpus'}/gpu[0-7]\n")
    for name, port in zip(names, node_ports):
        lines.append(f"NodeName={name} NodeHostname=localhost NodeAddr=127.0.0.1 Port={port} CPUs={cpus} "
                     f"RealMemory=2000 Gres=gpu:8 State=UNKNOWN")
    lines.append(f"PartitionName=debug Nodes={','.join(names)} Default=YES MaxTime=INFINITE State=UP PriorityTier=1")
    lines.append(f"PartitionName=urgent Nodes={','.join(names)} MaxTime=INFINITE State=UP PriorityTier=10")
    (root / "state").mkdir(exist_ok=True)
    for name in names:
        (root / "spool" / name).mkdir(parents=True, exist_ok=True)
    (root / "slurm.conf").write_text("\n".join(lines) + "\n")
    (root / "cgroup.conf").write_text("")
    env = {**os.environ, "SLURM_CONF": str(root / "slurm.conf")}
    cluster = Cluster(root, names, env)
    cluster.procs["munged"] = subprocess.Popen(
        ["munged", "-F", "--force", "-S", str(sock), "--key-file", str(key), "--pid-file", str(munge_dir / "munged.pid"),
         "--log-file", str(munge_dir / "munged.log"), "--seed-file", str(munge_dir / "munged.seed")],
        stdout=subprocess.DEVNULL, stderr=open(root / "munged.err", "ab"))
    deadline = time.monotonic() + 20
    while not sock.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    cluster.start_controller()
    for name in names:
        cluster.start_node(name)
    try:
        cluster.wait_idle()
    except Exception:
        cluster.stop()
        raise
    return cluster
