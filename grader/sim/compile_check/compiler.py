"""``compile_check``: numba-cuda's ``compile_ptx`` for the target cc, then ``ptxas -v``."""

from __future__ import annotations

import os
import time
from typing import Any, Iterable, Sequence

from grader.sim import patching
from grader.sim.argtypes import argtypes_for, declared_argtypes
from grader.sim.devices import TARGET_CC
from grader.sim.kernel_graph import python_function, user_functions

from . import cache, issue, ptxas, toolchain

STATIC_SHARED_LIMIT = 48 * 1024  # static shared memory per block without an opt-in (what ptxas enforces)
from .explain import classify, def_line, generator_use
from .report import CompileReport


def compile_check(kernel, argtypes: Sequence[Any] | None = None, cc: tuple[int, int] = TARGET_CC,
                  *, use_cache: bool = True) -> CompileReport:
    """Compile ``kernel`` (a ``@cuda.jit`` dispatcher or its ``py_func``) for ``cc`` and
    assemble it with ``ptxas -v``.

    ``argtypes``: numba types (``float32[:]``, ``types.int64``) or launch argument
    values (numpy arrays, device arrays, scalars), mixed freely; values are typed with
    ``numba_type_of``. None: the dispatcher's declared signature, if it has one.
    """
    py = python_function(kernel)
    cc = (int(cc[0]), int(cc[1]))
    name = py.__name__
    opts = dict(getattr(kernel, "targetoptions", {}) or {})

    st = toolchain.status_for_check()
    tc = {"numba": st.numba_version or "", "numba_cuda": st.numba_cuda_version or "",
          "ptxas": st.ptxas_version or ""}
    if not st.compile_ptx:
        return CompileReport(ok=False, available=False, kernel=name, cc=cc, toolchain=tc,
                             message=st.compile_ptx_reason)

    try:
        sig = _resolve_argtypes(kernel, argtypes)
    except TypeError as e:
        raise TypeError(f"compile_check({name}): {e}") from None
    sig_strs = [str(t) for t in sig]

    graph = user_functions(py)
    key = cache.key(graph, kernel, cc, sig_strs, tc, st.ptxas_path)
    if use_cache:
        hit = cache.lookup(key)
        if hit is not None:
            return hit

    t0 = time.perf_counter()
    report = _compile(py, sig, cc, opts, graph.dispatchers, graph.files, st)
    report.compile_seconds = round(time.perf_counter() - t0, 4)
    report.kernel, report.cc, report.argtypes, report.toolchain = name, cc, sig_strs, tc
    if use_cache and report.available:
        cache.store(key, report)
    return report


def _resolve_argtypes(kernel, argtypes) -> tuple:
    if argtypes is None:
        sigs = getattr(kernel, "sigs", None) or []
        if sigs:
            return declared_argtypes(sigs[0])
        raise TypeError("argtypes is required (the kernel declares no signature)")
    if isinstance(argtypes, (str, bytes)) or not isinstance(argtypes, Iterable):
        raise TypeError("argtypes must be a sequence of numba types or argument values")
    return argtypes_for(argtypes)


def _compile(py, sig, cc, opts, dispatchers, files, st: toolchain.ToolchainStatus) -> CompileReport:
    from numba import cuda

    gen = generator_use(py, dispatchers)
    if gen is not None:
        return gen
    kw: dict[str, Any] = {"cc": cc}
    for k in ("fastmath", "lineinfo", "launch_bounds", "forceinline"):
        if opts.get(k):
            kw[k] = opts[k]
    if opts.get("debug"):
        kw["debug"] = True
        kw["opt"] = bool(opts.get("opt", False))
    if opts.get("device"):
        kw["device"] = True
    try:
        with patching.compile_check_device(cc, dispatchers):
            ptx, _ = cuda.compile_ptx(py, tuple(sig), **kw)
    except Exception as e:  # noqa: BLE001 - classified below
        return classify(e, py, files)
    if not st.ptxas or st.ptxas_path is None:
        return CompileReport(ok=False, available=False, message=st.ptxas_reason,
                             detail="numba compiled the kernel to PTX; ptxas is needed for "
                                    "registers and shared memory")
    res = ptxas.run(st.ptxas_path, ptx, cc)
    report = CompileReport(ok=res.returncode == 0, ptxas_log=res.log)
    ptxas.parse_log(res.log, report)
    if res.relocatable and res.returncode == 0:  # the relocatable log leaves static shared memory out
        report.shared_bytes = ptxas.static_shared_bytes(ptx)
        if report.shared_bytes > STATIC_SHARED_LIMIT:
            res = ptxas.Result(1, f"ptxas error   : Entry function uses too much shared data "
                                  f"({report.shared_bytes:#x} bytes, {STATIC_SHARED_LIMIT:#x} max)")
            report.ok = False
    if res.returncode == 0:
        report.instructions = _instruction_profile(py, sig, kw, dispatchers, cc)
    if res.returncode != 0:
        errs = ptxas.errors(res.log)
        if ("Unsupported .version" in res.log or "not defined for option" in res.log
                or res.returncode < 0):
            return CompileReport(ok=False, available=False, ptxas_log=res.log,
                                 message=f"ptxas at {st.ptxas_path} cannot assemble numba's "
                                         f"PTX for sm_{cc[0]}{cc[1]}: {errs}")
        report.stage = "ptxas"
        report.detail = errs
        report.message = ptxas.message(errs, py.__name__)
        report.filename = os.path.abspath(py.__code__.co_filename)
        report.lineno = def_line(py)
    return report


def _instruction_profile(py, sig, kw: dict, dispatchers, cc) -> dict | None:
    """The kernel's instruction profile (issue.profile) from PTX compiled again with line info,
    which ties its instructions to the source lines the simulator counts (the PTX ptxas assembled
    stays the one a GPU runs: line info moves a few instructions). None where it cannot be had."""
    from numba import cuda

    if kw.get("device") or kw.get("debug"):
        return None
    try:
        with patching.compile_check_device(cc, dispatchers):
            ptx, _ = cuda.compile_ptx(py, tuple(sig), **{**kw, "lineinfo": True})
        return issue.profile(ptx, os.path.abspath(py.__code__.co_filename))
    except Exception:  # noqa: BLE001 - it compiled a moment ago; an estimate is not worth a failure
        return None
