"""What runs inside a batch job: one sweep of queue items, worked by the local runner's own code, one result file.

    python -m moe_tui.executors.job JOB.json

JOB.json (written by `dispatch.Dispatcher`) names the items (one profile's sweep: profile, spec,
repeat, warmup, attempt each), the profiles folder and where the result goes. The job makes a
private data dir on the node's own disk (`$TMPDIR`), queues the items there in order and works them
with `run.controller.Controller` until the queue is empty: the same server start (one for the
sweep, as the local runner keeps a server across a profile's items), readiness, warmup, benchmark,
telemetry, provenance and flags as the local runner. The profile's port is replaced by a free one
of this node (two jobs may share a machine). While it works, its node's GPU snapshots are relayed
through the job folder (`nodes`: one file, replaced each second). Then every item's run, requests,
GPU samples and server start go into the one result file (`results.write_result`, atomic) and the
private dir is removed.

SIGTERM (scancel, preemption, the time limit) stops the benchmark and the server and writes no
result: the dispatcher sees the job end without one and retries its items (the sweep again, on one
start). Exit 0 when a result was written, 1 when not.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from moe_tui.executors.nodes import NODE_FILE, gres_gpu_indices, owned_gpus, write_node_sample
from moe_tui.executors.results import write_result
from moe_tui.records import QueueItemJson

JOB_FORMAT = "moe-tui-job"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def job_payload(items: list[QueueItemJson], attempt: int, profiles_dir: str, result_path: str,
                executor: str) -> dict[str, Any]:
    """The job file: `items` (one profile's sweep, in order; each with its own `attempts`)."""
    return {"format": JOB_FORMAT, "version": 2, "item": items[0], "items": items, "attempt": attempt,
            "profiles_dir": profiles_dir, "result_path": result_path, "executor": executor}


async def _work(job: dict[str, Any], work: Path, job_id: str) -> dict[str, Any] | None:
    from moe_tui.profiles import ProfileSet, load_profiles
    from moe_tui.run.controller import Controller
    from moe_tui.spec import BenchmarkSpec
    from moe_tui.store.db import Store
    from moe_tui.store.queue import RunQueue

    asked = job["item"]
    sweep = list(job.get("items") or [asked])
    profile = load_profiles(job["profiles_dir"]).by_name(asked["profile_name"])
    placement = None
    if profile.nnodes > 1:  # one server over the job's nodes: its rendezvous fixed here (servers/multinode.py)
        from moe_tui.servers.multinode import PLACEMENT_ENV, slurm_placement

        placement = slurm_placement(profile.nnodes, str(Path(job["result_path"]).parent), free_port())
        os.environ[PLACEMENT_ENV] = placement.to_json()
    profiles = ProfileSet(profiles=[dataclasses.replace(profile, port=free_port())], problems=[])
    store = Store(work / "moe-tui.sqlite3")
    queue = RunQueue(store)
    mine = [queue.add_item(profile.name, BenchmarkSpec.from_dict(it["spec"], f"the job's item {it['id']} spec"),
                           repeat_index=int(it["repeat_index"]), warmup=bool(it["warmup"])) for it in sweep]
    controller = Controller(store, profiles, data_dir=work)
    controller.subscribe(_node_relay(Path(job["result_path"]).parent / NODE_FILE, job_id,
                                     {p.id: int(it["id"]) for p, it in zip(mine, sweep)}))
    stopped = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopped.set)
    await controller.start(work=True, until_empty=True, retry_interrupted=False)
    idle = asyncio.create_task(controller.wait_idle())
    stop = asyncio.create_task(stopped.wait())
    await asyncio.wait({idle, stop}, return_when=asyncio.FIRST_COMPLETED)
    await controller.shutdown("the job was signalled" if stopped.is_set() else "the job's item is done")
    stop.cancel()
    if stopped.is_set():
        return None
    parts = []
    for it, private in zip(sweep, mine):
        done = queue.item(private.id)
        attempt = int(it.get("attempts") or job["attempt"])
        parts.append({"item_id": int(it["id"]), "attempt": attempt, "item_state": done.state,
                      "item_error": done.error, **_run_parts(store, done.run_id, it, attempt)})
    out: dict[str, Any] = {"job_id": job_id, "node": os.environ.get("SLURMD_NODENAME") or socket.gethostname(),
                           "items": parts}
    if placement is not None:
        from moe_tui.servers.multinode import lost_nodes

        out["nodes"] = list(placement.nodes)
        lost = lost_nodes(placement.nodes) if any(p["item_state"] != "done" for p in parts) else []
        for part in parts:
            if part["run"] is not None:
                part["run"]["provenance"]["multinode"] = placement.describe()
            if lost and part["item_state"] != "done":  # a node of the server died: not the item's fault
                part.update(item_state="interrupted", lost_nodes=lost, run=None, server_start=None,
                            item_error=f"node {', '.join(lost)} lost: {part['item_error']}")
    return out


def _node_relay(path: Path, job_id: str, items: dict[int, int]) -> Callable[[Any], None]:
    """The controller's GPU snapshots, relayed to the dispatcher through the job folder (`nodes`), each
    naming the sweep's item being measured (`items`: the private queue's id -> the controller's)."""
    from moe_tui.events import GpuTelemetry, RunStarted

    node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    owned = owned_gpus(os.environ)
    if owned is None and os.environ.get("SLURM_JOB_ID"):  # GRES without the env: Slurm's own word
        try:
            shown = subprocess.run(["scontrol", "show", "job", "-d", job_id], capture_output=True, text=True,
                                   timeout=10, check=False).stdout
            owned = gres_gpu_indices(shown, node)
        except (OSError, subprocess.SubprocessError):
            owned = None
    seq = [0]
    current = [next(iter(items.values()))]

    def relay(event: Any) -> None:
        if isinstance(event, RunStarted) and event.queue_item_id in items:
            current[0] = items[event.queue_item_id]
        # Only snapshots with GPUs: the emulator's stop leaves "no simulated server runs", which is no
        # news about the node (a node that stops answering turns STALE on the dashboard instead).
        if isinstance(event, GpuTelemetry) and event.snapshot.get("available") and event.snapshot.get("gpus"):
            seq[0] += 1
            try:
                write_node_sample(path, job_id=job_id, item_id=current[0], node=node, snapshot=event.snapshot,
                                  owned=owned, seq=seq[0])
            except OSError:  # shared storage hiccup: the next second tries again; the run goes on
                pass
    return relay


def _run_parts(store: Any, run_id: int | None, asked: dict[str, Any], attempt: int) -> dict[str, Any]:
    if run_id is None:
        return {"run": None, "server_start": None}
    row = dict(store.query("SELECT * FROM runs WHERE id = ?", (run_id,))[0])
    provenance = json.loads(row["provenance_json"])
    if isinstance(provenance.get("queue_item"), dict):  # the controller's item, not the private copy
        provenance["queue_item"].update(id=asked["id"], campaign_id=asked.get("campaign_id"), attempt=attempt,
                                        requested_fingerprint=asked.get("fingerprint"))
    run = {"profile_name": row["profile_name"], "spec_json": row["spec_json"], "fingerprint": row["fingerprint"],
           "client": row["client"], "status": row["status"], "profile": json.loads(row["profile_json"]),
           "provenance": provenance, "summary": json.loads(row["summary_json"]), "flags": json.loads(row["flags_json"]),
           "telemetry": json.loads(row["telemetry_json"]), "selfcheck": json.loads(row["selfcheck_json"]),
           "error": row["error"], "started_at": row["started_at"], "finished_at": row["finished_at"],
           "requests": store.requests(run_id), "gpu_samples": store.gpu_samples(run_id)}
    start = store.server_start(row["server_start_id"]) if row["server_start_id"] is not None else None
    if start is not None:
        start = {k: v for k, v in start.items() if k not in ("id", "pid")}
    return {"run": run, "server_start": start}


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m moe_tui.executors.job JOB.json", file=sys.stderr)
        return 2
    job = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    if not isinstance(job, dict) or job.get("format") != JOB_FORMAT:
        print(f"{argv[0]}: not a {JOB_FORMAT} file", file=sys.stderr)
        return 2
    job_id = os.environ.get("SLURM_JOB_ID") or f"local-{os.getpid()}"
    work = Path(tempfile.mkdtemp(prefix=f"moe-tui-job-{job_id}-", dir=os.environ.get("TMPDIR") or None))
    os.environ["MOE_TUI_HOME"] = str(work)  # anything that asks for the data dir gets the private one
    try:
        result = asyncio.run(_work(job, work, job_id))
        if result is None:
            print(f"job {job_id}: signalled before its item ended; no result (the controller retries it)", file=sys.stderr)
            return 1
        write_result(Path(job["result_path"]), result)
        said = ", ".join(f"#{p['item_id']} {p['item_state']}" for p in result["items"])
        print(f"job {job_id}: item(s) {said} on {result['node']}")
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
