"""The executor interface: what `dispatch.Dispatcher` asks of a batch system, and the job words.

An executor only submits, reports and cancels; it never touches the store or the queue (the
dispatcher does, holding the runner lock). States are Slurm's words, which a Kubernetes executor
would map its Job conditions onto (`docs/executors.md`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

# Slurm's job states as `squeue -o %T` prints them; GONE: the scheduler no longer knows the job.
WAITING = frozenset({"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "SUSPENDED", "RESIZING"})
ACTIVE = frozenset({"RUNNING", "COMPLETING", "STAGE_OUT", "SIGNALING"})
# Ended without its work done for reasons outside the job: the item is retried, as the local runner
# retries an item interrupted by a stop (GONE: forgotten before its end was seen).
LOST = frozenset({"PREEMPTED", "NODE_FAIL", "TIMEOUT", "BOOT_FAIL", "DEADLINE", "GONE"})
ENDED = frozenset({"COMPLETED", "FAILED", "CANCELLED", "OUT_OF_MEMORY", "REVOKED", "SPECIAL_EXIT"}) | LOST


@dataclass(frozen=True)
class JobStatus:
    """One job as the scheduler reports it now."""

    job_id: str
    state: str
    node: str = ""
    reason: str = ""

    @property
    def ended(self) -> bool:
        return self.state in ENDED


@dataclass(frozen=True)
class JobRequest:
    """What one job must do: work `job_file` (written by the dispatcher) and leave `result_path`."""

    name: str  # unique per item attempt and data dir: how a restarted controller finds its job
    job_file: Path
    workdir: Path  # the job's folder on storage both sides see (its log, job file and result)
    result_path: Path
    gpus: int
    time_limit_s: float
    nodes: int = 1
    nodelist: str = ""  # pinned to this node ("" : wherever the scheduler puts it): a node-blocked plan


class ExecutorError(RuntimeError):
    """The batch system refused or could not be asked; the message names the command and why."""


class Executor(ABC):
    """A batch system that runs one job per queue item (see the module docstring)."""

    name: str = ""
    # How many jobs may be submitted and not yet ended at once (None: as many as there are items).
    max_in_flight: int | None = None

    @abstractmethod
    def submit(self, request: JobRequest) -> str:
        """Submit the job; its id. Raises ExecutorError."""

    @abstractmethod
    def poll(self, job_ids: Sequence[str]) -> dict[str, JobStatus]:
        """The status of each job the scheduler still knows (a job missing from the answer is GONE).
        Raises ExecutorError when the scheduler cannot be asked (nothing is concluded then)."""

    @abstractmethod
    def cancel(self, job_id: str) -> None:
        """Ask the scheduler to end the job (its end is seen by a later poll)."""

    @abstractmethod
    def find(self, name: str) -> str | None:
        """The id of a job the scheduler knows by this name, if any (re-adoption after a crash)."""

    def lost_nodes(self, nodes: str, now: str = "", reason: str = "") -> list[str]:
        """'NODE (why)' for each of a job's `nodes` the scheduler reports lost; `now` and `reason`:
        the job's nodes and reason as last seen (none known: empty)."""
        return []
