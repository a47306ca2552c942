#!/usr/bin/env bash
# The device check, prepared for a session lent a GPU (the device tool's `run`, from the
# repository root; nothing to explore there first):
#     bash benchmarks/gpu_wheels.sh          # here, once: the wheels the image lacks, into .whl
#     run(command="bash benchmarks/gpu_check.sh", carry=[".whl"], timeout_s=560)
# It ends within GPU_CHECK_BUDGET_S (default 500 s): each step gets what is left, in this order of
# value, and one that would start with under 20 s left is skipped and says so. The tool brings back
# at most 8 files from $OUT, so the step files are packed into $OUT/gpu_check.tar.gz, and
# $OUT/summary.md (also printed last, so the reply's output tail has it) is the section for
# docs/BENCHMARKS.md, made by benchmarks/gpu_summary.py. The steps:
#   0. env.txt         benchmarks/gpu_env.py: an environment of the image's Python, the carried wheels
#                      and this checkout (runners start as `python -I`, which ignores PYTHONPATH)
#   1. doctor.txt      `gpugrade doctor`: what grading sees there (GPU, numba-cuda, toolchain)
#   2. solutions.*     the reference solutions graded on --backend gpu, performance included
#                      (each perf test's kernels timed by a GPU device process of the grader's,
#                      the judge calling the function with fresh inputs, against the reference
#                      timed the same way: full marks expected; the JSON holds each test's
#                      median, spread, repeats, GB/s and fraction of the measured copy bandwidth)
#   3. bench_gpu.*     benchmarks/bench_gpu.py: the course kernels timed with CUDA events,
#                      beside CuPy's
#   4. noise.*         `gpugrade bench --reference vector_add --stage 1` up to 10 times within 150 s
#                      (all the perf tests took 65 s a run on an H200): the coefficient of variation
#                      of the harness's median over the runs (<= 2%)
#   5. allreduce_gpus.* benchmarks/allreduce_gpus.py: the all-reduce references on N GPUs beside
#                      NCCL (algbw, busbw, ratio to NCCL); on one GPU it only reports the GPU and
#                      whether cupy.cuda.nccl is there (multi-GPU timing needs 2 or more;
#                      without a GPU, as in the dry run, it says so and exits 0)
#   6. validate.txt    the known-wrong submissions that tell most on a GPU (15 of tests/submissions,
#                      named below) graded on --backend gpu in the time left (one grade per two
#                      cores, at most 8 at once; their timings take turns: grader/judge/gpu_lock.py):
#                      which lose their points on real hardware (the counter criteria and the
#                      data-flow proof are the simulator's). Each grade is a line as it ends, so a
#                      run stopped at the limit still says what it found
# Grading the solutions broke (an exit other than 0 or 1)? noise and validate are skipped, saving
# the device time for a rerun. Something failed there? The output tail has each step's last
# lines; fix it here and rerun at
# once with a smaller budget (GPU_CHECK_BUDGET_S=200 bash benchmarks/gpu_check.sh), since a
# machine stays warm only 30 s and none starts with under 4 minutes of device time left.
# Commit summary.md to docs/BENCHMARKS.md ("On a GPU"). The device image has numba, numba-cuda,
# numpy, pytest, rich and CuPy, not greenlet, and its numpy 2.5 breaks numba-cuda 0.30 (the wheels
# carry 2.4); --sandbox none (the code graded is the course's own).
#
# Without a GPU, `GPU_CHECK_BACKEND=sim PYTHON=.venv/bin/python bash benchmarks/gpu_check.sh`
# runs the same steps on the simulator (a dry run of this script).
set -u
cd "$(dirname "$0")/.."
out=${OUT:-$PWD/.gpu_check}
mkdir -p "$out"
work=$(mktemp -d /tmp/gpu_check.XXXXXX)
deadline=$((SECONDS + ${GPU_CHECK_BUDGET_S:-500}))
backend=${GPU_CHECK_BACKEND:-gpu}
export PYTHONUNBUFFERED=1
status=0
last_rc=0
pack() {  # the summary and the archive as they stand: after every step, so a run killed at the
          # tool's limit still brings back what it measured
    "$py" benchmarks/gpu_summary.py "$work" >"$work/summary.md" 2>&1 || status=1
    cp "$work/summary.md" "$out/summary.md"
    tar -czf "$out/gpu_check.tar.gz" -C "$work" .
}
finish() {
    pack
    echo "== summary (also $out/summary.md; every step's files in $out/gpu_check.tar.gz)"
    cat "$work/summary.md"
}
py=${PYTHON:-python3}
{ nvidia-smi -L; "$py" --version; } >"$work/machine.txt" 2>&1
"$py" benchmarks/gpu_env.py --wheels "${GPU_CHECK_WHEELS:-.whl}" --env /tmp/gpugrade-env >"$work/env.txt" 2>&1
rc=$?
cat "$work/env.txt"
if [ "$rc" -ne 0 ]; then
    finish
    exit 1
fi
py=$(tail -n 1 "$work/env.txt")
gpugrade=("$py" -m grader)
step() {  # step NAME LIMIT_S COMMAND...: within its limit and the time left; output logged, tail shown
    local name=$1 limit=$2
    shift 2
    local left=$((deadline - SECONDS - 15))
    [ "$left" -lt "$limit" ] && limit=$left
    echo "== $name"
    if [ "$limit" -lt 20 ]; then
        echo "skipped: $limit s left of the budget" | tee "$work/$name.txt"
        status=1
        return
    fi
    local t0=$SECONDS
    timeout "$limit" "$@" >"$work/$name.txt" 2>&1
    local rc=$?
    last_rc=$rc
    echo "   exit $rc after $((SECONDS - t0)) s (limit $limit s)"
    [ "$rc" -eq 0 ] || status=1
    tail -n 8 "$work/$name.txt"
    pack
}
step doctor 60 "${gpugrade[@]}" doctor
step solutions 200 "${gpugrade[@]}" grade solutions --backend "$backend" --sandbox none \
    --format json --output "$work/solutions.json"
# exit 1 is "graded, points lost": data. Any other exit (the grader failed, or ran past its limit)
# would fail the same way in the grader's later steps, so they are skipped and the device time is
# left for a rerun after a fix; bench_gpu.py and allreduce_gpus.py do not grade and still run.
grading_broke=0
solutions_rc=$last_rc
case $last_rc in 0|1) ;; *) grading_broke=1 ;; esac
sim=()
[ "$backend" = sim ] && sim=(--sim)
step bench_gpu 120 "$py" benchmarks/bench_gpu.py "${sim[@]}" --json "$work/bench_gpu.json" \
    --markdown "$work/bench_gpu.md"
graded() {  # graded STEP LIMIT COMMAND...: a grader step, skipped once grading broke
    if [ "$grading_broke" -eq 1 ]; then
        echo "== $1"
        echo "skipped: grading the solutions failed (exit $solutions_rc), so this would too" | tee "$work/$1.txt"
        status=1
        return
    fi
    step "$@"
}
graded noise 150 "$py" benchmarks/harness_noise.py --backend "$backend" --runs 10 --budget-s 135 --out "$work" \
    --exercise vector_add --stage 1
step allreduce_gpus 60 "$py" benchmarks/allreduce_gpus.py --json "$work/allreduce_gpus.json"
jobs=$(($(nproc) / 2))  # grades at once: half the cores, 1 to 8 (each grade runs several processes)
[ "$jobs" -lt 1 ] && jobs=1
[ "$jobs" -gt 8 ] && jobs=8
# the known-wrong submissions that tell most on a GPU, in that order: the speed criteria's (each
# grade's timings take turns on the GPU: all 52 took over 291 s on an H200, 2026-12-04) and the
# host-computed answers' (what the data flow must refuse there too)
graded validate $((deadline - SECONDS - 15)) "${gpugrade[@]}" validate --backend "$backend" --sandbox none \
    --jobs "$jobs" vector_add_grid_stride_small_fixed_grid reduction_grid_stride_atomic_per_warp \
    vector_add_two_passes reduction_per_thread_atomics matmul_uncoalesced matmul_bank_conflicts \
    matmul_coarsened_one_k_loop reduction_tree_bank_conflicts vector_add_numpy_on_the_host \
    matmul_host_answer_as_kernel_constant \
    reduction_final_sum_on_the_host vector_add_saxpy_extra_traffic reduction_shuffle_one_atomic_per_block \
    vector_add_chunked_grid_stride reduction_shuffle_in_float64 vector_add_grid_stride_one_element_at_a_time
finish
exit $status
