"""Grading tests for the all-reduce exercise (run by `gpugrade`, never by a bare `pytest`).

Each call is `f(ranks, bufs)` with one buffer per rank (grader/backends/ranks.py), drawn from the
secret per-run seed; the sum is computed here, in the judge, and every rank's buffer is checked.
int32 inputs are witnesses: a wrong element says whose contributions it holds. Traffic, the add
work and the timeline come from the simulated GPUs' report (grader/judge/collective.py), on a GPU
machine from the same call on the simulator beside it.
"""

import math

import numpy as np
import pytest

from grader.judge import require_kernel_launch
from grader.judge.collective import (PIPELINE_BUFFER_BYTES, Traffic, believed_busbw, expect_allreduced,
                                     expect_busbw, expect_no_host_traffic, expect_pipelined, expect_ring_traffic,
                                     expect_total_traffic, model_beside_allreduce, modelled_busbw,
                                     modelled_nccl_busbw, rank_inputs, size_text, timeline_of)
from grader.judge.perf import expect_performance

CASES = [(2, 1), (3, 2), (4, 1003), (8, 40009)]   # n = 1, n = N - 1 < N, n not divisible by N
INT_CASES = [(3, 1003), (8, 45)]
TRAFFIC_N = 1003
TIMELINE = (4, 40009)
# stage 3 against NCCL: full credit from this fraction of NCCL's busbw (the reference: 0.43 modelled on
# H100s, where one Python thread issuing every copy and add is the bound NCCL does not have)
NCCL_FULL_RATIO = 0.35


def _ids(cases):
    return [f"N={ranks},n={n}" for ranks, n in cases]


def _run(student, backend, rng, function, ranks, n, dtype=np.float32):
    inputs = rank_inputs(rng, ranks, n, dtype)
    result = student.call_ranks(function, inputs)
    what = f"{function}() with {ranks} ranks, n={n} {np.dtype(dtype).name}"
    expect_allreduced(result.value, inputs, what)
    # nothing through the host (first: staged through it, the data-flow check below would say the
    # answer was computed on the host, though kernels computed it)
    expect_no_host_traffic(Traffic.of(result, ranks, required=False), inputs[0].nbytes)
    # the adds are kernels, every output computed from every input (and following them)
    require_kernel_launch(result, backend, check=lambda args, outputs: expect_allreduced(outputs, args, what))
    return result, inputs


def _traffic(student, reference, stage_spec, backend, rng, function, ranks, n=TRAFFIC_N):
    result, inputs = _run(student, backend, rng, function, ranks, n)
    traffic = Traffic.of(result, ranks)
    expect_total_traffic(traffic, inputs[0].nbytes)
    # the add work against the reference's on the same buffers (course.toml criteria)
    expect_performance(stage_spec, result.launches, reference.call_ranks(function, inputs).launches, modelled=False)
    return traffic, inputs


# -- stage 1: reduce to rank 0, then broadcast ------------------------------------------------------
@pytest.mark.stage(1)
@pytest.mark.points(1)
@pytest.mark.parametrize("ranks,n", CASES, ids=_ids(CASES))
def test_naive(student, backend, rng, ranks, n):
    """Every rank ends with the sum; rank 0 gathers and broadcasts."""
    _run(student, backend, rng, "allreduce_naive", ranks, n)


@pytest.mark.stage(1)
@pytest.mark.points(1)
@pytest.mark.parametrize("ranks,n", INT_CASES, ids=_ids(INT_CASES))
def test_naive_int32(student, backend, rng, ranks, n):
    """int32, exactly."""
    _run(student, backend, rng, "allreduce_naive", ranks, n, np.int32)


@pytest.mark.stage(1)
@pytest.mark.points(2)
@pytest.mark.perf
def test_naive_moves_each_buffer_once(student, reference, stage_spec, backend, rng):
    """At most 2 (N - 1) buffers between ranks, nothing through the host, no extra add work."""
    _traffic(student, reference, stage_spec, backend, rng, "allreduce_naive", 4)


# -- stage 2: the ring --------------------------------------------------------------------------------
@pytest.mark.stage(2)
@pytest.mark.points(1)
@pytest.mark.parametrize("ranks,n", CASES, ids=_ids(CASES))
def test_ring(student, backend, rng, ranks, n):
    """Reduce-scatter then all-gather: every rank ends with the sum."""
    _run(student, backend, rng, "allreduce_ring", ranks, n)


@pytest.mark.stage(2)
@pytest.mark.points(1)
@pytest.mark.parametrize("ranks,n", INT_CASES, ids=_ids(INT_CASES))
def test_ring_int32(student, backend, rng, ranks, n):
    """int32, exactly (a missing all-gather names the ranks whose contributions are missing)."""
    _run(student, backend, rng, "allreduce_ring", ranks, n, np.int32)


@pytest.mark.stage(2)
@pytest.mark.points(2)
@pytest.mark.perf
@pytest.mark.parametrize("ranks", [2, 4, 8], ids=lambda r: f"N={r}")
def test_ring_traffic(student, reference, stage_spec, backend, rng, ranks):
    """Only the ring's links, each at most 2 (N - 1) chunks in 2 (N - 1) messages of at most
    ceil(n / N) elements (as stage 3's pieces are bounded); per rank the same."""
    traffic, _ = _traffic(student, reference, stage_spec, backend, rng, "allreduce_ring", ranks)
    expect_ring_traffic(traffic, TRAFFIC_N, 4, messages_per_link=2 * (ranks - 1),
                        largest_elements=math.ceil(TRAFFIC_N / ranks))


# -- stage 3: pipelined over streams ------------------------------------------------------------------
PIPELINED_CASES = CASES + [(3, 5)]  # n < N x slices: some pieces are empty


@pytest.mark.stage(3)
@pytest.mark.points(1)
@pytest.mark.parametrize("ranks,n", PIPELINED_CASES, ids=_ids(PIPELINED_CASES))
def test_pipelined(student, backend, rng, ranks, n):
    """Every rank ends with the sum, and no stream race (a missing event wait fails here)."""
    _run(student, backend, rng, "allreduce_pipelined", ranks, n)


@pytest.mark.stage(3)
@pytest.mark.points(1)
@pytest.mark.parametrize("ranks,n", INT_CASES, ids=_ids(INT_CASES))
def test_pipelined_int32(student, backend, rng, ranks, n):
    """int32, exactly."""
    _run(student, backend, rng, "allreduce_pipelined", ranks, n, np.int32)


@pytest.mark.stage(3)
@pytest.mark.points(2)
@pytest.mark.perf
@pytest.mark.parametrize("ranks", [4, 8], ids=lambda r: f"N={r}")
def test_pipelined_traffic(student, reference, stage_spec, backend, rng, ranks):
    """The ring's bytes, in pieces: at least twice 2 (N - 1) messages per link, none over half a chunk."""
    traffic, _ = _traffic(student, reference, stage_spec, backend, rng, "allreduce_pipelined", ranks)
    expect_ring_traffic(traffic, TRAFFIC_N, 4, min_messages_per_link=2 * 2 * (ranks - 1),
                        largest_elements=math.ceil(TRAFFIC_N / (2 * ranks)))


@pytest.mark.stage(3)
@pytest.mark.points(3)
@pytest.mark.perf
def test_pipelined_overlaps_copies_and_adds(student, reference, stage_spec, backend, rng):
    """On the modelled timeline (the stream order of the simulated GPUs, scheduled by the
    performance model as on a 1 GiB buffer, where the links are the bound): no host wait inside the
    loop, copies and adds overlapping, and no slower than the reference."""
    ranks, n = TIMELINE
    result, inputs = _run(student, backend, rng, "allreduce_pipelined", ranks, n)
    mine = timeline_of(result, stage_spec.gpu.model_gpu, inputs[0].nbytes, PIPELINE_BUFFER_BYTES)
    theirs = timeline_of(reference.call_ranks("allreduce_pipelined", inputs), stage_spec.gpu.model_gpu,
                         inputs[0].nbytes, PIPELINE_BUFFER_BYTES)
    expect_pipelined(stage_spec, mine, theirs)


@pytest.mark.stage(3)
@pytest.mark.points(2)
@pytest.mark.perf
def test_pipelined_against_nccl(student, reference, stage_spec, backend, rng):
    """busbw (nccl-tests' definition) against NCCL's all-reduce, on a 1 GiB buffer as the timeline
    test (on 64 MiB one Python thread issuing every copy and add is the bound, and an honest 8
    slices scored 0): on the simulator both modelled (NCCL as a fraction of the preset's link); on
    N GPUs both measured in the same run, NCCL in the trusted reference runner; on fewer GPUs than
    ranks not gradable (NCCL cannot put several ranks on one GPU)."""
    ranks, n = TIMELINE
    if backend == "sim":
        result, inputs = _run(student, backend, rng, "allreduce_pipelined", ranks, n)
        mine = modelled_busbw(timeline_of(result, stage_spec.gpu.model_gpu, inputs[0].nbytes, PIPELINE_BUFFER_BYTES),
                              ranks)
        expect_busbw(mine, modelled_nccl_busbw(stage_spec.gpu.model_gpu), NCCL_FULL_RATIO,
                     f"modelled on {stage_spec.gpu.model_gpu}s, {size_text(PIPELINE_BUFFER_BYTES)}",
                     stage_spec.gpu.model_gpu, ranks, PIPELINE_BUFFER_BYTES)
        return
    if student.stock_simulator:
        pytest.skip("numba's stock simulator stands in for the GPU here: nothing to time")
    gpus = student.gpu_count()
    if gpus < ranks:
        pytest.skip(f"needs {ranks} GPUs to compare with NCCL; this machine has {gpus} "
                    f"(NCCL cannot put several ranks on one GPU)")
    if not hasattr(reference, "nccl_allreduce"):
        pytest.skip("NCCL is timed in the reference solutions' runner, and this course copy has none")
    result, inputs = _run(student, backend, rng, "allreduce_pipelined", ranks, n)  # right, on GPUs and simulator
    count = PIPELINE_BUFFER_BYTES // 4
    from grader.judge.student import Unavailable

    try:
        nccl = reference.nccl_allreduce(ranks, count)
    except Unavailable as exc:
        pytest.skip(f"NCCL is not available on this machine: {exc}")
    theirs = reference.time_ranks("allreduce_pipelined", ranks, count)  # the trusted runner's, for the bound
    mine = student.time_ranks("allreduce_pipelined", ranks, count)
    # the model beside the measurement, from the simulator's record of the same call (and the bound on it)
    model = model_beside_allreduce(result, reference.call_ranks("allreduce_pipelined", inputs), inputs[0].nbytes,
                                   ranks, nccl.device, stage_spec.gpu.model_gpu, measured_bytes=count * 4)
    expect_busbw(mine.busbw_gbs() * 1e9, nccl.busbw_gbs() * 1e9, NCCL_FULL_RATIO, f"measured on {ranks} GPUs",
                 f"{gpus} x {nccl.device or 'GPU'}", ranks, count * 4, model=model,
                 believed_up_to=believed_busbw(model, theirs.busbw_gbs() * 1e9))
