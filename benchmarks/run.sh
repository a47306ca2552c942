#!/bin/sh
# Run the simulator benchmark with the project's virtual environment (several minutes; writes
# docs/BENCHMARKS.md). Options go to bench_sim.py, e.g. --no-stock, --only matmul128, --no-write.
here=$(cd "$(dirname "$0")" && pwd)
exec "$here/../.venv/bin/python" "$here/bench_sim.py" "$@"
