"""A server over several nodes: the ranks' rendezvous at `--dist-init-addr`, the link between them
while they serve, and what the link costs a step.

SGLang 0.5.23 started with `--nnodes N --node-rank r --dist-init-addr HOST:PORT` joins one
torch.distributed group at `tcp://HOST:PORT` (distributed/bootstrap.py `_resolve_dist_init_method`,
`init_process_group` between the log lines "Init parallel begin." and "Init parallel ends."): the
first rank hosts the TCPStore and waits for the others, for `--dist-timeout` seconds (torch's
default process-group timeout, 30 minutes, when unset). The emulator does the same over a real TCP
connection per follower; the failures read as torch's own (`DistStoreError: Timed out after ...
seconds waiting for clients. J/N clients joined.` on the head, `DistNetworkError: The client socket
has timed out after ...ms while trying to connect to (HOST, PORT).` on a follower that found no head).

Once up, the connection stands for the NCCL communicator: a rank that dies or stops answering is
seen by the others as NCCL's `ncclRemoteError` inside a scheduler (`Scheduler hit an exception`),
then SGLang's kill of the whole tree (sim/failure.py). A rank that goes silent (a node that lost
power sends no FIN) is declared lost after `PEER_SILENCE_S`. On a clean stop the head tells the
followers (SGLang's rank 0 broadcasts a ShutdownReq to every TP rank) and they exit 0.

Non-zero ranks run no tokenizer and no API: after their schedulers are ready they start SGLang's
dummy health server on `--host:--port` (utils/common.py `launch_dummy_health_check_server`: `/ping`,
`/health`, `/health_generate`, all 200, and nothing else), and ignore SIGTERM, waiting for rank 0
(entrypoints/engine.py). A follower starts it once the head's port is open: on a test cluster
whose nodes share one address the head's port stays the head's, and the follower's bind fails as
SGLang's does there, logged, the rank going on.

The inter-node cost (`internode_ms`): expert parallelism over the nodes sends, in each MoE layer,
every token's hidden state to its top-k experts (dispatch, FP8: 1 byte an element) and the expert
outputs back (combine, BF16: 2 bytes); the share of experts on other nodes, (N-1)/N, crosses the
network. Each GPU has its own 400 Gb/s InfiniBand NIC (~50 GB/s, as DeepEP's measurements on H800 +
CX7 state), and each all-to-all pays a latency: 20 us, about what DeepEP's low-latency kernels add
going from EP8 in one node (77/114 us dispatch/combine at 128 tokens) to EP16 over two (118/195 us)
beyond the extra bytes. The emulated box's compute model (backends.toml) is unchanged: a two-node
profile is the same box plus this cost, so it is measurably slower and never faster.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from moe_tui.sim.failure import child_failed
from moe_tui.sim.output import log

if TYPE_CHECKING:
    from moe_tui.sim.engine import SimEngine

IB_BYTES_PER_S = 50e9  # one 400 Gb/s NIC per GPU
ALL_TO_ALL_LATENCY_S = 20e-6
DISPATCH_BYTES, COMBINE_BYTES = 1, 2  # FP8 dispatch, BF16 combine, per hidden element
DEFAULT_DIST_TIMEOUT_S = 1800  # torch.distributed's default_pg_timeout (30 min) when --dist-timeout is unset
HEARTBEAT_S = 1.0
PEER_SILENCE_S = 10.0  # a rank unheard of this long is lost (a dead node sends no FIN)
CONNECT_RETRY_S = 0.2
_BEATS: set[asyncio.Task[None]] = set()  # a follower's heartbeat (held here: the loop keeps only weak references)
NCCL_REMOTE_ERROR = (
    "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3356, "
    "remote process exited or there was a network error, NCCL version 2.27.3\n"
    "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely. (SIMULATED)")
NONZERO_SIGTERM = ("SIGTERM received on node_rank {rank}; waiting for the rank-0 ShutdownReq broadcast to stop the "
                   "schedulers.")


@dataclass(frozen=True)
class MoeShape:
    hidden: int = 6144  # GLM-5's (sim/models/GLM-5-NVFP4/config.json)
    moe_layers: int = 75
    top_k: int = 8


def moe_shape(model_path: str) -> MoeShape:
    """The emulated model's MoE shape, from its bundled config (GLM-5's when there is none)."""
    cfg_file = Path(__file__).with_name("models") / Path(model_path).name / "config.json"
    if not cfg_file.is_file():
        return MoeShape()
    cfg = json.loads(cfg_file.read_text(encoding="utf-8"))
    layers = int(cfg.get("num_hidden_layers", 78)) - int(cfg.get("first_k_dense_replace", 3))
    return MoeShape(int(cfg.get("hidden_size", 6144)), layers, int(cfg.get("num_experts_per_tok", 8)))


def internode_ms(tokens: int, nnodes: int, tp_size: int, shape: MoeShape) -> float:
    """Modelled ms one step's `tokens` spend crossing nodes (the module docstring says why these figures).
    Each of the tp_size GPUs dispatches its share of the tokens over its own NIC."""
    if nnodes <= 1 or tokens <= 0:
        return 0.0
    per_gpu = tokens / max(1, tp_size)
    remote = (nnodes - 1) / nnodes
    bytes_per_layer = per_gpu * shape.top_k * shape.hidden * (DISPATCH_BYTES + COMBINE_BYTES) * remote
    per_layer_s = 2 * ALL_TO_ALL_LATENCY_S + bytes_per_layer / IB_BYTES_PER_S
    return per_layer_s * shape.moe_layers * 1000.0


def split_addr(engine: SimEngine) -> tuple[str, int]:
    """--dist-init-addr's host and port. Unset, SGLang rendezvouses at this node's own host and a
    port of its own choosing (`_resolve_dist_init_method`): the nodes never meet and time out."""
    addr = engine.args.dist_init_addr
    if not addr:
        import socket

        with socket.socket() as s:
            s.bind((engine.args.host, 0))
            return engine.args.host, int(s.getsockname()[1])
    host, _, port = addr.rpartition(":")
    return host.strip("[]"), int(port)


@dataclass
class Peers:
    """The head's links to its followers (rank -> stream pair), watched while the server lives."""

    links: dict[int, tuple[asyncio.StreamReader, asyncio.StreamWriter]] = field(default_factory=dict)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    server: asyncio.Server | None = None
    closing: bool = False

    def send(self, word: str) -> None:
        for _, writer in self.links.values():
            with contextlib.suppress(Exception):
                writer.write(word.encode() + b"\n")

    def shutdown(self) -> None:
        """The ShutdownReq broadcast: followers stop their schedulers and exit 0."""
        self.closing = True
        self.send("shutdown")
        for task in self.tasks:
            task.cancel()
        for _, writer in self.links.values():
            with contextlib.suppress(Exception):
                writer.close()
        if self.server is not None:
            self.server.close()


def _timeout_s(engine: SimEngine) -> float:
    return float(getattr(engine.args, "dist_timeout", None) or DEFAULT_DIST_TIMEOUT_S)


async def host_rendezvous(engine: SimEngine) -> Peers:
    """Rank 0: host the store at --dist-init-addr and wait for every other rank; the links."""
    a = engine.args
    host, port = split_addr(engine)
    peers = Peers()
    joined: asyncio.Queue[tuple[int, asyncio.StreamReader, asyncio.StreamWriter]] = asyncio.Queue()

    async def on_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(Exception):
            hello = json.loads((await asyncio.wait_for(reader.readline(), 10)).decode())
            await joined.put((int(hello["rank"]), reader, writer))
            return
        writer.close()

    try:
        peers.server = await asyncio.start_server(on_client, host, port, reuse_address=True)
    except OSError as exc:
        child_failed(engine, f"torch.distributed.DistNetworkError: The server socket has failed to listen on any local "
                             f"network address. port: {port}, useIpv6: false, code: -98, name: EADDRINUSE, message: "
                             f"{exc.strerror or exc} (SIMULATED)")
    timeout = _timeout_s(engine)
    deadline = time.monotonic() + timeout
    while len(peers.links) < a.nnodes - 1:
        try:
            rank, reader, writer = await asyncio.wait_for(joined.get(), max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            child_failed(engine, f"torch.distributed.DistStoreError: Timed out after {int(timeout) + 1} seconds waiting "
                                 f"for clients. {len(peers.links) + 1}/{a.nnodes} clients joined. (SIMULATED)")
        peers.links[rank] = (reader, writer)
    peers.send("go")
    for rank, (reader, _) in peers.links.items():
        peers.tasks.append(asyncio.get_running_loop().create_task(_watch(engine, reader, rank, peers)))
    peers.tasks.append(asyncio.get_running_loop().create_task(_beat(peers)))
    return peers


async def _beat(peers: Peers) -> None:
    while True:
        peers.send("hb")
        await asyncio.sleep(HEARTBEAT_S)


async def _watch(engine: SimEngine, reader: asyncio.StreamReader, rank: int, peers: Peers | None,
                 on_word: Any = None) -> None:
    """Read the link until it drops or goes silent: then the rank is lost, as NCCL reports it
    (`on_word` answering True ends the watch: the head's shutdown)."""
    while True:
        try:
            line = await asyncio.wait_for(reader.readline(), PEER_SILENCE_S)
        except (TimeoutError, ConnectionError, OSError):
            line = b""
        if peers is not None and peers.closing:
            return
        if not line:
            child_failed(engine, NCCL_REMOTE_ERROR, running=engine.state != "loading")
        word = line.decode(errors="replace").strip()
        if on_word is not None and await on_word(word):
            return


async def _beat_one(writer: asyncio.StreamWriter) -> None:
    while not writer.is_closing():
        writer.write(b"hb\n")
        await asyncio.sleep(HEARTBEAT_S)


async def join_rendezvous(engine: SimEngine) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Rank r > 0: connect to the head's store (retrying, as torch's client does) and wait for all ranks."""
    a = engine.args
    host, port = split_addr(engine)
    timeout = _timeout_s(engine)
    deadline = time.monotonic() + timeout
    while True:
        try:
            reader, writer = await asyncio.open_connection(host, port)
            writer.write(json.dumps({"rank": a.node_rank, "pid": os.getpid()}).encode() + b"\n")
            await writer.drain()
            left = max(0.1, deadline - time.monotonic())
            if (await asyncio.wait_for(reader.readline(), left)).strip() == b"go":
                _BEATS.add(beat := asyncio.get_running_loop().create_task(_beat_one(writer)))
                beat.add_done_callback(_BEATS.discard)
                return reader, writer
            writer.close()
        except (ConnectionError, OSError, TimeoutError):
            pass
        if time.monotonic() >= deadline:
            child_failed(engine, f"torch.distributed.DistNetworkError: The client socket has timed out after "
                                 f"{int(timeout * 1000)}ms while trying to connect to ({host}, {port}). (SIMULATED)")
        await asyncio.sleep(CONNECT_RETRY_S)


async def serve_follower(engine: SimEngine, follower_startup: Any) -> int:
    """A non-zero rank: its schedulers, the rendezvous and the load (`follower_startup`, sim/startup.py),
    the dummy health server, then wait for the head's shutdown."""
    from aiohttp import web

    a = engine.args
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, lambda: log(NONZERO_SIGTERM.format(rank=a.node_rank), level="WARNING"))
    reader, writer = await follower_startup(engine, join_rendezvous)
    done: asyncio.Future[int] = loop.create_future()
    runner: web.AppRunner | None = None

    async def dummy_health() -> None:
        nonlocal runner
        async def ok(request: web.Request) -> web.Response:
            return web.Response(status=200)

        app = web.Application()
        for path in ("/ping", "/health", "/health_generate"):
            app.router.add_get(path, ok)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        try:
            await web.TCPSite(runner, a.host, a.port).start()
        except OSError as exc:  # SGLang's thread logs it and the rank goes on
            log(f"Dummy health check server failed to start: {exc}", level="ERROR")

    async def on_word(word: str) -> bool:
        if word == "ready":
            await dummy_health()
        elif word == "shutdown":
            if not done.done():
                done.set_result(0)
            return True
        return False

    watch = loop.create_task(_watch(engine, reader, a.node_rank, None, on_word))
    try:
        return await done
    finally:
        watch.cancel()
        writer.close()
        await loop.run_in_executor(None, engine.children.stop)
        if runner is not None:
            await runner.cleanup()
