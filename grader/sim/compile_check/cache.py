"""The compile check's cache: the key (everything the compiled code depends on), a memory
cache and a disk cache (JSON, one file per key under ``$GPUGRADE_CACHE_DIR`` or
``~/.cache/gpugrade``, subfolder ``compile_check``)."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import inspect
import json
import marshal
import os
import tempfile
import threading
import types as pytypes
from pathlib import Path

from ..bounded import BoundedCache
from ..kernel_graph import KernelGraph, is_numba_dispatcher
from .report import CompileReport

_SCHEMA = 6  # 2: ptxas on relocatable code where numba links functions at load time (fp16, cudadevrt);
            # 3: the instruction profile (issue.py); 4: its blocks' DRAM round trips; 5: their float64 instructions;
            # 6: a recursion's failure explained (a failure's message is cached too: bump on a new explanation)
_MAX_DISK_ENTRIES = 4096


# --------------------------------------------------------------------------- the key
def key(graph: KernelGraph, kernel, cc: tuple[int, int], argtypes: list[str],
        toolchain: dict[str, str], ptxas_path: str | None) -> str:
    """The cache key of compiling `kernel` (whose graph is `graph`) for `cc` and `argtypes`
    with this toolchain."""
    src = json.dumps({"schema": _SCHEMA, "cc": cc, "args": argtypes, "opts": options(kernel),
                      "tc": toolchain, "ptxas": ptxas_path, "parts": fingerprint(graph)},
                     sort_keys=True)
    return hashlib.sha256(src.encode()).hexdigest()[:40]


def options(dispatcher) -> dict:
    """The jit options that change the compiled code."""
    to = getattr(dispatcher, "targetoptions", {}) or {}
    keep = ("fastmath", "debug", "lineinfo", "opt", "launch_bounds", "forceinline", "device",
            "inline")
    return {k: repr(to.get(k)) for k in keep if k in to}


def fingerprint(graph: KernelGraph) -> list[str]:
    """What the compiled code depends on, function by function of the graph: its source, the
    modules, constants and functions it names, the options of the dispatchers it calls."""
    parts: list[str] = []
    for node in graph.functions:
        fn = node.func
        parts.append(f"func {fn.__module__}.{fn.__qualname__} {_func_fingerprint(fn)}")
        for n in sorted(node.references):
            v = node.references[n]
            if isinstance(v, pytypes.ModuleType):
                parts.append(f"module {n}={v.__name__}")
                for attr, av in node.module_attributes(v).items():
                    if graph.follows(av):
                        continue  # a function of the graph: fingerprinted as such
                    c = _const_repr(av)
                    if c is not None and not v.__name__.startswith(("numba", "numpy", "math")):
                        parts.append(f"attr {n}.{attr}={c}")
            elif is_numba_dispatcher(v):
                if graph.follows(v):
                    parts.append(f"dispatcher {n} {sorted(options(v).items())}")
            elif isinstance(v, pytypes.FunctionType):
                parts.append(f"pyfunc {n} {_func_fingerprint(v)}")
            else:
                c = _const_repr(v)
                parts.append(f"global {n}={c if c is not None else type(v).__qualname__}")
    return parts


_SIMPLE = (int, float, complex, bool, str, bytes, type(None))


def _const_repr(v) -> str | None:
    """A stable description of a global the compiler freezes as a constant."""
    if isinstance(v, _SIMPLE):
        return repr(v)
    if isinstance(v, tuple) and all(isinstance(x, _SIMPLE) for x in v):
        return repr(v)
    mod = type(v).__module__
    if mod == "numpy" or mod.startswith("numpy."):
        try:
            import numpy as np

            if isinstance(v, np.generic):
                return f"{type(v).__name__}({v!r})"
            if isinstance(v, np.ndarray) and v.nbytes <= (64 << 20):
                return f"ndarray({v.dtype},{v.shape},{hashlib.sha256(v.tobytes()).hexdigest()})"
            if isinstance(v, np.dtype):
                return f"dtype({v})"
        except Exception:  # noqa: BLE001
            return None
    if mod.startswith("numba"):
        return f"{mod}:{v!r}"  # numba types (float32, ...)
    return None


def _func_fingerprint(f: pytypes.FunctionType) -> str:
    code = f.__code__
    try:
        src = inspect.getsource(f)
    except (OSError, TypeError):
        src = marshal.dumps(code).hex()
    return f"{code.co_filename}:{code.co_firstlineno}:{hashlib.sha256(src.encode()).hexdigest()}"


# --------------------------------------------------------------------------- the store
_mem_cache = BoundedCache(1024)
_mem_lock = threading.Lock()
_pruned = False


def cache_dir() -> Path:
    base = os.environ.get("GPUGRADE_CACHE_DIR")
    root = Path(base) if base else Path.home() / ".cache" / "gpugrade"
    return root / "compile_check"


def clear_cache(disk: bool = False) -> None:
    with _mem_lock:
        _mem_cache.clear()
    if disk:
        d = cache_dir()
        if d.is_dir():
            for p in d.glob("*.json"):
                with contextlib.suppress(OSError):
                    p.unlink()


def lookup(key: str) -> CompileReport | None:
    """The report stored under `key`, from memory or else disk (`cached` says which)."""
    with _mem_lock:
        hit = _mem_cache.get(key)
    if hit is not None:
        return dataclasses.replace(CompileReport.from_dict(hit), cached="memory")
    hit = _disk_get(key)
    if hit is not None:
        with _mem_lock:
            _mem_cache[key] = hit
        return dataclasses.replace(CompileReport.from_dict(hit), cached="disk")
    return None


def store(key: str, report: CompileReport) -> None:
    d = report.to_dict()
    with _mem_lock:
        _mem_cache[key] = d
    _disk_put(key, d)


def _disk_get(key: str) -> dict | None:
    p = cache_dir() / f"{key}.json"
    try:
        with open(p, encoding="utf-8") as fh:
            d = json.load(fh)
    except (OSError, ValueError):
        return None
    if not isinstance(d, dict) or d.get("schema") != _SCHEMA or d.get("key") != key:
        return None
    return d.get("report")


def _disk_put(key: str, report: dict) -> None:
    d = cache_dir()
    try:
        d.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-", suffix=".json")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump({"schema": _SCHEMA, "key": key, "report": report}, fh)
        os.replace(tmp, d / f"{key}.json")
    except OSError:
        return  # read-only home in a sandbox: memory cache only
    _prune(d)


def _prune(d: Path) -> None:
    """Once per process: keep the newest half when the folder holds too many entries."""
    global _pruned
    if _pruned:
        return
    _pruned = True
    try:
        files = list(d.glob("*.json"))
        if len(files) <= _MAX_DISK_ENTRIES:
            return
        files.sort(key=lambda p: p.stat().st_mtime)
        for p in files[: len(files) - _MAX_DISK_ENTRIES // 2]:
            p.unlink()
    except OSError:
        pass
