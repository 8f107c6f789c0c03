"""Per-node GPU telemetry of batch jobs: what a job relays, and the node rows the dashboard shows.

The channel: while it runs, a job writes its node's latest GPU snapshot (the same sampler as the
local runner: NVML on a GPU node, the emulator's simulated GPUs otherwise, marked simulated) into
`node-gpus.json` in its own job folder, replaced atomically (temporary name, rename) about once a
second. The controller reads it when it draws. Why a file and not a stream:
- the job folder is already on storage both sides see (the result file travels there), so the
  relay needs no shared SQLite and no connection into the compute node (none is usually allowed),
  nor one out of it to the controller (the control socket is a Unix socket on the controller's
  host; a TCP port would need its own authentication);
- one snapshot, replaced, is bounded by construction (a few KiB per job whatever its length);
  the history a run needs travels in its result file (`gpu_samples`), not here.

Ownership: the job records which of the node's GPUs Slurm gave it (`SLURM_JOB_GPUS`, else the
numeric `CUDA_VISIBLE_DEVICES`, else `scontrol show job -d`'s `GRES=gpu:N(IDX:...)`); without a
GPU allocation (a partition without GRES) the GPUs its own sampler reports are its own.

Freshness: a node's row is `live` while its newest sample is under `STALE_AFTER_S` old, `stale`
past that (the job's clock against the reader's: cluster hosts keep NTP time), `ended` once its
jobs ended, `waiting` before a first sample. Only a live row carries GPU figures: a stale or ended
node shows no last value as if it were current.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from moe_tui.store.db import Store
from moe_tui.store.jobs import JobRow

NODE_FILE = "node-gpus.json"
NODE_FORMAT = "moe-tui-node-gpus"
STALE_AFTER_S = 5.0
KEEP_ENDED_S = 300.0  # an ended node stays on the dashboard this long after its job was last seen
MAX_NODE_FILE_BYTES = 256 * 1024  # a larger file is not a snapshot of ours: ignored


def owned_gpus(env: Mapping[str, str]) -> list[int] | None:
    """The node's GPU indices Slurm allocated to this job, or None without a GPU allocation."""
    for key in ("SLURM_JOB_GPUS", "SLURM_STEP_GPUS", "CUDA_VISIBLE_DEVICES"):
        value = env.get(key, "").strip()
        if value:
            try:
                return sorted({int(v) for v in value.split(",") if v.strip()})
            except ValueError:  # GPU UUIDs (MIG or UUID lists): not indices, look further
                continue
    return None


_GRES_IDX = re.compile(r"GRES=\S*?gpu[^\s(]*\(IDX:([0-9,\-]+)\)")


def gres_gpu_indices(scontrol_text: str, node: str) -> list[int] | None:
    """The GPU indices `scontrol show job -d` gives the job on `node` (`Nodes=node1 ... GRES=gpu:2(IDX:0-1)`),
    or None when it names none (Slurm sets no SLURM_JOB_GPUS for some GRES set-ups, but says it here)."""
    found: list[int] | None = None
    for line in scontrol_text.splitlines():
        match = _GRES_IDX.search(line)
        if match is None:
            continue
        indices: set[int] = set()
        for part in match.group(1).split(","):
            lo, _, hi = part.partition("-")
            if lo.isdigit() and (not hi or hi.isdigit()):
                indices.update(range(int(lo), int(hi or lo) + 1))
        if f"Nodes={node} " in line + " " or found is None:
            found = sorted(indices)
    return found


def write_node_sample(path: Path, *, job_id: str, item_id: int, node: str, snapshot: Mapping[str, Any],
                      owned: Sequence[int] | None, seq: int) -> None:
    """Replace the job's node file with this snapshot (atomic: a reader sees the old or the new)."""
    body = {"format": NODE_FORMAT, "version": 1, "job_id": job_id, "item_id": item_id, "node": node,
            "seq": seq, "written_at": time.time(), "owned": list(owned) if owned is not None else None,
            "snapshot": dict(snapshot)}
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(body), encoding="utf-8")
    os.replace(tmp, path)


def read_node_sample(path: Path) -> dict[str, Any] | None:
    """The job's last relayed snapshot, or None when there is none yet or it is not one of ours
    (the file is untrusted: a wrong shape is no sample, never an error on the dashboard)."""
    try:
        if path.stat().st_size > MAX_NODE_FILE_BYTES:
            return None
        body = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(body, dict) or body.get("format") != NODE_FORMAT or not isinstance(body.get("snapshot"), dict):
        return None
    if not isinstance(body["snapshot"].get("gpus"), list):
        return None
    return body


@dataclass(frozen=True)
class NodeGpuRow:
    """One GPU of a node as the dashboard's node panel shows it (figures None unless live)."""

    index: int
    name: str
    util_pct: float | None
    mem_used_pct: float | None
    mem_text: str  # "12/80" GiB, or "" when not live
    power_w: float | None
    temperature_c: float | None
    job_id: str  # the job that owns it ("" for a GPU no job of ours holds)
    item_id: int | None

    @property
    def owner_text(self) -> str:
        return f"job {self.job_id} #{self.item_id}" if self.job_id else "—"


@dataclass(frozen=True)
class NodeRow:
    """One node: its freshness, the jobs of ours on it and its GPUs."""

    node: str
    status: str  # live, stale, ended, waiting
    age_s: float | None  # seconds since its newest sample (None: none yet)
    simulated: bool
    jobs: tuple[str, ...]  # "job 123 #4 RUNNING"
    gpus: tuple[NodeGpuRow, ...]

    @property
    def status_text(self) -> str:
        """A few words, k9s-style: live (sim: the emulator's GPUs), STALE and the sample's age, ended."""
        if self.status == "live":
            return "live · sim" if self.simulated else "live"
        if self.status == "stale":
            return f"STALE {self.age_s:.0f}s" if self.age_s is not None else "STALE"
        if self.status == "ended":
            return "ended"
        return "no sample yet"


def _gib(value: Any) -> float | None:
    return float(value) / 2**30 if isinstance(value, (int, float)) else None


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def node_rows(jobs: Sequence[JobRow], samples: Mapping[int, dict[str, Any] | None], now: float,
              *, stale_after_s: float = STALE_AFTER_S) -> list[NodeRow]:
    """The node rows from the jobs (newest attempts, open or recently ended) and each job's last
    relayed sample (by job row id). Pure: no clock, no file."""
    by_node: dict[str, list[JobRow]] = {}
    for job in jobs:
        sample = samples.get(job.id)
        node = (sample or {}).get("node") or job.node
        if isinstance(node, str) and node:
            by_node.setdefault(node, []).append(job)
    rows = []
    for node in sorted(by_node):
        node_jobs = by_node[node]
        running = [j for j in node_jobs if j.ended_seen_at is None and j.outcome == ""]
        newest: float | None = None
        gpus: dict[int, NodeGpuRow] = {}
        simulated = False
        for job in sorted(node_jobs, key=lambda j: j.id):
            sample = samples.get(job.id)
            if not sample:
                continue
            # The snapshot's wall clock (its `t` is the job's monotonic clock: no meaning here).
            t = _num(sample["snapshot"].get("wall")) or _num(sample.get("written_at"))
            if t is not None and (newest is None or t > newest):
                newest = t
            simulated = simulated or bool(sample["snapshot"].get("simulated"))
            live = job in running and t is not None and now - t <= stale_after_s
            owned = sample.get("owned")
            # A sweep's job works several items: the relay names the one being measured.
            said = sample.get("item_id")
            item = said if isinstance(said, int) and sample.get("job_id") == job.job_id else job.item_id
            for g in sample["snapshot"]["gpus"]:
                if not isinstance(g, dict) or not isinstance(g.get("index"), int):
                    continue
                mine = job in running and (owned is None or g["index"] in owned)
                used, total = _gib(g.get("mem_used_bytes")), _gib(g.get("mem_total_bytes"))
                row = NodeGpuRow(
                    index=g["index"], name=str(g.get("name") or "GPU").replace("NVIDIA ", "")[:16],
                    util_pct=_num(g.get("util_gpu_pct")) if live else None,
                    mem_used_pct=(100.0 * used / total if live and used is not None and total else None),
                    mem_text=f"{used:.0f}/{total:.0f}" if live and used is not None and total else "",
                    power_w=_num(g.get("power_w")) if live else None,
                    temperature_c=_num(g.get("temperature_c")) if live else None,
                    job_id=str(job.job_id or "") if mine else "", item_id=item if mine else None)
                if g["index"] not in gpus or mine:
                    gpus[g["index"]] = row
        age = now - newest if newest is not None else None
        if not running:
            status = "ended"
        elif age is None:
            status = "waiting"
        else:
            status = "live" if age <= stale_after_s else "stale"
        rows.append(NodeRow(node=node, status=status, age_s=age, simulated=simulated,
                            jobs=tuple(f"job {j.job_id} #{j.item_id} {j.state}" for j in node_jobs if j.job_id),
                            gpus=tuple(gpus[i] for i in sorted(gpus))))
    return rows


def recent_jobs(store: Store, now: float, keep_ended_s: float = KEEP_ENDED_S) -> list[JobRow]:
    """Open jobs, and jobs that ended within `keep_ended_s` (their node shows as ended a while)."""
    from moe_tui.store.jobs import ExecutorJobs

    return ExecutorJobs(store).recent(now - keep_ended_s)


def read_node_rows(store: Store, now: float | None = None, keep_ended_s: float = KEEP_ENDED_S) -> list[NodeRow]:
    """The dashboard's node rows: recent jobs from the store, their relayed samples from their folders."""
    now = time.time() if now is None else now
    jobs = recent_jobs(store, now, keep_ended_s)
    samples = {j.id: read_node_sample(Path(j.result_path).parent / NODE_FILE) for j in jobs}
    return node_rows(jobs, samples, now)
