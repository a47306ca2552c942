"""CPU-side compile check of numba-cuda kernels: PTX for sm_90 + ``ptxas -v``.

Catches kernels that run in Python (and so on the simulator) but that numba cannot
compile for the GPU (lists, dicts, strings, ``np.zeros``, plain Python calls,
generators, ...), and reports the resources the compiled kernel uses (registers,
shared/local memory, spills) and from them the theoretical occupancy.

Needs no GPU: ``numba.cuda.compile_ptx`` runs NVVM from the ``numba-cuda[cu13]``
wheels, and ``ptxas`` comes from the ``nvidia-cuda-nvcc`` wheel. Where that toolchain is
missing (macOS, a bare numba), results say ``available=False`` with the reason:
"unavailable" is never reported as a failure of the student's kernel.

Public API::

    toolchain_status() -> ToolchainStatus
    find_ptxas() -> str | None
    numba_type_of(value) / argtypes_for(args) -> numba types as numba types them
    compile_check(kernel, argtypes, cc=TARGET_CC) -> CompileReport
    CompileReport.occupancy(threads_per_block, dynamic_shared=0) -> Occupancy
    clear_cache(disk=False)

Results are cached in memory and on disk (JSON, one file per key under
``$GPUGRADE_CACHE_DIR`` or ``~/.cache/gpugrade``, subfolder ``compile_check``), keyed by
the source of the kernel and of every device function / constant it references,
the argument types, the compile options, the cc and the toolchain versions.

The one intrusion into numba (``patching.compile_check_device``, a recorded scope like every
patch of the simulator): numba-cuda compiles the *device functions* a kernel calls for
``get_current_device().compute_capability``, which needs a driver. For the duration of one
check, and only for the checking thread, ``get_current_device`` answers a stand-in device
with the requested cc; device-function overloads created during the check are removed
afterwards, so nothing compiled for the stand-in is reused by a real launch.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import inspect
import json
import marshal
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
import types as pytypes
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from grader.sim import patching
from grader.sim.devices import TARGET_CC
from grader.sim.occupancy import Occupancy, occupancy as _occupancy

__all__ = [
    "CompileReport", "ToolchainStatus", "compile_check", "toolchain_status", "find_ptxas",
    "numba_type_of", "argtypes_for", "clear_cache", "cache_dir",
]

_SCHEMA = 1
_PTXAS_TIMEOUT_S = 120

Stage = str  # "typing" | "lowering" | "ptxas" | None


# --------------------------------------------------------------------------- report


@dataclass
class CompileReport:
    """Outcome of one compile check.

    ``ok``: the kernel compiled and assembled. ``available`` False: the toolchain is
    missing here (``message`` says why); this is not a failure of the kernel (use
    ``failed`` to test for a real failure). ``stage`` of a failure: ``"typing"`` (the
    kernel uses something that cannot run on the GPU: numba's type inference rejected
    it, or it needs memory allocation at run time), ``"lowering"`` (numba/NVVM could
    not generate code), ``"ptxas"`` (the assembler rejected the PTX, e.g. too much
    static shared memory).
    """

    ok: bool
    available: bool = True
    stage: Stage | None = None
    message: str = ""
    kernel: str = ""
    filename: str | None = None  # file of the offending line (absolute), when known
    lineno: int | None = None
    source_line: str | None = None
    detail: str = ""  # numba's / ptxas's own message, trimmed
    cc: tuple[int, int] = TARGET_CC
    argtypes: list[str] = field(default_factory=list)
    registers: int | None = None  # per thread
    barriers: int | None = None
    shared_bytes: int | None = None  # static shared memory per block
    local_bytes: int | None = None  # per-thread stack frame (local arrays + spills)
    spill_stores: int | None = None  # bytes
    spill_loads: int | None = None  # bytes
    constant_bytes: int | None = None  # sum of the cmem[] banks ptxas reports
    ptxas_log: str = ""
    compile_seconds: float | None = None  # of the real compile (not of a cache hit)
    cached: str | None = None  # None (compiled now) | "memory" | "disk"
    toolchain: dict[str, str] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        """True only when the toolchain ran and rejected the kernel."""
        return self.available and not self.ok

    def occupancy(self, threads_per_block: int, dynamic_shared: int = 0) -> Occupancy:
        """Theoretical occupancy on ``self.cc`` for a launch with this block size and
        dynamic shared memory (bytes)."""
        if not self.ok or self.registers is None:
            raise ValueError(f"no resource usage for {self.kernel or 'kernel'}: "
                             f"compile check {'unavailable' if not self.available else 'failed'}")
        return _occupancy(self.registers, self.shared_bytes or 0, threads_per_block,
                          dynamic_shared, tuple(self.cc))

    def summary(self) -> str:
        if not self.available:
            return f"compile check unavailable: {self.message}"
        if not self.ok:
            return f"{self.kernel} does not compile for the GPU ({self.stage}): {self.message}"
        spill = (f", spills {self.spill_stores} B stored / {self.spill_loads} B loaded"
                 if (self.spill_stores or self.spill_loads) else "")
        return (f"{self.kernel} compiles for sm_{self.cc[0]}{self.cc[1]}: {self.registers} registers, "
                f"{self.shared_bytes} B shared, {self.local_bytes} B local{spill}")

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["cc"] = list(self.cc)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "CompileReport":
        names = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in d.items() if k in names}
        kw["cc"] = tuple(kw.get("cc", TARGET_CC))
        return cls(**kw)


@dataclass
class ToolchainStatus:
    compile_ptx: bool
    compile_ptx_reason: str  # "" when usable
    ptxas: bool
    ptxas_reason: str
    ptxas_path: str | None = None
    ptxas_version: str | None = None  # e.g. "13.5.37"
    numba_version: str | None = None
    numba_cuda_version: str | None = None  # None: numba's own numba.cuda
    nvvm_version: str | None = None  # NVVM IR version, e.g. "2.0"

    @property
    def available(self) -> bool:
        return self.compile_ptx and self.ptxas

    @property
    def reason(self) -> str:
        return "; ".join(r for r in (self.compile_ptx_reason, self.ptxas_reason) if r)

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["available"] = self.available
        return d

    def lines(self) -> list[str]:
        """Human-readable lines for ``gpugrade doctor``."""
        cp = ("ok" if self.compile_ptx else f"unavailable ({self.compile_ptx_reason})")
        px = (f"ok ({self.ptxas_path})" if self.ptxas else f"unavailable ({self.ptxas_reason})")
        return [
            f"numba {self.numba_version or '?'}, numba-cuda {self.numba_cuda_version or 'not installed'}"
            f", NVVM IR {self.nvvm_version or '?'}",
            f"compile_ptx (sm_90, no GPU needed): {cp}",
            f"ptxas {self.ptxas_version or ''}: {px}".replace("  ", " "),
        ]


# --------------------------------------------------------------------------- toolchain

_status_lock = threading.Lock()
_status_cache: ToolchainStatus | None = None
_ptxas_version_cache: dict[str, str | None] = {}


def find_ptxas() -> str | None:
    """Path of a usable ``ptxas``: ``$GPUGRADE_PTXAS``, the ``nvidia-cuda-nvcc`` wheel
    (``nvidia/cu13/bin``, ``nvidia/cuda_nvcc/bin``), ``$CUDA_HOME``/``$CUDA_PATH``,
    ``PATH``, ``/usr/local/cuda``. None when there is none."""
    exe = "ptxas.exe" if os.name == "nt" else "ptxas"
    candidates: list[Path] = []
    env = os.environ.get("GPUGRADE_PTXAS")
    if env:
        candidates.append(Path(env))
    try:
        import nvidia  # namespace package of the NVIDIA wheels

        roots = [Path(p) for p in getattr(nvidia, "__path__", [])]
    except ImportError:
        roots = []
    wheel_bins: list[Path] = []
    for root in roots:
        # cu13 wheels: nvidia/cu13/bin; cu12 wheels: nvidia/cuda_nvcc/bin. Newest first.
        wheel_bins += sorted(root.glob("cu*/bin"), key=lambda p: _natural_key(p.parent.name),
                             reverse=True)
        wheel_bins.append(root / "cuda_nvcc" / "bin")
    candidates += [b / exe for b in wheel_bins]
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            candidates.append(Path(os.environ[var]) / "bin" / exe)
    which = shutil.which(exe)
    if which:
        candidates.append(Path(which))
    candidates.append(Path("/usr/local/cuda/bin") / exe)
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return str(c)
    return None


def _natural_key(s: str) -> list:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", s)]


def _ptxas_version(path: str) -> str | None:
    if path not in _ptxas_version_cache:
        try:
            out = subprocess.run([path, "--version"], capture_output=True, text=True,
                                 timeout=30).stdout
            m = re.search(r"V(\d+\.\d+\.\d+)", out) or re.search(r"release (\d+\.\d+)", out)
            _ptxas_version_cache[path] = m.group(1) if m else None
        except (OSError, subprocess.SubprocessError):
            _ptxas_version_cache[path] = None
    return _ptxas_version_cache[path]


def _versions() -> dict[str, str | None]:
    v: dict[str, str | None] = {"numba": None, "numba_cuda": None}
    try:
        import numba

        v["numba"] = numba.__version__
    except Exception:  # noqa: BLE001 - any import failure means "not there"
        pass
    try:
        import numba_cuda

        v["numba_cuda"] = getattr(numba_cuda, "__version__", "?")
    except Exception:  # noqa: BLE001
        pass
    return v


def _probe_kernel(a):  # compiled by toolchain_status(); never run
    a[0] = a[0] + 1.0


def toolchain_status(refresh: bool = False) -> ToolchainStatus:
    """Whether ``compile_ptx`` and ``ptxas`` work here (by compiling and assembling a
    one-line kernel, once per process), with versions and the reason when not."""
    global _status_cache
    with _status_lock:
        if _status_cache is not None and not refresh:
            return _status_cache
        v = _versions()
        st = ToolchainStatus(compile_ptx=False, compile_ptx_reason="", ptxas=False,
                             ptxas_reason="", numba_version=v["numba"],
                             numba_cuda_version=v["numba_cuda"])
        ptx = None
        try:
            from numba import cuda, float32

            try:
                from numba.cuda.cudadrv import nvvm

                st.nvvm_version = ".".join(map(str, nvvm.NVVM().get_version()))
            except Exception as e:  # noqa: BLE001
                st.compile_ptx_reason = f"NVVM not usable: {_first_line(e)}"
            if not st.compile_ptx_reason:
                ptx, _ = cuda.compile_ptx(_probe_kernel, (float32[:],), cc=TARGET_CC)
                st.compile_ptx = True
        except Exception as e:  # noqa: BLE001
            st.compile_ptx_reason = st.compile_ptx_reason or (
                f"numba.cuda.compile_ptx failed: {type(e).__name__}: {_first_line(e)}")
        if st.compile_ptx_reason and st.numba_cuda_version is None:
            st.compile_ptx_reason += " (numba-cuda[cu13] is not installed)"

        path = find_ptxas()
        st.ptxas_path = path
        if path is None:
            st.ptxas_reason = ("ptxas not found (install nvidia-cuda-nvcc, or set CUDA_HOME "
                               "or GPUGRADE_PTXAS)")
        else:
            st.ptxas_version = _ptxas_version(path)
            if st.ptxas_version is None:
                st.ptxas_reason = f"{path} --version failed"
            elif ptx is not None:
                res = _run_ptxas(path, ptx, TARGET_CC)
                if res.returncode != 0:
                    st.ptxas_reason = f"ptxas cannot assemble numba's PTX: {_ptxas_errors(res.log)}"
                else:
                    st.ptxas = True
            else:
                st.ptxas = True  # cannot test-assemble without PTX; the binary answers
        _status_cache = st
        return st


_light_cache: ToolchainStatus | None = None


def _status_for_check() -> ToolchainStatus:
    """What compile_check needs, without toolchain_status()'s probe compile (~0.3 s), so
    that a cache hit in a fresh process stays cheap: versions, numba.cuda.compile_ptx
    importable, ptxas found and answering --version. A toolchain that turns out not to
    work (no NVVM, a ptxas too old for numba's PTX) is detected on the real compile and
    reported as unavailable there."""
    global _light_cache
    with _status_lock:
        if _status_cache is not None:
            return _status_cache
        if _light_cache is not None:
            return _light_cache
    v = _versions()
    st = ToolchainStatus(compile_ptx=False, compile_ptx_reason="", ptxas=False, ptxas_reason="",
                         numba_version=v["numba"], numba_cuda_version=v["numba_cuda"])
    try:
        from numba import cuda

        st.compile_ptx = callable(getattr(cuda, "compile_ptx", None))
        if not st.compile_ptx:
            st.compile_ptx_reason = "numba.cuda has no compile_ptx"
    except Exception as e:  # noqa: BLE001
        st.compile_ptx_reason = f"numba.cuda cannot be imported: {_first_line(e)}"
    if st.compile_ptx_reason and st.numba_cuda_version is None:
        st.compile_ptx_reason += " (numba-cuda[cu13] is not installed)"
    st.ptxas_path = find_ptxas()
    if st.ptxas_path is None:
        st.ptxas_reason = ("ptxas not found (install nvidia-cuda-nvcc, or set CUDA_HOME "
                           "or GPUGRADE_PTXAS)")
    else:
        st.ptxas_version = _ptxas_version(st.ptxas_path)
        st.ptxas = st.ptxas_version is not None
        if not st.ptxas:
            st.ptxas_reason = f"{st.ptxas_path} --version failed"
    with _status_lock:
        _light_cache = st
    return st


# --------------------------------------------------------------------------- arg types


def numba_type_of(value: Any):
    """The numba type a kernel argument gets on the GPU: numpy arrays as numba types
    them (``array(float32, 1d, C)``), Python ints ``int64``, floats ``float64``, numpy
    scalars their dtype, numba device arrays their own ``_numba_type_``; other device
    arrays with ``dtype``/``ndim`` (the simulator's, which stand in for numba's
    ``DeviceNDArray``) by dtype, ndim and contiguity; third-party
    ``__cuda_array_interface__`` objects (CuPy) as numba-cuda types them."""
    import numpy as np
    from numba.core import types

    if isinstance(value, types.Type):
        return value
    nt = getattr(value, "_numba_type_", None)
    if isinstance(nt, types.Type):
        return nt
    if isinstance(value, (np.ndarray, np.generic, bool, int, float, complex)):
        return _numba_typeof(value)
    if hasattr(value, "dtype") and hasattr(value, "ndim"):
        dtype = np.dtype(value.dtype)
        return types.Array(_from_dtype(dtype), int(value.ndim), _array_layout(value, dtype))
    cai = getattr(value, "__cuda_array_interface__", None)
    if isinstance(cai, dict):
        t = _numba_typeof(value)
        if t is not None:
            return t
        dtype = np.dtype(cai["typestr"])
        shape = tuple(cai["shape"])
        return types.Array(_from_dtype(dtype), len(shape),
                           _layout(shape, cai.get("strides"), dtype.itemsize),
                           readonly=bool(cai.get("data", (0, False))[1]))
    data = getattr(value, "data", None)
    if hasattr(data, "dtype") and hasattr(data, "ndim"):
        return numba_type_of(data)  # a DeviceBuffer-like wrapper of the backing ndarray
    t = _numba_typeof(value)
    if t is not None:
        return t
    raise TypeError(f"cannot type a kernel argument of type {type(value).__name__}")


def _numba_typeof(value):
    """numba-cuda's own argument typing (what its dispatcher uses); None if it cannot."""
    from numba.core import types

    try:
        from numba.cuda.typing.typeof import Purpose, typeof
    except ImportError:  # numba's own numba.cuda
        from numba.core.typing.typeof import Purpose, typeof
    try:
        t = typeof(value, Purpose.argument)
    except Exception:  # noqa: BLE001 - the caller falls back to its own rules
        return None
    return None if t is None or t == types.pyobject else t


def _array_layout(value, dtype) -> str:
    if callable(getattr(value, "is_c_contiguous", None)):
        if value.is_c_contiguous():
            return "C"
        f = getattr(value, "is_f_contiguous", None)
        return "F" if callable(f) and f() else "A"
    flags = getattr(value, "flags", None)
    if flags is not None:
        try:
            return "C" if flags["C_CONTIGUOUS"] else "F" if flags["F_CONTIGUOUS"] else "A"
        except (KeyError, TypeError):
            pass
    shape = tuple(getattr(value, "shape", (0,) * int(value.ndim)))
    return _layout(shape, getattr(value, "strides", None), dtype.itemsize)


def argtypes_for(args: Iterable[Any]) -> tuple:
    """``numba_type_of`` of each launch argument."""
    return tuple(numba_type_of(a) for a in args)


def _from_dtype(dtype):
    from numba.np.numpy_support import from_dtype

    return from_dtype(dtype)


def _layout(shape, strides, itemsize: int) -> str:
    if strides is None:
        return "C"
    # C-contiguous?
    expect, c_ok = itemsize, True
    for dim, st in zip(reversed(shape), reversed(strides)):
        if dim > 1 and st != expect:
            c_ok = False
        expect *= dim
    if c_ok:
        return "C"
    expect, f_ok = itemsize, True
    for dim, st in zip(shape, strides):
        if dim > 1 and st != expect:
            f_ok = False
        expect *= dim
    return "F" if f_ok else "A"


# --------------------------------------------------------------------------- kernel graph


def _py_func(kernel) -> pytypes.FunctionType:
    f = getattr(kernel, "py_func", kernel)
    if not isinstance(f, pytypes.FunctionType):
        raise TypeError(f"expected a @cuda.jit kernel or a Python function, got {type(kernel)!r}")
    return f


def _is_dispatcher(obj) -> bool:
    return (not isinstance(obj, type) and hasattr(obj, "py_func")
            and isinstance(getattr(obj, "py_func", None), pytypes.FunctionType)
            and hasattr(obj, "targetoptions"))


def _code_names(code: pytypes.CodeType) -> set[str]:
    names = set(code.co_names)
    for c in code.co_consts:
        if isinstance(c, pytypes.CodeType):
            names |= _code_names(c)
    return names


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


def _walk(f: pytypes.FunctionType):
    """The kernel's function and every function it reaches through globals/closure/
    module attributes, plus the constants it reads. Returns (fingerprint parts,
    device dispatchers, plain python functions by name, files)."""
    parts: list[str] = []
    dispatchers: list[Any] = []
    files: set[str] = set()
    seen: set[int] = set()
    stack = [f]
    while stack:
        fn = stack.pop()
        if id(fn) in seen:
            continue
        seen.add(id(fn))
        parts.append(f"func {fn.__module__}.{fn.__qualname__} {_func_fingerprint(fn)}")
        files.add(os.path.abspath(fn.__code__.co_filename))
        names = _code_names(fn.__code__)
        glb = fn.__globals__
        scope: dict[str, Any] = {n: glb[n] for n in names if n in glb}
        if fn.__closure__:
            for n, cell in zip(fn.__code__.co_freevars, fn.__closure__):
                try:
                    scope[n] = cell.cell_contents
                except ValueError:
                    pass
        for n in sorted(scope):
            v = scope[n]
            if isinstance(v, pytypes.ModuleType):
                parts.append(f"module {n}={v.__name__}")
                for attr in sorted(names):
                    av = getattr(v, attr, None) if not attr.startswith("__") else None
                    if av is None or isinstance(av, pytypes.ModuleType):
                        continue
                    if _is_dispatcher(av) and _is_user(av.py_func):
                        dispatchers.append(av)
                        stack.append(av.py_func)
                    else:
                        c = _const_repr(av)
                        if c is not None and not v.__name__.startswith(("numba", "numpy", "math")):
                            parts.append(f"attr {n}.{attr}={c}")
            elif _is_dispatcher(v):
                if _is_user(v.py_func):
                    dispatchers.append(v)
                    stack.append(v.py_func)
                    parts.append(f"dispatcher {n} {sorted(_opts(v).items())}")
            elif isinstance(v, pytypes.FunctionType):
                parts.append(f"pyfunc {n} {_func_fingerprint(v)}")
            else:
                c = _const_repr(v)
                parts.append(f"global {n}={c if c is not None else type(v).__qualname__}")
    return parts, dispatchers, files


def _is_user(f) -> bool:
    mod = getattr(f, "__module__", "") or ""
    return not mod.startswith(("numba.", "numba_cuda"))


def _opts(dispatcher) -> dict:
    to = getattr(dispatcher, "targetoptions", {}) or {}
    keep = ("fastmath", "debug", "lineinfo", "opt", "launch_bounds", "forceinline", "device",
            "inline")
    return {k: repr(to.get(k)) for k in keep if k in to}


# --------------------------------------------------------------------------- cache

_mem_cache: dict[str, dict] = {}
_mem_lock = threading.Lock()


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


_MAX_DISK_ENTRIES = 4096
_pruned = False


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


# --------------------------------------------------------------------------- compile


def compile_check(kernel, argtypes: Sequence[Any] | None = None, cc: tuple[int, int] = TARGET_CC,
                  *, use_cache: bool = True) -> CompileReport:
    """Compile ``kernel`` (a ``@cuda.jit`` dispatcher or its ``py_func``) for ``cc`` and
    assemble it with ``ptxas -v``.

    ``argtypes``: numba types (``float32[:]``, ``types.int64``) or launch argument
    values (numpy arrays, device arrays, scalars), mixed freely; values are typed with
    ``numba_type_of``. None: the dispatcher's declared signature, if it has one.
    """
    py = _py_func(kernel)
    cc = (int(cc[0]), int(cc[1]))
    name = py.__name__
    opts = dict(getattr(kernel, "targetoptions", {}) or {})

    st = _status_for_check()
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

    parts, dispatchers, files = _walk(py)
    key_src = json.dumps({"schema": _SCHEMA, "cc": cc, "args": sig_strs, "opts": _opts(kernel),
                          "tc": tc, "ptxas": st.ptxas_path, "parts": parts}, sort_keys=True)
    key = hashlib.sha256(key_src.encode()).hexdigest()[:40]
    if use_cache:
        with _mem_lock:
            hit = _mem_cache.get(key)
        if hit is not None:
            return _with(CompileReport.from_dict(hit), cached="memory")
        hit = _disk_get(key)
        if hit is not None:
            with _mem_lock:
                _mem_cache[key] = hit
            return _with(CompileReport.from_dict(hit), cached="disk")

    t0 = time.perf_counter()
    report = _compile(py, sig, cc, opts, dispatchers, files, st)
    report.compile_seconds = round(time.perf_counter() - t0, 4)
    report.kernel, report.cc, report.argtypes, report.toolchain = name, cc, sig_strs, tc
    if use_cache and report.available:
        d = report.to_dict()
        with _mem_lock:
            _mem_cache[key] = d
        _disk_put(key, d)
    return report


def _with(r: CompileReport, **kw) -> CompileReport:
    return dataclasses.replace(r, **kw)


def _resolve_argtypes(kernel, argtypes) -> tuple:
    if argtypes is None:
        sigs = getattr(kernel, "sigs", None) or []
        if sigs:
            from numba.core import sigutils

            args, _ = sigutils.normalize_signature(sigs[0])
            return tuple(args)
        raise TypeError("argtypes is required (the kernel declares no signature)")
    if isinstance(argtypes, (str, bytes)) or not isinstance(argtypes, Iterable):
        raise TypeError("argtypes must be a sequence of numba types or argument values")
    return argtypes_for(argtypes)


def _compile(py, sig, cc, opts, dispatchers, files, st: ToolchainStatus) -> CompileReport:
    from numba import cuda

    gen = _generator_use(py, dispatchers)
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
        return _classify(e, py, files)
    if not st.ptxas or st.ptxas_path is None:
        return CompileReport(ok=False, available=False, message=st.ptxas_reason,
                             detail="numba compiled the kernel to PTX; ptxas is needed for "
                                    "registers and shared memory")
    res = _run_ptxas(st.ptxas_path, ptx, cc)
    report = CompileReport(ok=res.returncode == 0, ptxas_log=res.log)
    _parse_ptxas(res.log, report)
    if res.returncode != 0:
        errs = _ptxas_errors(res.log)
        if ("Unsupported .version" in res.log or "not defined for option" in res.log
                or res.returncode < 0):
            return CompileReport(ok=False, available=False, ptxas_log=res.log,
                                 message=f"ptxas at {st.ptxas_path} cannot assemble numba's "
                                         f"PTX for sm_{cc[0]}{cc[1]}: {errs}")
        report.stage = "ptxas"
        report.detail = errs
        report.message = _ptxas_message(errs, py.__name__)
        report.filename = os.path.abspath(py.__code__.co_filename)
        report.lineno = _def_line(py)
    return report


# --------------------------------------------------------------------------- ptxas


@dataclass
class _PtxasResult:
    returncode: int
    log: str


def _run_ptxas(path: str, ptx: str, cc) -> _PtxasResult:
    with tempfile.TemporaryDirectory(prefix="gpugrade-ptxas-") as tmp:
        src = os.path.join(tmp, "kernel.ptx")
        with open(src, "w", encoding="utf-8") as fh:
            fh.write(ptx)
        try:
            r = subprocess.run([path, "-v", "--gpu-name", f"sm_{cc[0]}{cc[1]}", src,
                                "-o", os.path.join(tmp, "kernel.cubin")],
                               capture_output=True, text=True, timeout=_PTXAS_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return _PtxasResult(-1, f"ptxas timed out after {_PTXAS_TIMEOUT_S} s")
        except OSError as e:
            return _PtxasResult(-1, f"ptxas could not run: {e}")
        return _PtxasResult(r.returncode, (r.stdout or "") + (r.stderr or ""))


_RE_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_RE_PROPS = re.compile(r"Function properties for (\S+)")
_RE_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_RE_USED = re.compile(r"Used (\d+) registers")


def _parse_ptxas(log: str, r: CompileReport) -> None:
    """Fill the resource fields from ``ptxas -v`` output, for the (single) entry
    function; lines about non-entry functions are skipped."""
    entry = None
    props_for = None
    for line in log.splitlines():
        m = _RE_ENTRY.search(line)
        if m:
            entry = m.group(1)
            continue
        m = _RE_PROPS.search(line)
        if m:
            props_for = m.group(1)
            continue
        m = _RE_FRAME.search(line)
        if m and props_for is not None and props_for == entry:
            r.local_bytes, r.spill_stores, r.spill_loads = (int(g) for g in m.groups())
            continue
        m = _RE_USED.search(line)
        if m and entry is not None:
            r.registers = int(m.group(1))
            b = re.search(r"used (\d+) barriers", line)
            r.barriers = int(b.group(1)) if b else 0
            s = re.search(r"(\d+) bytes smem", line)
            r.shared_bytes = int(s.group(1)) if s else 0
            cm = [int(x) for x in re.findall(r"(\d+) bytes cmem\[\d+\]", line)]
            r.constant_bytes = sum(cm)
            lm = re.search(r"(\d+) bytes lmem", line)  # older ptxas
            if lm and r.local_bytes is None:
                r.local_bytes = int(lm.group(1))
            entry = None  # later "Used" lines belong to other functions
    for f in ("local_bytes", "spill_stores", "spill_loads"):
        if getattr(r, f) is None and r.registers is not None:
            setattr(r, f, 0)


def _ptxas_errors(log: str) -> str:
    errs = [ln.split(":", 1)[1].strip() if ":" in ln else ln.strip()
            for ln in log.splitlines() if "error" in ln.lower()]
    return "; ".join(errs) or log.strip()[-300:]


def _ptxas_message(errs: str, kernel: str) -> str:
    msg = re.sub(r"'_Z[\w$.]+'", f"'{kernel}'", errs)
    m = re.search(r"too much shared data \((0x[0-9a-f]+) bytes, (0x[0-9a-f]+) max\)", msg)
    if m:
        used, mx = int(m.group(1), 16), int(m.group(2), 16)
        return (f"{kernel} declares {used} bytes of static shared memory (cuda.shared.array); "
                f"the limit is {mx} bytes per block. Use smaller tiles, or dynamic shared memory")
    return f"ptxas rejected {kernel}: {msg}"


# --------------------------------------------------------------------------- errors


def _first_line(e: BaseException) -> str:
    for ln in str(e).splitlines():
        if ln.strip():
            return ln.strip()
    return type(e).__name__


def _generator_use(py, dispatchers) -> CompileReport | None:
    for fn in [py] + [d.py_func for d in dispatchers]:
        if inspect.isgeneratorfunction(fn):
            what = "kernel" if fn is py else "device function"
            code = fn.__code__
            lineno = _first_yield_line(fn) or code.co_firstlineno
            return CompileReport(
                ok=False, stage="typing",
                filename=os.path.abspath(code.co_filename), lineno=lineno,
                source_line=_source_line(code.co_filename, lineno),
                message=(f"{_rel(code.co_filename)}:{lineno}: {what} {fn.__name__!r} is a "
                         f"generator (uses yield): generators cannot run on the GPU"),
                detail="numba-cuda cannot compile generator functions")
    return None


def _first_yield_line(fn) -> int | None:
    import dis

    for ins in dis.get_instructions(fn):
        if ins.opname in ("YIELD_VALUE", "YIELD_FROM") and ins.positions and ins.positions.lineno:
            return ins.positions.lineno
    return None


def _isinstance_named(e: BaseException, name: str) -> bool:
    return any(c.__name__ == name for c in type(e).__mro__)


def explain_failure(error: BaseException, kernel) -> CompileReport:
    """The report ``compile_check`` gives when numba raised ``error`` compiling ``kernel`` (a
    dispatcher or function): the student's file and line, numba's summary, a hint. For a
    refusal numba's typing made elsewhere (the simulator types kernels before running them)."""
    py = _py_func(kernel)
    _, _, files = _walk(py)
    report = _classify(error, py, files)
    report.kernel = py.__name__
    return report


def _classify(e: BaseException, py, files: set[str]) -> CompileReport:
    text = str(e)
    # Toolchain problems are "unavailable", never the kernel's fault.
    if (_isinstance_named(e, "NvvmSupportError") or _isinstance_named(e, "CudaSupportError")
            or _isinstance_named(e, "NvrtcSupportError") or isinstance(e, (ImportError, OSError))):
        return CompileReport(ok=False, available=False,
                             message=f"{type(e).__name__}: {_first_line(e)}", detail=_trim(text))
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
        lineno = (_return_value_line(py) if void else None) or _def_line(py)
    numba_line = _numba_summary(text) if numba_err or nrt else f"{type(e).__name__}: {_first_line(e)}"
    hint = _hint(text, py, numba_line)
    where = f"{_rel(filename)}:{lineno}"
    if hint:
        message = f"{where}: {hint} [numba: {numba_line}]"
    elif numba_err or nrt:
        message = f"{where}: {numba_line}"
    else:
        message = f"{where}: numba could not compile this for the GPU ({numba_line})"
    return CompileReport(ok=False, stage=stage, message=message, filename=filename, lineno=lineno,
                         source_line=_source_line(filename, lineno), detail=_trim(text))


def _def_line(py) -> int:
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
                "constant (a literal or a module-level constant), not a variable or argument")
    if m:
        name, kind = m.groups()
        obj = py.__globals__.get(name)
        if kind == "function":
            if inspect.isgeneratorfunction(obj):
                return (f"{name!r} is a Python generator: generators cannot run on the GPU")
            return (f"{name!r} is a plain Python function: a kernel can only call "
                    f"@cuda.jit(device=True) functions, math functions and the numpy functions "
                    f"numba supports")
        return f"{name!r} (a {kind}) cannot be used inside a CUDA kernel"
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
    if "DictType" in text or "build_map" in text:
        return "dicts are not supported in CUDA kernels"
    if re.search(r"reflected list|ListType|List\(", text):
        return "Python lists are not supported in CUDA kernels (use a tuple or cuda.local.array)"
    if "Literal[str]" in text or "unicode_type" in text or "Function(<class 'str'>)" in text:
        return ("strings and string formatting are not supported in CUDA kernels "
                "(print('x =', x) with several arguments works)")
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
