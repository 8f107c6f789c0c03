"""The one library of helpers that tests and benches share (benches put the repository root on
sys.path and import `tests.support.<module>` as the tests do).

- `tmux`: a tmux server of the tests' own, sessions in it, keys sent, the screen read and waited on.
- `agreement`: moe-tui's client and sglang.bench_serving on twin emulators, and their figures compared.
- `controller`: an in-process controller driven to an empty queue with a callback on every tick.
- `schemas`: an export checked against its published JSON Schema (docs/schemas).
- `pilot`: the App timed as a user feels it (a key to its painted screen: benches/tui_overhead.py,
  benches/scale.py).

The runner's and emulator's start/kill helpers live in tests/runner_support.py (issue #35 part 4's
other half).
"""
