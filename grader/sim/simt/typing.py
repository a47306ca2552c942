"""numba-cuda's own type inference, run on the CPU, and numba's typing of single operations.

Lockstep values are numpy vectors; numpy's promotion rules are not numba's (numba computes
`int32 + int32` in int64 and keeps `acc = 0.0` in float64 even when every addend is float32).
So every local is cast to the type numba infers for it, and every arithmetic operation converts
its operands the way numba's typing context says before numpy computes it.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np

from .. import argtypes, numba_target, patching
from ..devices import TARGET_CC
from .unsupported import SimtUnsupported
from ..bounded import BoundedCache


def numba_parts() -> SimpleNamespace:
    """The modules and functions lockstep typing uses (`numba_target.compiler_modules`: numba-cuda's,
    or numba's own CUDA target's where numba-cuda is missing, so the lockstep executor runs there
    too); SimtUnsupported where numba's CUDA target is not importable."""
    try:
        return numba_target.compiler_modules()
    except ImportError as exc:
        raise SimtUnsupported(f"lockstep typing needs numba's CUDA target, which is not importable "
                              f"({exc})") from None


def _numba():
    parts = numba_parts()
    return parts.types, parts.cuda_target, parts.numpy_support


# --- numba types of runtime values -----------------------------------------------------------
# A lockstep value is not a launch argument: a lane vector (one value per lane) has the type of
# its elements and a SimtArray carries its own, so `type_of` is not `argtypes.numba_type_of`;
# its scalar and array types are built by `argtypes` (the launch arguments' typing), after
# `_numba()` made sure numba's CUDA target is importable (lockstep typing needs it).


def scalar_type(dtype: np.dtype):
    _numba()
    return argtypes.scalar_type(dtype)


def as_dtype(nbtype) -> np.dtype | None:
    """numpy dtype of a numba scalar type; None for arrays, tuples and other non-scalars."""
    _numba()
    return argtypes.scalar_dtype(nbtype)


def array_type(dtype: np.dtype, ndim: int, contiguous: bool = True, readonly: bool = False):
    _numba()
    return argtypes.array_type(dtype, ndim, "C" if contiguous else "A", readonly=readonly)


def named_class(value):
    """The namedtuple class of a tuple value, None for a plain tuple."""
    cls = type(value)
    return cls if cls is not tuple and hasattr(cls, "_fields") else None


def type_of(value):
    """numba type of a lockstep value: numpy scalar, lane vector, tuple, or a SIMT array."""
    types = _numba()[0]
    if hasattr(value, "numba_type"):
        return value.numba_type
    if isinstance(value, tuple):
        return types.BaseTuple.from_types([type_of(v) for v in value], named_class(value))
    if isinstance(value, (bool, int, float)):
        value = np.asarray(value)[()]
    return scalar_type(value.dtype)


# --- the inference pass ------------------------------------------------------------------------


@dataclass
class FunctionTypes:
    """Types numba infers for one function and one argument-type signature."""

    by_line: dict = field(default_factory=dict)  # (name, line) -> numba type of that assignment
    by_name: dict = field(default_factory=dict)  # name -> all its SSA versions unified
    return_type: object = None
    # line -> argument types of the calls there that pass a function or a type as a value
    # (`apply(cuda.atomic.add, ary, uint32)`): what the callee is typed with
    calls: dict = field(default_factory=dict)

    def local(self, name: str, line: int):
        return self.by_line.get((name, line), self.by_name.get(name))


_inferred = BoundedCache(1024)


class TypingRefused(SimtUnsupported):
    """numba's type inference refuses the function (a `TypingError` or `UnsupportedError`
    of numba's): it would not compile for a GPU, so neither executor runs it. `error` is
    numba's exception (with its traceback), `py_func` the function being typed."""

    error: BaseException
    py_func: object


def _numba_refuses(err: BaseException) -> bool:
    return any(cls.__name__ in ("TypingError", "UnsupportedError")
               and cls.__module__.startswith(("numba.", "numba_cuda."))
               for cls in type(err).__mro__)


def _typing_pipeline():
    parts = numba_parts()
    compiler = parts.compiler
    _EarlyPipelineCompletion = parts.core_compiler._EarlyPipelineCompletion
    AnalysisPass, PassManager = parts.machinery.AnalysisPass, parts.machinery.PassManager
    NopythonTypeInference = parts.typed_passes.NopythonTypeInference

    class SimtStopAfterTyping(AnalysisPass):  # registered only while typing (patching.registered_pass)
        _name = "simt_stop_after_typing"

        def __init__(self):
            AnalysisPass.__init__(self)

        def run_pass(self, state):
            raise _EarlyPipelineCompletion(state)

    class TypingOnly(compiler.CUDACompiler):
        """numba-cuda's pipeline cut right after nopython type inference."""

        def define_pipelines(self):
            full = super().define_pipelines()[0]
            pm = PassManager("simt_typing")
            for implementation, description in full.passes:
                pm.add_pass(implementation, description)
                if implementation is NopythonTypeInference:
                    break
            pm.add_pass(SimtStopAfterTyping, "stop after typing")
            pm.finalize()
            return [pm]

    return compiler, TypingOnly, SimtStopAfterTyping


_pipeline = None


def infer(py_func, argtypes: tuple, line: int | None = None) -> FunctionTypes:
    """Run numba-cuda's type inference on `py_func` for `argtypes`; cached per signature."""
    global _pipeline
    key = (py_func, argtypes)
    if key in _inferred:
        return _inferred[key]
    if _pipeline is None:
        _pipeline = _typing_pipeline()
    compiler, TypingOnly, stop_pass = _pipeline
    parts = numba_parts()
    types, cuda_target = parts.types, parts.cuda_target

    flags = compiler.CUDAFlags()
    flags.no_compile = flags.no_cpython_wrapper = flags.no_cfunc_wrapper = True
    flags.error_model = "numpy"
    flags.compute_capability = TARGET_CC
    try:
        with parts.target_override(), patching.typing_device(TARGET_CC, py_func, _device_return_type), \
                patching.registered_pass(stop_pass, parts.machinery):
            state = parts.compile_extra(
                cuda_target.typing_context, cuda_target.target_context, py_func, argtypes,
                None, flags, {}, pipeline_class=TypingOnly)
    except Exception as err:  # numba refusing the kernel, or a failure to type it here
        ufunc = _ufunc_cuda_lacks(err)  # a device function's, found when numba compiled it
        if ufunc is not None:
            from .. import ufuncs

            err = parts.errors.TypingError(ufuncs.refusal(ufunc), _call_site(py_func, ufunc))
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        refused = _numba_refuses(err)
        exc = (TypingRefused if refused else SimtUnsupported)(
            f"numba cannot type {py_func.__name__!r} ({first})", line)
        exc.error, exc.py_func = err, py_func
        raise exc from err
    result = FunctionTypes(return_type=state.return_type)
    typing_context = cuda_target.typing_context
    ir = parts.ir

    _refuse_ufuncs_cuda_lacks(state, py_func)

    for block in state.func_ir.blocks.values():
        for stmt in block.body:
            if not isinstance(stmt, ir.Assign) or stmt.target.name.startswith(("$", "arg.")):
                continue
            name = stmt.target.name.split(".")[0]
            ty = types.unliteral(state.typemap[stmt.target.name])
            key = (name, stmt.loc.line)
            if key in result.by_line and result.by_line[key] != ty:
                ty = typing_context.unify_types(result.by_line[key], ty) or ty
            result.by_line[key] = ty
            known = result.by_name.get(name)
            result.by_name[name] = ty if known is None else (
                typing_context.unify_types(known, ty) or known)
    for expr, sig in (getattr(state, "calltypes", None) or {}).items():
        if isinstance(expr, ir.Expr) and expr.op == "call" and sig is not None and any(
                is_function_value(t) for t in sig.args):
            result.calls.setdefault(expr.loc.line, []).append(tuple(sig.args))
    _inferred[key] = result
    return result


def _device_return_type(py_func, argtypes: tuple):
    """The return type of a device function a kernel calls, typed like the kernel (where numba
    cannot compile it: no libNVVM); numba's own refusal where it refuses it, as compiling it would."""
    try:
        return infer(py_func, argtypes).return_type
    except SimtUnsupported as exc:
        error = getattr(exc, "error", None)
        raise (error if error is not None else exc) from None


def is_function_value(nbtype) -> bool:
    """A numba type of a function or a type passed as a value (an atomic, a device function,
    `uint32`)."""
    types = _numba()[0]
    return isinstance(nbtype, (types.Function, types.Dispatcher, types.NumberClass))
def _ufunc_cuda_lacks(err: BaseException):
    """The ufunc numba-cuda's lowering found no CUDA implementation of (a KeyError of its ufunc
    table, raised while compiling a device function the kernel calls), or None."""
    from .. import ufuncs

    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, KeyError) and err.args and ufuncs.is_ufunc(err.args[0]):
            return err.args[0]
        err = err.__cause__ or err.__context__
    return None


def _call_site(py_func, ufunc):
    """numba's location of the first line calling `ufunc` by name in the functions `py_func`
    reaches (its own code or a device function's), or None."""
    import inspect

    from ..kernel_graph import is_numba_dispatcher, walk

    for node in walk(py_func, is_numba_dispatcher).functions:
        try:
            lines, first = inspect.getsourcelines(node.func)
        except (OSError, TypeError):
            continue
        for k, text in enumerate(lines):
            if f".{ufunc.__name__}(" in text or text.lstrip().startswith(f"{ufunc.__name__}("):
                return numba_parts().ir.Loc(node.func.__code__.co_filename, first + k)
    return None


def _refuse_ufuncs_cuda_lacks(state, py_func) -> None:
    """numba types a call of any NumPy ufunc, but numba-cuda lowers only those of its CUDA
    ufunc table (grader/sim/ufuncs.py): a call of another would fail to compile for a GPU, so
    the kernel is refused here, with a message that says what to use."""
    from .. import ufuncs

    parts = numba_parts()
    types, errors, ir = parts.types, parts.errors, parts.ir
    for block in state.func_ir.blocks.values():
        for stmt in block.body:
            expr = getattr(stmt, "value", None)
            if not (isinstance(expr, ir.Expr) and expr.op == "call"):
                continue
            fnty = state.typemap.get(expr.func.name)
            ufunc = getattr(fnty, "typing_key", None) if isinstance(fnty, types.Function) else None
            if ufuncs.is_ufunc(ufunc) and ufuncs.unsupported(ufunc):
                err = errors.TypingError(ufuncs.refusal(ufunc), stmt.loc)
                exc = TypingRefused(f"numba cannot type {py_func.__name__!r} ({err})",
                                    stmt.loc.line)
                exc.error, exc.py_func = err, py_func
                raise exc


# --- single operations ---------------------------------------------------------------------------

_signatures = BoundedCache(1024)
_refreshed = False


def signature(fn, dtypes: tuple):
    """(operand dtypes, result dtype) numba uses for `fn` applied to scalars of `dtypes`;
    None when numba cannot type it or the result is not a scalar."""
    key = (fn, dtypes)
    try:
        return _signatures[key]
    except KeyError:
        pass
    parts = numba_parts()
    cuda_target = parts.cuda_target
    global _refreshed
    if not _refreshed:  # the typing context loads its registries lazily
        cuda_target.typing_context.refresh()
        _refreshed = True

    try:
        with parts.target_override():
            sig = cuda_target.typing_context.resolve_function_type(
                fn, tuple(scalar_type(d) for d in dtypes), {})
    except Exception:
        sig = None
    answer = None
    if sig is not None:
        args = tuple(as_dtype(a) for a in sig.args)
        result = as_dtype(sig.return_type)
        if result is not None and len(args) == len(dtypes) and all(a is not None for a in args):
            answer = (args, result)
    _signatures[key] = answer
    return answer


BINOPS = {
    "Add": operator.add, "Sub": operator.sub, "Mult": operator.mul, "Div": operator.truediv,
    "FloorDiv": operator.floordiv, "Mod": operator.mod, "Pow": operator.pow,
    "LShift": operator.lshift, "RShift": operator.rshift, "BitAnd": operator.and_,
    "BitOr": operator.or_, "BitXor": operator.xor,
}
