# slurm-hetsched: set-up, tests and the demo. Every target that needs Python runs `setup` first.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
HETSCHED := $(BIN)/hetsched
PYTEST_ARGS ?=
# The SPANK plugin, registered in the dev cluster by `up`, `test` and `demo` (docs/spank.md).
SPANK_SO := spank/hetsched_spank.so

.PHONY: setup test unit demo up down status lint clean spank

setup: $(VENV)/.installed

# torch first, pinned, so the CPU build on this machine is used; the package itself asks for a range.
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[torch,test,plots]'
	touch $@

spank: $(SPANK_SO)

# Slurm's headers come with the dev cluster's packages, so install those first.
$(SPANK_SO): spank/hetsched_spank.c spank/Makefile | setup
	$(HETSCHED) devcluster install
	$(MAKE) -C spank

# The whole suite: brings the dev cluster up, runs unit and integration tests, and stops it again.
test: setup $(SPANK_SO)
	$(HETSCHED) devcluster up --spank $(SPANK_SO)
	CI=$${CI:-}; status=0; \
	eval "$$($(HETSCHED) devcluster env)"; \
	$(BIN)/python -m pytest $(PYTEST_ARGS) || status=$$?; \
	$(HETSCHED) devcluster down; exit $$status

# Tests that need no Slurm.
unit: setup
	$(BIN)/python -m pytest -m "not slurm" $(PYTEST_ARGS)

demo: setup $(SPANK_SO)
	$(HETSCHED) devcluster up --spank $(SPANK_SO)
	eval "$$($(HETSCHED) devcluster env)"; $(BIN)/python examples/controller_demo.py

up: setup $(SPANK_SO)
	$(HETSCHED) devcluster up --spank $(SPANK_SO)

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
	$(MAKE) -C spank clean
