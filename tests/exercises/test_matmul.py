"""Grading tests for the matmul exercise (run by `gpugrade`, never by a bare `pytest`).

Inputs are drawn from a secret per-run seed; the reference product is computed here, in the judge,
in float64. Performance tests compare the simulator's counters with the reference solution's on
the same input (criteria in course.toml) and count only when the stage's correctness tests pass.
"""

import numpy as np
import pytest

from grader.judge.correctness import WrongAnswer, expect_close
from grader.judge import Returns, require_kernel_launch
from grader.judge.perf import expect_gpu_speed, expect_performance

# (M, K, N): degenerate, one exact tile, odd sizes that are not multiples of 16 or 32 in any
# dimension, K a multiple of 16 but not of 32, non-square both ways.
SHAPES = [(1, 1, 1), (16, 16, 16), (33, 17, 65), (64, 48, 40), (70, 37, 50)]
# many blocks of many warps for every stage; M and N multiples of 128 and K of 32, so that a tile
# of up to 128 outputs a side (a thread coarsened over 4 columns 32 apart, as in PMPP) computes no
# padding the reference's does not (on 64 x 80 x 96 that tile computed 25% padding columns, which
# a GPU-sized problem does not, and lost the stage's speed points)
PERF_SHAPE = (128, 96, 128)
GPU_PERF_SHAPE = (1024, 1024, 1024)  # on a GPU: big enough to time the kernels, not the launch


def _ids(shapes):
    return [f"{m}x{k}x{n}" for m, k, n in shapes]


def _inputs(rng, m, k, n):
    return (rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32))


def _expect_product(got, A, B, what):
    expected = (A.astype(np.float64) @ B.astype(np.float64)).astype(np.float32)
    # float32 GEMM: rounding grows with K and with the magnitude of the terms, not of the sum
    scale = np.abs(A).astype(np.float64) @ np.abs(B).astype(np.float64)
    try:
        expect_close(got, expected, rtol=1e-5, atol=1e-5 * scale + 1e-6, what=f"{what} with A {A.shape}, B {B.shape}")
    except WrongAnswer as wrong:
        note = (_part_of_k(got, A, B, scale) or _swapped_roles(got, A, B)) if "elements wrong" in str(wrong) else ""
        if not note:
            raise
        raise WrongAnswer(str(wrong) + note, wrong.wrong, wrong.right_prefix, wrong.right_corner, wrong.size) from None


PARTIAL_SUMS_MAX = 1 << 22  # (M x K x N partial sums: the small shapes only, never a GPU's timed ones)


def _part_of_k(got, A, B, scale) -> str:
    """What a product wrong everywhere is, when it is the sum over only the first or the last k of
    the inner dimension: a tile loop that stops short (the tile count rounded down), or
    accumulators set to zero inside the tile loop (only the last tile's products are left)."""
    (M, K), N = A.shape, B.shape[1]
    if K < 2 or M * K * N > PARTIAL_SUMS_MAX or not isinstance(got, np.ndarray) or got.shape != (M, N):
        return ""
    # prefix[:, k, :]: the sum of the products of inner indices 0..k
    prefix = np.cumsum(A.astype(np.float64)[:, :, None] * B.astype(np.float64)[None, :, :], axis=1)
    total = prefix[:, -1, :]
    value = got.astype(np.float64)

    def fits(candidate) -> bool:
        return bool(np.all(np.abs(value - candidate) <= 1e-5 * np.abs(candidate) + 1e-5 * scale + 1e-6))

    for k in range(K - 1, 0, -1):
        if fits(prefix[:, k - 1, :]):
            last = "last" if K - k == 1 else f"last {K - k}"
            return (f"; that is exactly A[:, :{k}] @ B[:{k}, :]: the products of the {last} of the {K} "
                    f"columns of A never reach C: does the loop over k stop short of K = A.shape[1]? (a tile loop "
                    f"rounds the number of tiles up, (K + TILE - 1) // TILE, and loads the last tile's part past "
                    f"K as zeros)")
    for k in range(1, K):
        if fits(total - prefix[:, k - 1, :]):
            return (f"; that is exactly A[:, {k}:] @ B[{k}:, :], the last tile's products only: the earlier "
                    f"tiles' sums are lost: are the accumulators set to 0 inside the tile loop? (set them once, "
                    f"before it)")
    return ""


def _swapped_roles(got, A, B) -> str:
    """What a square product is when it is A @ B transposed (row and col swapped in an index) or
    B @ A (A and B swapped): said plainly, not read as a missed tile (non-square shapes go out of
    bounds or leave rows unwritten instead, which the simulator and short_grid tell)."""
    (M, K), N = A.shape, B.shape[1]
    if M != N or M < 2 or not isinstance(got, np.ndarray) or got.shape != (M, N):
        return ""
    A64, B64, value = A.astype(np.float64), B.astype(np.float64), got.astype(np.float64)
    swap = ("are row and col swapped in an index? C[row, col] is the sum over k of A[row, k] * B[k, col], and "
            "cuda.grid(2) gives (x, y) = (col, row)")
    candidates = [((A64 @ B64).T, (np.abs(A64) @ np.abs(B64)).T, f"the transpose of A @ B: {swap}")]
    if K == M:  # (B @ A has C's shape only when all three are equal)
        operands = "are A and B swapped? C[row, col] is the sum over k of A[row, k] * B[k, col]"
        candidates += [(B64 @ A64, np.abs(B64) @ np.abs(A64), f"B @ A: {operands}"),
                       ((B64 @ A64).T, (np.abs(B64) @ np.abs(A64)).T,
                        f"the transpose of B @ A: {operands}, and {swap}")]
    for candidate, scale, what in candidates:
        if np.all(np.abs(value - candidate) <= 1e-5 * np.abs(candidate) + 1e-5 * scale + 1e-6):
            return f"; that is exactly {what}"
    return ""


def _check(student, backend, rng, function, shape):
    A, B = _inputs(rng, *shape)
    result = student.call(function, A, B, returns=Returns((A.shape[0], B.shape[1]), np.dtype(np.float32)))
    # (the check judges the answer first, then the data flow and the replay)
    require_kernel_launch(result, backend, check=lambda args, out: _expect_product(out, *args, f"{function}(A, B)"))
    return result, (A, B)


def _perf(student, reference, stage_spec, backend, rng, function):
    """The stage's counter criteria on the simulator's launches (beside the GPU on a GPU machine),
    then its speed threshold: the modelled time on the simulator, the measured time on a GPU."""
    result, args = _check(student, backend, rng, function, PERF_SHAPE)
    (M, K), N = args[0].shape, args[1].shape[1]
    expect_performance(stage_spec, result.launches, reference.call(function, *args).launches,
                       modelled=backend == "sim", flops=2.0 * M * K * N)
    if backend != "sim":  # timed on the GPU against the reference, outputs re-checked
        M, K, N = (16, 16, 16) if student.stock_simulator else GPU_PERF_SHAPE  # the stock simulator is slow
        sets = [_inputs(rng, M, K, N) for _ in range(2)]
        expect_gpu_speed(student, reference, stage_spec, function, sets,
                         lambda args, out: _expect_product(out, *args, what=f"{function}(A, B), timed"),
                         bytes_moved=4.0 * (M * K + K * N + M * N), returns=Returns((M, N), np.dtype(np.float32)),
                         flops=2.0 * M * K * N, library=("matmul", (M, K, N)))


# -- stage 1: naive ---------------------------------------------------------------------------
@pytest.mark.stage(1)
@pytest.mark.points(1)
@pytest.mark.parametrize("shape", SHAPES, ids=_ids(SHAPES))
def test_naive(student, backend, rng, shape):
    """One thread per element of C, for any M, K, N."""
    _check(student, backend, rng, "matmul_naive", shape)


@pytest.mark.stage(1)
@pytest.mark.points(2)
@pytest.mark.perf
def test_naive_is_coalesced(student, reference, stage_spec, backend, rng):
    """On the simulator: a warp reads a row of B and writes a row of C (sectors per request), then the
    modelled time against the reference's; on a GPU: the measured time against the reference's (the
    stage's speed threshold)."""
    _perf(student, reference, stage_spec, backend, rng, "matmul_naive")


# -- stage 2: shared-memory tiles -------------------------------------------------------------
@pytest.mark.stage(2)
@pytest.mark.points(1)
@pytest.mark.parametrize("shape", SHAPES, ids=_ids(SHAPES))
def test_tiled(student, backend, rng, shape):
    """Tiles of A and B in shared memory, any M, K, N (partial tiles padded with zeros)."""
    _check(student, backend, rng, "matmul_tiled", shape)


@pytest.mark.stage(2)
@pytest.mark.points(3)
@pytest.mark.perf
def test_tiled_reuses_shared_memory(student, reference, stage_spec, backend, rng):
    """On the simulator: global loads about 1/TILE of the naive kernel's, no bank conflicts, then the
    modelled time against the reference's; on a GPU: the measured time against the reference's (the
    stage's speed threshold)."""
    _perf(student, reference, stage_spec, backend, rng, "matmul_tiled")


# -- stage 3: coarsening, register blocking ---------------------------------------------------
@pytest.mark.stage(3)
@pytest.mark.points(1)
@pytest.mark.parametrize("shape", SHAPES, ids=_ids(SHAPES))
def test_coarsened(student, backend, rng, shape):
    """COARSE outputs per thread from BIG_TILE x BIG_TILE tiles, any M, K, N."""
    _check(student, backend, rng, "matmul_coarsened", shape)


@pytest.mark.stage(3)
@pytest.mark.points(3)
@pytest.mark.perf
def test_coarsened_reuses_registers_without_bank_conflicts(student, reference, stage_spec, backend, rng):
    """On the simulator: fewer global and shared loads than tiling, every shared access conflict-free, then
    the modelled time against the reference's; on a GPU: the measured time against the reference's (the
    stage's speed threshold)."""
    _perf(student, reference, stage_spec, backend, rng, "matmul_coarsened")
