"""Which CUDA target's numba modules the simulator types with: numba-cuda's (`numba.cuda.*`,
served by the numba_cuda package), or, where numba-cuda is missing (no wheels: macOS), numba's
own built-in numba.cuda, which types with the numba.core / numba.np modules. One choice for the
whole simulator: the launch arguments' typing (argtypes), ufunc loops and the lockstep typing
take their modules here.

numba is imported lazily: the grader imports the simulator without it.
"""

from __future__ import annotations

import functools
import importlib.util
from types import SimpleNamespace

__all__ = ["numba_cuda_installed", "typing_modules", "compiler_modules"]


@functools.cache
def numba_cuda_installed() -> bool:
    return importlib.util.find_spec("numba_cuda") is not None


@functools.cache
def typing_modules() -> SimpleNamespace:
    """What types a value or a signature: `numpy_support`, `typeof` with its `Purpose`,
    `sigutils`. numba alone always has these."""
    if numba_cuda_installed():
        from numba.cuda.core import sigutils
        from numba.cuda.np import numpy_support
        from numba.cuda.typing.typeof import Purpose, typeof
    else:
        from numba.core import sigutils
        from numba.core.typing.typeof import Purpose, typeof
        from numba.np import numpy_support
    return SimpleNamespace(numpy_support=numpy_support, typeof=typeof, Purpose=Purpose, sigutils=sigutils)


@functools.cache
def compiler_modules() -> SimpleNamespace:
    """What compiles a kernel for the CUDA target (the lockstep typing runs its pipeline up to
    type inference): the compiler modules, the pass machinery, `types`, `cuda_target`, a
    `target_override()` context and `compile_extra`. ImportError where numba's CUDA target
    itself is not importable."""
    if numba_cuda_installed():
        from numba.cuda import compiler, types, utils
        from numba.cuda.core import compiler as core_compiler, compiler_machinery, errors, ir, typed_passes

        target_override = utils.numba_target_override
        compile_extra = compiler.compile_extra
    else:
        from numba.core import compiler as core_compiler, compiler_machinery, errors, ir, typed_passes, types
        from numba.core.target_extension import target_override as _override
        from numba.cuda import compiler

        def target_override():
            return _override("cuda")

        compile_extra = core_compiler.compile_extra
    from numba.cuda.descriptor import cuda_target

    return SimpleNamespace(types=types, cuda_target=cuda_target, numpy_support=typing_modules().numpy_support,
                           compiler=compiler, core_compiler=core_compiler, machinery=compiler_machinery,
                           errors=errors, ir=ir, typed_passes=typed_passes, target_override=target_override,
                           compile_extra=compile_extra)
