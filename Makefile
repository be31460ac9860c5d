# evalkit developer shortcuts. The venv is the one scripts/setup_vllm_cpu.sh (and .ci/run) make: .venv
VENV   ?= .venv
PYTHON ?= $(if $(wildcard $(VENV)/bin/python),$(VENV)/bin/python,python3)
BIN    := $(if $(wildcard $(VENV)/bin/python),$(VENV)/bin/,)

.PHONY: help test test-fast lint typecheck check demo

help:
	@echo "make test       the README test command (scripts/test.sh): sets up .venv if needed (CPU vLLM, dev extra),"
	@echo "                then python -m pytest -m \"not gpu\" (real vLLM included)"
	@echo "make test-fast  the unit tier only (tests/unit: in-process, no server or subprocess) over 2 workers"
	@echo "make lint       ruff check + ruff format --check (evalkit tests tasks benchmarks examples scripts)"
	@echo "make typecheck  mypy evalkit tasks; lint-imports (layer rules)"
	@echo "make check      lint + typecheck + test (what .ci/run checks after installing)"
	@echo "make demo       CPU demo: set up vLLM + SmolLM2-135M, evalkit starts vLLM, GSM8K --limit 20 (scripts/demo.sh)"

test:
	VENV=$(VENV) bash scripts/test.sh

test-fast:
	VENV=$(VENV) bash scripts/test.sh tests/unit -n 2

lint:
	$(BIN)ruff check evalkit tests tasks benchmarks examples scripts
	$(BIN)ruff format --check evalkit tests tasks benchmarks examples scripts

typecheck:
	$(BIN)mypy evalkit tasks
	$(BIN)lint-imports

check: lint typecheck test

demo:
	bash scripts/demo.sh
