# The two commands a newcomer runs: `make grade` and `make test`. Both set up .venv when needed.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
GPUGRADE := $(VENV)/bin/gpugrade
STAMP := $(VENV)/.installed-stamp
SAMPLES := $(sort $(dir $(wildcard tests/submissions/*/expected.json)))

.PHONY: setup grade test clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check --upgrade pip
	$(PY) -m pip install -q --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

# Reference solutions must score full marks (exit 0); stubs and known-wrong samples lose points
# (exit 1 is "graded, points lost"); any other exit code is a grader failure and stops make.
grade: setup
	$(GPUGRADE) grade solutions
	$(GPUGRADE) grade exercises || test $$? -eq 1
	@for sample in $(SAMPLES); do \
		$(GPUGRADE) grade $$sample || test $$? -eq 1 || exit 1; \
	done

test: setup
	$(PY) -m pytest

clean:
	rm -rf $(VENV) .pytest_cache
