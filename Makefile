# The two commands a newcomer runs: `make grade` and `make test`. Both set up .venv when needed.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
GPUGRADE := $(VENV)/bin/gpugrade
STAMP := $(VENV)/.installed-stamp
SAMPLE := examples/sample_submission

.PHONY: setup grade test validate images bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	@# the process sandbox (the default) is bubblewrap: installed here where we may (root, apt)
	@command -v bwrap >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null; }; } || \
		echo "note: bubblewrap (bwrap) is missing: install it for the process sandbox, or use --sandbox none"
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check --upgrade pip
	$(PY) -m pip install -q --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

# The reference solutions must score full marks (exit 0); the stubs and the sample submission lose
# points (exit 1 is "graded, points lost"). Any other exit code is a grader failure and stops make.
grade: setup
	$(GPUGRADE) grade solutions
	$(GPUGRADE) grade exercises || test $$? -eq 1
	$(GPUGRADE) grade $(SAMPLE) || test $$? -eq 1

# The layer contracts (import-linter, pyproject.toml), then the whole suite; it includes
# `gpugrade validate` over every exercise and known-wrong submission. Spread over the cores by
# pytest-xdist (TEST_WORKERS=0: one process); a module whose fixtures are costly, and every test
# that makes containers, keeps to one worker (WORKER_GROUPS in tests/conftest.py).
TEST_WORKERS ?= auto
test: setup
	$(VENV)/bin/lint-imports
	$(PY) -m pytest -n $(TEST_WORKERS) --maxprocesses 4 --dist loadgroup

validate: setup
	$(GPUGRADE) validate

# The docker sandbox's runner image and the production image, built without a registry
# (debootstrap base, wheels from the host; needs root and a docker engine). See docker/build-images.sh.
images: setup
	docker/build-images.sh

# The simulator against numba's stock simulator, side by side in one run (writes its section of docs/BENCHMARKS.md).
bench: setup
	$(PY) benchmarks/bench_sim.py

clean:
	rm -rf $(VENV) .pytest_cache
