"""The emulator's HTTP side: SGLang's routes on aiohttp over a `SimEngine`, and the process's
serve/shutdown loop.

Routes: `/generate` (native, streaming or not), `/v1/completions` (OpenAI, streaming or not),
`/health`, `/health_generate`, `/v1/models`, `/model_info`, `/server_info`, `/flush_cache`,
`/metrics` (with `--enable-metrics`), and `/sim/gpus`: the simulated GPUs' telemetry, which only
the emulator has (the control room reads it when no NVIDIA driver is present). Chunk JSON is
spliced from the text bank's pre-escaped text so one process can stream many thousands of chunks
per second. Request bodies are parsed and refused by `moe_tui.sim.requests` (SGLang's grammar).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import signal
import time
import uuid
from collections.abc import Awaitable, Callable

from aiohttp import web

from moe_tui.sim.auth import install_api_key
from moe_tui.sim.engine import TOKENIZER_DIR, ReqState, SimEngine
from moe_tui.sim.metrics_text import metrics_text
from moe_tui.sim.output import log
from moe_tui.sim.requests import BadRequest, RequestGrammar, json_body, native_error, openai_error
from moe_tui.sim.server_info import server_info
from moe_tui.sim.startup import startup

HEALTH_CHECK_TIMEOUT_S = 20.0


# (request, tokens so far, final?, text length sent) -> (the SSE bytes, the new text length sent)
ChunkMaker = Callable[[ReqState, int, bool, int], Awaitable[tuple[bytes, int]]]


class SimServer:
    """SGLang's HTTP API over one engine; `serve()` runs the process until a signal stops it."""

    def __init__(self, args: argparse.Namespace, argv: list[str]) -> None:
        self.e = SimEngine(args, argv)
        self.requests = RequestGrammar(self.e)
        from moe_tui.sim.expert_load import SimExpertRecorder
        from moe_tui.sim.profiler import SimProfiler

        self.profiler, self.expert = SimProfiler(self.e), SimExpertRecorder(self.e)
        self.e.step_hooks += [self.profiler.on_step, self.expert.on_step]
        self._stop: asyncio.Future[int] | None = None  # the process's exit status
        self._tasks: list[asyncio.Task[None]] = []

    def _not_ready(self) -> str | None:
        if self.e.state == "loading":
            return "The server is not ready yet (SIMULATED: still starting up)."
        if self.e.state == "draining":
            return "The server is shutting down."
        return None

    # -- generation routes -----------------------------------------------------------------

    def _native_chunk(self, st: ReqState, n: int, final: bool) -> str:
        seq = st.seq
        finish = f'{{"type":"length","length":{n}}}' if final else "null"
        e2e = f',"e2e_latency":{time.monotonic() - st.started:.6f}' if final else ""
        return (f'{{"text":"{self.e.bank.text_json(st.text_offset, n)}","output_ids":['
                f'{self.e.bank.ids_csv(st.text_offset, n)}],"meta_info":{{"id":"{seq.rid}",'
                f'"finish_reason":{finish},"prompt_tokens":{seq.prompt_len},'
                f'"weight_version":"default","completion_tokens":{n},"cached_tokens":{seq.cached_tokens}{e2e}}}}}')

    async def handle_generate(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await json_body(request)
            prompt_ids, max_new, stream, rid = self.requests.parse_generate(body)
        except BadRequest as exc:
            return native_error(str(exc))
        reason = self._not_ready()
        if reason:
            return native_error(reason, 503)
        if self.e.error_draw():
            return native_error("Internal server error (SIMULATED: --sim-error-rate)", 500)
        self.e.requests_started += 1
        st = self.e.submit(prompt_ids, max_new, rid, self.e.requests_started)
        if not stream:
            return await self._generate_whole(request, st)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                           "Cache-Control": "no-cache"})
        await resp.prepare(request)
        return await self._stream(request, resp, st, self._native_stream_chunks)

    async def _generate_whole(self, request: web.Request, st: ReqState) -> web.Response:
        try:
            while not st.finished:
                await st.event.wait()
                st.event.clear()
                if st.seq.tokens_at(self.e.completed_step) >= 1:
                    self.e.maybe_crash(st)
        except asyncio.CancelledError:
            self.e.abort(st)
            raise
        n = st.seq.max_new_tokens
        return web.Response(text=self._native_chunk(st, n, True),
                            content_type="application/json")

    async def _native_stream_chunks(self, st: ReqState, n: int, final: bool,
                                    sent_text_len: int) -> tuple[bytes, int]:
        return ("data: " + self._native_chunk(st, n, final) + "\n\n").encode(), 0

    async def _stream(self, request: web.Request, resp: web.StreamResponse, st: ReqState,
                      make_chunk: ChunkMaker, tail: bytes = b"") -> web.StreamResponse:
        cut = self.e.args.sim_cut_stream_after_tokens
        hang = self.e.args.sim_hang_after_tokens
        sent = 0
        text_len = 0
        crashed_checked = False
        try:
            while True:
                await st.event.wait()
                st.event.clear()
                final = st.finished
                n = st.seq.max_new_tokens if final else st.seq.tokens_at(self.e.completed_step)
                if cut is not None and n > cut and not final:
                    n = max(cut, sent)
                if hang is not None and n > hang and not final:
                    n = max(hang, sent)
                if n > sent or final:
                    chunk, text_len = await make_chunk(st, n, final, text_len)
                    await resp.write(chunk)
                    sent = n
                if not crashed_checked and sent >= 1:
                    crashed_checked = True
                    self.e.maybe_crash(st)
                if cut is not None and sent >= cut and not final:
                    self.e.abort(st)
                    log(f"SIMULATED stream cut after {sent} tokens (rid={st.seq.rid})", self.e.prefix)
                    if request.transport is not None:
                        request.transport.close()
                    return resp
                if hang is not None and sent >= hang and not final:
                    self.e.abort(st)
                    log(f"SIMULATED stream hang after {sent} tokens (rid={st.seq.rid})", self.e.prefix)
                    while request.transport is not None and not request.transport.is_closing():
                        await asyncio.sleep(0.5)
                    return resp
                if final:
                    break
            if tail:
                await resp.write(tail)
            await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
        except (ConnectionError, asyncio.CancelledError):
            self.e.abort(st)
            raise
        return resp

    async def handle_completions(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await json_body(request)
            prompt_ids, max_new, stream, (include_usage, continuous_usage) = self.requests.parse_completions(body)
        except BadRequest as exc:
            return openai_error(str(exc))
        reason = self._not_ready()
        if reason:
            return openai_error(reason, 503)
        if self.e.error_draw():
            return openai_error("Internal server error (SIMULATED: --sim-error-rate)", 500)
        self.e.requests_started += 1
        rid = uuid.uuid4().hex
        st = self.e.submit(prompt_ids, max_new, rid, self.e.requests_started)
        prompt_len = len(prompt_ids)
        created = int(time.time())
        model = self.e.served_model_name
        head = {"id": rid, "object": "text_completion", "created": created, "model": model}
        if not stream:
            await self._generate_whole(request, st)
            text = json.loads(f'"{self.e.bank.text_json(st.text_offset, max_new)}"')
            return web.json_response(head | {
                "choices": [{"index": 0, "text": text, "logprobs": None,
                             "finish_reason": "length", "matched_stop": None}],
                "usage": {"prompt_tokens": prompt_len, "completion_tokens": max_new,
                          "total_tokens": prompt_len + max_new, "prompt_tokens_details": None},
            })
        head_json = json.dumps(head)[:-1]

        async def chunk(st: ReqState, n: int, final: bool, sent_len: int) -> tuple[bytes, int]:
            full = self.e.bank.text_json(st.text_offset, n)
            finish = '"length"' if final else "null"
            # stream_options.continuous_usage_stats: cumulative usage on every chunk (serving_completions.py)
            usage = (f'{{"prompt_tokens": {prompt_len}, "total_tokens": {prompt_len + n}, "completion_tokens": {n}, '
                     '"prompt_tokens_details": null}') if continuous_usage else "null"
            data = (f'{head_json}, "choices": [{{"index": 0, "text": "{full[sent_len:]}", '
                    f'"logprobs": null, "finish_reason": {finish}, "matched_stop": null}}], '
                    f'"usage": {usage}}}')
            return ("data: " + data + "\n\n").encode(), len(full)

        tail = b""
        if include_usage:
            usage = {"prompt_tokens": prompt_len, "completion_tokens": max_new,
                     "total_tokens": prompt_len + max_new, "prompt_tokens_details": None}
            tail = ("data: " + json.dumps(head | {"choices": [], "usage": usage}) + "\n\n").encode()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                           "Cache-Control": "no-cache"})
        await resp.prepare(request)
        return await self._stream(request, resp, st, chunk, tail)

    # -- status routes ---------------------------------------------------------------------

    async def handle_health(self, request: web.Request) -> web.Response:
        if self._not_ready():
            return web.Response(status=503)
        st = self.e.submit([0], 1, "HEALTH_CHECK_" + uuid.uuid4().hex, 0)
        try:
            await asyncio.wait_for(self._wait_finished(st), HEALTH_CHECK_TIMEOUT_S)
        except TimeoutError:
            self.e.abort(st)
            log(f"Health check failed. Server couldn't get a response from detokenizer for last "
                f"{HEALTH_CHECK_TIMEOUT_S:.0f} seconds.", level="ERROR")
            return web.Response(status=503)
        return web.Response(status=200)

    @staticmethod
    async def _wait_finished(st: ReqState) -> None:
        while not st.finished:
            await st.event.wait()
            st.event.clear()

    async def handle_models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{
            "id": self.e.served_model_name, "object": "model", "created": int(time.time()),
            "owned_by": "sglang", "root": self.e.args.model_path,
            "max_model_len": self.e.context_length}]})

    async def handle_model_info(self, request: web.Request) -> web.Response:
        return web.json_response({
            "model_path": self.e.args.model_path,
            "tokenizer_path": str(TOKENIZER_DIR),
            "served_model_name": self.e.served_model_name,
            "architectures": ["GlmMoeDsaForCausalLM"],
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": "default",
            "simulated": True,
        })

    async def handle_server_info(self, request: web.Request) -> web.Response:
        return web.json_response(server_info(self.e))

    async def handle_flush_cache(self, request: web.Request) -> web.Response:
        timeout = request.query.get("timeout")
        try:
            wait_s = float(timeout) if timeout is not None else 0.0
        except ValueError:
            return web.Response(status=400, text=f"Invalid timeout {timeout!r}\n")
        deadline = time.monotonic() + wait_s
        while self.e.sched.has_work() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        ok = not self.e.sched.has_work()
        if ok:
            self.e.flush_cache()
            log("Cache flushed successfully!", self.e.prefix)
        return web.Response(
            status=200 if ok else 400,
            text="Cache flushed.\nPlease check backend logs for more details. (When there are "
                 "running or waiting requests, the operation will not be performed.)\n")

    async def handle_metrics(self, request: web.Request) -> web.Response:
        return web.Response(text=metrics_text(self.e), content_type="text/plain", charset="utf-8")


    async def handle_sim_time_scale(self, request: web.Request) -> web.Response:
        """moe-tui's own (not SGLang's): set the clock's time scale between runs. Refused while
        requests run (a run at two speeds measures neither); /server_info's sim settings say it."""
        try:
            body = await json_body(request)
            scale = float(body.get("time_scale"))  # type: ignore[arg-type]
        except (BadRequest, TypeError, ValueError) as exc:
            return web.Response(status=400, text=f"time_scale: a positive number is needed ({exc})\n")
        if not 0 < scale < float("inf"):
            return web.Response(status=400, text=f"time_scale must be > 0, got {scale!r}\n")
        if self.e.sched.has_work():
            return web.Response(status=409, text="requests are running; the time scale changes between runs\n")
        self.e.set_time_scale(scale)
        log(f"SIMULATED clock: time scale {scale:g} (launched at {self.e.launch_time_scale:g})", self.e.prefix)
        return web.json_response({"time_scale": scale, "launch_time_scale": self.e.launch_time_scale})

    async def handle_sim_gpus(self, request: web.Request) -> web.Response:
        """What NVML would report for this server's GPUs (GpuSample dicts), marked simulated."""
        return web.json_response({
            "simulated": True, "server_pid": os.getpid(), "driver_version": "sim",
            "cuda_driver_version": None, "gpus": self.e.gpu_samples(),
        })

    # -- app -------------------------------------------------------------------------------

    def build_app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        from moe_tui.sim.outputs import greedy_outputs_middleware  # /generate with return_logprob

        app.middlewares.append(greedy_outputs_middleware(self.e.args, self._not_ready))
        install_api_key(app, getattr(self.e.args, "api_key", None),  # 401 without the key, as SGLang
                        getattr(self.e.args, "admin_api_key", None))
        r = app.router
        r.add_route("POST", "/generate", self.handle_generate)
        r.add_route("PUT", "/generate", self.handle_generate)
        r.add_post("/v1/completions", self.handle_completions)
        r.add_get("/health", self.handle_health)
        r.add_get("/health_generate", self.handle_health)
        r.add_get("/v1/models", self.handle_models)
        r.add_get("/model_info", self.handle_model_info)
        r.add_get("/get_model_info", self.handle_model_info)
        r.add_get("/server_info", self.handle_server_info)
        r.add_get("/get_server_info", self.handle_server_info)
        r.add_route("*", "/flush_cache", self.handle_flush_cache)
        r.add_get("/sim/gpus", self.handle_sim_gpus)
        r.add_post("/sim/time_scale", self.handle_sim_time_scale)
        if self.e.args.enable_metrics:
            r.add_get("/metrics", self.handle_metrics)
        from moe_tui.sim.profiler import add_routes

        add_routes(app, self.profiler, self.expert)
        return app

    async def serve(self) -> int:
        # The engine's tables (the text bank: three lists of 131k entries) live as long as the process:
        # out of every later collection, which would otherwise walk them each time.
        gc.freeze()
        loop = asyncio.get_running_loop()
        self.e._wake = asyncio.Event()
        self._stop = loop.create_future()
        runner = web.AppRunner(self.build_app(), access_log=None, handle_signals=False)
        await runner.setup()

        async def open_port() -> bool:  # startup calls it once the engine is up (http_server.py)
            try:
                await web.TCPSite(runner, self.e.args.host, self.e.args.port, backlog=4096, reuse_address=True).start()
            except OSError as exc:
                log(f"Failed to bind {self.e.args.host}:{self.e.args.port}: {exc}", level="ERROR")
                if self._stop is not None and not self._stop.done():
                    self._stop.set_result(1)
                return False
            return True
        self.e.open_port = open_port
        for sig, how in ((signal.SIGTERM, "term"), (signal.SIGINT, "int")):
            loop.add_signal_handler(sig, self._on_signal, how)
        self._tasks = [asyncio.create_task(self.e.engine_loop()), asyncio.create_task(startup(self.e))]
        try:
            code = await self._stop
        finally:
            for task in self._tasks + ([self.e.fault_task] if self.e.fault_task else []):
                task.cancel()
            if self.e.peers is not None:  # rank 0's ShutdownReq to the other nodes' ranks
                self.e.peers.shutdown()
            await loop.run_in_executor(None, self.e.children.stop)
            await runner.cleanup()
        return code

    def _on_signal(self, how: str) -> None:
        assert self._stop is not None
        if self._stop.done():
            return
        if how == "int":
            log("Received SIGINT, exiting.")
            self._stop.set_result(0)
            return
        log("Received sigterm, shutting down gracefully (draining in-flight requests).")
        self.e.state = "draining"
        asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        deadline = time.monotonic() + 5.0
        while self.e.sched.has_work() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert self._stop is not None
        if not self._stop.done():
            self._stop.set_result(0)
