"""What runs inside a batch job: one queue item, worked by the local runner's own code, one result file.

    python -m moe_tui.executors.job JOB.json

JOB.json (written by `dispatch.Dispatcher`) names the item (profile, spec, repeat, warmup), its
attempt, the profiles folder and where the result goes. The job makes a private data dir on the
node's own disk (`$TMPDIR`), queues the item there and works it with `run.controller.Controller`
until the queue is empty: the same server start, readiness, warmup, benchmark, telemetry,
provenance and flags as the local runner. The profile's port is replaced by a free one of this node
(two jobs may share a machine). Then the run, its requests, GPU samples and server start go into
the result file (`results.write_result`, atomic) and the private dir is removed.

SIGTERM (scancel, preemption, the time limit) stops the benchmark and the server and writes no
result: the dispatcher sees the job end without one and retries the item. Exit 0 when a result was
written, 1 when not.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import shutil
import signal
import socket
import sys
import tempfile
from pathlib import Path
from typing import Any, TypedDict, cast

from moe_tui.executors.results import write_result
from moe_tui.records import ExecutorJobFileJson, FreeForm, JobResultJson, QueueItemJson

JOB_FORMAT = "moe-tui-job"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def job_payload(item: QueueItemJson, attempt: int, profiles_dir: str, result_path: str, executor: str) -> ExecutorJobFileJson:
    return {"format": JOB_FORMAT, "version": 1, "item": item, "attempt": attempt, "profiles_dir": profiles_dir,
            "result_path": result_path, "executor": executor}


async def _work(job: ExecutorJobFileJson, work: Path, job_id: str) -> JobResultJson | None:
    from moe_tui.profiles import ProfileSet, load_profiles
    from moe_tui.run.controller import Controller
    from moe_tui.spec import BenchmarkSpec
    from moe_tui.store.db import Store
    from moe_tui.store.queue import RunQueue

    asked = job["item"]
    profile = load_profiles(job["profiles_dir"]).by_name(asked["profile_name"])
    profiles = ProfileSet(profiles=[dataclasses.replace(profile, port=free_port())], problems=[])
    store = Store(work / "moe-tui.sqlite3")
    queue = RunQueue(store)
    item = queue.add_item(profile.name, BenchmarkSpec.from_dict(asked["spec"], "the job's item spec"),
                          repeat_index=int(asked["repeat_index"]), warmup=bool(asked["warmup"]))
    controller = Controller(store, profiles, data_dir=work)
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
    done = queue.item(item.id)
    return {"job_id": job_id, "item_id": int(asked["id"]), "attempt": int(job["attempt"]),
            "node": os.environ.get("SLURMD_NODENAME") or socket.gethostname(), "item_state": done.state,
            "item_error": done.error, **_run_parts(store, done.run_id, asked, int(job["attempt"]))}


class _RunParts(TypedDict):
    run: FreeForm | None  # JobResultJson's
    server_start: FreeForm | None


def _run_parts(store: Any, run_id: int | None, asked: QueueItemJson, attempt: int) -> _RunParts:
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
        result = asyncio.run(_work(cast(ExecutorJobFileJson, job), work, job_id))  # job_payload wrote it
        if result is None:
            print(f"job {job_id}: signalled before its item ended; no result (the controller retries it)", file=sys.stderr)
            return 1
        write_result(Path(job["result_path"]), result)
        print(f"job {job_id}: item #{result['item_id']} {result['item_state']} on {result['node']}")
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
