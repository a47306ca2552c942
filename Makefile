# The two commands a newcomer runs: `make grade` and `make test`. Both set up .venv when needed.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
GPUGRADE := $(VENV)/bin/gpugrade
STAMP := $(VENV)/.installed-stamp

.PHONY: setup grade test clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check --upgrade pip
	$(PY) -m pip install -q --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

# Reference solutions must score full marks (exit 0), stubs lose points (exit 1 is "graded, points
# lost"); then `validate` checks every stage: references full, stubs 0, each known-wrong submission
# in tests/submissions loses exactly the tests its expected.json lists. Anything else stops make.
grade: setup
	$(GPUGRADE) grade solutions
	$(GPUGRADE) grade exercises || test $$? -eq 1
	$(GPUGRADE) validate

test: setup
	$(PY) -m pytest

clean:
	rm -rf $(VENV) .pytest_cache
