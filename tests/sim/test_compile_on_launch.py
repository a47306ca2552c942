"""With compile_check on (as the grader runs it), a launch compiles the kernel for sm_90 first:
a kernel that only runs in Python fails like it would on a GPU, and records carry resources."""

import numpy as np
import pytest
from numba import cuda

import grader.sim as sim
from grader.sim.errors import CompileError


@cuda.jit
def list_kernel(a, out):
    i = cuda.grid(1)
    if i < out.size:
        pair = [a[i], a[i]]
        out[i] = pair[0] + pair[1]


@cuda.jit
def tiled_copy(a, out):
    tile = cuda.shared.array(256, np.float32)
    i = cuda.grid(1)
    t = cuda.threadIdx.x
    tile[t] = a[i] if i < a.size else 0.0
    cuda.syncthreads()
    if i < out.size:
        out[i] = tile[t]


def test_a_python_only_kernel_fails_its_launch_naming_the_line():
    a = np.arange(64, dtype=np.float32)
    with sim.installed(compile_check=True):
        with pytest.raises(CompileError, match=r"'list_kernel' would not compile for a GPU: .*test_compile_on_launch.py:16: Python lists"):
            list_kernel[1, 64](a, np.zeros_like(a))


def test_the_same_kernel_runs_when_the_check_is_off():
    a = np.arange(64, dtype=np.float32)
    out = np.zeros_like(a)
    with sim.installed():
        list_kernel[1, 64](a, out)
    assert np.array_equal(out, 2 * a)


def test_launch_records_carry_registers_shared_memory_and_occupancy():
    a = np.arange(1000, dtype=np.float32)
    out = np.zeros_like(a)
    with sim.installed(compile_check=True), sim.trace() as launches:
        tiled_copy[4, 256](a, out)
    assert np.array_equal(out, a)
    compiled = launches[0].compiled
    assert compiled["available"] and compiled["shared_bytes"] == 1024 and compiled["registers"] > 0
    assert "256 threads/block" in compiled["occupancy"]
