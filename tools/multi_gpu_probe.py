"""A TP-shaped process tree holding real GPU memory, owned, judged and stopped by moe-tui's own code.

    python tools/multi_gpu_probe.py [--gib 4] [--out DIR]

On a machine with N NVIDIA GPUs it starts what `sglang.launch_server --tp-size N` looks like from
outside: one parent process (a new session, like the lifecycle starts a server) with one child per
GPU, each child allocating `--gib` GiB on its own GPU with torch and then sleeping. Then, with
moe-tui's sampler (moe_tui.telemetry.NvmlSampler) and ownership rule (moe_tui.judgement):

1. every child is listed by NVML on its own GPU, and the ownership rule names all N as the server's;
2. a stranger process allocating on GPU 0 is flagged foreign, the server's children are not;
3. the lifecycle's stop (moe_tui.servers.terminate_server) leaves no process of the tree and NVML's
   process list empty on every GPU, and the memory is released;
4. the same after SIGKILL of the parent alone (children reparented, found by the env marker).

Prints a report and writes it as JSON under --out. Read-only towards the GPUs: it never changes a
clock, a power limit or any other GPU setting; it only allocates memory in its own processes.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from moe_tui import judgement  # noqa: E402
from moe_tui.servers import SERVER_ID_ENV, terminate_server  # noqa: E402
from moe_tui.telemetry import NvmlSampler, foreign_processes  # noqa: E402

CHILD = """
import sys, time, torch
gpu, gib = int(sys.argv[1]), float(sys.argv[2])
x = torch.empty(int(gib * 2**30), dtype=torch.uint8, device=f"cuda:{gpu}")
x.fill_(1); torch.cuda.synchronize(gpu)
print(f"child gpu {gpu} holds {gib} GiB", flush=True)
time.sleep(3600)
"""

PARENT = """
import os, subprocess, sys, time
n, gib, child = int(sys.argv[1]), sys.argv[2], sys.argv[3]
kids = [subprocess.Popen([sys.executable, "-c", child, str(i), gib]) for i in range(n)]
print("parent", os.getpid(), "children", [k.pid for k in kids], flush=True)
time.sleep(3600)
"""


def parent_map() -> dict[int, int]:
    import psutil

    out = {}
    for proc in psutil.process_iter(["pid", "ppid"]):
        out[proc.info["pid"]] = proc.info["ppid"]
    return out


def wait_listed(sampler: NvmlSampler, pids: set[int], timeout: float = 120.0) -> dict[int, list[int]]:
    """Wait until NVML lists every pid in `pids` on some GPU (the children have allocated)."""
    deadline = time.monotonic() + timeout
    while True:
        snap = sampler.sample()
        held = {g.index: [p.pid for p in (g.processes or ())] for g in snap.gpus}
        listed = {pid for v in held.values() for pid in v}
        if pids <= listed or time.monotonic() > deadline:
            return held
        time.sleep(0.5)


def wait_family(leader: int, size: int, timeout: float = 60.0) -> frozenset[int]:
    """The leader's family once it has `size` members (the parent has spawned every child)."""
    deadline = time.monotonic() + timeout
    while True:
        family = judgement.server_family(leader, parent_map())
        if len(family) >= size or time.monotonic() > deadline:
            return family
        time.sleep(0.2)


BASELINE_GIB: dict[int, float] = {}  # memory used per GPU before the probe started anything
RELEASED_TOLERANCE_GIB = 0.1


def used_gib(sampler: NvmlSampler) -> dict[int, float]:
    return {g.index: round((g.mem_used_bytes or 0) / 2**30, 2) for g in sampler.sample().gpus}


def wait_empty(sampler: NvmlSampler, timeout: float = 60.0) -> tuple[float, dict[int, list[int]], dict[int, float]]:
    """Until NVML lists no process AND every GPU's used memory is back at its baseline (the driver
    releases a SIGKILLed process's memory a little after it drops it from the process list)."""
    began = time.monotonic()
    while True:
        snap = sampler.sample()
        held = {g.index: [p.pid for p in (g.processes or ())] for g in snap.gpus}
        used = {g.index: round((g.mem_used_bytes or 0) / 2**30, 2) for g in snap.gpus}
        released = all(used[i] <= BASELINE_GIB.get(i, 0.0) + RELEASED_TOLERANCE_GIB for i in used)
        if (not any(held.values()) and released) or time.monotonic() - began > timeout:
            return time.monotonic() - began, held, used


def start_tree(n: int, gib: float, marker: str) -> subprocess.Popen:
    env = {**os.environ, SERVER_ID_ENV: marker}
    return subprocess.Popen([sys.executable, "-c", PARENT, str(n), str(gib), CHILD], env=env,
                            start_new_session=True)


def scenario(sampler: NvmlSampler, n: int, gib: float, *, kill_parent_first: bool) -> dict:
    marker = f"probe-{os.getpid()}-{int(kill_parent_first)}"
    parent = start_tree(n, gib, marker)
    try:
        return _judge_and_stop(sampler, parent, marker, n, kill_parent_first)
    finally:  # whatever happened, the tree does not outlive the probe (it runs in its own session)
        terminate_server(parent.pid, marker, grace_s=5.0)


def _judge_and_stop(sampler: NvmlSampler, parent: subprocess.Popen, marker: str, n: int,
                    kill_parent_first: bool) -> dict:
    family = wait_family(parent.pid, n + 1)
    listed = wait_listed(sampler, set(family) - {parent.pid})
    owners = {gpu: [judgement.owner_of(pid, {"tp-server": family}) for pid in pids] for gpu, pids in listed.items()}
    stranger = subprocess.Popen([sys.executable, "-c", CHILD, "0", "1"])
    wait_listed(sampler, {stranger.pid})
    snap = sampler.sample()
    foreign = [{"gpu": f.gpu_index, "pid": f.pid, "name": f.name} for f in foreign_processes(snap, family)]
    stranger.kill()
    stranger.wait()
    result: dict = {
        "scenario": "SIGKILL parent, then stop by marker" if kill_parent_first else "stop the running tree",
        "parent_pid": parent.pid, "family": sorted(family), "nvml_listed": listed, "owners": owners,
        "all_children_owned": all(o == "tp-server" for os_ in owners.values() for o in os_),
        "each_gpu_held": all(len(listed.get(g, [])) >= 1 for g in range(n)),
        "foreign_with_stranger": foreign,
        "stranger_flagged_only": [f["pid"] for f in foreign] == [stranger.pid],
    }
    leader = parent.pid
    if kill_parent_first:
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        time.sleep(1.0)
        import psutil
        result["children_alive_after_parent_sigkill"] = sum(
            1 for pid in family if pid != parent.pid and psutil.pid_exists(pid))
        report = terminate_server(leader, marker, grace_s=10.0)
    else:
        report = terminate_server(leader, marker, grace_s=10.0, popen=parent)
    seconds, held, used = wait_empty(sampler)
    result.update({
        "stop": report.describe(), "stop_clean": report.clean, "survivors": list(report.survivors),
        "nvml_empty_after_s": round(seconds, 2), "nvml_after": held, "memory_used_gib_after": used,
        "memory_released": all(used[i] <= BASELINE_GIB.get(i, 0.0) + RELEASED_TOLERANCE_GIB for i in used),
    })
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gib", type=float, default=4.0)
    ap.add_argument("--out", type=Path, default=Path("."))
    args = ap.parse_args()
    sampler = NvmlSampler(process_names=True)
    snap = sampler.sample()
    if not sampler.available:
        print(f"no NVML: {sampler.reason}")
        return 2
    n = len(snap.gpus)
    busy = {g.index: [p.pid for p in (g.processes or ())] for g in snap.gpus if g.processes}
    if busy:
        print(f"GPUs not idle at the start (gpu: pids): {busy}; refusing to judge ownership over them")
        return 3
    BASELINE_GIB.update(used_gib(sampler))
    print(f"memory used at the start (GiB): {BASELINE_GIB}")
    print(f"{n} GPU(s): {', '.join(g.name or '?' for g in snap.gpus)}")
    results = [scenario(sampler, n, args.gib, kill_parent_first=False),
               scenario(sampler, n, args.gib, kill_parent_first=True)]
    for r in results:
        print(json.dumps(r, indent=1, default=str))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "multi_gpu_probe.json").write_text(json.dumps(results, indent=1, default=str))
    ok = all(r["all_children_owned"] and r["stranger_flagged_only"] and r["stop_clean"]
             and not any(r["nvml_after"].values())
             and r["memory_released"] for r in results)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
