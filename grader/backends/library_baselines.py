"""Library baselines on the GPU: what a tuned library does with the same problem, timed in the
trusted reference runner beside the student's kernel (same GPU, same run): cuBLAS's SGEMM for
matmul and CuPy's own reduction for a sum, both through CuPy (the `gpu` extra).

Timing: CuPy arrays made once, `warmup` calls untimed (cuBLAS picks its kernel, CuPy compiles its
reduction), then `timed` calls each between two CUDA events on the current stream; the median in
milliseconds. CuPy is imported only here, so a machine without it times everything else and
says why this baseline is missing.
"""

from __future__ import annotations

import statistics

from .collective_timing import TimingUnavailable
from .gpu import hold_gpu

# name -> (what it is called in feedback, the shape it takes)
LIBRARIES = {"matmul": ("cuBLAS SGEMM (CuPy)", "M, K, N"), "sum": ("CuPy's sum", "n")}
MAX_ELEMENTS = 1 << 30  # per operand: a baseline never allocates more than 4 GiB


def load_cupy():
    try:
        import cupy
    except Exception as exc:  # noqa: BLE001 - ImportError, or CuPy failing to load its CUDA libraries
        raise TimingUnavailable(f"no CuPy ({type(exc).__name__}: {exc}): pip install the `gpu` extra") from None
    try:
        cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # noqa: BLE001 - CuPy present, no GPU or driver
        raise TimingUnavailable(f"CuPy finds no GPU ({type(exc).__name__}: {exc})") from None
    return cupy


def check_request(what: str, shape) -> tuple[int, ...]:
    """The baseline's name and shape as the runner accepts them (ValueError otherwise)."""
    if what not in LIBRARIES:
        raise ValueError(f"no library baseline {what!r} (known: {', '.join(LIBRARIES)})")
    dims = tuple(shape) if isinstance(shape, (list, tuple)) else ()
    wanted = 3 if what == "matmul" else 1
    if len(dims) != wanted or not all(isinstance(d, int) and not isinstance(d, bool) and 0 < d <= MAX_ELEMENTS
                                      for d in dims):
        raise ValueError(f"{what}: the shape must be {LIBRARIES[what][1]} (positive integers), got {shape!r}")
    if what == "matmul" and max(dims[0] * dims[1], dims[1] * dims[2], dims[0] * dims[2]) > MAX_ELEMENTS:
        raise ValueError(f"matmul {dims}: an operand over {MAX_ELEMENTS} elements")
    return dims


def library_ms(what: str, shape, warmup: int = 3, timed: int = 20) -> float:
    """The median milliseconds of one call of the library on float32 data of `shape`."""
    dims = check_request(what, shape)
    cupy = load_cupy()
    rng = cupy.random.default_rng(0)
    if what == "matmul":
        m, k, n = dims
        a = rng.standard_normal((m, k), dtype=cupy.float32)
        b = rng.standard_normal((k, n), dtype=cupy.float32)
        out = cupy.empty((m, n), cupy.float32)

        def call():
            cupy.matmul(a, b, out=out)
    else:
        x = rng.standard_normal(dims[0], dtype=cupy.float32)

        def call():
            x.sum()
    for _ in range(warmup):
        call()
    cupy.cuda.Device().synchronize()
    times = []
    for _ in range(timed):
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        hold_gpu()  # (numba's default stream is CuPy's null stream: the call's dispatch is not timed)
        start.record()
        call()
        end.record()
        end.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, end))
    return float(statistics.median(times))
