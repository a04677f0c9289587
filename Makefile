# slurm-hetsched: set-up, tests and the demo. Every target that needs Python runs `setup` first.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
HETSCHED := $(BIN)/hetsched
PYTEST_ARGS ?=
# The SPANK plugin, registered in the dev cluster by `up`, `test` and `demo` (docs/spank.md).
SPANK_SO := spank/hetsched_spank.so

.PHONY: setup test test-slurm unit demo up down status lint clean spank

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

# Which dev cluster `up`, `down`, `status` and `test-slurm` use: system (this machine's Slurm,
# 22.05 on Debian 12) or sid (the newest Slurm of Debian sid, in a chroot: docs/devcluster-sid.md).
# The system one runs with Slurm accounting (slurmdbd, accounts with GPU quotas: docs/devcluster.md,
# "Accounting"), which tests/integration/test_accounting.py needs; the sid one has none.
SLURM ?= system
SYSTEM_UP_ARGS = --slurm system --spank $(SPANK_SO) --accounting
UP_ARGS = $(if $(filter sid,$(SLURM)),--slurm sid,$(SYSTEM_UP_ARGS))

# The whole suite: brings both dev clusters up, runs the unit tests, then the integration and
# end-to-end tests against both Slurm versions side by side, and stops both clusters again.
test: setup $(SPANK_SO)
	$(HETSCHED) devcluster up $(SYSTEM_UP_ARGS)
	$(HETSCHED) devcluster up --slurm sid
	CI=$${CI:-}; status=0; \
	tests/both_slurms.sh $(HETSCHED) $(BIN)/python $(PYTEST_ARGS) || status=$$?; \
	$(HETSCHED) devcluster down --slurm sid; $(HETSCHED) devcluster down --slurm system; \
	exit $$status

# The integration and end-to-end tests against one Slurm: make test-slurm SLURM=sid
test-slurm: setup $(SPANK_SO)
	$(HETSCHED) devcluster up $(UP_ARGS)
	CI=$${CI:-}; status=0; \
	eval "$$($(HETSCHED) devcluster env --slurm $(SLURM))"; \
	$(BIN)/python -m pytest -m slurm $(PYTEST_ARGS) || status=$$?; \
	$(HETSCHED) devcluster down --slurm $(SLURM); exit $$status

# Tests that need no Slurm.
unit: setup
	$(BIN)/python -m pytest -m "not slurm" $(PYTEST_ARGS)

demo: setup $(SPANK_SO)
	$(HETSCHED) devcluster up --slurm system --spank $(SPANK_SO)
	eval "$$($(HETSCHED) devcluster env --slurm system)"; $(BIN)/python examples/controller_demo.py

up: setup $(SPANK_SO)
	$(HETSCHED) devcluster up $(UP_ARGS)

down: setup
	$(HETSCHED) devcluster down --slurm $(SLURM)

status: setup
	$(HETSCHED) devcluster status --slurm $(SLURM)

lint: setup
	$(BIN)/pip install --quiet ruff mypy
	$(BIN)/ruff check slurm_hetsched tests examples benchmarks
	$(BIN)/mypy

clean:
	rm -rf $(VENV) build dist *.egg-info
	$(MAKE) -C spank clean
