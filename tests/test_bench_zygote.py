"""The benchmark client process forked by the zygote (`moe_tui.bench.zygote`): what the runner gives each
queue item. One process serves the warmup pass and the timed run, a stop ends one run and not the
process, it is known for a benchmark child (orphan clean-up), and a zygote that cannot start leaves
the client exec'd instead."""

from __future__ import annotations

import asyncio

import psutil
import pytest

from moe_tui.bench.process import ClientProcess
from moe_tui.bench.zygote import ForkedClient, Zygote
from moe_tui.run.orphans import describe
from moe_tui.sim.launch import start_sim
from moe_tui.spec import BenchmarkSpec
from moe_tui.store.queue import warmup_spec

pytestmark = pytest.mark.integration  # starts real processes

SPEC = BenchmarkSpec(num_prompts=6, input_len=32, output_len=8, max_concurrency=2)


def test_one_forked_client_serves_warmup_and_timed_run_and_survives_a_stop():
    async def scenario(url: str) -> None:
        zygote = Zygote()
        client = ClientProcess(zygote=zygote)
        try:
            await client.start()
            proc = client.proc
            assert isinstance(proc, ForkedClient)
            assert zygote.proc is not None and psutil.Process(proc.pid).ppid() == zygote.proc.pid
            assert describe(psutil.Process(proc.pid)).startswith("benchmark child")
            warm = await client.run(warmup_spec(SPEC), url, vocab_size=1000)
            timed = await client.run(SPEC, url, vocab_size=1000)
            assert (warm.status, timed.status) == ("complete", "complete"), (warm.error, timed.error)
            assert [warm.selfcheck["client_process_run"], timed.selfcheck["client_process_run"]] == [1, 2]
            assert timed.selfcheck["gc_timed"] == "frozen" and len(timed.requests) == SPEC.num_prompts
            # A stop ends that run with what it measured; the process stays for the next.
            stop = asyncio.Event()
            long = asyncio.create_task(client.run(SPEC.replace(num_prompts=2000, warmup_requests=0), url,
                                                  vocab_size=1000, stop=stop, warmup_pause=0))
            await asyncio.sleep(1.0)
            stop.set()
            stopped = await long
            assert stopped.status in ("incomplete", "failed") and "stopped" in stopped.error, stopped.error
            again = await client.run(SPEC, url, vocab_size=1000)
            assert again.status == "complete" and again.selfcheck["client_process_run"] == 4
            assert client.proc is proc and client.starts == 1
        finally:
            await client.close()
            await zygote.close()
        await proc.wait()  # ended at the end of its requests
        assert zygote.proc is None

    with start_sim(["--sim-zero-delay"]) as sim:
        asyncio.run(scenario(sim.base_url))


def test_a_zygote_that_cannot_start_leaves_the_client_execd():
    async def scenario(url: str) -> None:
        client = ClientProcess(zygote=Zygote(python="/nonexistent/python"))
        try:
            result = await client.run(SPEC, url, vocab_size=1000)
            assert result.status == "complete", result.error
            assert isinstance(client.proc, asyncio.subprocess.Process) and client.zygote is None
        finally:
            await client.close()

    with start_sim(["--sim-zero-delay"]) as sim:
        asyncio.run(scenario(sim.base_url))
