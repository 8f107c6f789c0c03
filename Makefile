# The README's two commands live here: `make demo` and `make test`. Both build .venv from nothing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: demo test check unit lint lint-code parser-check install bench screenshots sglang-client hta envs durations clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/moe-tui demo

# SGLang's own benchmark client, unmodified, in an environment of its own (see tools/sglang_client/).
sglang-client:
	$(PYTHON) tools/sglang_client/build_env.py

# Holistic Trace Analysis, test-only, in an environment of its own (its pins are not ours): built once,
# rebuilt only when tools/hta/requirements.txt changes (the stamp is a copy of it). Not byte-compiled by
# pip (5,100 files, plotly's and pandas' most of them: 9 s of CPU); importing HTA with bytecode writing on
# compiles the 1,500 a run imports (a run imports nothing more: tests/test_hta_agreement).
HTA_STAMP := .venv-hta/.hta-stamp
$(HTA_STAMP): tools/hta/requirements.txt
	rm -rf .venv-hta
	$(PYTHON) -m venv .venv-hta
	.venv-hta/bin/python -m pip install --quiet --no-compile --no-deps -r tools/hta/requirements.txt
	env -u PYTHONDONTWRITEBYTECODE .venv-hta/bin/python -c "from hta.trace_analysis import TraceAnalysis"
	cp tools/hta/requirements.txt $(HTA_STAMP)

hta: $(HTA_STAMP)

# The two environments are built side by side (each is mostly waiting on downloads and unpacking).
envs:
	$(MAKE) --no-print-directory -j2 $(STAMP) sglang-client hta

# Layers that fail the build: style and bugs (ruff), types (mypy --strict, the whole package), and the
# import contracts in pyproject.toml (import-linter), then SGLang's own parser over the profiles.
# `make test` runs them first.
lint: lint-code parser-check

lint-code: $(STAMP)
	$(VENV)/bin/ruff check moe_tui tests benches tools
	$(VENV)/bin/mypy
	PYTHONPATH=$(CURDIR) $(VENV)/bin/lint-imports

# SGLang 0.5.23's own parser over every shipped profile (torch stubbed; ~2 s); skipped, with a
# note, until `make sglang-client` has built the light env.
parser-check:
	@if [ -x .venv-sglang-client/bin/python ]; then .venv-sglang-client/bin/python tools/sglang_parser/check.py; \
	else echo "note: no .venv-sglang-client: SGLang parser check skipped (make sglang-client)"; fi

# Tests in three tiers (tests/conftest.py): unit (pure code), ui (in-process Textual pilots and
# snapshots), integration (real processes: emulator, runner, CLI, SGLang's client, tmux). Parallel
# workers (pytest-xdist): the integration tests wait on real processes much of the time (4 workers
# on 2 cores kept them 62% busy; 6 left the cores 40-70% idle for ~45 s while the longest tests, which
# start first and mostly wait (a Slurm time limit, frozen servers), ran together), so four workers a
# core keep a small box busy (2 cores, 2026-12-05: 8 workers 484 s, 6 workers 497 s, one run each on
# the same shared box). Longest tests start first (tests/durations.json).
PYTEST := $(PY) -m pytest -p no:cacheprovider
NPROC := $(shell nproc 2>/dev/null || echo 2)
TEST_WORKERS ?= $(shell expr 4 \* $(NPROC))

# The quick tier: lint plus the unit tests, no process started (under a minute on 2 cores): the
# lint (mypy's cold start is most of it, one core) runs beside the unit tests; each job's output is
# printed whole when it ends.
check: $(STAMP)
	$(MAKE) --no-print-directory -j2 -Otarget lint unit

unit: $(STAMP)
	$(PYTEST) -q -n $(NPROC) -m "not integration and not ui" --durations=5

# The whole suite, every tier; prints the slowest tests and each tier's time. Nothing waits in front of
# the tests: SGLang's client environment and HTA's (mostly waiting on unpacking) are built in the
# background while the suite runs, and the code's lint (mypy's cold start) beside them; the few tests
# that need an environment wait for its build (MOE_TUI_ENVS_DONE: the file its exit status lands in,
# tests/conftest.py) and are scheduled after the longest ones. Every part's output is printed whole
# when the suite ends; any part that failed fails `make test`. First, alone: the package is compiled
# to bytecode (a box with PYTHONDONTWRITEBYTECODE=1 never keeps it, and each of the suite's ~1,300
# moe-tui processes compiled what it imported: a runner's imports 0.24 -> 0.16 s of CPU), and one
# collection leaves pytest's rewritten test modules cached (tests/conftest.py), so the workers, which
# all collect at once, read them instead of each rewriting every module (8 workers: ~60 -> ~33 s).
BUILD := .build
test: $(STAMP)
	@mkdir -p $(BUILD) && rm -f $(BUILD)/envs.rc $(BUILD)/lint.rc
	@if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null; then \
	echo "Slurm tier (tests/slurm): on, a real two-node Slurm on this host"; \
	else echo "note: no slurmctld/slurmd/munged: the Slurm tier (tests/slurm) is SKIPPED (.ci/run installs them)"; fi
	@( $(MAKE) --no-print-directory -j2 -Otarget sglang-client hta >$(BUILD)/envs.log 2>&1; echo $$? >$(BUILD)/envs.rc ) & \
	( $(MAKE) --no-print-directory lint-code >$(BUILD)/lint.log 2>&1; echo $$? >$(BUILD)/lint.rc ) & \
	$(PY) -m compileall -q moe_tui >/dev/null; $(PYTEST) -q --collect-only >/dev/null; \
	MOE_TUI_ENVS_DONE=$(CURDIR)/$(BUILD)/envs.rc MOE_TUI_ENVS_LOG=$(CURDIR)/$(BUILD)/envs.log \
	$(PYTEST) -q -rfER -n $(TEST_WORKERS) --dist loadgroup --durations=15; rc=$$?; wait; \
	echo "--- environments (make sglang-client hta): exit $$(cat $(BUILD)/envs.rc)"; cat $(BUILD)/envs.log; \
	echo "--- lint (make lint-code): exit $$(cat $(BUILD)/lint.rc)"; cat $(BUILD)/lint.log; \
	$(MAKE) --no-print-directory parser-check || rc=1; \
	[ "$$(cat $(BUILD)/envs.rc)" = 0 ] && [ "$$(cat $(BUILD)/lint.rc)" = 0 ] && exit $$rc; exit 1

# Refresh tests/durations.json (the scheduling order) from a whole run on this machine.
durations: envs
	$(PYTEST) -q -n $(TEST_WORKERS) --dist loadgroup --record-durations tests/durations.json

bench: envs
	$(PY) benches/run_all.py $(BENCH_ARGS)

screenshots: $(STAMP)
	$(PY) tools/screenshots.py

clean:
	rm -rf $(VENV) .venv-sglang-client .venv-hta
