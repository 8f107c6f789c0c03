"""Start the SGLang emulator as a real subprocess (tests, demo, benches) and clean it up.

`SimProcess` runs `python -m moe_tui.sim` in its own process group on a free loopback port,
collects its log lines (stdout and stderr merged) in a background thread, waits for
`/health_generate` to answer 200 (not `/v1/models`: that answers during load), and on `stop()`
sends SIGTERM to the whole group, then SIGKILL after a grace period. Only the standard library
is used, so any test or tool can import it cheaply.

    with SimProcess(["--moe-runner-backend", "flashinfer_cutlass"]) as sim:
        sim.wait_ready()
        ... sim.base_url ...
"""

from __future__ import annotations

import codecs
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import IO, TypedDict, Unpack

# Fast startup phases for tests unless a caller overrides them.
FAST_START = ["--sim-load-seconds", "0.2", "--sim-graph-seconds", "0.1",
              "--sim-warmup-seconds", "0.1"]


class SimStartError(RuntimeError):
    """The emulator exited or did not become ready; the message carries its log tail."""


# Ports are drawn below the kernel's ephemeral range (net.ipv4.ip_local_port_range, 32768+ by
# default): a port the kernel hands out for bind(0), or as an outgoing connection's source port,
# can be taken again between our check and the emulator's own bind, which made tests that run in
# parallel collide. A claim file per port (holding the claimer's pid) keeps two processes of ours,
# two test workers or two test runs, from drawing the same port while the claimer lives.
PORT_RANGE = (20000, 32000)


def _port_claims_dir() -> Path:
    import tempfile

    path = Path(tempfile.gettempdir()) / f"moe-tui-ports-{os.getuid()}"
    path.mkdir(mode=0o700, exist_ok=True)
    return path


def _claim_port(port: int) -> bool:
    """Claim `port` for this process: True when no live process of ours holds it."""
    claim = _port_claims_dir() / str(port)
    for _ in range(2):
        try:
            fd = os.open(claim, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            try:
                holder = int(claim.read_text() or "0")
            except (OSError, ValueError):
                holder = 0
            if holder == os.getpid():
                return False  # this process already drew it once: never hand it out twice
            if holder > 0 and _pid_alive(holder):
                return False
            claim.unlink(missing_ok=True)  # a dead claimer's file
            continue
        with os.fdopen(fd, "w") as f:
            f.write(str(os.getpid()))
        return True
    return False


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def free_port(host: str = "127.0.0.1") -> int:
    """A loopback port nothing listens on, outside the ephemeral range and claimed for this process."""
    import random

    rng = random.SystemRandom()
    for _ in range(500):
        port = rng.randrange(*PORT_RANGE)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
        if _claim_port(port):
            return port
    # Every draw taken (a crowded box): fall back to the kernel's choice.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def http_status(url: str, timeout: float = 2.0) -> int | None:
    """GET `url`; the status code, or None when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return int(resp.status)  # urlopen is typed Any
    except urllib.error.HTTPError as exc:
        return exc.code
    except (urllib.error.URLError, OSError, TimeoutError):
        return None



def _updates(stream: IO[bytes]) -> Iterator[str]:
    """The stream's lines, each "\r" update of a progress bar (tqdm) counting as one: what a
    reader of the terminal sees go by, as soon as it is written."""
    decode = codecs.getincrementaldecoder("utf-8")("replace").decode
    buf = ""
    read = getattr(stream, "read1", stream.read)
    while chunk := read(65536):
        buf += decode(chunk)
        *done, buf = buf.replace("\r\n", "\n").split("\n")
        if "\r" in buf:  # updates of the line still open are seen now, not at its newline: tqdm
            done += [u for u in buf.split("\r") if u]  # writes each "\r" + update in one call
            buf = ""
        for line in done:
            yield from ([part for part in line.split("\r") if part] or [""])
    if buf:
        yield buf


class SimProcess:
    """One emulator subprocess in its own process group."""

    def __init__(self, args: list[str] | None = None, *, host: str = "127.0.0.1",
                 port: int | None = None, fast_start: bool = True,
                 log_path: str | Path | None = None, env: dict[str, str] | None = None) -> None:
        self.host = host
        self.port = port or free_port(host)
        self.args = (FAST_START if fast_start else []) + list(args or [])
        self.log_path = Path(log_path) if log_path else None
        self.env = env
        self.lines: list[str] = []
        self.line_times: list[float] = []  # time.monotonic() each line reached this reader
        self.proc: subprocess.Popen[bytes] | None = None
        self._reader: threading.Thread | None = None
        self._lines_cv = threading.Condition()

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def argv(self) -> list[str]:
        return [sys.executable, "-u", "-m", "moe_tui.sim", "--host", self.host,
                "--port", str(self.port), *self.args]

    def start(self) -> SimProcess:
        env = dict(os.environ if self.env is None else self.env)
        env.setdefault("PYTHONUNBUFFERED", "1")
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True, env=env)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        return self

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        sink = open(self.log_path, "a", encoding="utf-8") if self.log_path else None
        try:
            for line in _updates(self.proc.stdout):
                with self._lines_cv:
                    self.lines.append(line)
                    self.line_times.append(time.monotonic())
                    self._lines_cv.notify_all()
                if sink:
                    sink.write(line + "\n")
                    sink.flush()
        finally:
            if sink:
                sink.close()
            with self._lines_cv:
                self._lines_cv.notify_all()

    def log_tail(self, n: int = 30) -> str:
        with self._lines_cv:
            return "\n".join(self.lines[-n:])

    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Block until /health_generate answers 200; raise SimStartError otherwise."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            code = self.returncode()
            if code is not None:
                raise SimStartError(f"emulator exited with {code} before ready:\n{self.log_tail()}")
            # The probe generates a token: under a slow model (--sim-time-scale below 1) that takes
            # seconds, so it may wait out the time left (the server itself gives up after 20 s).
            probe_s = min(max(2.0, deadline - time.monotonic()), 25.0)
            if http_status(self.base_url + "/health_generate", timeout=probe_s) == 200:
                return
            time.sleep(0.05)
        raise SimStartError(f"emulator not ready after {timeout:.0f} s:\n{self.log_tail()}")

    def wait_for_log(self, pattern: str, timeout: float = 10.0) -> str:
        """The first log line matching regex `pattern`, waiting up to `timeout` seconds."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        seen = 0
        with self._lines_cv:
            while True:
                for line in self.lines[seen:]:
                    if rx.search(line):
                        return line
                seen = len(self.lines)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"no log line matching {pattern!r}:\n{self.log_tail()}")
                self._lines_cv.wait(min(left, 0.2))

    def wait_exit(self, timeout: float = 10.0) -> int:
        """The exit code, once the process has exited and its last log lines are read (the reader
        reaches the pipe's end: on a busy machine it can trail the exit)."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        code = self.proc.wait(timeout)
        if self._reader is not None:
            self._reader.join(max(0.0, deadline - time.monotonic()) + 5.0)
        return code

    def stop(self, grace: float = 3.0) -> int | None:
        """SIGTERM the process group, then SIGKILL it after `grace` seconds."""
        if self.proc is None:
            return None
        pgid = self.proc.pid  # start_new_session: the group id is the child's pid
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                break
            try:
                self.proc.wait(wait)
                break
            except subprocess.TimeoutExpired:
                continue
        # The group may outlive its leader; make sure nothing is left.
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if self._reader is not None:
            self._reader.join(timeout=2.0)
        return self.proc.returncode

    def __enter__(self) -> SimProcess:
        if self.proc is None:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class SimOptions(TypedDict, total=False):
    """`SimProcess`'s keyword arguments, as `start_sim` passes them on."""

    host: str
    port: int | None
    fast_start: bool
    log_path: str | Path | None
    env: dict[str, str] | None


def start_sim(args: list[str] | None = None, *, ready: bool = True, timeout: float = 30.0,
              **kwargs: Unpack[SimOptions]) -> SimProcess:
    """Start an emulator (and by default wait until ready); stops it again if that fails."""
    sim = SimProcess(args, **kwargs).start()
    if ready:
        try:
            sim.wait_ready(timeout)
        except BaseException:
            sim.stop()
            raise
    return sim
