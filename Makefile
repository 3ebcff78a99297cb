# bertology: `make setup` then `make test`. `make help` lists the targets.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
TORCH   ?= torch==2.13.0
export BERTOLOGY_DATA_DIR ?= $(abspath ../shared/data)

.PHONY: help setup setup-gpu test test-slow tables lint bench gpu-check reproduce reproduce-population reference results default-runs clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

setup:  ## create .venv and install bertology (editable, dev extras) with the CPU torch
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# Pin torch first: an unpinned torch pulls several GB of CUDA wheels.
	$(BIN)/pip install --quiet $(TORCH)
	$(BIN)/pip install --quiet -e '.[dev]'

# The same torch version's CUDA build: the package index's default Linux wheel (TORCH_INDEX=<a
# CUDA wheel index> for another CUDA version); stops where that torch sees no GPU (docs/gpu.md).
TORCH_INDEX ?=

setup-gpu:  ## create .venv with the CUDA build of the pinned torch, then bertology (a GPU machine)
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# a CPU torch left by `make setup` would satisfy the pin: remove it first
	$(BIN)/python -c "import torch, sys; sys.exit(0 if torch.version.cuda else 1)" 2>/dev/null \
		|| $(BIN)/pip uninstall --quiet -y torch 2>/dev/null || true
	$(BIN)/pip install --quiet $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX)) $(TORCH)
	$(BIN)/pip install --quiet -e '.[dev]'
	@$(BIN)/python -c "import sys, torch; cuda = torch.version.cuda; \
	print(f'torch {torch.__version__}, CUDA {cuda}, {torch.cuda.device_count()} GPU(s) visible'); \
	sys.exit(0 if cuda and torch.cuda.is_available() else 'setup-gpu: this torch sees no GPU (a CPU build, or no driver): check nvidia-smi, or give TORCH_INDEX')"

TESTS   ?= tests

# Two pytest workers (pytest-xdist), each on one thread: the small models gain little from a
# second thread, and two workers of two threads each would fight over the cores. On 2 cores of
# an AMD EPYC: 148 s, against 204 s with torch's default threads and about 4 min in one process.
# loadgroup: a module marked xdist_group runs in one worker, so its module fixture (the planted
# check's half-hour pretrain) runs once, not once per worker that gets one of its tests.
WORKERS ?= 2
PYTEST  := OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(BIN)/pytest -q -n $(WORKERS) --dist loadgroup

test:  ## fast test suite, under 3 minutes on 2 cores (everything not marked slow; TESTS= picks files)
	$(PYTEST) -m "not slow" $(TESTS)

# The measuring tests write the tables of docs/reliability.md, bad-input.md and damaged-files.md;
# `make tables` runs all of them (fast and slow), so test-slow leaves their files out.
# make test + test-slow + tables = every test.
MEASURING := $(shell $(PY) tests/helpers/reliability_tables.py --list)

# The same two one-thread workers ($(PYTEST)): 28 min against 48 in one process (bench/RESULTS.md).
test-slow:  ## the slow tests (end-to-end runs, whole sweeps), less the measuring ones
	$(PYTEST) -m slow $(addprefix --ignore=,$(MEASURING))

tables:  ## run the measuring tests (all of them) and write their tables into docs/ (reliability.md, ...)
	$(BIN)/python tests/helpers/reliability_tables.py

lint:  ## ruff
	$(BIN)/ruff check bertology tests bench

# make reproduce ENCODERS="minilm bert modernbert": the findings across encoders (docs/reproduce.md)
ENCODERS ?= minilm
NAME ?= minilm

reproduce:  ## every finding at CPU scale, then the report (outputs/reproduce/<stamp>/report/REPORT.md)
	$(BIN)/python -m bertology.reproduce --encoders $(ENCODERS)

# make reproduce-population: the README's population result, the model-reading findings judged
# across 18 BERTs pretrained here that learned, drawn from seed 200 on, a member that ends at its
# floor replaced by the next seed (docs/reproduce.md, "The checkpoint population"); about 4 hours
# on 2 cores. POPULATION=K FIRST_MEMBER=N for another.
POPULATION ?= 18
FIRST_MEMBER ?= 200

reproduce-population:  ## pretrain BERTs until 18 learned, run the model-reading studies on each, judge them across them
	$(BIN)/python -m bertology.reproduce --population $(POPULATION) --first-member $(FIRST_MEMBER) --replace-failed

reference:  ## write docs/reference/ (claims, config keys, CLI help) from the code
	$(BIN)/python -m bertology.cli.reference

# make results REPORT=outputs/reproduce/<stamp>/report [NAME=population]: publish a run's files
# to docs/results/<NAME>/ and write docs/results.md and the README's block from them
results:  ## publish a make reproduce run's report to docs/results.md and the README (REPORT=<out>/report)
	$(BIN)/python -m bertology.study.pages.publish $(REPORT) --name $(NAME)

default-runs:  ## time the default pretrain and probe runs; writes docs/default_runs.md (the docs' one source)
	$(BIN)/python bench/default_runs.py

gpu-check:  ## the prepared GPU check, ~8 min on one H100: outputs/gpu_check/<stamp>/gpu_check.md (docs/gpu.md)
	$(BIN)/python bench/gpu_check.py $(GPU_CHECK_ARGS)

bench:  ## benchmarks; figures go to bench/RESULTS.md
	$(BIN)/python bench/bench_pretrain.py
	$(BIN)/python bench/bench_levers.py
	$(BIN)/python bench/bench_memory.py
	$(BIN)/python bench/bench_probe.py
	$(BIN)/python bench/bench_importance.py
	$(BIN)/python bench/bench_cli.py

clean:  ## remove run outputs and caches
	rm -rf outputs/*/ .pytest_cache .ruff_cache
