# Quick start:  make demo   (install, then run the main job on the embedded default)
#               make test   (install with the test extra, then run the tests; `make validate`: the validation tier)
#               make test-fast (the inner loop: every test not marked slow)
PYTHON ?= $(shell scripts/find-python)
VENV   ?= .venv
BIN     = $(VENV)/bin

.PHONY: install install-test install-docs install-lint demo test validate test-fast lint docs robustness bench clean

$(BIN)/python:
	@test -n "$(PYTHON)" || { echo "no Python >= 3.12 found"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# the package and what its commands need (the main job needs no Dask: without it installed, xarray does not
# import it when it builds a Dataset, 0.4 s of a 3 s `bayes-attn theory`)
install: $(BIN)/python
	$(BIN)/python -m pip install -q -e .

install-test: $(BIN)/python
	$(BIN)/python -m pip install -q -e ".[test]"

install-docs: $(BIN)/python
	$(BIN)/python -m pip install -q -e ".[test,docs]"

install-lint: $(BIN)/python
	$(BIN)/python -m pip install -q -e ".[test,lint]"

# ruff (rules and the rules left out, each with its reason, in pyproject.toml) and mypy over bayes_attn/: both at
# zero findings
lint: install-lint
	$(BIN)/python -m ruff check .
	$(BIN)/python -m mypy

demo: install
	$(BIN)/bayes-attn run

# the tests in parallel: one pytest-xdist worker per core, at most 4; tests that share a costly fixture
# run on one worker (tests/conftest.py: SHARED_FIXTURES)
PYTEST = $(BIN)/python -m pytest -q -n auto --maxprocesses 4 --dist loadgroup

# two tiers (pyproject.toml's markers): `make test` every unit and integration test and the fast statistical
# checks; `make validate` the samplers' statistical validation (SBC, agreement with an exact sampler), the fuzz
# test and the end-to-end runs (examples, pages, benchmarks, scripts, Dask). CI runs both. validate writes each of its tests' outcome, seconds and checked statistics (each SBC's
# pooled p-value, each agreement's statistic with its threshold) to VALIDATE_JSON, to compare one run with another
VALIDATE_JSON ?= validate.json
test: install-test
	$(PYTEST) -m "not validate"

validate: install-test
	BAYES_ATTN_STATS_JSON=$(VALIDATE_JSON) $(PYTEST) -m validate

# the inner loop compiles with LLVM's optimisation off (XLA's CPU backend, level 0 of 2): its programs
# compile faster and run slower, which the short tests gain from (103 s against 147 s on a quiet 2-core
# machine, 2026-12-04; the whole suite lost: 575 s against 490 s). Results differ from the optimised
# programs' in the last bits, within every tolerance; `make test` (CI) compiles as users' runs do
test-fast: install-test
	XLA_FLAGS="$$XLA_FLAGS --xla_backend_optimization_level=0" $(PYTEST) -m "not slow and not validate"

# the documentation site (docs/, Sphinx with MyST, the PyData theme, sphinx-gallery over examples/, autodoc,
# sphinx-argparse) into docs/_build/html, warnings as errors; the gallery's examples are executed
docs: install-docs
	$(BIN)/python -m sphinx -W --keep-going -b html docs docs/_build/html

# the stochastic tests at K seed offsets (BAYES_ATTN_TEST_SEED = 0..K-1): each checked statistic's mean, sd and
# distance of its threshold in sds (tests/robustness.py)
K ?= 12
robustness: install-test
	$(BIN)/python tests/robustness.py --offsets $(K) --markdown tests/robustness.md --json tests/robustness.json

# the headline set (benchmarks/README.md): the theory solve, the samplers' ESS per second (~25 min), the cold
# start, each into BENCH_OUT, then one table of their headline numbers. BENCH_FLAGS=--quick: the same at tiny
# sizes (minutes, numbers meaningless), refused into benchmarks/results: give BENCH_OUT=<folder>
BENCH_OUT ?= benchmarks/results
BENCH_FLAGS ?=
HEADLINE = solver sampler cold_start

bench: $(BIN)/python
	@case " $(BENCH_FLAGS) " in *" --quick "*) test "$(BENCH_OUT)" != benchmarks/results || \
		{ echo "--quick writes meaningless numbers: give BENCH_OUT=<folder>"; exit 1; };; esac
	$(BIN)/python -m pip install -q -e ".[test,bench]"
	$(foreach b,$(HEADLINE),$(BIN)/python benchmarks/bench_$(b).py $(BENCH_FLAGS) --out $(BENCH_OUT)/$(b).json &&) true
	$(BIN)/python benchmarks/report.py $(foreach b,$(HEADLINE),$(BENCH_OUT)/$(b).json)

# what the build made, never results: runs/ (every command's default output folder) stays
clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info docs/_build docs/auto_examples docs/api/*.rst
	find . -name __pycache__ -type d -not -path "./$(VENV)/*" -prune -exec rm -rf {} +
