"""Device functions whose Python or numpy twin computes something else than numba-cuda does,
written once for both executors (each works on numpy scalars and on lane vectors alike).

- `round_ndigits(x, ndigits)`: `round(x, ndigits)` of a float in a kernel. numba-cuda lowers it
  to CPython's fallback algorithm (`cudaimpl.round_to_impl`), not to numpy's `round`: `y` is
  computed in float64 even for a float32 `x`, half-way cases round to even, and `x` comes back
  unchanged when `x * 10**ndigits` overflows (numpy gives inf or nan).
- `kernel_round`: the `round` a per-thread kernel calls (Python's for one argument).
- `FP16`: `cuda.fp16.*`, half-precision arithmetic, comparisons and math on `np.float16`:
  operands are converted to half precision (numba's signatures are all float16), each result is
  computed in float32 (float64 for the fused multiply-add) and rounded once to half precision,
  which is what the hardware's correctly rounded half instructions give for + - * / and fma
  (the math functions are approximations on a GPU too; the tests compare with a tolerance).
"""

from __future__ import annotations

import builtins

import numpy as np

__all__ = ["round_ndigits", "kernel_round", "FP16"]


def round_ndigits(x, ndigits):
    """numba-cuda's `round(x, ndigits)` for floats, elementwise; the result has x's type."""
    x = np.asarray(x)
    dtype = x.dtype if x.dtype.kind == "f" and x.dtype.itemsize >= 4 else np.dtype(np.float64)
    nd = np.asarray(ndigits).astype(np.int64)
    xd = x.astype(np.float64)
    with np.errstate(all="ignore"):
        ndf = nd.astype(np.float64)
        pos = nd >= 0
        big = nd > 22  # pow1 * pow2 ~= 10**ndigits could overflow: two factors
        pow1 = np.where(pos, np.power(10.0, np.where(big, ndf - 22, ndf)), np.power(10.0, -ndf))
        pow2 = np.where(pos & big, 1e22, 1.0)
        y = np.where(pos, (xd * pow1) * pow2, xd / pow1)
        z = np.rint(y)  # round(float64) on a GPU: llrint, ties to even
        z = np.where(np.abs(y - z) == 0.5, 2.0 * np.rint(y / 2.0), z)
        z = np.where(pos, (z / pow2) / pow1, z * pow1)
        keep = ~np.isfinite(xd) | (pos & np.isinf(y))
        out = np.where(keep, xd, z)
    return out.astype(dtype)[()]


def kernel_round(x, ndigits=None):
    """`round` inside a kernel run by the per-thread executor."""
    if ndigits is None:
        return builtins.round(x)
    if isinstance(x, (float, np.floating)):
        return round_ndigits(x, ndigits)
    return builtins.round(x, ndigits)


# ---------------------------------------------------------------- cuda.fp16
def _half(x) -> np.ndarray:
    return np.asarray(x).astype(np.float16)


def _unary(op):
    def fn(x):
        with np.errstate(all="ignore"):
            return op(_half(x).astype(np.float32)).astype(np.float16)[()]
    return fn


def _binary(op):
    def fn(a, b):
        with np.errstate(all="ignore"):
            return op(_half(a).astype(np.float32), _half(b).astype(np.float32)) \
                .astype(np.float16)[()]
    return fn


def _compare(op):
    def fn(a, b):
        return np.asarray(op(_half(a), _half(b)))[()]
    return fn


def _hfma(a, b, c):
    # the product of two halves is exact in float64, and so is the sum: one rounding, as fma
    with np.errstate(all="ignore"):
        return (_half(a).astype(np.float64) * _half(b).astype(np.float64) +
                _half(c).astype(np.float64)).astype(np.float16)[()]


def _rsqrt(x):
    return 1.0 / np.sqrt(x)


def _exp10(x):
    return np.power(np.float32(10.0), x)


FP16 = {
    "hadd": _binary(np.add), "hsub": _binary(np.subtract), "hmul": _binary(np.multiply),
    "hdiv": _binary(np.true_divide), "hmax": _binary(np.fmax), "hmin": _binary(np.fmin),
    "hfma": _hfma, "hneg": _unary(np.negative), "habs": _unary(np.abs),
    "heq": _compare(np.equal), "hne": _compare(np.not_equal), "hge": _compare(np.greater_equal),
    "hgt": _compare(np.greater), "hle": _compare(np.less_equal), "hlt": _compare(np.less),
    "hsin": _unary(np.sin), "hcos": _unary(np.cos), "hlog": _unary(np.log),
    "hlog2": _unary(np.log2), "hlog10": _unary(np.log10), "hexp": _unary(np.exp),
    "hexp2": _unary(np.exp2), "hexp10": _unary(_exp10), "hsqrt": _unary(np.sqrt),
    "hrsqrt": _unary(_rsqrt), "hrcp": _unary(np.reciprocal), "hceil": _unary(np.ceil),
    "hfloor": _unary(np.floor), "htrunc": _unary(np.trunc), "hrint": _unary(np.rint),
    "htanh": _unary(np.tanh), "htanh_approx": _unary(np.tanh),
}
for _name, _fn in FP16.items():
    _fn.__name__ = _fn.__qualname__ = _name
