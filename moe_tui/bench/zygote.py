"""Benchmark client processes forked from one that has done the imports: they start without them.

A client process (`moe_tui.bench.worker`) spends ~0.3 s of CPU on its imports (aiohttp, numpy; the
prompts need numpy's seeded generator to match sglang.bench_serving's) before its first request
(benches/client_start.py). The runner starts one client per queue item, so it keeps one zygote:
`python -m moe_tui.bench.zygote FD` imports the engine once, then forks a client for every request
that arrives on the Unix socket FD. A request is one byte with three file descriptors attached
(SCM_RIGHTS): the client's stdin, stdout and stderr. The zygote answers the client's pid (4 bytes).
The client (a child of the zygote, in a session of its own) runs `worker`'s loop on those
descriptors exactly as an exec'd worker does; its command line is the zygote's, which names
`moe_tui.bench`, so `moe_tui.run.orphans` still knows it for a benchmark child.

The zygote does nothing else: no event loop, no thread of its own, stdin/stdout at /dev/null. It
reaps its children (SIGCHLD) and exits at the end of its socket (the runner closed it, or died),
once the last of its clients has ended.

`Zygote` (the runner's side) starts it and hands out `ForkedClient`s, which `process.ClientProcess`
drives like an exec'd child; anything failing there falls back to exec.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import signal
import socket
import struct
import sys
import time
import traceback

PID = struct.Struct("!i")


# -- the zygote -------------------------------------------------------------------------------------
_clients: set[int] = set()  # forked clients not reaped yet


def _reap(*_: object) -> None:
    with contextlib.suppress(ChildProcessError):
        while (pid := os.waitpid(-1, os.WNOHANG)[0]) > 0:
            _clients.discard(pid)


def _client(fds: list[int]) -> int:
    """In the forked child: the three descriptors as stdin/stdout/stderr, a session of its own, the
    worker's loop."""
    os.setsid()
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    from moe_tui.bench.worker import main

    return main()


def serve(sock: socket.socket) -> None:
    while True:
        try:
            message, fds, _flags, _addr = socket.recv_fds(sock, 1, 3)
        except OSError:
            return
        if not message:
            _outlive_clients()  # the runner closed its end (or died)
            return
        if len(fds) != 3:
            for fd in fds:
                os.close(fd)
            with contextlib.suppress(OSError):
                sock.sendall(PID.pack(-1))
            continue
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                sock.close()
                code = _client(fds)
            except BaseException:
                traceback.print_exc()
            finally:
                os._exit(code)
        _clients.add(pid)
        for fd in fds:
            os.close(fd)
        try:
            sock.sendall(PID.pack(pid))
        except OSError:  # the runner died while asking: its client runs the request it was handed
            _outlive_clients()
            return


def _outlive_clients() -> None:
    """Stay until the last client has ended: one whose runner died ends at the end of its run (its
    stdin closed) or is stopped with the rest of what that runner left (`moe_tui.run.orphans`)."""
    while _clients:
        time.sleep(0.1)
        _reap()
        for pid in list(_clients):  # one that ended before it was added here was reaped unseen
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                _clients.discard(pid)


def main(argv: list[str]) -> int:
    sock = socket.socket(fileno=int(argv[0]))
    signal.signal(signal.SIGCHLD, _reap)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the runner ends it by closing the socket
    import moe_tui.bench.engine  # noqa: F401  (the imports every client would make: once, here)

    gc.collect()
    gc.freeze()  # what every client shares stays out of their collections (and copy-on-write intact)
    serve(sock)
    return 0


# -- the runner's side ----------------------------------------------------------------------------
class ForkedClient:
    """A forked client, driven like an `asyncio.subprocess.Process` by `process.ClientProcess`: its
    pid, stdin (writer), stdout and stderr (readers). Not this process's child: its exit code is
    the zygote's to reap, so `returncode` is -1 once it is gone, `wait()` polls for that."""

    def __init__(self, pid: int, stdin: asyncio.StreamWriter, stdout: asyncio.StreamReader,
                 stderr: asyncio.StreamReader) -> None:
        self.pid, self.stdin, self.stdout, self.stderr = pid, stdin, stdout, stderr
        self._gone = False

    @property
    def returncode(self) -> int | None:
        if not self._gone:
            try:
                os.kill(self.pid, 0)
            except ProcessLookupError:
                self._gone = True
            except PermissionError:
                pass
        return -1 if self._gone else None

    async def wait(self) -> int:
        while self.returncode is None:
            await asyncio.sleep(0.05)
        return -1


class Zygote:
    """The runner's zygote: `start()` once, `spawn()` a client per item, `close()` at the end."""

    def __init__(self, python: str | None = None) -> None:
        self.python = python or sys.executable
        self.proc: asyncio.subprocess.Process | None = None
        self.sock: socket.socket | None = None
        self.spawned = 0

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.returncode is None and self.sock is not None

    async def start(self) -> None:
        if self.alive:
            return
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            env = {**os.environ, "PYTHONUNBUFFERED": "1"}
            self.proc = await asyncio.create_subprocess_exec(
                self.python, "-m", "moe_tui.bench.zygote", str(theirs.fileno()), pass_fds=(theirs.fileno(),),
                stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL, start_new_session=True, env=env)
        finally:
            theirs.close()
        ours.setblocking(False)
        self.sock = ours

    async def spawn(self, timeout_s: float = 30.0, first: bytes = b"") -> ForkedClient:
        """A new client process; OSError or TimeoutError when the zygote cannot make one. `first`
        (its first request line) is in its stdin before the zygote is even asked: a runner that
        dies while the zygote is still importing leaves a client that runs it, as an exec'd one would."""
        await self.start()
        assert self.sock is not None
        loop = asyncio.get_running_loop()
        (in_r, in_w), (out_r, out_w), (err_r, err_w) = os.pipe(), os.pipe(), os.pipe()
        try:
            if first:
                os.write(in_w, first)  # one request line: far below a pipe's buffer
            socket.send_fds(self.sock, [b"f"], [in_r, out_w, err_w])
        except BaseException:
            for fd in (in_r, in_w, out_r, out_w, err_r, err_w):
                os.close(fd)
            raise
        for fd in (in_r, out_w, err_w):
            os.close(fd)
        try:
            answer = b""
            deadline = time.monotonic() + timeout_s
            while len(answer) < PID.size:
                piece = await asyncio.wait_for(loop.sock_recv(self.sock, PID.size - len(answer)),
                                               max(0.1, deadline - time.monotonic()))
                if not piece:
                    raise ConnectionResetError("the zygote closed its socket")
                answer += piece
            (pid,) = PID.unpack(answer)
            if pid <= 0:
                raise OSError("the zygote could not fork a client")
            stdout = await _reader(loop, out_r)
            stderr = await _reader(loop, err_r)
            transport, protocol = await loop.connect_write_pipe(
                lambda: asyncio.StreamReaderProtocol(asyncio.StreamReader()), os.fdopen(in_w, "wb", buffering=0))
        except BaseException:
            for fd in (in_w, out_r, err_r):
                with contextlib.suppress(OSError):
                    os.close(fd)
            await self.close()
            raise
        self.spawned += 1
        return ForkedClient(pid, asyncio.StreamWriter(transport, protocol, None, loop), stdout, stderr)

    async def close(self) -> None:
        sock, self.sock = self.sock, None
        if sock is not None:
            sock.close()  # the zygote exits at the end of its socket
        proc, self.proc = self.proc, None
        if proc is not None and proc.returncode is None:
            try:
                await asyncio.wait_for(proc.wait(), 5.0)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()


async def _reader(loop: asyncio.AbstractEventLoop, fd: int) -> asyncio.StreamReader:
    reader = asyncio.StreamReader(limit=1 << 26)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(fd, "rb", buffering=0))
    return reader


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
