# slurm-hetsched: set-up, tests and the demo. Every target that needs Python runs `setup` first.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
HETSCHED := $(BIN)/hetsched
PYTEST_ARGS ?=

.PHONY: setup test unit demo up down status lint clean

setup: $(VENV)/.installed

# torch first, pinned, so the CPU build on this machine is used; the package itself asks for a range.
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[torch,test]'
	touch $@

# The whole suite: brings the dev cluster up, runs unit and integration tests, and stops it again.
test: setup
	$(HETSCHED) devcluster up
	CI=$${CI:-}; status=0; \
	eval "$$($(HETSCHED) devcluster env)"; \
	$(BIN)/python -m pytest $(PYTEST_ARGS) || status=$$?; \
	$(HETSCHED) devcluster down; exit $$status

# Tests that need no Slurm.
unit: setup
	$(BIN)/python -m pytest -m "not slurm" $(PYTEST_ARGS)

demo: setup
	$(HETSCHED) devcluster up
	eval "$$($(HETSCHED) devcluster env)"; $(BIN)/python examples/placement_demo.py

up: setup
	$(HETSCHED) devcluster up

down: setup
	$(HETSCHED) devcluster down

status: setup
	$(HETSCHED) devcluster status

lint: setup
	$(BIN)/pip install --quiet ruff mypy
	$(BIN)/ruff check slurm_hetsched tests examples benchmarks
	$(BIN)/mypy

clean:
	rm -rf $(VENV) build dist *.egg-info
