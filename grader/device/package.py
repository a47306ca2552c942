"""A kernel as data: what the device process needs to run a kernel without the student's module.

`pack(dispatcher)` (in the runner) describes a kernel and every device function it reaches: for
each, its file's source text, where its `def` is, the jit options and declared signatures, and
the values of the globals and closure cells its code names, each as plain data: numbers, NumPy
scalars and arrays (numba freezes global arrays as constants), dtypes and NumPy scalar types,
numba types, the modules `numba`, `numba.cuda`, `math`, `cmath`, `numpy` (by name), objects taken
from them by name (`from numba.cuda import syncthreads`), and other device functions. Anything
else cannot reach a GPU and is refused at the launch, naming the global.

`Builder.build(package)` (in the device process) makes the kernel again: it parses the file text,
takes the `def` nodes (decorators, annotations dropped; only constant defaults), executes those
definitions alone in a namespace of the decoded values, and jits them with the options sent. No
expression of the student's module is ever evaluated there: not its decorators, not its
top-level code, not its imports. The kernel body then runs only as the simulator runs it, after
numba has typed it (and, when grading, compiled it for sm_90).
"""

from __future__ import annotations

import ast
import hashlib
import json
import linecache
import math
import cmath
import os
import types
from typing import Any

import numpy as np

from ..sim import patching
from ..wire.messages import is_number
from ..wire.digests import text_digest
from ..sim.compile_check.explain import plain_function_use
from ..sim.kernel_graph import code_names, is_cuda_dispatcher, is_numba_dispatcher

MODULES = {"numba": "numba", "numba.cuda": "numba.cuda", "math": "math", "cmath": "cmath", "numpy": "numpy",
           "numba.cuda.fp16": "numba.cuda.fp16", "numba.cuda.random": "numba.cuda.random",
           "numba.cuda.cg": "numba.cuda.cg"}
# jit options that may cross (numba's targetoptions); the rest is the device process's business
OPTIONS = ("device", "fastmath", "debug", "lineinfo", "opt", "inline", "cache", "max_registers")


class NotPackable(Exception):
    """A kernel refers to something that cannot reach a GPU."""


class NotCompilable(NotPackable):
    """A kernel refers to something numba would refuse to compile for a GPU (a plain Python
    function): `report` is the compile check's, with the student's line."""

    def __init__(self, report):
        super().__init__(report.message)
        self.report = report


# ------------------------------------------------------------------ the runner's side
def pack(dispatcher, declared=lambda dispatcher: ()) -> dict:
    """The kernel package of `dispatcher` (see module doc); raises NotPackable. `declared(d)`:
    the argument types declared for dispatcher `d` (eager `cuda.jit("void(...)")`)."""
    functions: dict[str, dict] = {}
    files: dict[str, str] = {}

    def key_of(disp) -> str:
        fn = disp.py_func
        return f"{fn.__code__.co_filename}:{fn.__code__.co_firstlineno}:{fn.__qualname__}"

    pending = [dispatcher]
    seen: set[int] = set()
    while pending:
        disp = pending.pop()
        if id(disp) in seen:
            continue
        seen.add(id(disp))
        fn = disp.py_func
        filename = fn.__code__.co_filename
        if filename not in files:
            lines = linecache.getlines(filename, fn.__globals__)
            if not lines:
                raise NotPackable(f"the source of {fn.__name__!r} ({filename}) cannot be read")
            files[filename] = "".join(lines)
        values = {}
        for name in code_names(fn.__code__):
            if name in fn.__globals__:
                values[name] = _encode(fn.__globals__[name], fn, name, pending, key_of)
        for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
            try:
                contents = cell.cell_contents
            except ValueError:
                raise NotPackable(f"{fn.__name__!r}: the closure variable {name!r} is not set") from None
            values[name] = _encode(contents, fn, name, pending, key_of)
        options = {k: v for k, v in (getattr(disp, "targetoptions", {}) or {}).items()
                   if k in OPTIONS and isinstance(v, (bool, int, str))}
        if not is_cuda_dispatcher(disp):  # a CPU-jitted helper: numba-cuda compiles it as a device function
            options["device"] = True
        functions[key_of(disp)] = {
            "name": fn.__name__, "file": filename, "line": fn.__code__.co_firstlineno,
            "options": options,
            "signatures": [encode_signature(s) for s in declared(disp)],
            "values": values,
        }
    package = {"kernel": key_of(dispatcher), "functions": functions, "files": files}
    package["id"] = hashlib.blake2b(json.dumps(_identity(package), sort_keys=True, default=str).encode(),
                                    digest_size=16).hexdigest()
    return package


def _identity(package: dict) -> Any:
    """What identifies a package for the device's cache (arrays by their bytes' digest)."""
    def strip(value):
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items()}
        if isinstance(value, list):
            return [strip(v) for v in value]
        if isinstance(value, np.ndarray):
            return ["array", value.dtype.str, list(value.shape), hashlib.blake2b(value.tobytes()).hexdigest()]
        if isinstance(value, np.generic):
            return ["scalar", value.dtype.str, value.item()]
        return value
    return strip(package)


def _encode(value: Any, fn: types.FunctionType, name: str, pending: list, key_of) -> dict:
    attr = _module_attribute(value)  # numba's own (numba.cuda.random's generators): by name
    if attr is not None and is_numba_dispatcher(value):
        return {"attribute": attr}
    if is_numba_dispatcher(value):
        pending.append(value)
        return {"function": key_of(value)}
    if isinstance(value, types.ModuleType):
        if value.__name__ in MODULES:
            return {"module": value.__name__}
        if value is patching.cuda_module():
            return {"module": "numba.cuda"}
        raise NotPackable(f"kernel {fn.__name__!r} uses the module {name!r} ({value.__name__}): only numba, numba.cuda "
                          f"(its fp16, random and cg), math, cmath and numpy reach a GPU")
    if value is None or isinstance(value, (bool, int, float, complex, str)):
        if isinstance(value, complex):
            return {"complex": [value.real, value.imag]}
        return {"value": value}
    if isinstance(value, (np.generic, np.ndarray)):
        if isinstance(value, np.ndarray) and value.dtype.kind not in "biufc":
            raise NotPackable(f"kernel {fn.__name__!r}: the global array {name!r} has dtype {value.dtype}")
        return {"value": value}
    if isinstance(value, tuple):
        return {"tuple": [_encode(v, fn, name, pending, key_of) for v in value]}
    if isinstance(value, np.dtype):
        return {"dtype": value.str}
    if isinstance(value, type) and issubclass(value, np.generic):
        return {"numpy_type": np.dtype(value).str}
    attr = _module_attribute(value)
    if attr is not None:
        return {"attribute": attr}
    numba_type = _numba_type(value)
    if numba_type is not None:
        return {"numba_type": numba_type}
    if isinstance(value, types.FunctionType):  # numba's typing would refuse it too: say so as it would, with the line
        raise NotCompilable(plain_function_use(fn, name, value))
    raise NotPackable(f"kernel {fn.__name__!r} uses the global {name!r}, a {type(value).__name__}: only numbers, NumPy "
                      f"arrays and dtypes, numba types, the modules numba, numpy and math, and device "
                      f"functions reach a GPU")


def constant_arrays(package: dict) -> list[tuple[str, str, np.ndarray]]:
    """(function, global or closure name, array) for every array a package's functions take
    as a constant (numba copies them into the kernel): data the host made, as an upload is."""
    return [c for c in _constants(package) if isinstance(c[2], np.ndarray)]


def constant_numbers(package: dict) -> list[tuple[str, str, Any]]:
    """(function, global or closure name, number) for every number a package's functions take
    as a constant (numba freezes it into the code): a tile size, a mask, or a sum the host
    computed before defining the kernel around it."""
    return [c for c in _constants(package) if not isinstance(c[2], np.ndarray)]


def _constants(package: dict) -> list[tuple[str, str, Any]]:
    """Every array and number (not bool) among a package's global and closure values."""
    found = []

    def walk(fn: str, name: str, spec: dict) -> None:
        value = spec.get("value")
        if isinstance(value, np.ndarray) or is_number(value):
            found.append((fn, name, value))
        elif "complex" in spec:
            found.append((fn, name, complex(*spec["complex"])))
        for item in spec.get("tuple", ()):
            walk(fn, name, item)

    for function in package["functions"].values():
        for name, spec in function["values"].items():
            walk(function["name"], name, spec)
    return found


_ATTRIBUTES: dict[int, list[str]] | None = None


def _module_attribute(value) -> list[str] | None:
    """[module, name] of an object taken by name from a module a kernel may use
    (`from numba.cuda import syncthreads`, `from math import sqrt`)."""
    global _ATTRIBUTES
    if _ATTRIBUTES is None:
        index: dict[int, list[str]] = {}
        cuda = patching.cuda_module()
        modules = [("numba.cuda", cuda), ("numba.cuda.fp16", getattr(cuda, "fp16", None)), ("math", math),
                   ("cmath", cmath), ("numba", patching.numba_module()), ("numba.cuda.random", _cuda_random())]
        for module_name, module in modules:
            for attr in dir(module) if module is not None else ():
                if attr.startswith("_"):
                    continue
                try:
                    member = getattr(module, attr)
                except Exception:  # noqa: BLE001 - a lazy attribute that fails: not this one
                    continue
                if not isinstance(member, (int, float, str, bool, types.ModuleType)):
                    index.setdefault(id(member), [module_name, attr])
        _ATTRIBUTES = index
    return _ATTRIBUTES.get(id(value))


def _cuda_random():
    try:
        import numba.cuda.random as module
    except ImportError:
        return None
    return module


def _numba_type(value) -> dict | None:
    try:
        from numba.core import types as nt
    except ImportError:
        return None
    if isinstance(value, nt.Array):
        inner = _numba_type(value.dtype)
        return {"array": inner, "ndim": value.ndim, "layout": value.layout} if inner else None
    if isinstance(value, nt.Type) and getattr(nt, str(value), None) == value:
        return {"name": str(value)}
    return None


def encode_signature(argtypes) -> list:
    out = []
    for t in argtypes:
        encoded = _numba_type(t)
        if encoded is None:
            raise NotPackable(f"a declared argument type {t} cannot be sent to the device")
        out.append(encoded)
    return out


# ------------------------------------------------------------------ the device's side
def decode_numba_type(spec: dict):
    from numba.core import types as nt

    if "array" in spec:
        return nt.Array(decode_numba_type(spec["array"]), int(spec["ndim"]), str(spec["layout"]))
    t = getattr(nt, str(spec["name"]), None)
    if not isinstance(t, nt.Type):
        raise NotPackable(f"unknown numba type {spec['name']!r}")
    return t


class Builder:
    """Makes kernels from packages, once per package id."""

    def __init__(self, cuda, workspace: str | None = None, sources: dict[str, str] | None = None):
        """`workspace`: the runner's, where every file a package sends must be (None: anywhere);
        `sources`: the digest (text_digest) of each file there, by its name in the workspace, as
        the judge read them (None: any text)."""
        self.cuda = cuda
        self.workspace = None if workspace is None else workspace.rstrip("/") + "/"
        self.sources = sources
        self._kernels: dict[str, Any] = {}
        self._constants: dict[str, list] = {}
        self._texts: dict[str, str] = {}  # file -> the one text its kernels are built from
        self._trees: dict[str, ast.Module] = {}
        self._kernel_specs: dict[str, dict] = {}  # package id -> its kernel's spec (file, name, line)

    def cached(self, package_id: str):
        """A kernel built before, named by its package's id."""
        kernel = self._kernels.get(str(package_id))
        if kernel is None:
            raise NotPackable("a kernel launched by id that was never sent to this device")
        return kernel

    def constants(self, package_id: str) -> list[tuple[str, str, np.ndarray]]:
        """`constant_arrays` of a package built before."""
        return self._constants.get(str(package_id), ([], []))[0]

    def numbers(self, package_id: str) -> list[tuple[str, str, Any]]:
        """`constant_numbers` of a package built before."""
        return self._constants.get(str(package_id), ([], []))[1]

    @staticmethod
    def params(kernel) -> list[str]:
        import inspect

        return list(inspect.signature(kernel.py_func).parameters)

    def build(self, package: dict):
        hit = self._kernels.get(package["id"])
        if hit is not None:
            return hit
        self._take_files(package["files"])
        functions = package["functions"]
        namespaces: dict[str, dict] = {}
        plain: dict[str, types.FunctionType] = {}
        for key, spec in functions.items():
            namespaces[key] = {"__name__": "gpugrade_device_kernels"}
            plain[key] = self._define(spec, namespaces[key])
        jitted: dict[str, Any] = {}
        for key, spec in functions.items():
            options = dict(spec["options"])
            is_device = bool(options.pop("device", False))
            jitted[key] = self.cuda.jit(device=is_device, **self._accepted(options))(plain[key])
        for key, spec in functions.items():
            namespace = namespaces[key]
            for name, value in spec["values"].items():
                namespace[name] = self._decode(value, jitted)
        # a kernel's signatures compiled once its globals are there (numba types it at compile);
        # a device function's are compiled with the kernels that call it
        for key, spec in functions.items():
            compile_now = getattr(jitted[key], "compile", None)  # (numba's stock simulator compiles nothing)
            if compile_now is not None and not spec["options"].get("device"):
                for sig in spec["signatures"]:
                    compile_now(tuple(decode_numba_type(t) for t in sig))
        kernel = jitted[package["kernel"]]
        self._kernels[package["id"]] = kernel
        self._kernel_specs[package["id"]] = functions[package["kernel"]]
        self._constants[package["id"]] = (constant_arrays(package), constant_numbers(package))
        return kernel

    def _take_files(self, files: dict) -> None:
        """Each file's text for inspect.getsource: the simulator runs a kernel as its source says,
        re-read by file name, so a file has one text for this process's life (a second text would
        run a body numba never compiled, Python of the student's, here) and only the runner's
        workspace's files are sent (not numba's, whose device functions the simulator reads too), with
        the text the judge read there (the runner's linecache is the student's to edit)."""
        trees = {}
        for filename, text in files.items():
            if not isinstance(filename, str) or not isinstance(text, str):
                raise NotPackable("a package's files are names and texts")
            if self.workspace is not None and (not filename.startswith(self.workspace) or
                                               os.path.normpath(filename) != filename):
                raise NotPackable(f"a kernel's file {filename!r} is outside the workspace")
            if self.sources is not None:
                known = self.sources.get(filename[len(self.workspace or ""):])
                if known is None:
                    raise NotPackable(f"a kernel's file {filename} is none of the submission's files")
                if known != text_digest(text):
                    raise NotPackable(f"a kernel's file {filename} came with another text than the submission's "
                                      f"file of that name")
            if self._texts.get(filename, text) != text:
                raise NotPackable(f"a kernel's file {filename} came with another text than the one its "
                                  f"kernels were built from (a file is sent once)")
            if filename not in self._texts:
                trees[filename] = ast.parse(text, filename)
        for filename, text in files.items():
            if filename in trees:
                self._trees[filename], self._texts[filename] = trees[filename], text
            linecache.cache[filename] = (len(text), None, text.splitlines(keepends=True), filename)

    def _accepted(self, options: dict) -> dict:
        """The jit options this `cuda.jit` takes (numba's stock simulator takes fewer: `lineinfo`,
        `max_registers` change nothing there)."""
        import inspect

        parameters = inspect.signature(self.cuda.jit).parameters
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
            return options
        return {key: value for key, value in options.items() if key in parameters}

    def definition(self, package_id: str) -> ast.FunctionDef | None:
        """The `def` of a kernel built before, as parsed from its file (None: never built here)."""
        spec = self._kernel_specs.get(str(package_id))
        if spec is None or spec["file"] not in self._trees:
            return None
        return _find_def(self._trees[spec["file"]], spec["name"], int(spec["line"]))

    def _define(self, spec: dict, namespace: dict):
        tree = self._trees[spec["file"]]
        node = _find_def(tree, spec["name"], int(spec["line"]))
        if node is None:
            raise NotPackable(f"no definition of {spec['name']!r} at line {spec['line']} of {spec['file']}")
        node = _strip(node)
        module = ast.Module(body=[node], type_ignores=[])
        exec(compile(module, spec["file"], "exec"), namespace)  # defines the function; runs nothing else
        return namespace.pop(spec["name"])

    def _decode(self, spec: dict, jitted: dict) -> Any:
        if "function" in spec:
            return jitted[spec["function"]]
        if "module" in spec:
            name = MODULES.get(spec["module"])
            if name is None:
                raise NotPackable(f"module {spec['module']!r} does not reach the GPU")
            return __import__(name, fromlist=["_"])
        if "value" in spec:
            return spec["value"]
        if "complex" in spec:
            return complex(*spec["complex"])
        if "tuple" in spec:
            return tuple(self._decode(v, jitted) for v in spec["tuple"])
        if "dtype" in spec:
            return np.dtype(spec["dtype"])
        if "numpy_type" in spec:
            return np.dtype(spec["numpy_type"]).type
        if "attribute" in spec:
            module_name, attr = spec["attribute"]
            module = __import__(MODULES[module_name], fromlist=["_"])
            return getattr(module, attr)
        if "numba_type" in spec:
            return decode_numba_type(spec["numba_type"])
        raise NotPackable(f"a value the device cannot make: {sorted(spec)}")


def _find_def(tree: ast.Module, name: str, line: int):
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            if first == line or node.lineno == line:
                return node
    return None


def _strip(node: ast.FunctionDef) -> ast.FunctionDef:
    """The definition without what would run at `def` time: decorators, annotations; defaults
    only as constants."""
    node = ast.FunctionDef(name=node.name, args=node.args, body=node.body, decorator_list=[], returns=None,
                           type_comment=None, lineno=node.lineno, col_offset=0,
                           end_lineno=node.end_lineno, end_col_offset=node.end_col_offset)
    args = node.args
    for arg in args.posonlyargs + args.args + args.kwonlyargs + [a for a in (args.vararg, args.kwarg) if a]:
        arg.annotation = None
    for default in args.defaults + [d for d in args.kw_defaults if d is not None]:
        if not isinstance(default, ast.Constant):
            raise NotPackable(f"{node.name!r}: a default argument that is not a constant (line {default.lineno})")
    for inner in ast.walk(ast.Module(body=node.body, type_ignores=[])):
        if isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda, ast.Import,
                              ast.ImportFrom, ast.Global, ast.Nonlocal)):
            raise NotPackable(f"{node.name!r}: a {type(inner).__name__} inside a kernel (line {inner.lineno}) "
                              f"does not compile for a GPU")
    return node
