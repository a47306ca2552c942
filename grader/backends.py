"""Which machine runs the student's kernels: `gpu` (real numba-cuda) or `sim` (grader.sim)."""

from __future__ import annotations

from .errors import UsageError

BACKENDS = ("auto", "sim", "gpu")


def gpu_available() -> bool:
    """True when numba-cuda sees a usable GPU. Never raises: no driver simply means no GPU."""
    try:
        from numba import cuda

        return bool(cuda.is_available())
    except Exception:  # noqa: BLE001 - any import or driver failure means "no GPU here"
        return False


def resolve(backend: str) -> str:
    if backend not in BACKENDS:
        raise UsageError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    if backend == "auto":
        return "gpu" if gpu_available() else "sim"
    if backend == "gpu" and not gpu_available():
        raise UsageError("backend 'gpu' asked for, but numba-cuda sees no GPU here (try --backend sim)")
    return backend
