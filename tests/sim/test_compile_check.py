"""Tests of grader.sim.compile_check (PTX + ptxas on the CPU) and grader.sim.occupancy.

Each kernel is compiled once per module (module-scoped fixtures); the compile tests
skip where the toolchain (numba-cuda[cu13] + nvidia-cuda-nvcc) is not installed.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import textwrap

import numpy as np
import pytest
from numba import cuda, float32, types

from grader.sim import compile_check as cc_mod
from grader.sim.compile_check import ptxas as ptxas_mod, toolchain as toolchain_mod
from grader.sim.compile_check import (
    CompileReport,
    ToolchainStatus,
    argtypes_for,
    clear_cache,
    compile_check,
    numba_type_of,
    toolchain_status,
)
from grader.sim.occupancy import occupancy


THIS = os.path.abspath(__file__)
F1 = (float32[:],)


def _line_of(marker: str) -> int:
    with open(THIS, encoding="utf-8") as fh:
        for i, line in enumerate(fh, 1):
            if line.rstrip().endswith(f"# <-- {marker}"):
                return i
    raise AssertionError(marker)


# --------------------------------------------------------------------------- kernels

@cuda.jit
def vector_add(a, b, c):
    i = cuda.grid(1)
    if i < c.size:
        c[i] = a[i] + b[i]


TILE = 16


@cuda.jit
def tiled_matmul(A, B, C):
    sA = cuda.shared.array((TILE, TILE), float32)
    sB = cuda.shared.array((TILE, TILE), float32)
    x, y = cuda.grid(2)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    acc = float32(0.0)
    for t in range((A.shape[1] + TILE - 1) // TILE):
        sA[ty, tx] = 0.0
        sB[ty, tx] = 0.0
        if y < A.shape[0] and t * TILE + tx < A.shape[1]:
            sA[ty, tx] = A[y, t * TILE + tx]
        if x < B.shape[1] and t * TILE + ty < B.shape[0]:
            sB[ty, tx] = B[t * TILE + ty, x]
        cuda.syncthreads()
        for k in range(TILE):
            acc += sA[ty, k] * sB[k, tx]
        cuda.syncthreads()
    if y < C.shape[0] and x < C.shape[1]:
        C[y, x] = acc


@cuda.jit
def warp_reduce(a, out):
    i = cuda.grid(1)
    v = a[i] if i < a.size else float32(0.0)
    off = 16
    while off > 0:
        v += cuda.shfl_down_sync(0xFFFFFFFF, v, off)
        off //= 2
    if cuda.laneid == 0:
        cuda.atomic.add(out, 0, v)


@cuda.jit(device=True)
def square(x):
    return x * x


@cuda.jit
def calls_device(a):
    i = cuda.grid(1)
    if i < a.size:
        a[i] = square(a[i])


@cuda.jit
def local_array(a):
    i = cuda.grid(1)
    t = cuda.local.array(256, float32)
    for j in range(256):
        t[j] = a[(i + j) % a.size]
    s = float32(0)
    for j in range(256):
        s += t[(j * 7 + i) % 256]
    a[i] = s


@cuda.jit
def too_much_shared(a):
    s = cuda.shared.array(16384, float32)
    t = cuda.shared.array(16384, float32)
    s[cuda.threadIdx.x] = a[0]
    t[cuda.threadIdx.x] = a[1]
    cuda.syncthreads()
    a[cuda.threadIdx.x] = s[cuda.threadIdx.x + 1] + t[3]


@cuda.jit
def uses_list(a):
    i = cuda.grid(1)
    vals = [1.0, 2.0, 3.0]  # <-- list
    a[i] = vals[0]


@cuda.jit
def uses_dict(a):
    i = cuda.grid(1)
    d = {1: 2.0}
    a[i] = d[1]  # <-- dict


@cuda.jit
def uses_format(a):
    i = cuda.grid(1)
    s = "value %d" % i  # <-- format
    a[i] = len(s)


@cuda.jit
def prints_an_f_string(a):
    i = cuda.grid(1)
    print(f"thread {i}")  # <-- f-string
    a[i] = 1.0


@cuda.jit
def uses_np_zeros(a):
    i = cuda.grid(1)
    t = np.zeros(4)  # <-- np.zeros
    a[i] = t[0]


def plain_helper(x):
    return x * 2


@cuda.jit
def calls_python(a):
    i = cuda.grid(1)
    a[i] = plain_helper(a[i])  # <-- python call


def countdown(n):
    if n > 0:
        yield n
        yield from countdown(n - 1)


@cuda.jit
def uses_generator(a):
    i = cuda.grid(1)
    for v in countdown(3):  # <-- generator
        a[i] += v


@cuda.jit(device=True)
def device_generator(n):
    yield n  # <-- device generator


@cuda.jit
def uses_device_generator(a):
    i = cuda.grid(1)
    for v in device_generator(3):
        a[i] += v


SIDE = 16
PADDED_SIDE = SIDE + 1


@cuda.jit
def shared_of_padded_side(a):
    s = cuda.shared.array((SIDE, SIDE + 1), float32)  # <-- padded
    s[0, 0] = a[0]
    a[0] = s[0, 0]


@cuda.jit
def shared_of_padded_constant(a):
    s = cuda.shared.array((SIDE, PADDED_SIDE), float32)
    s[0, 0] = a[0]
    a[0] = s[0, 0]


@cuda.jit
def shared_of_argument_size(a, n):
    s = cuda.shared.array(n, float32)  # <-- shape
    s[0] = a[0]
    a[0] = s[0]


@cuda.jit(device=True)
def halve_down(a, i, s):
    if s > 0:
        a[i] += a[i + s]
        halve_down(a, i, s // 2)  # <-- recursion


@cuda.jit
def calls_recursive(a):
    halve_down(a, cuda.grid(1), 4)


@cuda.jit
def unpacks_a_1d_index(a):
    row, col = cuda.grid(1)  # <-- unpack
    a[row] = col


@cuda.jit
def returns_value(a):
    return a[0]  # <-- return


GOOD = {
    "vector_add": (vector_add, (float32[:],) * 3, 0),
    "tiled_matmul": (tiled_matmul, (float32[:, :],) * 3, 2 * 16 * 16 * 4),
    "warp_reduce": (warp_reduce, (float32[:], float32[:]), 0),
    "calls_device": (calls_device, F1, 0),
}

BAD = {
    "list": (uses_list, "list"),
    "dict": (uses_dict, "dict"),
    "format": (uses_format, "string"),
    # (an f-string needs NRT too: the hint is the string's, not "memory allocation")
    "f-string": (prints_an_f_string, "strings and string formatting are not supported"),
    "np.zeros": (uses_np_zeros, "np.zeros"),
    "python call": (calls_python, "plain Python function"),
    "generator": (uses_generator, "generator"),
    "device generator": (uses_device_generator, "generator"),
}


# --------------------------------------------------------------------------- fixtures

@pytest.fixture(scope="module")
def cache_env(tmp_path_factory):
    """Private disk cache and an empty memory cache for this module."""
    old = os.environ.get("GPUGRADE_CACHE_DIR")
    os.environ["GPUGRADE_CACHE_DIR"] = str(tmp_path_factory.mktemp("gpugrade-cache"))
    clear_cache()
    yield os.environ["GPUGRADE_CACHE_DIR"]
    clear_cache()
    if old is None:
        os.environ.pop("GPUGRADE_CACHE_DIR", None)
    else:
        os.environ["GPUGRADE_CACHE_DIR"] = old


@pytest.fixture(scope="module")
def toolchain():
    st = toolchain_status()
    if not st.available:
        pytest.skip(f"compile toolchain unavailable here: {st.reason}")
    return st


@pytest.fixture(scope="module")
def good_reports(cache_env, toolchain):
    return {name: compile_check(k, sig) for name, (k, sig, _) in GOOD.items()}


@pytest.fixture(scope="module")
def bad_reports(cache_env, toolchain):
    return {name: compile_check(k, F1) for name, (k, _) in BAD.items()}


# --------------------------------------------------------------------------- toolchain

def test_toolchain_status_reports_versions():
    st = toolchain_status()
    assert isinstance(st, ToolchainStatus)
    assert st.numba_version
    lines = st.lines()
    assert len(lines) == 3 and all(isinstance(x, str) for x in lines)
    d = st.to_dict()
    assert d["available"] == st.available
    if st.available:
        assert st.ptxas_path and os.path.isfile(st.ptxas_path)
        assert st.ptxas_version and st.ptxas_version[0].isdigit()
        assert st.nvvm_version
    else:
        assert st.reason


def test_find_ptxas_honours_override(tmp_path, monkeypatch):
    fake = tmp_path / ("ptxas.exe" if os.name == "nt" else "ptxas")
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv("GPUGRADE_PTXAS", str(fake))
    assert cc_mod.find_ptxas() == str(fake)


# --------------------------------------------------------------------------- good kernels

@pytest.mark.parametrize("name", list(GOOD))
def test_correct_kernels_compile(good_reports, name):
    r = good_reports[name]
    assert r.ok, r.message
    assert r.available and not r.failed and r.stage is None
    assert 4 <= r.registers <= 128
    assert r.shared_bytes == GOOD[name][2]
    assert r.spill_stores == 0 and r.spill_loads == 0
    assert r.local_bytes == 0
    assert r.cc == (9, 0)
    assert r.kernel == name
    assert "compiles for sm_90" in r.summary()
    occ = r.occupancy(256)
    assert 0 < occ.occupancy <= 1 and occ.active_blocks >= 1


def test_matmul_occupancy_with_dynamic_shared(good_reports):
    r = good_reports["tiled_matmul"]
    occ = r.occupancy(256, dynamic_shared=100 * 1024)
    # 2048 + 102400 + 1024 reserved = 105472 per block -> 2 blocks in 228 KB
    assert occ.active_blocks == 2
    assert occ.limiter == "shared_memory"
    assert any("opt-in" in n for n in occ.notes)


def test_device_function_compiles_without_leaving_state(good_reports):
    import numba.cuda.dispatcher as nd

    assert good_reports["calls_device"].ok
    # no overload compiled for the stand-in device stays on the device function
    assert len(square.overloads) == 0
    assert not getattr(nd.get_current_device, "__gpugrade_compile_check__", False)


def test_local_array_reports_local_memory(cache_env, toolchain):
    r = compile_check(local_array, F1)
    assert r.ok, r.message
    assert r.local_bytes >= 256 * 4


def test_too_much_static_shared_is_a_ptxas_failure(cache_env, toolchain):
    r = compile_check(too_much_shared, F1)
    assert not r.ok and r.failed
    assert r.stage == "ptxas"
    assert "131072" in r.message and "49152" in r.message
    assert "_Z" not in r.message  # mangled name replaced by the kernel's


# --------------------------------------------------------------------------- bad kernels

@pytest.mark.parametrize("name", list(BAD))
def test_python_only_constructs_fail_typing(bad_reports, name):
    r = bad_reports[name]
    marker = name
    assert not r.ok and r.available and r.failed
    assert r.stage == "typing", r.message
    line = _line_of(marker)
    assert r.filename == THIS
    assert r.lineno == line, (r.lineno, line, r.message)
    assert f"test_compile_check.py:{line}" in r.message
    assert BAD[name][1] in r.message
    assert r.source_line and r.source_line in open(THIS).read().splitlines()[line - 1]
    assert len(r.message.splitlines()) == 1
    assert "does not compile for the GPU" in r.summary()
    with pytest.raises(ValueError):
        r.occupancy(128)


def test_shared_array_shape_must_be_constant(cache_env, toolchain):
    r = compile_check(shared_of_argument_size, (float32[:], types.int64))
    assert r.failed and r.stage == "typing"
    assert r.lineno == _line_of("shape") and "compile-time constant" in r.message
    # a padded tile, (SIDE, SIDE + 1): numba types SIDE + 1 as an int64, no constant; named at module level it is
    r = compile_check(shared_of_padded_side, (float32[:],))
    assert r.failed and r.lineno == _line_of("padded") and "name it at module level (PADDED = TILE + 1)" in r.message
    assert compile_check(shared_of_padded_constant, (float32[:],)).ok


def test_kernel_returning_a_value(cache_env, toolchain):
    r = compile_check(returns_value, F1)
    assert r.failed and r.stage == "typing"
    assert r.lineno == _line_of("return") and "cannot return a value" in r.message


def test_a_recursive_device_function_is_named_where_numba_fails_inside(cache_env, toolchain):
    # numba-cuda's code generator raised AttributeError ('JITCUDACodegen' ... 'insert_unresolved_ref'),
    # which named nothing of the student's
    r = compile_check(calls_recursive, F1)
    assert r.failed and r.lineno == _line_of("recursion"), r.message
    assert "device function 'halve_down' calls 'halve_down', which leads back to it" in r.message
    assert "write it as a loop" in r.message


def test_unpacking_cuda_grid_1_is_told_it_gives_one_index(cache_env, toolchain):
    r = compile_check(unpacks_a_1d_index, F1)
    assert r.failed and r.lineno == _line_of("unpack"), r.message
    assert "cuda.grid(1) and cuda.gridsize(1) give one index; for two, x, y = cuda.grid(2)" in r.message, r.message


def test_accepts_py_func(good_reports):
    r = compile_check(vector_add.py_func, (float32[:],) * 3)
    assert r.ok and r.registers == good_reports["vector_add"].registers


def test_numba_line_is_quoted(bad_reports):
    assert "(numba says: NRT required" in bad_reports["list"].message
    assert "Untyped global name 'plain_helper'" in bad_reports["python call"].message


# --------------------------------------------------------------------------- caching

def test_cache_memory_then_disk(good_reports):
    first = good_reports["vector_add"]
    assert first.cached is None and first.compile_seconds > 0
    again = compile_check(vector_add, (float32[:],) * 3)
    assert again.cached == "memory"
    assert again.registers == first.registers
    clear_cache()  # memory only
    from_disk = compile_check(vector_add, (float32[:],) * 3)
    assert from_disk.cached == "disk"
    assert from_disk.to_dict() | {"cached": None} == first.to_dict()
    # failures are cached too (compiled here, so that the test owns its entry whatever ran before)
    failed = compile_check(uses_list, F1)
    assert not failed.ok and failed.stage == "typing"
    clear_cache()  # memory only
    assert compile_check(uses_list, F1).cached == "disk"


def test_cache_key_depends_on_argtypes_and_cc(good_reports):
    r64 = compile_check(vector_add, (types.float64[:],) * 3)
    assert r64.cached is None and r64.argtypes == ["array(float64, 1d, A)"] * 3
    r80 = compile_check(vector_add, (float32[:],) * 3, cc=(8, 0))
    assert r80.cached is None and r80.cc == (8, 0)
    assert r80.occupancy(256).arch == "sm_80"


def test_cache_key_depends_on_referenced_constants(cache_env, toolchain, tmp_path):
    src = textwrap.dedent("""
        from numba import cuda, float32
        TILE = 8

        @cuda.jit(device=True)
        def helper(x):
            return x + 1.0

        @cuda.jit
        def k(a):
            s = cuda.shared.array(TILE, float32)
            s[cuda.threadIdx.x] = helper(a[0])
            cuda.syncthreads()
            a[cuda.threadIdx.x] = s[0]
    """)
    path = tmp_path / "student_tile.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("student_tile", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["student_tile"] = mod
    try:
        spec.loader.exec_module(mod)
        a = compile_check(mod.k, F1)
        assert a.ok and a.shared_bytes == 8 * 4
        mod.TILE = 64
        b = compile_check(mod.k, F1)
        assert b.cached is None and b.shared_bytes == 64 * 4
        assert compile_check(mod.k, F1).cached == "memory"
    finally:
        sys.modules.pop("student_tile", None)


def test_timings_first_compile_and_cached(cache_env, toolchain):
    import time

    clear_cache()
    t0 = time.perf_counter()
    r = compile_check(warp_reduce, (float32[:], float32[:]), use_cache=False)
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    compile_check(warp_reduce, (float32[:], float32[:]))  # memory or disk
    compile_check(warp_reduce, (float32[:], float32[:]))
    cached = time.perf_counter() - t0
    assert r.ok
    assert cached < max(first, 0.05)
    print(f"first compile {first * 1e3:.1f} ms, two cached lookups {cached * 1e3:.2f} ms")


# --------------------------------------------------------------------------- arg types

def test_numba_type_of_matches_numba():
    import numba

    c = np.zeros(8, np.float32)
    f = np.zeros((3, 4), np.float64, order="F")
    strided = np.zeros((4, 6), np.int32)[:, ::2]
    for v in (c, f, strided, np.zeros((2, 2, 2), np.complex64)):
        assert numba_type_of(v) == numba.typeof(v)
    assert str(numba_type_of(c)) == "array(float32, 1d, C)"
    assert str(numba_type_of(f)) == "array(float64, 2d, F)"
    assert str(numba_type_of(strided)) == "array(int32, 2d, A)"
    ro = np.zeros(3)
    ro.flags.writeable = False
    assert "readonly" in str(numba_type_of(ro))
    assert numba_type_of(3) == types.int64
    assert numba_type_of(3.0) == types.float64
    assert numba_type_of(True) == types.boolean
    assert numba_type_of(np.float32(1)) == types.float32
    assert numba_type_of(np.int32(1)) == types.int32
    assert numba_type_of(1j) == types.complex128
    assert numba_type_of(float32[:, :]) == float32[:, :]  # types pass through


def test_numba_type_of_array_likes():
    class CAI:
        def __init__(self, arr):
            self.__cuda_array_interface__ = {
                "shape": arr.shape, "strides": None if arr.flags.c_contiguous else arr.strides,
                "typestr": arr.dtype.str, "data": (0, False), "version": 3}

    class DtypeOnly:
        def __init__(self, arr):
            self.dtype, self.ndim, self.shape, self.strides = arr.dtype, arr.ndim, arr.shape, arr.strides

    class Buffer:  # the simulator's DeviceBuffer: .data is the backing ndarray
        def __init__(self, arr):
            self.data = arr

    class SimLike(CAI):  # the simulator's SimDeviceArray: CAI with strides + contiguity
        def __init__(self, arr):
            super().__init__(arr)
            self.__cuda_array_interface__["strides"] = arr.strides
            self.dtype, self.ndim, self.shape = arr.dtype, arr.ndim, arr.shape
            self._arr = arr

        def is_c_contiguous(self):
            return self._arr.flags.c_contiguous

        def is_f_contiguous(self):
            return self._arr.flags.f_contiguous

    c = np.zeros((4, 5), np.float32)
    f = np.asfortranarray(c)
    # typed like the DeviceNDArray it stands in for, not like a third-party CAI array
    assert str(numba_type_of(SimLike(c))) == "array(float32, 2d, C)"
    assert str(numba_type_of(SimLike(f))) == "array(float32, 2d, F)"
    assert str(numba_type_of(SimLike(c[:, ::2]))) == "array(float32, 2d, A)"
    assert str(numba_type_of(CAI(c))) == "array(float32, 2d, C)"
    # exactly what numba-cuda's dispatcher gives (0.30.4 types an F-ordered CAI array
    # as "A": it compares strides with the bit width), whatever that is
    from numba.cuda.typing.typeof import Purpose, typeof

    assert numba_type_of(CAI(f)) == typeof(CAI(f), Purpose.argument)
    assert numba_type_of(CAI(f)).layout in ("F", "A")
    assert str(numba_type_of(CAI(c[:, ::2]))) == "array(float32, 2d, A)"
    assert str(numba_type_of(DtypeOnly(f))) == "array(float32, 2d, F)"
    assert str(numba_type_of(Buffer(c))) == "array(float32, 2d, C)"
    with pytest.raises(TypeError):
        numba_type_of(object())


def test_compile_check_accepts_launch_values(good_reports):
    a = np.zeros(16, np.float32)
    r = compile_check(vector_add, (a, a, a))
    assert r.ok and r.argtypes == ["array(float32, 1d, C)"] * 3
    assert argtypes_for((a, 2, 1.5)) == (numba_type_of(a), types.int64, types.float64)


def test_compile_check_requires_argtypes_without_signature():
    with pytest.raises(TypeError):
        compile_check(vector_add, None)


# --------------------------------------------------------------------------- unavailable

def _status(**kw) -> ToolchainStatus:
    base = dict(compile_ptx=True, compile_ptx_reason="", ptxas=True, ptxas_reason="",
                ptxas_path="/nonexistent/ptxas", ptxas_version="0.0", numba_version="x")
    base.update(kw)
    return ToolchainStatus(**base)


def test_no_compiler_is_unavailable_not_failed(monkeypatch):
    monkeypatch.setattr(toolchain_mod, "status_for_check",
                        lambda refresh=False: _status(
                            compile_ptx=False,
                            compile_ptx_reason="NVVM not usable: libNVVM cannot be found"))
    r = compile_check(vector_add, (float32[:],) * 3)
    assert not r.ok and not r.available and not r.failed
    assert "libNVVM" in r.message
    assert "unavailable" in r.summary()
    with pytest.raises(ValueError):
        r.occupancy(256)


def test_a_library_the_toolchain_cannot_find_is_unavailable_never_the_kernels_failure():
    """(audit) A machine whose numba found no libnvrtc: every kernel, the reference's too, read
    "would not compile for a GPU (DynamicLibNotFoundError ...)", and a batch stored the zeros."""
    from grader.sim.compile_check.explain import classify

    class DynamicLibNotFoundError(RuntimeError):  # (cuda.pathfinder's: named, as numba-cuda raises it)
        pass

    for error in (DynamicLibNotFoundError('Failure finding "libnvrtc.so.13 or libnvrtc.so.12"'),
                  RuntimeError('NVRTC: DynamicLibNotFoundError: Failure finding "libnvrtc.so.13"')):
        report = classify(error, vector_add.py_func, set())
        assert not report.available and not report.failed, report


def test_no_ptxas_still_reports_typing_failures(monkeypatch, toolchain):
    monkeypatch.setattr(toolchain_mod, "status_for_check",
                        lambda refresh=False: _status(ptxas=False, ptxas_path=None,
                                                      ptxas_reason="ptxas not found"))
    good = compile_check(vector_add, (float32[:],) * 3, use_cache=False)
    assert not good.available and not good.failed and "ptxas not found" in good.message
    bad = compile_check(calls_python, F1, use_cache=False)
    assert bad.failed and bad.stage == "typing"


def test_report_roundtrip():
    r = CompileReport(ok=True, kernel="k", registers=10, shared_bytes=0, cc=(8, 6))
    assert CompileReport.from_dict(r.to_dict()) == r


# --------------------------------------------------------------------------- ptxas parsing

PTXAS_LOG = """\
ptxas info    : 8 bytes gmem
ptxas info    : Compiling entry function '_Z1kPf' for 'sm_90'
ptxas info    : Function properties for _Z6helperf
    16 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Function properties for _Z1kPf
    40 bytes stack frame, 24 bytes spill stores, 16 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 4096 bytes smem, 368 bytes cmem[0], 8 bytes cmem[2]
ptxas info    : Compile time = 3.5 ms
"""


def test_parse_ptxas_log():
    r = CompileReport(ok=True)
    ptxas_mod.parse_log(PTXAS_LOG, r)
    assert (r.registers, r.barriers, r.shared_bytes, r.constant_bytes) == (255, 1, 4096, 376)
    assert (r.local_bytes, r.spill_stores, r.spill_loads) == (40, 24, 16)


# --------------------------------------------------------------------------- occupancy

@pytest.mark.parametrize("regs,static,tpb,dyn,blocks,warps,limiter", [
    (32, 2048, 256, 0, 8, 64, "warps"),
    (64, 0, 256, 0, 4, 32, "registers"),
    (40, 0, 128, 0, 12, 48, "registers"),  # 1280 regs/warp: 12 warps per sub-partition
    (16, 0, 32, 0, 32, 32, "blocks"),
    (32, 48 * 1024, 128, 0, 4, 16, "shared_memory"),  # (49152 + 1024) per block
    (32, 0, 128, 100 * 1024, 2, 8, "shared_memory"),
    (255, 0, 256, 0, 1, 8, "registers"),
    (255, 0, 1024, 0, 0, 0, "registers"),  # launch fails: too many resources
    (32, 0, 128, 228 * 1024, 0, 0, "shared_memory"),  # over 227 KB per block
    (32, 0, 1025, 0, 0, 0, "block_size"),
    (0, 0, 1024, 0, 2, 64, "warps"),
])
def test_occupancy_sm90(regs, static, tpb, dyn, blocks, warps, limiter):
    occ = occupancy(regs, static, tpb, dyn, (9, 0))
    assert (occ.active_blocks, occ.active_warps, occ.limiter) == (blocks, warps, limiter)
    assert occ.occupancy == pytest.approx(warps / 64)
    assert occ.max_warps == 64
    if blocks == 0:
        assert occ.notes


def test_occupancy_other_arch_and_unknown():
    occ = occupancy(32, 0, 1024, 0, (8, 6))  # 48 warps per SM on sm_86
    assert occ.active_blocks == 1 and occ.max_warps == 48
    with pytest.raises(ValueError):
        occupancy(32, 0, 128, 0, (5, 0))


def test_half_precision_code_assembles_as_on_a_gpu():
    """numba links its fp16 helpers at load time: ptxas runs on relocatable code (-c), as it
    does for numba on a GPU, instead of calling them unresolved."""
    import numpy as np
    from numba import cuda

    from grader import sim

    with sim.installed(compile_check=True):
        @cuda.jit
        def half_add(out, a, b):
            i = cuda.grid(1)
            if i < out.size:
                out[i] = cuda.fp16.hadd(a[i], b[i])

        out = np.zeros(64, np.float16)
        with sim.trace() as launches:
            half_add[1, 64](out, np.ones(64, np.float16), np.ones(64, np.float16))
    np.testing.assert_array_equal(out, 2)
    compiled = launches[0].compiled
    assert compiled.get("available") is False or compiled["registers"] > 0, compiled


def test_static_shared_memory_is_read_from_relocatable_ptx():
    from grader.sim.compile_check.ptxas import static_shared_bytes

    ptx = (".visible .entry k(\n)\n{\n\t.shared .align 4 .b8 _cudapy_smem_1[1024];\n"
           "\t.shared .align 8 .f64 tile[16];\n\t.reg .b32 %r<3>;\n}\n")
    assert static_shared_bytes(ptx) == 1024 + 16 * 8
