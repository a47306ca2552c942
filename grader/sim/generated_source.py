"""The source of kernels numba-cuda writes itself: the stager kernel of a
`@vectorize(target="cuda")` ufunc (`__vectorized_<name>`) is made from a template by `exec`, so
no file holds it and the front ends that read a kernel's source (the lockstep transform, the
typed rewrite) would have none. `source_of(func)` expands numba-cuda's own template again for
`func` and answers it only when it compiles to `func`'s bytecode: it is that function's source.
"""

from __future__ import annotations

__all__ = ["source_of"]

_VECTORIZED = "__vectorized_"


def source_of(func) -> str | None:
    """The source text `func` was compiled from, when numba-cuda generated it; else None."""
    code = getattr(func, "__code__", None)
    if code is None or code.co_filename != "<string>" or not func.__name__.startswith(_VECTORIZED):
        return None
    try:
        from numba.cuda.vectorizers import vectorizer_stager_source as template
    except ImportError:
        return None
    args = code.co_varnames[:code.co_argcount - 1]  # a0, a1, ... then __out__
    source = template.format(name=func.__name__[len(_VECTORIZED):], args=", ".join(args),
                             argitems=", ".join(f"{a}[__tid__]" for a in args))
    namespace: dict = {}
    try:
        exec(compile(source, code.co_filename, "exec"), namespace)
        same = namespace[func.__name__].__code__.co_code == code.co_code
    except Exception:  # noqa: BLE001 - not this template's
        return None
    return source if same else None
