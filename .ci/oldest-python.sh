#!/usr/bin/env bash
# The README's `make grade` again on the oldest Python the project declares (pyproject.toml's
# requires-python: a student on Ubuntu 22.04 has 3.10), in a virtual environment of its own, after
# importing every module of the grader there. CI's own suite runs on the machine's python3 (3.11),
# where a module that needs 3.11 (tomllib without its tomli fallback) passes every test, and
# `pip install gpugrade` on 3.10 installed a grader that failed at its first import.
# The interpreter: python3.X on PATH, else pyenv's (this machine has one), the first that runs (a
# pyenv shim on PATH answers "command not found" for a version that is not the active one); none:
# a clear failure.
set -euo pipefail
cd "$(dirname "$0")/.."
oldest=$(sed -n 's/^requires-python *= *">= *\([0-9.]*\)".*/\1/p' pyproject.toml)
[ -n "$oldest" ] || { echo "pyproject.toml declares no requires-python \">=3.N\"" >&2; exit 1; }
python=
for candidate in $(command -v "python$oldest") $(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$oldest".*/bin/python"$oldest" 2>/dev/null); do
    if "$candidate" -c "import sys, venv; assert sys.version_info[:2] == tuple(map(int, '$oldest'.split('.')))" 2>/dev/null; then
        python=$candidate
        break
    fi
done
if [ -z "$python" ]; then
    echo "no Python $oldest on this machine (PATH, ~/.pyenv): the oldest declared Python is not checked" >&2
    exit 1
fi
venv=${GPUGRADE_OLDEST_VENV:-/tmp/gpugrade-ci-python$oldest}
echo "== the oldest declared Python: $("$python" --version) ($python), in $venv"
# every module of the grader imported (the sandboxes', batch's and exports' too, which `make grade` never loads)
make setup PYTHON="$python" VENV="$venv"
"$venv/bin/python" - <<'EOF'
import importlib, pkgutil, grader
names = [m.name for m in pkgutil.walk_packages(grader.__path__, "grader.") if not m.name.endswith("__main__")]
for name in names:
    importlib.import_module(name)
print(f"imported {len(names)} modules of the grader")
EOF
make grade VENV="$venv"
