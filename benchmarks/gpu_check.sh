#!/usr/bin/env bash
# The device check, prepared for a session lent a GPU (the device tool's `run`, from the
# repository root; nothing to explore there first):
#     run(command="bash benchmarks/gpu_check.sh", timeout_s=540)
# On the GPU machine, each step's output goes to $OUT (the tool brings it back):
#   1. doctor.txt      `gpugrade doctor`: what grading sees there (GPU, numba-cuda, toolchain)
#   2. solutions.*     the reference solutions graded on --backend gpu, performance included
#                      (each perf test times the kernels with the harness against the reference
#                      itself, in another runner: full marks expected; the JSON holds each test's
#                      median, spread, repeats, GB/s and fraction of the measured copy bandwidth)
#   3. noise.*         `gpugrade bench --reference` 5 times: per perf test, the coefficient of
#                      variation of the harness's median over the runs (target <= 2%)
#   4. validate.txt    every known-wrong submission (tests/submissions) graded on --backend gpu:
#                      which lose their points on real hardware (races may not show there, and
#                      the counter criteria are the simulator's)
#   5. bench_gpu.*     benchmarks/bench_gpu.py: the course kernels timed with CUDA events,
#                      beside CuPy's
#   6. allreduce_gpus.* benchmarks/allreduce_gpus.py: the all-reduce references on N GPUs beside
#                      NCCL (algbw, busbw, ratio to NCCL); on one GPU it only reports the GPU and
#                      whether cupy.cuda.nccl is there (multi-GPU timing needs 2 or more;
#                      without a GPU, as in the dry run, it says so and exits 0)
# Commit the numbers to docs/BENCHMARKS.md ("On a GPU"). The device image has numba-cuda,
# numpy, pytest, rich and CuPy; grading there needs nothing else (--sandbox none: the code
# graded is the course's own). If a module is missing, carry wheels in .whl (the device
# README) and name ".whl" in `carry`: they are installed first.
#
# Without a GPU, `GPU_CHECK_BACKEND=sim PYTHON=.venv/bin/python bash benchmarks/gpu_check.sh`
# runs the same steps on the simulator (a dry run of this script).
set -u
cd "$(dirname "$0")/.."
out=${OUT:-$PWD/.gpu_check}
mkdir -p "$out"
py=${PYTHON:-python3}
backend=${GPU_CHECK_BACKEND:-gpu}
if ls .whl/*.whl >/dev/null 2>&1; then
    "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
gpugrade=("$py" -c 'import sys; from grader.cli import main; sys.exit(main())')
status=0
step() {  # step NAME LIMIT_S COMMAND...: run it with a time limit, log its output and exit code
    local name=$1 limit=$2
    shift 2
    local t0=$SECONDS
    echo "== $name"
    timeout "$limit" "$@" >"$out/$name.txt" 2>&1
    local rc=$?
    echo "   exit $rc after $((SECONDS - t0)) s (log: $name.txt)"
    [ "$rc" -eq 0 ] || status=1
    tail -n 25 "$out/$name.txt"
}
{ nvidia-smi -L; "$py" --version; } >"$out/machine.txt" 2>&1
step doctor 120 "${gpugrade[@]}" doctor
step solutions 240 "${gpugrade[@]}" grade solutions --backend "$backend" --sandbox none \
    --format json --output "$out/solutions.json"
step noise 300 "$py" benchmarks/harness_noise.py --backend "$backend" --runs 5 --out "$out"
step validate 300 "${gpugrade[@]}" validate --backend "$backend" --sandbox none
if [ "$backend" = sim ]; then
    step bench_gpu 240 "$py" benchmarks/bench_gpu.py --sim --json "$out/bench_gpu.json" \
        --markdown "$out/bench_gpu.md"
else
    step bench_gpu 240 "$py" benchmarks/bench_gpu.py --json "$out/bench_gpu.json" \
        --markdown "$out/bench_gpu.md"
fi
step allreduce_gpus 240 "$py" benchmarks/allreduce_gpus.py --json "$out/allreduce_gpus.json"
exit $status
