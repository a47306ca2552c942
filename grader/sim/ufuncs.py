"""NumPy ufuncs called inside a kernel, as numba-cuda compiles them, for both executors.

numba-cuda lowers a ufunc call through its CUDA ufunc table (`numba.cuda.ufuncs.ufunc_db`):
trigonometric and hyperbolic functions, logarithms, comparisons, bitwise and logical
operations, maximum/minimum/fmax/fmin, degrees/radians... A ufunc missing from it does not
compile in a kernel, on scalars or arrays (`np.sqrt`, `np.add`, `np.exp`: `math.sqrt` or
`a + b` do); `unsupported` tells, so that typing refuses such a kernel as compiling it for a
GPU would.

With array arguments the call is element-wise, each thread running the whole loop
(`np.sin(x, out)`): the loop runs over the output array's shape in C order; inputs broadcast
onto it (a scalar, or an array whose dimensions of extent 1 repeat); each element is loaded,
converted to the input types of the ufunc loop numba picks (`ufunc_find_matching_loop`, from
the types of every argument, outputs included), computed, and stored converted to the output's
dtype. numba types such a call only with explicit output arrays (it cannot allocate one in a
kernel), and returns the output array.
"""

from __future__ import annotations

import numpy as np

from . import numba_target
from .bounded import BoundedCache

__all__ = ["is_ufunc", "unsupported", "refusal", "loop_dtypes", "broadcast_index"]

_MATH_NAMES = {"absolute": "fabs", "fabs": "fabs", "power": "pow", "float_power": "pow",
               "arcsin": "asin", "arccos": "acos", "arctan": "atan"}
_OPERATORS = {"add": "+", "subtract": "-", "multiply": "*", "true_divide": "/",
              "floor_divide": "//", "remainder": "%", "mod": "%", "negative": "unary -"}

_loops = BoundedCache(512)


def is_ufunc(obj) -> bool:
    return isinstance(obj, np.ufunc)


def unsupported(ufunc) -> bool:
    """Whether numba-cuda cannot compile `ufunc` inside a kernel (not in its CUDA ufunc table)."""
    from numba.cuda.descriptor import cuda_target

    try:
        cuda_target.target_context.get_ufunc_info(ufunc)
    except KeyError:
        return True
    return False


def refusal(ufunc) -> str:
    """What a student reads when a kernel calls a ufunc numba-cuda cannot compile."""
    import math

    name = ufunc.__name__
    if name in _OPERATORS:
        instead = f"the operator {_OPERATORS[name]} on elements"
    elif hasattr(math, _MATH_NAMES.get(name, name)):
        instead = f"math.{_MATH_NAMES.get(name, name)} on elements"
    else:
        instead = "the math module or an operator on elements"
    return (f"np.{name} does not compile inside a kernel with numba-cuda (its GPU ufuncs are "
            f"the trigonometric, hyperbolic, log, comparison, bitwise, logical and "
            f"maximum/minimum ones); use {instead}")


def loop_dtypes(ufunc, dtypes: tuple) -> tuple[tuple, tuple]:
    """(input dtypes, output dtypes) of the loop numba picks for `ufunc` called with arguments
    of numpy `dtypes` (array element types and scalar types, explicit outputs included)."""
    key = (ufunc, dtypes)
    hit = _loops.get(key)
    if hit is None:
        numpy_support = numba_target.typing_modules().numpy_support
        types = tuple(numpy_support.from_dtype(d) for d in dtypes)
        spec = numpy_support.ufunc_find_matching_loop(ufunc, types)
        if spec is None:  # numba's typing accepted the call: not expected
            raise TypeError(f"no loop of {ufunc.__name__} for {dtypes}")
        hit = _loops[key] = (tuple(numpy_support.as_dtype(t) for t in spec.inputs),
                             tuple(numpy_support.as_dtype(t) for t in spec.outputs))
    return hit


def broadcast_index(shape: tuple, index: tuple) -> tuple:
    """The element of an array of `shape` that loop position `index` reads (NumPy broadcasting:
    trailing dimensions align, an extent of 1 repeats)."""
    offset = len(index) - len(shape)
    return tuple(0 if extent == 1 else index[offset + k] for k, extent in enumerate(shape))
