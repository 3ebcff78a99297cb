# bertology: `make setup` then `make test`. `make help` lists the targets.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
TORCH   ?= torch==2.13.0
export BERTOLOGY_DATA_DIR ?= $(abspath ../shared/data)

.PHONY: help setup test test-slow lint bench reproduce clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

setup:  ## create .venv and install bertology (editable, dev extras) with the CPU torch
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# Pin torch first: an unpinned torch pulls several GB of CUDA wheels.
	$(BIN)/pip install --quiet $(TORCH)
	$(BIN)/pip install --quiet -e '.[dev]'

TESTS   ?= tests

test:  ## fast test suite (everything not marked slow; TESTS= picks files)
	$(BIN)/pytest -q -m "not slow" $(TESTS)

test-slow:  ## the slow end-to-end tests
	$(BIN)/pytest -q -m slow

lint:  ## ruff
	$(BIN)/ruff check bertology tests bench

# make reproduce ENCODERS="minilm bert modernbert": the findings across encoders (docs/reproduce.md)
ENCODERS ?= minilm

reproduce:  ## every finding at CPU scale, then the report (outputs/reproduce/<stamp>/report/REPORT.md)
	$(BIN)/python -m bertology.reproduce --encoders $(ENCODERS)

bench:  ## benchmarks; figures go to bench/RESULTS.md
	$(BIN)/python bench/bench_pretrain.py
	$(BIN)/python bench/bench_levers.py
	$(BIN)/python bench/bench_memory.py
	$(BIN)/python bench/bench_probe.py
	$(BIN)/python bench/bench_importance.py
	$(BIN)/python bench/bench_cli.py

clean:  ## remove run outputs and caches
	rm -rf outputs/*/ .pytest_cache .ruff_cache
