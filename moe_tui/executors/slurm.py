"""The Slurm executor: one `sbatch` job per queue item, watched with `squeue`, ended with `scancel`.

`SlurmSettings` says how a job asks for its machine: partition, account, QoS, constraint, the GPUs
(`gpus = "gres"`: `--gres=gpu:N` with N the profile's GPU count; `"exclusive"`: a whole node;
`"none"`), a fixed time limit or the plan's estimate (`time_limit_for`), and extra sbatch options.
They come from `slurm.toml` beside the profiles (`[defaults]`, then `[profiles.NAME]` per profile)
and from the command line (`moe-tui run --executor slurm --partition P ...`: the campaign's), the
command line winning. Every value is checked before anything is submitted; options go to `sbatch`
as arguments (never through a shell), so a value cannot smuggle another option in.

Jobs are submitted `--no-requeue`: a preempted, failed or timed-out job ends, and the dispatcher
retries its item as a new job (a new attempt, its own result file), so one job never runs twice.
"""

from __future__ import annotations

import getpass
import math
import re
import shlex
import subprocess
import sys
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from moe_tui.executors.base import Executor, ExecutorError, JobRequest, JobStatus
from moe_tui.records import SettingsTable

GPU_MODES = ("gres", "exclusive", "none")
SETTINGS_FILE = "slurm.toml"
_SAFE = re.compile(r"^[A-Za-z0-9_.,:=+@%/\-|&!()\[\]*]{1,200}$")  # Slurm names, lists and constraint expressions
_KEYS = {"partition", "account", "qos", "constraint", "gpus", "time_limit_s", "extra_args"}
COMMAND_TIMEOUT_S = 30.0


class SlurmSettingsError(ValueError):
    """A bad Slurm setting; the message names where and which key."""


@dataclass(frozen=True)
class SlurmSettings:
    partition: str = ""
    account: str = ""
    qos: str = ""
    constraint: str = ""
    gpus: str = "gres"
    time_limit_s: float | None = None  # None: estimated from the item (`time_limit_for`)
    extra_args: tuple[str, ...] = ()

    def sbatch_args(self, gpu_count: int) -> list[str]:
        args = [f"--{k}={v}" for k, v in (("partition", self.partition), ("account", self.account),
                                          ("qos", self.qos), ("constraint", self.constraint)) if v]
        if self.gpus == "gres" and gpu_count > 0:
            args.append(f"--gres=gpu:{gpu_count}")
        elif self.gpus == "exclusive":
            args.append("--exclusive")
        return args + list(self.extra_args)

    def merged(self, data: Mapping[str, Any], where: str) -> SlurmSettings:
        """These settings with `data`'s keys over them (validated; the error names `where`)."""
        for key, value in data.items():
            if key not in _KEYS:
                raise SlurmSettingsError(f"{where}: unknown key {key!r} (known: {', '.join(sorted(_KEYS))})")
            if value is None:
                continue
            if key == "gpus":
                if value not in GPU_MODES:
                    raise SlurmSettingsError(f"{where}: gpus must be one of {', '.join(GPU_MODES)}, got {value!r}")
            elif key == "time_limit_s":
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 366 * 86400:
                    raise SlurmSettingsError(f"{where}: time_limit_s must be seconds in (0, 1 year], got {value!r}")
            elif key == "extra_args":
                if not isinstance(value, (list, tuple)) or not all(
                        isinstance(a, str) and a.startswith("--") and _SAFE.match(a) for a in value):
                    raise SlurmSettingsError(f"{where}: extra_args must be a list of '--option=value' strings "
                                             f"of plain characters, got {value!r}")
                value = tuple(value)
            elif not isinstance(value, str) or (value and not _SAFE.match(value)):
                raise SlurmSettingsError(f"{where}: {key} must be a Slurm name or expression "
                                         f"(letters, digits, _.,:=+@%/-|&!()[]*), got {value!r}")
            self = replace(self, **{key: value})
        return self


@dataclass
class SlurmConfig:
    """Settings per profile: `slurm.toml`'s defaults and per-profile tables, then the campaign's."""

    defaults: SlurmSettings = field(default_factory=SlurmSettings)
    per_profile: dict[str, SettingsTable] = field(default_factory=dict)
    campaign: SettingsTable = field(default_factory=dict)

    def for_profile(self, name: str) -> SlurmSettings:
        settings = self.defaults.merged(self.per_profile.get(name, {}), f"{SETTINGS_FILE} [profiles.{name}]")
        return settings.merged(self.campaign, "the command line")


def load_config(profiles_dir: Path | None, campaign: Mapping[str, Any] | None = None) -> SlurmConfig:
    """`slurm.toml` beside the profiles (optional) and the campaign's settings, all validated now."""
    config = SlurmConfig(campaign={k: v for k, v in (campaign or {}).items() if v is not None})
    path = profiles_dir / SETTINGS_FILE if profiles_dir is not None else None
    if path is not None and path.is_file():
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise SlurmSettingsError(f"{path}: cannot read it: {exc}") from None
        unknown = set(data) - {"defaults", "profiles"}
        if unknown:
            raise SlurmSettingsError(f"{path}: unknown table(s) {sorted(unknown)} (known: defaults, profiles)")
        config.defaults = SlurmSettings().merged(data.get("defaults", {}), f"{path} [defaults]")
        profiles = data.get("profiles", {})
        if not isinstance(profiles, dict) or not all(isinstance(v, dict) for v in profiles.values()):
            raise SlurmSettingsError(f"{path}: [profiles.NAME] must be tables")
        config.per_profile = {str(k): dict(v) for k, v in profiles.items()}
    for name in config.per_profile:  # every table checked now, not when its first item comes
        config.for_profile(name)
    config.defaults.merged(config.campaign, "the command line")
    return config


def time_limit_for(startup_timeout_s: float, num_prompts: int, concurrency: int, output_len: int,
                   warmup: bool, time_scale: float = 1.0) -> float:
    """The plan's time limit for one item: the server's start-up limit, plus a generous bound on the
    benchmark (20 ms a token at the item's concurrency, twice with a warmup pass), plus two minutes."""
    waves = math.ceil(max(1, num_prompts) / max(1, concurrency))
    bench = waves * max(1, output_len) * 0.02 / max(time_scale, 1e-3)
    return startup_timeout_s + bench * (2 if warmup else 1) + 120.0


def slurm_time(seconds: float) -> str:
    """sbatch's --time as minutes:seconds, rounded up to whole seconds."""
    total = max(1, math.ceil(seconds))
    return f"{total // 60}:{total % 60:02d}"


class SlurmExecutor(Executor):
    """Submits with `sbatch`, reports with `squeue`, cancels with `scancel` (see the module docstring)."""

    name = "slurm"

    def __init__(self, settings_for: Any = None, python: str | None = None, env: Mapping[str, str] | None = None) -> None:
        self._settings_for = settings_for or (lambda request: SlurmSettings())
        self.python = python or sys.executable
        self.env = dict(env) if env is not None else None
        self.user = getpass.getuser()

    def _run(self, argv: list[str]) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run(argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, env=self.env)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ExecutorError(f"{argv[0]}: {exc}") from None

    def script(self, request: JobRequest) -> str:
        return ("#!/bin/sh\n# moe-tui: one queue item (python -m moe_tui.executors.job); its result comes back as a file\n"
                f"exec {shlex.quote(self.python)} -m moe_tui.executors.job {shlex.quote(str(request.job_file))}\n")

    def sbatch_argv(self, request: JobRequest, settings: SlurmSettings, script: Path) -> list[str]:
        limit = settings.time_limit_s if settings.time_limit_s is not None else request.time_limit_s
        return ["sbatch", "--parsable", f"--job-name={request.name}", f"--chdir={request.workdir}",
                f"--output={request.workdir / 'job-%j.log'}", f"--nodes={request.nodes}",
                "--ntasks-per-node=1", f"--time={slurm_time(limit)}", "--no-requeue",
                *([f"--nodelist={request.nodelist}"] if request.nodelist else []),
                *settings.sbatch_args(request.gpus), str(script)]

    def submit(self, request: JobRequest) -> str:
        settings: SlurmSettings = self._settings_for(request)
        script = request.workdir / "job.sh"
        script.write_text(self.script(request), encoding="utf-8")
        script.chmod(0o700)
        done = self._run(self.sbatch_argv(request, settings, script))
        job_id = done.stdout.strip().split(";")[0]
        if done.returncode != 0 or not job_id.isdigit():
            raise ExecutorError(f"sbatch refused job {request.name}: {(done.stderr or done.stdout).strip()[:500]}")
        return job_id

    def _squeue(self, *selection: str) -> list[JobStatus]:
        done = self._run(["squeue", "-h", "-t", "all", *selection, "-o", "%i|%T|%N|%r"])
        if done.returncode != 0:
            raise ExecutorError(f"squeue failed: {done.stderr.strip()[:500]}")
        out = []
        for line in done.stdout.splitlines():
            parts = line.strip().split("|")
            if len(parts) == 4 and parts[0]:
                reason = "" if parts[3] in ("None", "(null)") else parts[3]
                out.append(JobStatus(parts[0], parts[1], parts[2], reason))
        return out

    def poll(self, job_ids: Sequence[str]) -> dict[str, JobStatus]:
        if not job_ids:
            return {}
        wanted = set(job_ids)
        return {s.job_id: s for s in self._squeue("-u", self.user) if s.job_id in wanted}

    def cancel(self, job_id: str) -> None:
        done = self._run(["scancel", str(job_id)])
        if done.returncode != 0:
            raise ExecutorError(f"scancel {job_id} failed: {done.stderr.strip()[:500]}")

    def lost_nodes(self, nodes: str, now: str = "", reason: str = "") -> list[str]:
        """The nodes sinfo reports down, failing or not responding; else, for a job ended by NodeDown,
        the nodes Slurm took off it (a failed node leaves the job's list as it completes; one that
        still has its slurmd is soon back in service under ReturnToService=2)."""
        from moe_tui.servers.multinode import lost_nodes

        lost = lost_nodes(nodes, self.env)
        if lost or reason != "NodeDown" or not now or now == nodes:
            return lost
        held, left = self._hostnames(nodes), set(self._hostnames(now))
        return [f"{n} (taken off the job by Slurm: NodeDown)" for n in held if n not in left]

    def _hostnames(self, hostlist: str) -> list[str]:
        try:
            done = self._run(["scontrol", "show", "hostnames", hostlist])
        except ExecutorError:
            return []
        return done.stdout.split() if done.returncode == 0 else []

    def find(self, name: str) -> str | None:
        found = [s.job_id for s in self._squeue("-u", self.user, "-n", name)]
        return found[-1] if found else None
