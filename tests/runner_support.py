"""Helpers for the controller / runner tests: a private MOE_TUI_HOME, fast emulator profiles on free
loopback ports, `moe-tui` subprocesses that are always cleaned up (process group killed), and a
whole-process-table check that no emulator of the test is left behind."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import psutil
import pytest

REPO = Path(__file__).resolve().parents[1]

# Startup phases and the performance model sped up so a campaign of 8 items takes seconds.
FAST_SIM = {"time_scale": 50, "load_seconds": 0.2, "graph_seconds": 0.1, "warmup_seconds": 0.1}


def free_port() -> int:
    """A claimed loopback port outside the ephemeral range (safe with parallel workers and runs)."""
    from moe_tui.sim.launch import free_port as claim

    return claim()


def processes_with(variable: str, values: set[str] | frozenset[str]) -> list[psutil.Process]:
    """Every live process on the machine whose environment sets `variable` to one of `values` (a server's
    MOE_TUI_SERVER_ID, a runner child's MOE_TUI_RUNNER_DIR): the whole process table, not a handle's pid."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(variable) in values and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (psutil.Error, OSError):
            continue
    return found


def runner_children(data_dir: Path) -> list[psutil.Process]:
    """The live processes a runner of `data_dir` started (they carry MOE_TUI_RUNNER_DIR)."""
    return processes_with("MOE_TUI_RUNNER_DIR", {str(Path(data_dir).resolve())})


@contextlib.contextmanager
def tmpfs(path: Path, size: str, mode: str | None = None) -> Iterator[Path]:
    """A tmpfs of `size` mounted at `path` (made here) for the block, lazily unmounted after; the test is
    skipped where mounting is not allowed (it needs root)."""
    path.mkdir()
    options = f"size={size}" + (f",mode={mode}" if mode else "")
    if subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


# --stream-interval 16 sends a chunk every 16 tokens, like SGLang's own flag of that name: the client and
# the emulator keep up at concurrency 256 on a CI box (the end-to-end campaigns' profiles).
STREAMED_ARGS = ("--enable-metrics", "--stream-interval", "16")


def _toml(value: Any) -> str:
    """A TOML value of the few kinds a test profile holds (JSON's strings and arrays of strings are TOML's)."""
    return str(value).lower() if isinstance(value, bool) else json.dumps(value) if isinstance(value, (str, list)) \
        else str(value)


def write_profile(directory: Path, name: str, backend: str, port: int, *,
                  extra_args: Sequence[str] = ("--enable-metrics",), top: dict[str, Any] | None = None,
                  env: dict[str, str] | None = None, **sim: Any) -> Path:
    """A fast emulator profile of GLM-5 (TP8/EP8): `top` overrides the profile's own keys (tp_size, api_key,
    ...), `env` is its [env] table, `sim` its [sim] table over FAST_SIM."""
    head: dict[str, Any] = {"name": name, "engine": "sim", "model_path": "GLM-5-NVFP4", "moe_runner_backend": backend,
                            "tp_size": 8, "ep_size": 8, "quantization": "modelopt_fp4", "host": "127.0.0.1",
                            "port": port, "startup_timeout_s": 30, "extra_args": list(extra_args), **(top or {})}
    lines = [f"{key} = {_toml(value)}" for key, value in head.items()]
    if env:
        lines += ["", "[env]", *(f"{key} = {_toml(value)}" for key, value in env.items())]
    lines += ["", "[sim]", *(f"{key} = {_toml(value)}" for key, value in {**FAST_SIM, **sim}.items())]
    path = directory / f"{name}.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


class Env:
    """One test's world: home dir, profiles dir, ports, and every process it started."""

    def __init__(self, tmp_path: Path):
        # Short paths: the runner's Unix socket lives in the data dir.
        self.home = tmp_path / "h"
        self.profiles = tmp_path / "p"
        self.profiles.mkdir()
        self.ports: list[int] = []
        self.procs: list[subprocess.Popen] = []
        self.env = {**os.environ, "MOE_TUI_HOME": str(self.home), "PYTHONUNBUFFERED": "1"}
        self.env.pop("CI_FAKE", None)

    @property
    def data_dir(self) -> Path:
        return self.home / "data"

    @property
    def db(self) -> Path:
        return self.data_dir / "moe-tui.sqlite3"

    def profile(self, name: str, backend: str, *, extra_args: Sequence[str] = ("--enable-metrics",),
                top: dict[str, Any] | None = None, env: dict[str, str] | None = None, **sim: Any) -> str:
        """An emulator profile `name` on a claimed port (`write_profile`); returns its name."""
        port = free_port()
        self.ports.append(port)
        write_profile(self.profiles, name, backend, port, extra_args=extra_args, top=top, env=env, **sim)
        return name

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "moe_tui", *args]

    def run(self, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess:
        """`moe-tui ARGS` to the end; `timeout` is for an idle machine and is scaled (speed_factor)."""
        timeout = scaled(timeout)
        proc = self.popen(*args)
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill(proc)
            out, _ = proc.communicate()
            raise AssertionError(f"moe-tui {' '.join(args)} did not finish in {timeout} s:\n{out}") from None
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, "")

    def popen(self, *args: str) -> subprocess.Popen:
        proc = subprocess.Popen(self.argv(*args), env=self.env, cwd=REPO, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
        self.procs.append(proc)
        return proc

    @staticmethod
    def kill(proc: subprocess.Popen) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(Exception):
            proc.wait(5)

    def query(self, sql: str, params: tuple = ()) -> list[tuple]:
        conn = sqlite3.connect(self.db, timeout=30)
        try:
            return conn.execute(sql, params).fetchall()
        finally:
            conn.close()

    def emulators(self) -> list[psutil.Process]:
        """Every live emulator process on one of this test's ports, anywhere in the process table."""
        found = []
        wanted = {str(p) for p in self.ports}
        for proc in psutil.process_iter(["cmdline"]):
            cmd = proc.info.get("cmdline") or []
            if "moe_tui.sim" in cmd and "--port" in cmd:
                i = cmd.index("--port")
                if i + 1 < len(cmd) and cmd[i + 1] in wanted:
                    with contextlib.suppress(psutil.Error):
                        if proc.status() != psutil.STATUS_ZOMBIE:
                            found.append(proc)
        return found

    def cleanup(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                self.kill(proc)
        runner = self.data_dir / "runner.json"
        if runner.exists():
            with contextlib.suppress(Exception):
                import json

                pid = json.loads(runner.read_text()).get("pid")
                if pid:
                    os.killpg(os.getpgid(pid), signal.SIGKILL)
        for proc in self.emulators():
            with contextlib.suppress(Exception):
                os.killpg(os.getpgid(proc.pid), signal.SIGKILL)


# A fixed CPU task takes about this long on an idle development machine.
_REFERENCE_S = 0.05
_speed: list[float] = []


def speed_factor() -> float:
    """How much slower this machine is right now than an idle one (>= 1): a fixed CPU task is
    timed (which measures contention by other work too) and the load per core is read. Timeouts
    of tests that wait on real processes are multiplied by it, so the suite holds on a loaded
    2-core box instead of racing a fixed wall clock. MOE_TUI_TEST_SPEED_FACTOR overrides it."""
    if not _speed:
        forced = os.environ.get("MOE_TUI_TEST_SPEED_FACTOR")
        if forced:
            _speed.append(max(1.0, float(forced)))
        else:
            t0 = time.perf_counter()
            total = 0
            for i in range(400_000):
                total += i * i % 7
            measured = (time.perf_counter() - t0) / _REFERENCE_S
            load = os.getloadavg()[0] / max(1, os.cpu_count() or 1)
            _speed.append(min(10.0, max(1.0, measured, load)))
    return _speed[0]


def scaled(seconds: float) -> float:
    """`seconds` on an idle machine, scaled to this one's current speed."""
    return seconds * speed_factor()


def wait_for(predicate: Any, timeout: float, what: str, interval: float = 0.1) -> Any:
    """Poll `predicate` until it is truthy; `timeout` is for an idle machine, scaled to this one's
    measured speed (`speed_factor`), so a loaded box waits longer instead of failing."""
    timeout = scaled(timeout)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def wait_gone(env: Env, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + scaled(timeout)
    while time.monotonic() < deadline and env.emulators():
        time.sleep(0.1)
    left = env.emulators()
    assert not left, f"emulator processes left behind: {[(p.pid, p.cmdline()) for p in left]}"

