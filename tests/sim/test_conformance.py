"""numba-cuda's own test suite (shipped in its wheel) on grader.sim: no module may pass fewer
tests than recorded in tests/sim/conformance/expected.json, and the total must beat numba-cuda's
stock simulator. docs/CONFORMANCE.md lists every test that does not pass, with its reason;
`tests/sim/conformance/numba_suite.py --full --thread --stock --write` re-records both."""

import importlib.util
import json
import sys
from collections import namedtuple
from pathlib import Path

import numpy as np
import pytest
from numba import cuda

import grader.sim as sim

HERE = Path(__file__).resolve().parent / "conformance"
sys.path.insert(0, str(HERE))
import numba_suite as conformance  # noqa: E402

needs_suite = [
    pytest.mark.slow,
    pytest.mark.skipif(conformance.cudapy_dir() is None,
                       reason="numba-cuda (with its test suite) is not installed"),
    pytest.mark.skipif(importlib.util.find_spec("filecheck") is None,
                       reason="numba-cuda's test modules import `filecheck` (dev extra)"),
]


def suite_test(f):
    for mark in needs_suite:
        f = mark(f)
    return f


@pytest.fixture(scope="module")
def timed_run():
    outcomes, _ = conformance.run(conformance.fast_modules(), "auto",
                                  deselect=conformance.fast_deselect(), timeout=300)
    return outcomes


@pytest.fixture(scope="module")
def expected():
    return json.loads((HERE / "expected.json").read_text())


@suite_test
def test_every_module_passes_at_least_its_recorded_count(timed_run, expected):
    counts = conformance.summarise(timed_run)
    below = []
    for module in conformance.fast_modules():
        floor = expected["modules"][module]["fast_passed_min"]
        got = counts.get(module, {}).get("passed", 0)
        if got < floor:
            lost = sorted(n for n, e in timed_run.items() if conformance.module_of(n) == module
                          and e["outcome"] != "passed"
                          and n not in expected["not_passing"])
            detail = "; ".join(f"{n}: {timed_run[n]['message']}" for n in lost[:5])
            below.append(f"{module}: {got} passed < {floor} recorded ({detail or 'see numba_suite.py'})")
    assert not below, "\n".join(below)


@suite_test
@pytest.mark.xfail(strict=False, reason="not yet: bugs B1-B7 and the fp16 gap leave grader.sim "
                   "below the stock simulator's free passes (docs/CONFORMANCE.md)")
def test_total_beats_the_stock_simulator(timed_run, expected):
    modules = conformance.fast_modules()
    ours = sum(1 for n, e in timed_run.items()
               if conformance.module_of(n) in modules and e["outcome"] == "passed")
    stock = sum(max(expected["modules"][m].get("stock", {}).get("passed", 0),
                    expected["modules"][m]["stock_reference"] or 0) for m in modules)
    assert ours > stock, f"grader.sim passes {ours} tests, the stock simulator {stock}"


# ---------------------------------------------------------------- the bugs the suite found
# Minimal reproducers of docs/CONFORMANCE.md's B1-B5, expected to fail until fixed (not strict:
# a fix shows as XPASS; then drop the mark, and re-record with numba_suite.py --write).
@pytest.fixture(params=["simt", "thread"])
def executor(request):
    sim.install(executor=request.param)
    try:
        yield request.param
    finally:
        sim.uninstall()


def _tuple_index(a):
    g = cuda.grid(2)
    if g[0] < a.shape[0] and g[1] < a.shape[1]:
        a[g] = g[0] * 10 + g[1]


def test_b1_index_held_in_a_tuple_variable(executor):
    if executor == "simt":
        pytest.xfail("B1: SIMT takes a tuple-valued index variable as one index")
    a = np.zeros((4, 4), np.int32)
    cuda.jit(_tuple_index)[(1, 1), (4, 4)](a)
    np.testing.assert_array_equal(a, np.add.outer(np.arange(4) * 10, np.arange(4)))


def _clz(ary, c):
    ary[0] = cuda.clz(c)


@pytest.mark.xfail(reason="B2: the scalar types of an eager signature are ignored", strict=False)
def test_b2_eager_signature_types_scalars(executor):
    a = np.zeros(1, np.int32)
    cuda.jit("void(int32[:], int32)")(_clz)[1, 1](a, 0x00100000)
    assert a[0] == 11


def _popc(ary, c):
    ary[0] = cuda.popc(c)


def test_b3_popc_of_an_unsigned_integer(executor):
    if executor == "simt":
        pytest.xfail("B3: SIMT fails on cuda.popc of a uint32")
    a = np.zeros(1, np.uint32)
    cuda.jit(_popc)[1, 1](a, np.uint32(0xF0F0))
    assert a[0] == 8


def _round_to(ary, c, nd):
    ary[0] = round(c, nd)


def test_b4_round_with_ndigits(executor):
    if executor == "simt":
        pytest.xfail("B4: SIMT rejects round()'s ndigits")
    a = np.zeros(1, np.float32)
    cuda.jit(_round_to)[1, 1](a, np.float32(0.34567), 2)
    assert a[0] == np.float32(0.35)


Point = namedtuple("Point", ("x", "y"))


def _fields(p, out):
    out[0] = p.x
    out[1] = p.y


@pytest.mark.xfail(reason="B5: namedtuple arguments lose their field names", strict=False)
def test_b5_namedtuple_argument(executor):
    out = np.zeros(2, np.int64)
    cuda.jit(_fields)[1, 1](Point(3, 4), out)
    np.testing.assert_array_equal(out, [3, 4])
