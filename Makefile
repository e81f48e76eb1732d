# Two set-up commands: `make demo` and `make test`. Both create .venv on first use.
PYTHON ?= $(shell for p in python3.13 python3.12 python3.11 python3; do \
	command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null \
	&& echo $$p && break; done)
VENV := .venv
BIN := $(VENV)/bin
RUNTIME := $(VENV)/.installed-runtime
DEV := $(VENV)/.installed-dev
DEMO_ARGS ?=
PYTEST_ARGS ?=

.PHONY: demo test lint typecheck imports unit bench docs clean

$(BIN)/python:
	@test -n "$(PYTHON)" || { echo "gpulens needs Python 3.11 or newer on PATH (python3.11, python3.12...)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(RUNTIME): pyproject.toml setup.py src/gpulens/analyze/traces/_scan.c | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(DEV): pyproject.toml setup.py src/gpulens/analyze/traces/_scan.c | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@ $(RUNTIME)

demo: $(RUNTIME)
	$(BIN)/gpulens demo $(DEMO_ARGS)

lint: $(DEV)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench

typecheck: $(DEV)
	$(BIN)/mypy

imports: $(DEV)
	$(BIN)/lint-imports

test: lint typecheck imports
	$(BIN)/python -m pytest $(PYTEST_ARGS)

unit: $(DEV)
	$(BIN)/python -m pytest tests/unit $(PYTEST_ARGS)

bench: $(RUNTIME)
	$(BIN)/python bench/run_all.py

docs: $(RUNTIME)
	$(BIN)/python -m gpulens.present.docs
	$(BIN)/python -m gpulens.present.prometheus.rules

clean:
	rm -rf $(VENV) build dist src/*.egg-info .mypy_cache .ruff_cache .pytest_cache
