# The README's two commands live here: `make demo` and `make test`. Both build .venv from nothing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: demo test lint install bench screenshots sglang-client clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/moe-tui demo

# SGLang's own benchmark client, unmodified, in an environment of its own (see tools/sglang_client/).
sglang-client: $(STAMP)
	$(PY) tools/sglang_client/build_env.py

# Layers that fail the build: style and bugs (ruff), types (mypy: strict on the core), and the
# import contracts in pyproject.toml (import-linter). `make test` runs them first.
lint: $(STAMP)
	$(VENV)/bin/ruff check moe_tui tests benches tools
	$(VENV)/bin/mypy
	PYTHONPATH=$(CURDIR) $(VENV)/bin/lint-imports
	@# SGLang 0.5.23's own parser over every shipped profile (torch stubbed; ~2 s); skipped, with a
	@# note, until `make sglang-client` has built the light env.
	@if [ -x .venv-sglang-client/bin/python ]; then .venv-sglang-client/bin/python tools/sglang_parser/check.py; \
	else echo "note: no .venv-sglang-client: SGLang parser check skipped (make sglang-client)"; fi

test: $(STAMP) sglang-client lint
	$(PY) -m pytest -q -p no:cacheprovider

bench: $(STAMP) sglang-client
	$(PY) benches/run_all.py $(BENCH_ARGS)

screenshots: $(STAMP)
	$(PY) tools/screenshots.py

clean:
	rm -rf $(VENV) .venv-sglang-client
