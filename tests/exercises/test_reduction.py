"""Grading tests for the reduction exercise (run by `gpugrade`, never by a bare `pytest`).

Inputs are drawn from a secret per-run seed; the reference sum is computed here, in the judge, in
float64 (int64 for integers). float32 sums are compared with a tolerance that grows with sqrt(n)
times the sum of magnitudes (so cancellation cannot make it vanish); int32 sums must be exact.
"""

import numpy as np
import pytest

from grader.judge.correctness import WrongAnswer, reduction_rtol
from grader.judge import require_kernel_launch
from grader.judge.grid import expect_one_grid, on_the_stock_grid
from grader.judge.perf import expect_gpu_speed, expect_performance

SIZES = [1, 31, 33, 1000, 1025, 40000]       # below a warp, around it, not a multiple of a block
GRID_THREADS = 8 * 132 * 256                 # stage 3: grid_blocks() x THREADS_PER_BLOCK on the simulator's 132 SMs
# past the grid twice over: a stride that is not the grid's shows, and a loop that steps by the block
# (n / 256 iterations for each of the grid's threads) still ends in seconds on the simulator
MANY = 2 * GRID_THREADS + 7
STRIDE_SIZES = [1, 31, 33, 1025, MANY]
INT_SIZES = [1, 1000, MANY]
PERF_N = 40000
GPU_PERF_N = 1 << 24                         # on a GPU: big enough to time the kernels, not the launch


def _ids(sizes):
    return [f"n={n}" for n in sizes]


def _int32_input(rng, n: int) -> np.ndarray:
    """Small integers, a third of them negative (a positive sum), plus `_cancelling_millions`, each made odd:
    one element alone (n = 1) is then an integer float32 cannot hold, and so is every warp's sum, half the
    time each (a float32 step loses an answer on every run, not on half of them)."""
    x = (rng.integers(1, 1000, n) * rng.choice(np.array([-1, 1, 1]), n)).astype(np.int32)
    return (x + _cancelling_millions(rng, n)) | 1


def _other_int32_input(arguments: list, rng) -> list:
    """The replay's input (grader.judge.replay): another `_int32_input` whose sum is another (drawn from
    the input's own values, the millions would not cancel, and the sum would not fit an int32)."""
    x = arguments[0]
    other = _int32_input(rng, x.size)
    if int(other.astype(np.int64).sum()) == int(x.astype(np.int64).sum()):
        other[0] += 1
    return [other]


def _cancelling_millions(rng, n: int) -> np.ndarray:
    """int32 terms of 2^24 to 1.25 * 2^24 in pairs (v, -v), shuffled, and one of 2^24 + 2^20 where n is odd
    (alone, past 2^24 whatever is added to it): they add up to 0 or that, but the partial sums a kernel
    makes of them (a thread's, a warp's, a block's) are integers float32 cannot always hold, so a float32
    step on the way (a float32 shared array of warp sums) loses the exact answer. Every element has one, so
    an element missed or added twice is never mistaken for rounding. Warp sums stay inside int32 (under
    2^31 even for 96 terms of one sign: 3 per lane on the grid)."""
    half = rng.integers(1 << 24, (1 << 24) + (1 << 22), n // 2, dtype=np.int64)
    terms = np.concatenate([half, -half, np.full(n % 2, (1 << 24) + (1 << 20), np.int64)])
    return rng.permutation(terms).astype(np.int32)


def _expect_sum(got, x: np.ndarray, what: str) -> None:
    value = np.asarray(got)
    if value.size != 1 or value.dtype.kind not in "iuf":
        if got is None:
            raise WrongAnswer(f"{what}: expected one number, got None (nothing returned: a missing `return`?)")
        raise WrongAnswer(f"{what}: expected one number, got {type(got).__name__} {np.shape(got)}")
    value = value.reshape(())
    if x.dtype.kind in "iu":
        expected = int(x.astype(np.int64).sum())
        if value.dtype.kind not in "iu" or int(value) != expected:
            got_text = str(value.item()) + (f" ({value.dtype})" if value.dtype.kind not in "iu" else "")
            raise WrongAnswer(f"{what}: expected exactly {expected} ({x.dtype}), got {got_text}"
                              f"{_pattern((int(value), x)) if value.dtype.kind in 'iu' else ''}")
        return
    expected = float(x.astype(np.float64).sum())
    allowed = reduction_rtol(x.size) * float(np.abs(x).astype(np.float64).sum()) + 1e-6
    if not np.isfinite(float(value)) or abs(float(value) - expected) > allowed:
        raise WrongAnswer(f"{what}: expected {expected:.7g}, got {float(value):.7g} "
                          f"(off by {abs(float(value) - expected):.3g}, allowed {allowed:.3g})"
                          f"{_pattern((float(value), x)) or _whole(value, expected)}")


def _whole(value: np.ndarray, expected: float) -> str:
    """A float sum come back a whole number (or as integers): an integer array or variable on the way."""
    if value.dtype.kind in "iu":
        return (f"; it comes back as {value.dtype} where the sum of {expected:.3g} has a fraction: an integer array "
                f"or variable on the way (an int32 output of the atomics?) drops every fraction: keep the sum in "
                f"float32")
    if np.isfinite(float(value)) and float(value).is_integer() and not float(expected).is_integer():
        return ("; a whole number where the sum has a fraction: an integer array or variable on the way (an int32 "
                "output of the atomics, an int accumulator?) drops every fraction: keep the sum in float32")
    return ""


def _pattern(*sums: tuple[float, np.ndarray]) -> str:
    """What wrong sums (value, x) are exactly, as a note ("" when nothing fits): a part of x, else
    elements counted again, else every lane's partial sum added, else a multiple of the right sum,
    else (integers) the right sum rounded.
    Integer sums are matched exactly, as the int32 result holds them: modulo 2^32, as a GPU wraps."""
    return next((note for fits in (_part, _largest, _counted_again, _every_lane, _multiple, _rounded)
                 if (note := _closest(fits, sums))), "")


def _misfit(value, sums, allowed, x: np.ndarray):
    """How far `value` is from each of `sums`, in units of `allowed` (<= 1: it fits): for a float
    sum; for an integer one 0 where it is the same number modulo 2^bits of x's dtype, else inf."""
    if x.dtype.kind not in "iu":
        return np.abs(value - sums) / allowed
    wrap = (1 << (8 * x.dtype.itemsize)) - 1
    return np.where(((np.asarray(sums, np.int64) - np.int64(value)) & wrap) == 0, 0.0, np.inf)


def _exact(x: np.ndarray) -> np.ndarray:
    """x in the type its sums are judged in: int64 for integers (wrapping as the GPU's int32 does, modulo
    2^32), float64 otherwise."""
    return x.astype(np.int64 if x.dtype.kind in "iu" else np.float64)


def _closest(fits, sums) -> str:
    """Of the notes `fits(value, x)` finds within their tolerance ({note: misfit in units of it}),
    the one fitting every (value, x) of `sums`, closest in the worst of them ("" when none does).
    Judged over two calls, a stray fit of one call (some candidate fits it closer than the true one
    now and then: a loop stepping by 256 over 1056 blocks and one stepping by 32 over 811 differ by
    a hair at n = 540,679) no longer hides the note both calls fit."""
    found = [fits(value, x) for value, x in sums]
    every = [note for note in found[0] if all(note in f for f in found[1:])]  # (in the order found: ties go alike each run)
    return min(every, key=lambda note: max(f[note] for f in found)) if every else ""


def _confirmed(wrong: WrongAnswer, student, function: str, value, x: np.ndarray, rng) -> WrongAnswer:
    """`wrong` with its note on what the wrong sum `value` is (`_pattern`) kept only when a second
    call on other values of the same size gives a sum that note fits too: some 40 candidate parts,
    each fitting a stray wrong sum now and then, would otherwise name a bug the code does not have.
    The note kept is the one fitting both sums closest."""
    value = np.asarray(value)
    if x.dtype.kind != "f" or value.size != 1 or value.dtype.kind != "f":
        return wrong  # (integer sums match exactly or not at all)
    first = (float(value.reshape(())), x)
    note = _pattern(first)
    if not note or note not in str(wrong):
        return wrong
    again = (rng.standard_normal(x.size) + 1.0).astype(np.float32)
    try:
        second = np.asarray(student.call(function, again).value)
        both = _pattern(first, (float(second.reshape(())), again)) if second.size == 1 else ""
    except Exception:  # a second call that fails confirms nothing; the verdict is the first call's
        both = ""
    return wrong if both == note else WrongAnswer(str(wrong).replace(note, both, 1), wrong.wrong)


def _counted_again(value: float, x: np.ndarray) -> dict[str, float]:
    """A sum that counts element k min(k // b + 1, g) times: a grid-stride loop of g blocks of b
    threads that steps by the block's size, not the grid's (each block adds everything from its
    own start on); or k + 1 times: one that steps by 1. Of the candidates, one or another fits a
    stray sum now and then; the true one fits far closer (rounding only), and fits a second call's
    sum too (`_closest`)."""
    n, x64 = x.size, _exact(x)
    fits = {}
    # a loop stepping by 1 (each thread adds everything from its own index on) on at least n threads
    weights = np.arange(1, n + 1, dtype=x64.dtype)
    allowed = reduction_rtol(n * (n + 1) // 2) * float(np.abs(x64) @ weights) + 1e-6
    off = float(_misfit(value, x64 @ weights, allowed, x))
    if n > 1 and off <= 1:
        fits["; that is exactly the sum with element k counted k + 1 times: each thread adds every element from "
             "its own index on, stepping by 1 (a grid-stride loop steps by the whole grid: cuda.gridsize(1))"] = off
    for b in (1 << j for j in range(5, 11)):
        if b >= n:
            break
        # element k lies in chunk j = k // b; counted min(j + 1, g) times. For every g at once:
        # sum(g) = sum_{j < g} (j + 1) * chunk_j + g * sum_{j >= g} chunk_j
        chunks = -(-n // b)
        g = np.arange(2, chunks + 1)
        sums, magnitudes, terms = (_count_weighted(np.add.reduceat(v, np.arange(0, n, b)), g)
                                   for v in (x64, np.abs(x64).astype(np.float64), np.ones(n)))
        allowed = np.array([reduction_rtol(int(t)) for t in terms]) * magnitudes + 1e-6
        off = _misfit(value, sums, allowed, x)
        # a candidate that cannot be told from g times the sum (a few small blocks over a large x) is
        # left to `_multiple`, which names g x the sum: the simpler bug
        plain = _misfit(g * x64.sum(), sums, allowed, x) <= 1
        for i in np.flatnonzero((off <= 1) & ~plain):
            times = f"k // {b} + 1" if g[i] >= chunks else f"min(k // {b} + 1, {g[i]})"
            fits[f"; that is exactly the sum with element k counted {times} times: each block adds every "
                 f"element from its own start on, stepping by the block's size {b} (a grid-stride loop "
                 f"steps by the whole grid: cuda.gridsize(1))"] = float(off[i])
    return fits


def _shuffle_down_weights() -> np.ndarray:
    """How many times each lane's value is in the sum of all 32 lanes after a shfl_down_sync tree
    (offsets 16, 8, 4, 2, 1): lane l gains lane l + offset's value, and a lane whose source is past
    the warp gets its own (CUDA's shfl_down returns the caller's value there)."""
    lanes = np.arange(32)
    held = np.eye(32, dtype=np.int64)  # held[l]: lane l's value as counts of each lane's input
    for offset in (16, 8, 4, 2, 1):
        held = held + held[np.where(lanes + offset < 32, lanes + offset, lanes)]
    return held.sum(axis=0)


def _every_lane(value: float, x: np.ndarray) -> dict[str, float]:
    """A shuffle reduction whose every lane adds its value to the total, not lane 0 only: element k
    counted as often as lane k % 32's value reaches the lanes' values."""
    weights = _shuffle_down_weights()[np.arange(x.size) % 32]
    x64 = _exact(x)
    allowed = reduction_rtol(int(weights.sum())) * float(np.abs(x64).astype(np.float64) @ weights) + 1e-6
    off = float(_misfit(value, x64 @ weights.astype(x64.dtype), allowed, x))
    if x.size < 2 or off > 1:
        return {}
    return {"; that is exactly the total when every lane adds what it holds after the shuffles: only lane 0 "
            "holds the warp's sum (add it under `if cuda.laneid == 0:`)": off}


def _count_weighted(chunk: np.ndarray, g: np.ndarray) -> np.ndarray:
    """For each g: the sum over chunks j of chunk[j] * min(j + 1, g)."""
    zero = np.zeros(1, chunk.dtype)
    below = np.concatenate((zero, np.cumsum(chunk * np.arange(1, chunk.size + 1))))   # sum_{j < g} (j+1) c_j
    above = np.concatenate((np.cumsum(chunk[::-1])[::-1], zero))                        # sum_{j >= g} c_j
    return below[g] + g * above[g]


_MORE_THAN_ONCE = (": values are added more than once (a shuffle offset or stride of a whole warp or block adds a "
                   "lane's own value, or a step that is not halved)")
# a sum added once by every lane of a warp, or by every warp of a block of 256 threads
_TIMES = {32: ", once for each lane of a warp: does every lane add the warp's sum to the total, where only lane 0 "
              "should (`if cuda.laneid == 0:`)? Else" + _MORE_THAN_ONCE[1:],
          8: ", once for each of the 8 warps of a block of 256 threads: does every warp add the block's sum, "
             "where only warp 0 should? Else" + _MORE_THAN_ONCE[1:]}


def _multiple(value: float, x: np.ndarray) -> dict[str, float]:
    """What a sum that is a whole multiple (or fraction) of the right one says about the bug
    (within 1% of it)."""
    expected = _exact(x).sum()
    if not expected or not np.isfinite(value):
        return {}
    fits = {}
    for k in range(2, 65):
        if x.dtype.kind in "iu":  # exactly k times, or 1/k of, the sum
            more = _misfit(value, expected * k, 1, x)
            fewer = _misfit(value, expected // k, 1, x) if expected % k == 0 else np.inf
        else:  # within 1% of it
            more, fewer = abs(value / expected - k) / (0.01 * k), abs(value / expected - 1 / k) / (0.01 / k)
        if more <= 1:
            fits[f"; that is {k}x the right sum{_TIMES.get(k, _MORE_THAN_ONCE)}"] = float(more)
        if fewer <= 1:
            fits[f"; that is 1/{k} of the right sum: some partial sums are never added (a missed block, lane "
                 f"or step)"] = float(fewer)
    return fits


def _rounded(value, x: np.ndarray) -> dict[str, float]:
    """An integer sum off by no more than float32 rounds it: a float32 step on the way."""
    if x.dtype.kind not in "iu":
        return {}
    exact = _exact(x)
    off, bound = abs(int(value) - int(exact.sum())), float(np.finfo(np.float32).eps) * float(np.abs(exact).sum())
    if not 0 < off <= bound:
        return {}
    return {"; that is the right sum rounded: some partial sum went through float32, which holds integers exactly "
            "only up to 2^24 = 16,777,216 (keep integer partial sums in x.dtype: "
            "`cuda.shared.array(WARPS_PER_BLOCK, x.dtype)`, an integer accumulator)": off / bound}


def _part(value: float, x: np.ndarray) -> dict[str, float]:
    """Which part of x a wrong sum is exactly the sum of (within that part's own tolerance): the
    first p elements, one element in every k, or the first w of every b (the first warp of each
    block): each says which partial sums never reach the total."""
    n, x64 = x.size, _exact(x)
    scale = np.abs(x64).astype(np.float64)
    powers = [1 << j for j in range(1, 11)]                       # 2 .. 1024
    parts = [(f"the first {p} elements (x[0:{p}]): the other elements' partial sums are never added",
              np.s_[:p]) for p in sorted({p for b in powers if b >= 32 for p in (b, n // b * b)}) if 0 < p < n]
    parts += [(f"one element in every {k} (x[::{k}]): only each group's first thread kept its own value, the "
               f"others' never reach it (a missing shuffle or tree step?)", np.s_[::k]) for k in powers if k < n]
    for w in (16, 8, 4, 2):  # a warp's shuffle tree starting below offset 16 (WARP_SIZE // 4 ...)
        if w < n:
            offsets = ", ".join(str(o) for o in (16, 8, 4, 2) if o >= w)
            parts.append((f"the first {w} elements of every 32 (lanes 0..{w - 1} of each warp): lane 0 only "
                           f"gathers from the first {w} lanes, so the shuffle {'step' if w == 16 else 'steps'} with offset "
                           f"{offsets} {'is' if w == 16 else 'are'} missing "
                           f"(the offsets start at WARP_SIZE // 2 and halve down to 1)", (np.arange(n) % 32) < w))
    for b in (b for b in powers if 64 <= b < n):
        mask = (np.arange(n) % b) < 32
        parts.append((f"the first 32 elements of every {b} (the first warp of each block of {b} threads): only one "
                      f"warp per block adds its sum (lane 0 of every warp is `cuda.laneid == 0`, not "
                      f"`threadIdx.x == 0`)", mask))
    fits = {}  # (parts of one size fit by chance now and then: `_closest` takes the closest of both calls)
    for what, part in parts:
        size = int(np.count_nonzero(part)) if isinstance(part, np.ndarray) else len(range(n)[part])
        off = float(_misfit(value, x64[part].sum(), _part_tolerance(size, float(scale[part].sum())), x))
        if off <= 1:
            fits[f"; that is exactly the sum of {what}"] = off
    return fits


def _largest(value: float, x: np.ndarray) -> dict[str, float]:
    """A sum that is the largest of the warps' sums (or of the blocks', or the largest element):
    partial sums combined with cuda.atomic.max (or a max of any kind) where they are to be added."""
    n, x64 = x.size, _exact(x)
    fits = {}
    for size in (1, 32, 64, 128, 256, 512, 1024):
        if size >= n:
            break
        starts = np.arange(0, n, size)
        sums = np.add.reduceat(x64, starts)
        top = int(np.argmax(sums))
        chunk = x64[starts[top]:starts[top] + size]
        off = float(_misfit(value, sums[top], _part_tolerance(chunk.size, float(np.abs(chunk).sum())), x))
        if off <= 1:
            what = ("the largest element" if size == 1 else "the largest of the warps' sums" if size == 32
                    else f"the largest of the sums of each {size} elements (a block of {size} threads each?)")
            fits[f"; that is exactly {what}: partial sums combined with a maximum (cuda.atomic.max?) where they "
                 f"are to be added (cuda.atomic.add)"] = off
    return fits


# A part fits within eps * sqrt(its size) * its magnitude: a float32 sum in any order a kernel uses
# (sequential included) stays inside; stray sums of as many other elements rarely do (4x this, the
# test's own tolerance, named about 2.5% of them; this and a second call: under 0.05%).
PART_RTOL = 1.0


def _part_tolerance(size: int, magnitude: float) -> float:
    return PART_RTOL * float(np.finfo(np.float32).eps) * np.sqrt(max(size, 1)) * magnitude + 1e-6


def _check(student, backend, rng, function, n, dtype=np.float32):
    if student.stock_simulator and function == "reduce_grid_stride":  # its grid is 16 blocks: n as far past it
        n = on_the_stock_grid(n, GRID_THREADS)
    # Inputs with a positive mean and no zeros: a sum near 0 would let a doubled or halved result
    # (a wrong shuffle offset) pass inside the tolerance.
    x = _int32_input(rng, n) if dtype == np.int32 else (rng.standard_normal(n) + 1.0).astype(np.float32)
    result = student.call(function, x)
    what = f"{function}(x) with n={n} {np.dtype(dtype).name}"
    # (the check judges the answer first, then the data flow and the replay)
    try:
        require_kernel_launch(result, backend, check=lambda args, got: _expect_sum(got, args[0], what),
                              draw=_other_int32_input if dtype == np.int32 else None)
    except WrongAnswer as wrong:
        raise _confirmed(wrong, student, function, result.value, x, rng) from None
    return result, x


def _perf(student, reference, stage_spec, backend, rng, function, n=PERF_N):
    """The stage's counter criteria on the simulator's launches (beside the GPU on a GPU machine),
    then its speed threshold: the modelled time on the simulator, the measured time on a GPU."""
    result, x = _check(student, backend, rng, function, n)
    expect_performance(stage_spec, result.launches, reference.call(function, x).launches, modelled=backend == "sim")
    if backend != "sim":  # timed on the GPU against the reference, outputs re-checked
        size = min(n, 4096) if student.stock_simulator else GPU_PERF_N  # the stock simulator is slow
        sets = [((rng.standard_normal(size) + 1.0).astype(np.float32),) for _ in range(2)]
        expect_gpu_speed(student, reference, stage_spec, function, sets,
                         lambda args, out: _expect_sum(out, args[0], f"{function}(x), timed, n={size}"),
                         bytes_moved=4.0 * size, library=("sum", (size,)))


# -- stage 1: shared-memory tree --------------------------------------------------------------
@pytest.mark.stage(1)
@pytest.mark.points(1)
@pytest.mark.parametrize("n", SIZES, ids=_ids(SIZES))
def test_tree(student, backend, rng, n):
    """Tree reduction per block in shared memory, relaunched on the partial sums."""
    _check(student, backend, rng, "reduce_tree", n)


@pytest.mark.stage(1)
@pytest.mark.points(2)
@pytest.mark.perf
def test_tree_is_conflict_free(student, reference, stage_spec, backend, rng):
    """On the simulator: each input loaded once, contiguous active threads (no bank conflicts), then the
    modelled time against the reference's; on a GPU: the measured time against the reference's (the
    stage's speed threshold)."""
    _perf(student, reference, stage_spec, backend, rng, "reduce_tree")


# -- stage 2: warp shuffles -------------------------------------------------------------------
@pytest.mark.stage(2)
@pytest.mark.points(1)
@pytest.mark.parametrize("n", SIZES, ids=_ids(SIZES))
def test_shuffle(student, backend, rng, n):
    """Shuffle tree within each warp, then one atomic per warp."""
    _check(student, backend, rng, "reduce_shuffle", n)


@pytest.mark.stage(2)
@pytest.mark.points(2)
@pytest.mark.perf
def test_shuffle_one_atomic_per_warp(student, reference, stage_spec, backend, rng):
    """On the simulator: warp shuffles used, no more atomics than one per warp, then the modelled time
    against the reference's; on a GPU: the measured time against the reference's (the stage's speed
    threshold)."""
    _perf(student, reference, stage_spec, backend, rng, "reduce_shuffle")


# -- stage 3: grid stride + shuffle, any dtype ------------------------------------------------
@pytest.mark.stage(3)
@pytest.mark.points(1)
@pytest.mark.parametrize("n", STRIDE_SIZES, ids=_ids(STRIDE_SIZES))
def test_grid_stride_float32(student, backend, rng, n):
    """float32, sizes below a warp up to past twice the grid."""
    _check(student, backend, rng, "reduce_grid_stride", n)


@pytest.mark.stage(3)
@pytest.mark.points(1)
@pytest.mark.parametrize("n", INT_SIZES, ids=_ids(INT_SIZES))
def test_grid_stride_int32_exact(student, backend, rng, n):
    """int32 input: the exact integer sum, as an integer."""
    _check(student, backend, rng, "reduce_grid_stride", n, np.int32)


@pytest.mark.stage(3)
@pytest.mark.points(1)
def test_grid_stride_uses_a_fixed_grid(student, backend, rng):
    """The launch configuration does not depend on n."""
    small, _ = _check(student, backend, rng, "reduce_grid_stride", 100)
    large, x = _check(student, backend, rng, "reduce_grid_stride", MANY)
    expect_one_grid({100: small.launches, x.size: large.launches})  # (the simulator's, beside a GPU)


@pytest.mark.stage(3)
@pytest.mark.points(2)
@pytest.mark.perf
def test_grid_stride_atomics_and_coalescing(student, reference, stage_spec, backend, rng):
    """On the simulator: atomics independent of n (one per warp of the fixed grid), coalesced loads, then
    the modelled time against the reference's; on a GPU: the measured time against the reference's (the
    stage's speed threshold)."""
    # a fixed grid's atomics do not grow with n: modelled at n where the loads, which do, dominate as
    # they do on a GPU (at 2 grids, 1,056 atomics queued at one address outlast the loads; at 8 grids,
    # 8.7 MB of loads outlast them 1.4 to 1 on an H100, twice the bytes shows; more would not fit the
    # simulator's memory limit where numba-cuda is missing and kernels run thread by thread)
    _perf(student, reference, stage_spec, backend, rng, "reduce_grid_stride", 8 * GRID_THREADS + 7)
