"""Regression tests for what numba-cuda's own test suite found missing or wrong in grader.sim
(docs/CONFORMANCE.md): eager signatures (B2, typing at decoration), tuple-valued indices (B1),
popc/brev of unsigned integers (B3), round(x, ndigits) (B4), namedtuple arguments (B5), tuples
of arrays under executor auto (B6), activemask in divergent branches (B7), cuda.fp16,
`cuda.current_context()`, and the size guard for GPU-sized launches. Each runs under the SIMT
and the per-thread executor (and "auto" where the fallback is the point)."""

import sys
from collections import namedtuple

import numpy as np
import pytest
from numba import cuda

import grader.sim as sim
from grader.sim import patching


# ---------------------------------------------------------------- eager signatures (B2)
def _clz(ary, c):
    ary[0] = cuda.clz(c)


def test_b2_python_int_converted_to_the_declared_int32(executor):
    kernel = cuda.jit("void(int32[:], int32)")(_clz)
    a = np.zeros(1, np.int32)
    kernel[1, 1](a, 0x00100000)
    assert a[0] == 11  # 32-bit clz, not 64-bit
    kernel[1, 1](a, 0xFFFFFFFF)  # wraps to -1, as a C cast
    assert a[0] == 0


def _brev(ary, c):
    ary[0] = cuda.brev(c)


def test_b2_python_int_converted_to_the_declared_uint32(executor):
    a = np.zeros(1, np.uint32)
    cuda.jit("void(uint32[:], uint32)")(_brev)[1, 1](a, 0x000030F0)
    assert a[0] == 0x0F0C0000


def _round3(ary, c):
    ary[0] = round(c, 3)


def test_b2_python_float_rounded_to_the_declared_float32(executor):
    # float32(0.3425) is 0.34250000119..., which rounds up; float64 0.3425 rounds down
    a = np.zeros(1, np.float32)
    cuda.jit("void(float32[:], float32)")(_round3)[1, 1](a, 0.3425)
    assert a[0] == np.float32(0.343)


def _nonliteral_grid(x):
    cuda.grid(x)


def test_numba_typing_error_comes_from_the_decorator():
    from numba.core.errors import TypingError

    with sim.installed():
        with pytest.raises(TypingError, match="RequireLiteralValue"):
            cuda.jit("void(int32)")(_nonliteral_grid)


def test_declared_signatures_are_per_installation():
    with sim.installed() as s:
        kernel = cuda.jit("void(int32[:], int32)")(_clz)
        assert len(s.signatures.declared(kernel)) == 1
    with sim.installed() as s:
        assert s.signatures.declared(kernel) == []


# ---------------------------------------------------------------- B1, B3, B4
def _tuple_index(a):
    g = cuda.grid(2)
    if g[0] < a.shape[0] and g[1] < a.shape[1]:
        a[g] = g[0] * 10 + g[1]


def test_b1_index_held_in_a_tuple_variable(executor):
    a = np.zeros((4, 4), np.int32)
    with sim.trace() as launches:
        cuda.jit(_tuple_index)[(1, 1), (4, 4)](a)
    np.testing.assert_array_equal(a, np.add.outer(np.arange(4) * 10, np.arange(4)))
    assert launches[0].executor == executor


def _popc(ary, c):
    ary[0] = cuda.popc(c)


@pytest.mark.parametrize("value, bits", [(np.uint16(0xFFFF), 16), (np.uint32(0xF0F0), 8),
                                         (np.uint64(2**64 - 1), 64), (np.int32(-1), 32)])
def test_b3_popc_of_integers_of_every_width(executor, value, bits):
    a = np.zeros(1, np.int32)
    cuda.jit(_popc)[1, 1](a, value)
    assert a[0] == bits


def test_b3_brev_of_an_unsigned_64_bit_integer(executor):
    a = np.zeros(1, np.uint64)
    cuda.jit(_brev)[1, 1](a, np.uint64(0x000030F0000030F0))
    assert a[0] == 0x0F0C00000F0C0000


def _round_to(ary, c, nd):
    ary[0] = round(c, nd)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_b4_round_with_ndigits(executor, dtype):
    a = np.zeros(1, dtype)
    kernel = cuda.jit(_round_to)
    for value, nd in [(0.34567, 2), (1234.5, -2), (0.125, 2), (0.5425, 3)]:
        kernel[1, 1](a, dtype(value), nd)
        assert a[0] == dtype(round(float(dtype(value)), nd)), (value, nd)
    # numba-cuda's algorithm (CPython's fallback one), not numpy's nor CPython's dtoa: float32
    # 2.675 is 2.67499995 -> 2.67 (numpy: 2.68); float64 2.675 * 100 is 267.5 -> 2.68 (Python
    # itself: 2.67)
    kernel[1, 1](a, dtype(2.675), 2)
    assert a[0] == dtype(2.67 if dtype is np.float32 else 2.68)


def test_b4_round_returns_x_when_scaling_overflows(executor):
    a = np.zeros(1, np.float64)
    cuda.jit(_round_to)[1, 1](a, np.finfo(np.float64).max, 12)
    assert a[0] == np.finfo(np.float64).max  # numpy's round gives inf here


# ---------------------------------------------------------------- B5, B6
Point = namedtuple("Point", ("x", "y", "r"))


def _fields(p, out, out_r):
    out[0] = p.x
    out[1] = p.y
    out_r[0] = p.r


def test_b5_namedtuple_argument(executor):
    out, out_r = np.zeros(2, np.int64), np.zeros(1, np.float64)
    with sim.trace() as launches:
        cuda.jit(_fields)[1, 1](Point(3, 4, 2.5), out, out_r)
    np.testing.assert_array_equal(out, [3, 4])
    assert out_r[0] == 2.5
    assert launches[0].executor == executor  # SIMT reads the fields itself, no fallback


def _tuple_of_arrays(x):
    i = cuda.grid(1)
    if i < len(x[0]):
        x[0][i] = x[1][i] + x[2][i]


def test_b6_tuple_of_arrays_falls_back_under_auto():
    x0 = np.zeros(10)
    with sim.installed(executor="auto"), sim.trace() as launches:
        cuda.jit(_tuple_of_arrays)[1, 10]((x0, np.ones(10), np.full(10, 3.0)))
    np.testing.assert_array_equal(x0, 4.0)
    assert launches[0].executor == "thread"
    assert "tuple argument holding arrays" in launches[0].fallback_reason


# ---------------------------------------------------------------- B7
def _activemask(x):
    i = cuda.grid(1)
    if i % 2 == 0:
        x[i] = cuda.activemask()
    else:
        x[i] = cuda.activemask()


def test_b7_activemask_in_divergent_branches(executor):
    out = np.zeros(32, np.uint32)
    cuda.jit(_activemask)[1, 32](out)
    np.testing.assert_array_equal(out[0::2], 0x55555555)
    np.testing.assert_array_equal(out[1::2], 0xAAAAAAAA)


# ---------------------------------------------------------------- cuda.fp16
def _half_ops(r, a, b, c):
    r[0] = cuda.fp16.hadd(a[0], b[0])
    r[1] = cuda.fp16.hfma(a[0], b[0], c)
    r[2] = cuda.fp16.hmax(a[0], b[0])
    r[3] = cuda.fp16.hneg(a[0])
    r[4] = cuda.fp16.hsqrt(b[0])
    r[5] = a[0] * b[0]  # float16 operators stay float16


def test_fp16_arithmetic_in_half_precision(executor):
    r = np.zeros(6, np.float16)
    a, b = np.array([3.1415926], np.float16), np.array([1.57], np.float16)
    with sim.trace() as launches:
        cuda.jit(_half_ops)[1, 1](r, a, b, np.float16(0.5))
    np.testing.assert_array_equal(r, [a[0] + b[0], np.float16(a[0] * b[0] + np.float16(0.5)),
                                      b[0] if b[0] > a[0] else a[0], -a[0],
                                      np.sqrt(b[0]), a[0] * b[0]])
    assert launches[0].executor == executor


def _half_compare(r, a, b):
    r[0] = cuda.fp16.hlt(a, b)
    r[1] = cuda.fp16.heq(a, a)
    r[2] = cuda.fp16.hgt(a, b)


def test_fp16_comparisons_give_booleans(executor):
    r = np.zeros(3, np.bool_)
    cuda.jit("void(b1[:], f2, f2)")(_half_compare)[1, 1](r, np.float16(2), np.float16(3))
    np.testing.assert_array_equal(r, [True, True, False])


def test_float16_as_a_dtype(executor):
    from numba import types

    def kernel(out, x):
        tmp = cuda.local.array(2, types.float16)
        tmp[0] = x
        out[0] = cuda.fp16.hexp2(tmp[0])

    out = np.zeros(1, np.float16)
    cuda.jit(kernel)[1, 1](out, np.float16(3))
    assert out[0] == np.float16(8)


# ---------------------------------------------------------------- the driver context
def test_current_context_answers_for_the_simulated_device():
    from numba.cuda.cudadrv import devices

    with sim.installed(devices=2):
        ctx = cuda.current_context()
        assert ctx.device.compute_capability == (9, 0)
        assert ctx.can_access_peer(1) and not ctx.can_access_peer(0)
        assert devices.get_context().device is cuda.get_current_device()
        with cuda.gpus[1]:
            assert cuda.current_context().device.id == 1
        assert devices.get_context(1).device.id == 1
        assert ctx.get_memory_info().total > 0
        with pytest.raises(sim.NotSimulatedError, match="memalloc"):
            ctx.memalloc(16)


def test_current_context_is_restored_by_uninstall():
    from numba.cuda.cudadrv import devices

    api = sys.modules["numba.cuda.api"]
    before = (cuda.current_context, api.current_context, devices.get_context)
    with sim.installed():
        assert cuda.current_context is not before[0]
        assert devices.get_context is not before[2]
    assert (cuda.current_context, api.current_context, devices.get_context) == before
    assert patching.cuda_module() is cuda


# ---------------------------------------------------------------- GPU-sized launches
def _noop(a):
    pass


def test_a_gpu_sized_launch_is_refused_by_name(executor):
    with pytest.raises(sim.NotSimulatedError, match="threads per launch"):
        cuda.jit(_noop)[22_121_216, 256](np.zeros(1))


# ---------------------------------------------------------------- stores wrap as numba's do
def _ballot_into_uint32(ary):
    ballot = cuda.ballot_sync(0xFFFFFFFF, True)  # int32: -1 with every lane
    ary[cuda.threadIdx.x] = ballot


def _big_into_uint8(ary, big):
    x = big * 2  # an int64 local (held as a Python int by the per-thread executor)
    ary[0] = x
    ary[1] += x


@pytest.mark.parametrize("checks", [None, sim.Checks(off={"races", "uninitialised"})],
                         ids=["recorded", "compiled"])
def test_stores_convert_integers_with_wrap_around(executor, checks):
    """An int32 -1 into a uint32 array is 0xFFFFFFFF, an int64 300 into uint8 is 44: numba
    converts as a C cast; numpy refuses a Python int out of the element type's range."""
    sim.install(executor=executor, checks=checks)
    a = np.zeros(32, np.uint32)
    cuda.jit("void(uint32[:])")(_ballot_into_uint32)[1, 32](a)
    assert (a == 0xFFFFFFFF).all()
    b = np.zeros(2, np.uint8)
    cuda.jit(_big_into_uint8)[1, 1](b, 150)
    assert list(b) == [44, 44]


# ---------------------------------------------------------------- transpose, as numba-cuda's
def test_a_device_arrays_transpose_is_two_d_only_as_in_numba_cuda():
    # numba-cuda: `d.T` of a 1-D array raises NotImplementedError (numpy's would be the array
    # itself); a 2-D one is transposed; the identity axes give the array back
    with sim.installed():
        d1 = cuda.to_device(np.arange(4, dtype=np.float32))
        with pytest.raises(NotImplementedError, match="non-2D"):
            d1.T
        assert d1.transpose((0,)) is d1
        d2 = cuda.to_device(np.arange(6, dtype=np.float32).reshape(2, 3))
        np.testing.assert_array_equal(d2.T.copy_to_host(), np.arange(6, dtype=np.float32).reshape(2, 3).T)


def _store_ones(x):
    i, j = cuda.grid(2)
    if i < x.shape[0] and j < x.shape[1]:
        x[i, j] = 1.0


def test_a_device_arrays_two_d_transpose_is_a_copy_as_in_numba_cuda():
    # numba-cuda makes it with a kernel of its own, into new memory: a kernel storing into `d.T`
    # leaves `d` as it was (a strided view here would have changed it)
    with sim.installed():
        host = np.arange(6, dtype=np.float32).reshape(2, 3)
        d = cuda.to_device(host)
        t = d.T
        assert t.shape == (3, 2) and t.is_c_contiguous()
        cuda.jit(_store_ones)[(1, 1), (4, 4)](t)
        np.testing.assert_array_equal(t.copy_to_host(), np.ones((3, 2), np.float32))
        np.testing.assert_array_equal(d.copy_to_host(), host)
