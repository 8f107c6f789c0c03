"""The benchmark engine: moe-tui's native load generator and the glue to SGLang's own client.

- `workload`: prompts, lengths and arrivals of a BenchmarkSpec (sglang's random-ids, seeded).
- `client`: one streamed /generate or /v1/completions request, timed like bench_serving.
- `transport`: the run's aiohttp session and its pre-opened connection pool.
- `live`: live figures and the client's self-checks (event-loop lag, CPU, achieved rate).
- `engine`: `run_benchmark` (in this process); `result`: `BenchResult` and the request records.
- `worker`: the client process (`python -m moe_tui.bench.worker`), benchmarks one after another;
  `zygote`: forks such processes from one that did the imports once (the runner's way).
- `process`: `ClientProcess` and `run_benchmark_subprocess` (the load generator in its own
  process; for the runner and UIs).
- `report`: bench_serving's printed summary block and JSONL record.
- `sglang_adapter`: run sglang.bench_serving itself; `bench_serving_record`: read its records.

Service layer. May import the core (spec, metrics, judgement, events) and the standard library
and aiohttp/numpy; never the controller, runner, control package or Textual (import contracts in
pyproject.toml). Import the submodules directly; this package file stays light.
"""
