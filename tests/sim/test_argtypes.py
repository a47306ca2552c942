"""grader.sim.argtypes: the one typing of launch arguments (by value, and by a declared
signature), as numba-cuda's dispatcher types them."""

import collections

import numpy as np
import pytest
from numba import types

import grader.sim as sim
from grader.sim import argtypes


@pytest.mark.parametrize("value", [3, -2**63, 2**63 - 1, 2**63, 1.5, 2 + 1j, True])
def test_a_launch_scalar_has_the_type_numba_gives_the_value(value):
    scalar = argtypes.launch_scalar(value)
    assert argtypes.scalar_type(scalar.dtype) == argtypes.numba_type_of(value)
    assert scalar == value


def test_launch_scalars_keep_numpy_scalars_and_namedtuples():
    point = collections.namedtuple("Point", "x y")
    assert argtypes.launch_scalar(np.float32(1.5)).dtype == np.float32
    got = argtypes.launch_scalar(point(1, 2.0))
    assert type(got) is point and got.x.dtype == np.int64 and got.y.dtype == np.float64


def test_a_declared_signature_converts_scalars_like_a_c_cast():
    declared = argtypes.declared_argtypes("void(int32[:], int32, float32)")
    assert declared == (types.int32[:], types.int32, types.float32)
    a = np.zeros(4, np.int32)
    assert argtypes.fits_declared(declared, (a, 0xFFFFFFFF, 0.1))
    assert not argtypes.fits_declared(declared, (a.astype(np.int64), 1, 0.1))
    assert not argtypes.fits_declared(declared, (a, "1", 0.1))
    assert argtypes.to_declared(0xFFFFFFFF, types.int32) == -1
    assert argtypes.to_declared(0.1, types.float32).dtype == np.float32
    assert argtypes.to_declared(a, declared[0]) is a


def test_scalar_dtype_of_numba_types():
    assert argtypes.scalar_dtype(types.float32) == np.float32
    assert argtypes.scalar_dtype(types.literal(3)) == np.int64
    assert argtypes.scalar_dtype(types.float32[:]) is None
    assert str(argtypes.array_type(np.float32, 2, "A", readonly=True)) == \
        "readonly array(float32, 2d, A)"


def test_a_raw_pointer_argument_is_the_array_it_points_into(executor):
    """numba-cuda's cpointer example: `types.CPointer(types.uint8)` given the address from
    `__cuda_array_interface__`; past the allocation's end is out of bounds, as on a GPU."""
    from numba import cuda
    from numba.cuda import types as cuda_types

    @cuda.jit(cuda_types.void(cuda_types.CPointer(cuda_types.uint8), cuda_types.uint32))
    def add_one(x, n):
        i = cuda.grid(1)
        if i < n:
            x[i] += 1

    x = cuda.to_device(np.arange(10, dtype=np.uint8))
    address = x.__cuda_array_interface__["data"][0]
    add_one[1, 32](address, len(x))
    assert (x.copy_to_host() == np.arange(1, 11)).all()
    add_one[1, 32](address + 4, 6)  # a pointer into the middle
    assert (x.copy_to_host() == np.r_[1:5, 6:12]).all()
    with pytest.raises(sim.OutOfBoundsError):
        add_one[1, 32](address + 4, 7)
    with pytest.raises(sim.NotSimulatedError, match="points into no simulated allocation"):
        add_one[1, 32](12345, 1)
