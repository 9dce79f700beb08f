# The two README commands: `make demo` plans the shipped default scenario, `make test` runs the test suite.
# Each creates .venv and installs fleetplan (with its test extras) on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint figures docs bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/fleetplan plan

# --dist loadfile: each test file runs on one worker, so a module-scoped fixture (two `fleetplan serve` processes for
# schemathesis, a local Ray instance, a private PostgreSQL) starts once. --dist loadgroup meant that for the files
# marked xdist_group, but pytest-xdist 3.8 cannot tag the tests under pytest 9 (a test's nodeid is read-only), so the
# groups were split across both workers and their module fixtures ran twice.
#
# PYTHONDONTWRITEBYTECODE= : where the environment disables bytecode writing (this machine sets
# PYTHONDONTWRITEBYTECODE=1), every xdist worker would recompile and assertion-rewrite every test module and every
# `fleetplan serve` the tests start would recompile fleetplan; with it they go to __pycache__ beside the sources
# (git ignores them), and site-packages' bytecode, compiled by pip at install, is read as it is. (Under
# PYTHONPYCACHEPREFIX=build/pycache, tried before, Python reads no __pycache__ folder at all: each worker compiled
# the site-packages it imports again on a fresh clone, 97.5 s for the suite against 71-76 s with bytecode present.)
# A clone's first run also sizes every replica option the tests use (~28 CPU-s): 91-101 s, then 71-79 s.
# Sized replicas go to build/cache (fleetplan.costmodels.capacity_cache; tests/conftest.py sets the same folder).
#
# -n 4 on 2 cores: a fifth of the suite's time is waiting (a real Prometheus scraping, a lease expiring, a locked
# database timing out, `fleetplan serve` and Ray starting), which two more workers overlap with the others' work.
# Measured on 2 idle cores (2026-12-03): -n 2 111 s wall, 160 CPU-s; -n 3 107 s; -n 4 99-106 s, 175 CPU-s (each
# worker builds the shared fixtures once).
# --no-loadscope-reorder: the files that wait on real processes or hold the longest tests start first
# (tests/conftest.py's FIRST). xdist's default reorders the files by their number of tests, which undid that order
# and left one worker running the service files alone for the last ~20 s (109-117 s; 98 s with the order kept).
TEST_ENV = PYTHONDONTWRITEBYTECODE= FLEETPLAN_CACHE_DIR="$(CURDIR)/build/cache"

test: $(STAMP)
	$(TEST_ENV) $(BIN)/python -m pytest -q -n 4 --dist loadfile --no-loadscope-reorder

# mypy cannot follow setuptools package-dir through an editable install, so it checks the package through
# build/mypy/fleetplan, a symlink to this folder (whatever the clone's folder is called).
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	mkdir -p build/mypy && ln -sfn "$(CURDIR)" build/mypy/fleetplan
	cd build/mypy && "$(CURDIR)/$(BIN)/mypy" --config-file "$(CURDIR)/pyproject.toml" -p fleetplan

# Every figure README.md and docs/*.md quote from a fast command, recomputed and compared with the text (about two
# minutes); `$(BIN)/python docs/figures.py --write` updates them.
figures: $(STAMP)
	$(BIN)/python docs/figures.py

# The reference pages as a static site (site/), warnings as errors: needs the docs extra (pip install -e '.[docs]').
docs: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[docs]'
	$(BIN)/mkdocs build --strict --quiet

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_planner.py

clean:
	rm -rf $(VENV) .pytest_cache build
