"""Per-line request counts: what lets a diagnostic say "uncoalesced access at line L"."""

import numpy as np
import pytest
from numba import cuda

import grader.sim as sim


@cuda.jit
def gather(a, out, stride):
    i = cuda.grid(1)
    if i < out.size:
        v = a[i]
        w = a[(i * stride) % a.size]
        out[i] = v + w


@cuda.jit
def transpose_tile(a, out):
    tile = cuda.shared.array((32, 32), np.float32)
    x, y = cuda.threadIdx.x, cuda.threadIdx.y
    tile[y, x] = a[y, x]
    cuda.syncthreads()
    out[y, x] = tile[x, y]


def _lines(launch, space):
    return {(e["line"], e["kind"]): e for e in launch.lines if e["space"] == space}


@pytest.mark.parametrize("executor", ["simt", "thread"])
def test_global_requests_and_sectors_per_line(executor):
    a = np.arange(4096, dtype=np.float32)
    out = np.zeros(1024, np.float32)
    with sim.installed(executor=executor), sim.trace() as launches:
        gather[4, 256](a, out, 32)
    first = gather.py_func.__code__.co_firstlineno
    lines = _lines(launches[0], "global")
    assert lines[(first + 4, "load")]["sectors"] == 4 * 32      # a[i]: coalesced, 4 per request
    assert lines[(first + 5, "load")]["sectors"] == 32 * 32     # strided: one sector per lane
    assert all(e["requests"] == 32 for e in lines.values())
    counters = launches[0].counters
    assert sum(e["sectors"] for e in lines.values()) == counters["global_load_sectors"] + counters["global_store_sectors"]


@pytest.mark.parametrize("executor", ["simt", "thread"])
def test_shared_wavefronts_per_line_find_the_column_read(executor):
    a = np.arange(1024, dtype=np.float32).reshape(32, 32)
    out = np.zeros_like(a)
    with sim.installed(executor=executor), sim.trace() as launches:
        transpose_tile[1, (32, 32)](a, out)
    assert np.array_equal(out, a.T)
    first = transpose_tile.py_func.__code__.co_firstlineno
    lines = _lines(launches[0], "shared")
    assert lines[(first + 4, "store")]["wavefronts"] == 32           # row write: 1 per request
    assert lines[(first + 6, "load")]["wavefronts"] == 32 * 32       # column read: 32-way conflict


@pytest.mark.parametrize("executor", ["simt", "thread"])
@pytest.mark.parametrize("checkers", ["on", "off"])  # off: the SIMT path's known-pattern fast path
def test_each_line_keeps_one_warps_costliest_request(executor, checkers):
    """The lanes and byte addresses of one request, for the feedback's pictures: a strided load's
    32 lanes touch 32 sectors, a column read of a 32-wide float32 tile puts 32 words in one bank."""
    checks = None if checkers == "on" else sim.Checks(off=("races", "uninitialised"))
    a = np.arange(4096, dtype=np.float32)
    out = np.zeros(1024, np.float32)
    t = np.arange(1024, dtype=np.float32).reshape(32, 32)
    with sim.installed(executor=executor, checks=checks), sim.trace() as launches:
        gather[4, 256](a, out, 32)
        transpose_tile[1, (32, 32)](t, np.zeros_like(t))
    first = gather.py_func.__code__.co_firstlineno
    lines = _lines(launches[0], "global")
    strided = lines[(first + 5, "load")]["sample"]
    assert strided["lanes"] == list(range(32)) and strided["itemsize"] == 4
    assert len({address // 32 for address in strided["addresses"]}) == 32
    coalesced = lines[(first + 4, "load")]["sample"]
    assert len({address // 32 for address in coalesced["addresses"]}) == 4
    first = transpose_tile.py_func.__code__.co_firstlineno
    shared = _lines(launches[1], "shared")
    column = shared[(first + 6, "load")]["sample"]
    words = {address // 4 for address in column["addresses"]}
    assert len(words) == 32 and {w % 32 for w in words} == {column["addresses"][0] // 4 % 32}
    row = shared[(first + 4, "store")]["sample"]
    assert len({address // 4 % 32 for address in row["addresses"]}) == 32  # 32 banks, one pass


@cuda.jit
def count_all(out):
    cuda.atomic.add(out, 0, 1)


@pytest.mark.parametrize("executor", ["simt", "thread"])
def test_atomic_operations_are_counted_per_line(executor):
    out = np.zeros(1, np.int64)
    with sim.installed(executor=executor), sim.trace() as launches:
        count_all[2, 64](out)
    line = count_all.py_func.__code__.co_firstlineno + 2
    assert out[0] == 128
    assert [e for e in launches[0].lines if e["kind"] == "atomic"] == [
        {"line": line, "space": "global", "kind": "atomic", "atomics": 128}]
