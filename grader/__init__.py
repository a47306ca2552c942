"""gpugrade: grade numba-cuda exercises with pytest, on a GPU or on an instrumented simulator."""

__version__ = "0.1.0"
