"""Lane compaction (grader/sim/simt/compaction.py): a divergent loop runs on its active lanes
only, and nothing a kernel or its grader can see changes: outputs, counters, per-thread tables
and findings are those of the uncompacted lockstep run and of the per-thread executor."""

import numpy as np
import pytest
from numba import cuda, int64

import grader.sim as sim
from grader.sim.errors import OutOfBoundsError
from grader.sim.simt import compaction
from test_executor_agreement import COUNTERS, assert_same_finding, dev

GRID, BLOCK = 8, 128  # 1024 lanes in one batch: above compaction.MIN_LANES


@cuda.jit(device=True)
def halve_or_triple(n, limit):
    if n > limit:
        return -1  # a return from inside the caller's compacted loop
    return n // 2 if n % 2 == 0 else 3 * n + 1


@cuda.jit
def divergent_steps(start, steps, peak, hist, rows, limit):
    i = cuda.grid(1)
    if i >= start.size:
        return
    seen = cuda.local.array(4, int64)
    for k in range(4):
        seen[k] = 0
    row = rows[i % rows.shape[0]]  # a view whose offset differs between lanes
    tail = start[i:]  # and one whose length does
    n = start[i]
    count = 0
    high = n
    while n != 1:
        if n < 0:
            break
        n = halve_or_triple(n, limit)
        count += 1
        seen[count % 4] += 1
        if n > high:
            high = n
        if count > 120:  # a kernel return from inside the compacted loop
            peak[i] = -count
            return
        if count % 7 == 3:
            continue
        if n % 5 == 0:
            cuda.atomic.add(hist, n % 8, 1)
        if count == 20:
            tail = start[i // 2:]
    steps[i] = count + row[count % 3] + len(tail) * 1000 + tail[0] * 100000
    peak[i] = high * 10 + seen[1]


def make(n=1000, limit=10**6):
    def args():
        start = np.arange(1, n + 1, dtype=np.int64) * 7 % 997 + 1
        return [dev(start), dev(np.zeros(n, np.int64)), dev(np.zeros(n, np.int64)),
                dev(np.zeros(8, np.int64)), dev(np.arange(9, dtype=np.int64).reshape(3, 3)),
                np.int64(limit)]
    return args


def run(executor, make_args, compact=True, kernel=None):
    """`kernel` (default divergent_steps) on `make_args()` under `executor`, compacting or not:
    (the device arrays' contents after, the launch record, the lane counts compacted to)."""
    kernel = kernel or divergent_steps
    calls = []
    original = compaction.Compaction.compact

    def counted(self, values):
        calls.append(self.n)
        return original(self, values)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(compaction.Compaction, "compact", counted)
        # small vectors compact too here: the loop compacts again as lanes leave
        mp.setattr(compaction, "MIN_LANES", 64 if compact else 1 << 40)
        with sim.installed(executor=executor), sim.trace() as records:
            args = make_args()
            kernel[GRID, BLOCK](*args)
            outputs = [a.copy_to_host() for a in args if hasattr(a, "copy_to_host")]
    (record,) = records
    assert record.executor == executor
    return outputs, record, calls


def test_compacted_lockstep_agrees_with_uncompacted_and_per_thread():
    compacted, rec_c, calls = run("simt", make())
    assert len(calls) >= 2 and calls[0] == GRID * BLOCK, calls  # compacted, then again
    plain, rec_p, none = run("simt", make(), compact=False)
    assert none == []
    threaded, rec_t, _ = run("thread", make())
    for other, rec in ((plain, rec_p), (threaded, rec_t)):
        for a, b in zip(compacted, other):
            np.testing.assert_array_equal(a, b)
        for key in COUNTERS:
            assert rec_c.counters[key] == rec.counters[key], key
        for key in ("global_loads", "global_stores", "shared_loads", "shared_stores"):
            np.testing.assert_array_equal(rec_c.threads[key], rec.threads[key])
    assert rec_c.counters == rec_p.counters  # every counter, per line too
    assert rec_c.lines == rec_p.lines


@cuda.jit
def overrun_in_a_divergent_loop(start, out):
    i = cuda.grid(1)
    if i < start.size:
        n = start[i]
        k = 0
        while n != 1:
            n = n // 2 if n % 2 == 0 else 3 * n + 1
            k += 1
        out[k * 8 + i % 8] = n  # past the end for the lanes that looped longest


def test_a_finding_inside_a_compacted_loop_is_the_same():
    def args():
        return [dev(np.arange(1, 1025, dtype=np.int64)), cuda.device_array(1000, np.int64)]
    errors = {}
    for name, executor, compact in (("simt", "simt", True), ("plain", "simt", False),
                                    ("thread", "thread", True)):
        with pytest.MonkeyPatch.context() as mp:
            if not compact:
                mp.setattr(compaction, "MIN_LANES", 1 << 40)
            with sim.installed(executor=executor), pytest.raises(sim.SimError) as info:
                overrun_in_a_divergent_loop[GRID, BLOCK](*args())
        errors[name] = info.value
    assert_same_finding(errors, OutOfBoundsError, "out[k * 8 + i % 8] = n")
    assert str(errors["simt"]) == str(errors["plain"])


@cuda.jit
def shuffles_in_a_divergent_loop(start, out):
    i = cuda.grid(1)
    n = start[i]
    total = 0
    while n != 1:
        n = n // 2 if n % 2 == 0 else 3 * n + 1
        total += cuda.shfl_down_sync(0xFFFFFFFF, n, 1)
    out[i] = total


def test_a_loop_with_warp_collectives_is_never_compacted():
    calls = []
    original = compaction.Compaction.compact
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(compaction.Compaction, "compact",
                   lambda self, values: calls.append(1) or original(self, values))
        with sim.installed(executor="simt"):
            out = cuda.device_array(1024, np.int64)
            start = np.arange(1024, dtype=np.int64) // 32 + 1  # warps diverge, lanes of one do not
            shuffles_in_a_divergent_loop[GRID, BLOCK](dev(start), out)
    assert calls == []
    assert out.copy_to_host()[0] == 0 and out.copy_to_host()[32 * 26] > 0


@cuda.jit
def sparse_rows(starts, cols, vals, x, y):
    row = cuda.grid(1)
    if row < y.size:
        acc = 0.0
        for k in range(starts[row], starts[row + 1]):  # a trip count per lane
            acc += vals[k] * x[cols[k]]
        y[row] = acc


def test_a_for_loop_with_per_lane_bounds_compacts_and_agrees():
    rng = np.random.default_rng(1)
    lengths = np.where(rng.random(1000) < 0.1, rng.integers(20, 60, 1000), rng.integers(0, 3, 1000))
    starts = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    cols = rng.integers(0, 50, starts[-1]).astype(np.int64)
    vals = rng.random(starts[-1])

    def args():
        return [dev(starts), dev(cols), dev(vals), dev(rng.random(50) * 0 + np.arange(50)),
                cuda.device_array(1000)]
    runs = {}
    for name, executor, compact in (("simt", "simt", True), ("plain", "simt", False),
                                    ("thread", "thread", True)):
        outputs, record, calls = run(executor, args, compact, sparse_rows)
        runs[name] = (outputs[-1], record, calls)
    assert runs["simt"][2] and not runs["plain"][2]
    for other in ("plain", "thread"):
        np.testing.assert_array_equal(runs["simt"][0], runs[other][0])
        for key in COUNTERS:
            assert runs["simt"][1].counters[key] == runs[other][1].counters[key], (other, key)
    assert runs["simt"][1].counters == runs["plain"][1].counters


@cuda.jit(device=True)
def steps_to_one(n, cap):
    k = 0
    while True:  # compacts inside the device function; lanes return from inside the loop
        if n == 1:
            return k
        if k == cap:
            return -k
        n = n // 2 if n % 2 == 0 else 3 * n + 1
        k += 1


@cuda.jit
def calls_a_compacting_function(start, out, cap):
    i = cuda.grid(1)
    if i < start.size:
        out[i] = steps_to_one(start[i], cap) * 10 + i % 7


def test_returns_from_inside_a_compacted_loop_of_a_device_function():
    def args():
        return [dev(np.arange(1, 1001, dtype=np.int64)), cuda.device_array(1000, np.int64), np.int64(100)]
    runs = {}
    for name, executor, compact in (("simt", "simt", True), ("plain", "simt", False),
                                    ("thread", "thread", True)):
        outputs, record, calls = run(executor, args, compact, calls_a_compacting_function)
        runs[name] = (outputs[-1], record, calls)
    assert len(runs["simt"][2]) >= 2 and not runs["plain"][2]
    for other in ("plain", "thread"):
        np.testing.assert_array_equal(runs["simt"][0], runs[other][0])
        for key in COUNTERS:
            assert runs["simt"][1].counters[key] == runs[other][1].counters[key], (other, key)


@cuda.jit
def sum_into_first(a, n):
    i = cuda.grid(1)
    if i == 0:
        for k in range(1, n):  # no iteration when n == 1 (numba-cuda's cuda.reduce on a partial block)
            a[0] += a[k]


@pytest.mark.parametrize("n", [1, 5])
def test_a_compactable_loop_that_runs_no_iteration(n):
    make = lambda: [cuda.to_device(np.arange(8, dtype=np.float32)), n]  # noqa: E731
    with sim.installed(executor="auto"), sim.trace() as records:
        a = make()[0]
        sum_into_first[1, 32](a, n)
    assert records[0].executor == "simt" and records[0].fallback_reason is None
    assert a.copy_to_host()[0] == sum(range(n))
