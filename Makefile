# The README's two commands live here: `make demo` and `make test`. Both build .venv from nothing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: demo test install bench screenshots sglang-client clean

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

test: $(STAMP) sglang-client
	$(PY) -m pytest -q -p no:cacheprovider

bench: $(STAMP) sglang-client
	$(PY) benches/run_all.py $(BENCH_ARGS)

screenshots: $(STAMP)
	$(PY) tools/screenshots.py

clean:
	rm -rf $(VENV) .venv-sglang-client
