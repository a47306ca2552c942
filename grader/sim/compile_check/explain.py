"""A compile failure as the student should read it: the offending file and line of their own
code, numba's one-line summary, and a hint for the constructs that cannot run on a GPU."""

from __future__ import annotations

import inspect
import os
import re

from grader.sim.kernel_graph import python_function, user_functions

from .report import CompileReport


def explain_failure(error: BaseException, kernel) -> CompileReport:
    """The report ``compile_check`` gives when numba raised ``error`` compiling ``kernel`` (a
    dispatcher or function): the student's file and line, numba's summary, a hint. For a
    refusal numba's typing made elsewhere (the simulator types kernels before running them)."""
    py = python_function(kernel)
    report = classify(error, py, user_functions(py).files)
    report.kernel = py.__name__
    return report


def first_line(e: BaseException) -> str:
    for ln in str(e).splitlines():
        if ln.strip():
            return ln.strip()
    return type(e).__name__


def generator_use(py, dispatchers) -> CompileReport | None:
    """The failure of a kernel or device function that is a generator (numba-cuda cannot
    compile one, and says so less clearly); None when there is none."""
    for fn in [py] + [d.py_func for d in dispatchers]:
        if inspect.isgeneratorfunction(fn):
            what = "kernel" if fn is py else "device function"
            code = fn.__code__
            lineno = _first_line(fn, lambda ins: ins.opname in ("YIELD_VALUE", "YIELD_FROM")) or code.co_firstlineno
            return CompileReport(
                ok=False, stage="typing",
                filename=os.path.abspath(code.co_filename), lineno=lineno,
                source_line=_source_line(code.co_filename, lineno),
                message=(f"{_rel(code.co_filename)}:{lineno}: {what} {fn.__name__!r} is a "
                         f"generator (uses yield): generators cannot run on the GPU"),
                detail="numba-cuda cannot compile generator functions")
    return None


def plain_function_use(py, name: str, obj) -> CompileReport:
    """The failure of kernel or device function `py` naming `name`, a plain Python function
    `obj` (no @cuda.jit): a GPU cannot call it. Told before numba types the kernel (the device
    process refuses it at packing), so the line is found here: where `py` loads the name."""
    code = py.__code__
    lineno = _first_line(py, lambda ins: ins.opname in ("LOAD_GLOBAL", "LOAD_DEREF", "LOAD_NAME")
                         and ins.argval == name) or def_line(py)
    return CompileReport(ok=False, stage="typing", filename=os.path.abspath(code.co_filename), lineno=lineno,
                         source_line=_source_line(code.co_filename, lineno),
                         message=f"{_rel(code.co_filename)}:{lineno}: {_plain_function_hint(name, obj)}",
                         detail=f"numba cannot type the global {name!r}, a plain Python function")


def _plain_function_hint(name: str, obj) -> str:
    if inspect.isgeneratorfunction(obj):
        return f"{name!r} is a Python generator: generators cannot run on the GPU"
    return (f"{name!r} is a plain Python function: a kernel can call only @cuda.jit(device=True) functions "
            f"(decorate {name} with @cuda.jit(device=True), or write its code inline in the kernel), math "
            f"functions and the numpy functions numba supports")


def _first_line(fn, match) -> int | None:
    """The line of the first instruction of `fn` that `match(instruction)` accepts."""
    import bisect
    import dis

    # (an instruction's own line is `positions` from Python 3.11 on; before, the line it lies in)
    starts = [(offset, line) for offset, line in dis.findlinestarts(fn.__code__) if line]
    for ins in dis.get_instructions(fn):
        if match(ins):
            positions = getattr(ins, "positions", None)
            if positions is not None and positions.lineno:
                return positions.lineno
            k = bisect.bisect_right([offset for offset, _ in starts], ins.offset) - 1
            if k >= 0:
                return starts[k][1]
    return None


def _isinstance_named(e: BaseException, name: str) -> bool:
    return any(c.__name__ == name for c in type(e).__mro__)


def classify(e: BaseException, py, files: set[str]) -> CompileReport:
    """The report of numba's exception `e` compiling `py` (whose graph spans `files`): a
    failure at its stage, or "unavailable" for a toolchain problem."""
    text = str(e)
    # Toolchain problems are "unavailable", never the kernel's fault.
    # (DynamicLibNotFoundError: cuda-pathfinder found no libnvrtc or libnvvm, a machine's setup: every
    # kernel, the reference's too, read "would not compile for a GPU", and a class was stored with zeros)
    if (_isinstance_named(e, "NvvmSupportError") or _isinstance_named(e, "CudaSupportError")
            or _isinstance_named(e, "NvrtcSupportError") or _isinstance_named(e, "DynamicLibNotFoundError")
            or "DynamicLibNotFoundError" in text or isinstance(e, (ImportError, OSError))):
        return CompileReport(ok=False, available=False,
                             message=f"{type(e).__name__}: {first_line(e)}", detail=_trim(text))
    frames = _tb_frames(e)
    in_typing = any(_frame_file(f).endswith(("typeinfer.py", "typed_passes.py", "untyped_passes.py",
                                            "interpreter.py", "bytecode.py", "byteflow.py"))
                    for f in frames)
    nrt = "NRT required" in text
    numba_err = _isinstance_named(e, "NumbaError")
    void = "must have void return type" in text
    if nrt or void or _isinstance_named(e, "TypingError") \
            or _isinstance_named(e, "UnsupportedError") or (not numba_err and in_typing):
        stage = "typing"
    else:
        stage = "lowering"

    filename, lineno = _student_loc(e, frames, files, text)
    if filename is None:
        filename = os.path.abspath(py.__code__.co_filename)
        lineno = (_return_value_line(py) if void else None) or def_line(py)
    numba_line = _numba_summary(text) if numba_err or nrt else f"{type(e).__name__}: {first_line(e)}"
    hint = _hint(text, py, numba_line)
    recursion = _recursive_call(py) if not (hint or numba_err or nrt) else None  # an error inside numba
    if recursion is not None:  # numba-cuda fails inside its code generator, naming none of this
        name, callee, filename, lineno = recursion
        hint = (f"device function {name!r} calls {callee!r}, which leads back to it: numba-cuda could not compile "
                f"this recursion (and a GPU thread's stack is small); write it as a loop")
        numba_line = ""  # (its AttributeError from inside numba-cuda reads as the grader's crash)
    where = f"{_rel(filename)}:{lineno}"
    if hint:  # numba's own words last, marked as its: the hint is the message
        message = f"{where}: {hint}{f' (numba says: {numba_line})' if numba_line else ''}"
    elif numba_err or nrt:
        message = f"{where}: {numba_line}"
    else:
        message = f"{where}: numba could not compile this for the GPU ({numba_line})"
    return CompileReport(ok=False, stage=stage, message=message, filename=filename, lineno=lineno,
                         source_line=_source_line(filename, lineno), detail=_trim(text))


def _recursive_call(py) -> tuple[str, str, str, int] | None:
    """(function, callee, file, line) of a call in `py`'s graph that leads back to its caller
    (a device function calling itself, or two calling each other); None when none does."""
    import dis

    nodes = user_functions(py).functions
    calls = {node.func: {name: value.py_func for name, value in node.references.items()
                         if hasattr(value, "py_func")} for node in nodes}
    for fn, callees in calls.items():
        for name, callee in sorted(callees.items()):
            seen, stack = set(), [callee]
            while stack:
                here = stack.pop()
                if here is fn:
                    line = next((getattr(ins.positions, "lineno", None) or fn.__code__.co_firstlineno
                                 for ins in dis.get_instructions(fn)
                                 if ins.opname == "LOAD_GLOBAL" and ins.argval == name), fn.__code__.co_firstlineno)
                    return fn.__name__, name, os.path.abspath(fn.__code__.co_filename), line
                if here not in seen:
                    seen.add(here)
                    stack.extend(calls.get(here, {}).values())
    return None


def def_line(py) -> int:
    """Line of ``def`` (``co_firstlineno`` is the first decorator's)."""
    try:
        lines, start = inspect.getsourcelines(py)
    except (OSError, TypeError):
        return py.__code__.co_firstlineno
    for i, ln in enumerate(lines):
        if ln.lstrip().startswith(("def ", "async def ")):
            return start + i
    return start


def _return_value_line(py) -> int | None:
    import ast
    import textwrap

    try:
        lines, start = inspect.getsourcelines(py)
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (OSError, TypeError, SyntaxError):
        return None
    fn = tree.body[0] if tree.body else None
    for node in ast.walk(fn) if fn is not None else ():
        if isinstance(node, ast.Return) and node.value is not None and not (
                isinstance(node.value, ast.Constant) and node.value.value is None):
            return start + node.lineno - 1
    return None


def _tb_frames(e: BaseException) -> list:
    frames = []
    tb = e.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    return frames


def _frame_file(f) -> str:
    return f.f_code.co_filename or ""


def _student_loc(e, frames, files: set[str], text: str) -> tuple[str | None, int | None]:
    """Innermost numba IR location (``loc``) in the kernel's own files, found in the
    compiler's frames; else the last ``File "...", line N`` of the message that names
    one of those files."""
    best: tuple[str, int] | None = None
    for f in frames:
        loc_objs = [f.f_locals.get("loc")]
        for k in ("inst", "stmt", "constraint", "self", "expr"):
            loc_objs.append(getattr(f.f_locals.get(k), "loc", None))
        for loc in loc_objs:
            fn = getattr(loc, "filename", None)
            line = getattr(loc, "line", None)
            if isinstance(fn, str) and isinstance(line, int) and os.path.abspath(fn) in files:
                best = (os.path.abspath(fn), line)
                break
    if best:
        return best
    cands = re.findall(r'File "([^"]+)", line (\d+)', text)
    cands += re.findall(r" at (\S+\.py) \((\d+)\)", text)
    for fn, line in reversed(cands):
        ab = os.path.abspath(fn)
        if ab in files:
            return ab, int(line)
        for known in files:  # numba prints paths relative to the cwd
            if os.path.basename(known) == os.path.basename(fn) and known.endswith(fn.lstrip("./")):
                return known, int(line)
    return None, None


_SKIP = ("Failed in ", "During:", "File \"", "<source elided>", "raised from", "There are ",
         "- Of which", "Overload ", "With argument", "Rejected as", "No match")


def _numba_summary(text: str) -> str:
    lines = [ln.rstrip() for ln in text.splitlines()]
    first = None
    sig = None
    for i, ln in enumerate(lines):
        s = ln.strip()
        if not s or s.startswith(_SKIP):
            continue
        if ln.startswith(" "):  # indented: source excerpt or nested detail
            continue
        first = s
        if s.startswith("No implementation of function"):
            for nxt in lines[i + 1:i + 4]:
                if nxt.strip().startswith(">>>"):
                    sig = nxt.strip()[3:].strip()
                    break
        break
    if first is None:
        first = next((ln.strip() for ln in lines if ln.strip()), "")
    first = re.sub(r"\x1b\[[0-9;]*m", "", first)
    first = re.sub(r" at 0x[0-9a-fA-F]+", "", first)
    if sig:
        first = f"{first} {sig}"
    return first if len(first) <= 240 else first[:237] + "..."


_ALLOC_FUNCS = ("zeros", "empty", "ones", "full", "array", "arange", "zeros_like", "empty_like",
                "ones_like", "full_like", "linspace", "copy", "concatenate", "stack")


def _hint(text: str, py, summary: str) -> str | None:
    """A student-facing explanation for the common constructs that cannot run on the GPU."""
    m = re.search(r"Untyped global name '([^']+)': Cannot determine Numba type of <class '([^']+)'>",
                  summary)
    if "must have void return type" in text:
        return "a kernel cannot return a value: write results into an output array"
    if re.search(r"Function\(<function (shared|local|const)\.array", summary):
        return ("the shape of cuda.shared.array / cuda.local.array must be a compile-time "
                "constant (a literal or a module-level constant), not a variable or argument; an expression "
                "such as TILE + 1 is not one either: name it at module level (PADDED = TILE + 1)")
    if m:
        name, kind = m.groups()
        obj = py.__globals__.get(name)
        if kind == "function":
            return _plain_function_hint(name, obj)
        return f"{name!r} (a {kind}) cannot be used inside a CUDA kernel"
    # (before the allocation's hint: an f-string or str() also needs NRT, but the string is the mistake)
    if "Literal[str]" in text or "unicode_type" in text or "Function(<class 'str'>)" in text:
        return ("strings and string formatting are not supported in CUDA kernels "
                "(print('x =', x) with several arguments works)")
    if "NRT required" in text:
        if "build_list" in text:
            return ("Python lists cannot be created in a CUDA kernel (use a tuple, "
                    "cuda.local.array or cuda.shared.array)")
        if "build_map" in text:
            return "dicts cannot be created in a CUDA kernel"
        if "build_set" in text:
            return "sets cannot be created in a CUDA kernel"
        return ("this needs memory allocation while the kernel runs, which CUDA kernels "
                "cannot do")
    m = re.search(r"No implementation of function Function\(<(?:built-in )?function (\w+)>\)", text)
    if m and m.group(1) in _ALLOC_FUNCS and ("array" in text or "Literal[int]" in text
                                               or "UniTuple" in text or "int64" in text):
        return (f"np.{m.group(1)} cannot allocate memory inside a CUDA kernel (allocate on the "
                f"host with cuda.device_array, or use cuda.local.array / cuda.shared.array with "
                f"a constant shape)")
    m = re.search(r"failed to unpack (\w+)", text)
    if m:
        return (f"a single {m.group(1)} cannot be unpacked into several names: cuda.grid(1) and cuda.gridsize(1) "
                f"give one index; for two, x, y = cuda.grid(2) (x the column, y the row)")
    if "DictType" in text or "build_map" in text:
        return "dicts are not supported in CUDA kernels"
    if re.search(r"reflected list|ListType|List\(", text):
        return "Python lists are not supported in CUDA kernels (use a tuple or cuda.local.array)"
    return None


def _rel(path: str) -> str:
    try:
        rel = os.path.relpath(path)
    except ValueError:  # other drive on Windows
        return os.path.basename(path)
    return os.path.basename(path) if rel.startswith("..") else rel


def _source_line(filename: str | None, lineno: int | None) -> str | None:
    if not filename or not lineno:
        return None
    import linecache

    s = linecache.getline(filename, lineno).strip()
    return s or None


def _trim(text: str, max_lines: int = 40) -> str:
    lines = text.splitlines()
    if len(lines) > max_lines:
        lines = lines[:max_lines] + [f"... ({len(lines) - max_lines} more lines)"]
    return "\n".join(lines)
