"""The SGLang emulator: a real HTTP server process that behaves like SGLang serving a MoE model.

It accepts `python -m sglang.launch_server`'s flags (`args`), speaks SGLang's HTTP API (`server`),
runs a continuous-batching engine whose step time follows a per-backend performance model kept
as data (`backends.toml`, `model`), prints SGLang-like startup logs, and can inject faults
(crash, hang, slow start, silent backend fallback, JIT stalls, errors, cut streams).
Everything it reports is marked SIMULATED. `launch` starts it as a subprocess for tests and the
demo; `loadgen` is a tiny streaming client used to calibrate and test it.

Run it with `python -m moe_tui.sim ARGS...` or `moe-tui sim ARGS...`.

Service layer: may import the core (spec, metrics, judgement, events); never the controller,
runner, control package or Textual.
"""

SIM_VERSION = "0.5.23-sim"
