#!/usr/bin/env bash
# The wheels the device check carries to a GPU machine (its image has no greenlet, and may have
# other numba / numba-cuda versions than the ones grader.sim is tested with), fetched here into
# .whl for the image's Python 3.12 on x86-64. The versions are this checkout's .venv's (what
# `make setup` installed). Then:  run(command="bash benchmarks/gpu_check.sh", carry=[".whl"])
# benchmarks/gpu_env.py, on the GPU machine, installs only those the image lacks or has in
# another version, and only where their requirements hold there.
# numpy travels too: the image's 2.5 removed np.row_stack, which numba-cuda 0.30's typing still
# names, so every kernel's compile failed there (seen on an H200, 2026-12-04); hence numpy<2.5 here.
# (llvmlite, 57 MiB, would not fit the 64 MiB the working tree may take: numba travels, and is
# used only where the image's llvmlite is the one it needs.)
set -eu
cd "$(dirname "$0")/.."
py=${PYTHON:-.venv/bin/python}
grep -qx '/.whl/' .gitignore || echo '/.whl/' >>.gitignore
rm -rf .whl && mkdir .whl
for name in greenlet numba numba-cuda cuda-core cuda-pathfinder numpy; do
    version=$("$py" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$name")
    "$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl "$name==$version" 2>&1 \
        | grep -v '^WARNING: Location' || true
done
ls -l .whl
du -sh .whl
