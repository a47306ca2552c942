"""The per-thread executor's front end: a kernel's syntax tree rewritten so that its values
follow numba's types (`values`) and its element accesses are compiled inline where they can be
(`access`), compiled with the original file name and line numbers:

    x = e          ->  x = __gg_cast(e, <numba's type of x at this line>)
    x op= e        ->  x = __gg_cast(__gg_bin(op, x, e), <type>)
    a[i] op= e     ->  t1 = a; t2 = i; t1[t2] = __gg_bin(op, t1[t2], e)
    a op b, a < b  ->  __gg_bin(op, a, b)   # operands converted as numba's typing context says
    -a, ~a         ->  __gg_un(op, a)
    2.5            ->  a float64 constant (numba's type for float literals)
    for x in ...:  ->  the loop variable cast at the top of the body
    return e       ->  cast to the device function's return type

Where the class of every operand is known before running (locals that every binding casts to
one representation, literals, globals), an operation is decided here once
(`values.static_plan`) instead of per call.

Why a second front end beside the SIMT executor's (`simt/transform.py`): that transform turns
every statement into calls on a lockstep context (locals are numpy vectors over the lanes of a
batch of blocks, control flow becomes mask-stack operations) and rejects what lockstep cannot
run; this rewrite keeps the code Python that one thread runs on scalars, changes only how
values are typed and accessed, and must accept everything Python does (it is the fallback).
What both need the same way (the source tree with the file's line numbers, compiling it back,
node classes, operator tables) is shared in `grader/sim/ast_tools.py`.
"""

from __future__ import annotations

import ast
import types
import zlib

import numpy as np

from ..bounded import BoundedCache
from ..ast_tools import (BINARY, COMPARE, SCOPES, UNARY, append_return, arguments, define,
                         index_parts, name_node, parse_function, stored_names)
from ..kernel_source import _END_MARKER
from ..simt import typing as simt_typing
from . import access as thread_access
from .values import (DIRECT, binop, cast, converted_type, converter, representation,
                     static_plan, unop)


class _Scan:
    """How each name of a function is bound (read before the rewrite): what the static classes
    and the compiled accesses may assume."""

    def __init__(self, fdef: ast.FunctionDef):
        args = fdef.args
        self.params = [a.arg for a in (*args.posonlyargs, *args.args)]
        self.cast_lines: dict = {}  # name -> lines of the bindings the rewrite casts
        self.other: set = {a.arg for a in args.kwonlyargs}  # bound in ways nothing is assumed of
        self.other.update(a.arg for a in (args.vararg, args.kwarg) if a is not None)
        self.not_by_assign: set = set()  # bound by a `for`, `+=` or annotated assignment
        self.bound = set(self.params) | self.other
        self.has_while = False
        for stmt in fdef.body:
            self._visit(stmt)
        self.bound |= self.other

    def _cast_targets(self, target, line):
        """Names the rewrite casts (`_direct_names`); deeper ones: other."""
        direct = _direct_names(target)
        for n in direct:
            self.cast_lines.setdefault(n.id, []).append(line)
        self.other.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name) and
                          isinstance(n.ctx, ast.Store) and n not in direct)

    def _visit(self, node):
        if isinstance(node, SCOPES):
            # a nested scope may rebind our names (nonlocal): assume nothing of any name in it
            self.other.update(n.id for n in ast.walk(node) if isinstance(n, ast.Name))
            if not isinstance(node, ast.Lambda):
                self.other.add(node.name)
                self.bound.add(node.name)
            return
        if isinstance(node, ast.While):
            self.has_while = True
        if isinstance(node, ast.Assign):
            for target in node.targets:
                self._cast_targets(target, node.lineno)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            if isinstance(node.target, ast.Name):
                self.not_by_assign.add(node.target.id)
                if isinstance(node, ast.AugAssign) and type(node.op) not in BINARY:
                    self.other.add(node.target.id)
                elif getattr(node, "value", True) is not None:  # (`x: int` binds nothing)
                    self.cast_lines.setdefault(node.target.id, []).append(node.lineno)
        elif isinstance(node, ast.For):
            self._cast_targets(node.target, node.lineno)
            self.not_by_assign.update(n.id for n in ast.walk(node.target) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            self.other.update(node.names)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            self.other.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            self.other.add(node.name)
        elif isinstance(node, (ast.NamedExpr, ast.withitem, ast.Delete, ast.AsyncFor,
                               ast.comprehension)):
            self.other.update(stored_names(node))
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            self.bound.add(node.id)
        for child in ast.iter_child_nodes(node):
            self._visit(child)


def _cls(node):
    """The class of the value an expression of the rewritten code evaluates to, when it is
    known before running (None: only the running code knows)."""
    return getattr(node, "_gg_cls", None)


def _known(node, cls):
    node._gg_cls = cls
    return node


class _Rewrite(ast.NodeTransformer):
    """The rewrite of one function for one argument-type signature (see the module doc)."""

    def __init__(self, func, types: simt_typing.FunctionTypes, kind: str, scan: _Scan,
                 access: str | None):
        self.func, self.types, self.kind, self.scan = func, types, kind, scan
        self.consts: dict = {}
        self._temps = 0
        self.classes = self._local_classes()
        self.access = access  # compiled accesses: None, "count" or "record" (thread_access)
        arrays = self._array_locals()
        self.array_names = set(arrays)
        self.arrays = arrays if access else {}  # name -> (ArrayAccesses, class)

    # --- what is known before running
    def _dtype(self, nbtype):
        dtype = simt_typing.as_dtype(nbtype) if nbtype is not None else None
        return dtype if dtype is not None and dtype.kind in "biufc" else None

    def _local_classes(self) -> dict:
        """name -> the class its value always has (every binding casts to one representation)."""
        scan, out = self.scan, {}
        for name in scan.bound:
            if name in scan.other:
                continue
            reps = set()
            for line in scan.cast_lines.get(name, ()):
                dtype = self._dtype(self.types.local(name, line))
                reps.add(representation(dtype.type) if dtype is not None else None)
            if name in scan.params:
                dtype = self._dtype(self.types.by_name.get(name))
                reps.add(representation(dtype.type) if dtype is not None else None)
            if len(reps) == 1 and None not in reps:
                out[name] = reps.pop()
        return out

    def _array_locals(self) -> dict:
        """name -> (its ArrayAccesses, element class) of the array locals whose accesses can be
        compiled: bound only as parameters or by `=`, with one number of dimensions."""
        types = simt_typing._numba()[0]
        scan, out = self.scan, {}
        for name in scan.bound:
            nbtype = self.types.by_name.get(name)
            if not isinstance(nbtype, types.Array) or name in scan.other or \
                    name in scan.not_by_assign or isinstance(nbtype.dtype, types.Record):
                # (an element of records is a reference: RecordArray's path)
                continue
            if any(not isinstance(self.types.by_line.get((name, line), nbtype), types.Array) or
                   self.types.by_line.get((name, line), nbtype).ndim != nbtype.ndim
                   for line in scan.cast_lines.get(name, ())):
                continue
            dtype = self._dtype(nbtype.dtype)
            out[name] = (thread_access.ArrayAccesses(
                name, nbtype.ndim, nbtype.layout == "C", self.access == "record", self._site),
                dtype.type if dtype is not None else None)
        return out

    def _scalar_type_called(self, node):
        """The numpy type of the numba scalar type `node` calls as a conversion with one
        argument (`uint64(x)`, `numba.int32(i)`), or None."""
        if len(node.args) != 1 or node.keywords or isinstance(node.args[0], ast.Starred):
            return None
        func, chain = node.func, []
        while isinstance(func, ast.Attribute):
            chain.insert(0, func.attr)
            func = func.value
        if not isinstance(func, ast.Name) or func.id in self.scan.bound:
            return None
        code = self.func.__code__
        if func.id in code.co_freevars:
            try:
                obj = self.func.__closure__[code.co_freevars.index(func.id)].cell_contents
            except ValueError:  # not yet assigned
                return None
        else:
            obj = self.func.__globals__.get(func.id, _MISSING)
        for attr in chain:
            obj = getattr(obj, attr, _MISSING) if isinstance(obj, types.ModuleType) else _MISSING
        if not type(obj).__module__.startswith(("numba.core.types", "numba.cuda.types")):
            return None
        dtype = self._dtype(obj)
        return dtype.type if dtype is not None and dtype.kind in "biuf" else None

    def _global_class(self, name):
        if name in self.scan.bound or name in self.func.__code__.co_freevars:
            return None
        value = self.func.__globals__.get(name, _MISSING)
        cls = value.__class__
        if cls in (int, float, bool) or isinstance(value, (np.number, np.bool_)):
            return cls
        return None

    # --- emitted helpers
    def _site(self, line: int) -> str:
        """The global holding the `thread_access.Site` of a line (recorded accesses)."""
        name = f"__gg_site_{line}_{zlib.crc32(self.func.__code__.co_filename.encode())}"
        self.consts[name] = thread_access.Site(line, self.func.__code__.co_filename)
        return name

    def _type_const(self, t) -> str:
        name = f"__gg_t_{np.dtype(t).name}"
        self.consts[name] = np.dtype(t).type
        return name

    def _type_name(self, nbtype):
        dtype = self._dtype(nbtype)
        return self._type_const(dtype.type) if dtype is not None else None

    def _local(self, name: str, line: int):
        return self._type_name(self.types.local(name, line))

    def _convert(self, value, conv, like):
        """`conv(value)`: `conv` a `converter` (or a numpy type, for `converter` of it)."""
        conv = converter(conv) if isinstance(conv, type) else conv
        name = f"__gg_to_{np.dtype(converted_type(conv)).name}"
        self.consts[name] = conv
        call = ast.Call(ast.Name(name, ast.Load()), [value], [])
        return ast.copy_location(call, like)

    def _cast(self, value, type_name, like):
        t = self.consts[type_name]
        rep = representation(t)
        if _cls(value) is rep and rep is not int:  # ints: the cast wraps them to the type
            return value
        call = ast.Call(ast.Name("__gg_cast", ast.Load()), [value, ast.Name(type_name, ast.Load())], [])
        return _known(ast.copy_location(call, like), rep)

    def _cast_stmts(self, targets, node) -> list:
        out = []
        for target in targets:
            for name in _direct_names(target):
                t = self._local(name.id, node.lineno)
                if t is not None:
                    stmt = ast.Assign([ast.Name(name.id, ast.Store())],
                                      self._cast(ast.Name(name.id, ast.Load()), t, node))
                    out.append(ast.copy_location(stmt, node))
        return out

    def _call(self, helper, op, args, like):
        call = ast.Call(ast.Name(helper, ast.Load()),
                        [ast.Name(f"__gg_op_{op.__name__}", ast.Load()), *args], [])
        return ast.copy_location(call, like)

    def _typed(self, op, fn, node, operands, rebuild):
        """`node` computing `fn(*operands)` as numba does: as written where the operand classes
        are known and numpy already agrees, with conversions where it does not, else through
        `__gg_bin` / `__gg_un` (which decide per call)."""
        classes = tuple(_cls(o) for o in operands)
        static = static_plan(fn, classes) if None not in classes else None
        if static is None:
            helper = "__gg_bin" if len(operands) == 2 else "__gg_un"
            return self._call(helper, op, list(operands), node)
        plan, result = static
        if plan is not DIRECT:
            casts, result_cast = plan
            operands = [o if k is None else self._convert(o, k, o)
                        for o, k in zip(operands, casts)]
        out = rebuild(operands)
        if plan is not DIRECT and result_cast is not None:
            out = self._convert(out, result_cast, node)
        return _known(out, result)

    # nested functions are not numba's (nor typed here): left as written
    def visit_FunctionDef(self, node):
        return node

    visit_Lambda = visit_AsyncFunctionDef = visit_ClassDef = visit_FunctionDef

    def visit_Name(self, node):
        if isinstance(node.ctx, ast.Load):
            cls = self.classes.get(node.id) if node.id in self.scan.bound else \
                self._global_class(node.id)
            if cls is not None:
                node._gg_cls = cls
        return node

    def visit_Attribute(self, node):
        self.generic_visit(node)
        if node.attr in ("size", "ndim") and isinstance(node.value, ast.Name) and \
                node.value.id in self.array_names:
            node._gg_cls = int  # ThreadArray.size / .ndim: Python ints
        return node

    def visit_Constant(self, node):
        if type(node.value) is float:
            name = f"__gg_f_{node.value.hex().replace('-', 'm').replace('.', '_')}"
            name = name.replace("+", "p")
            self.consts[name] = np.float64(node.value)
            return _known(ast.copy_location(ast.Name(name, ast.Load()), node), np.float64)
        if type(node.value) in (int, bool):
            node._gg_cls = type(node.value)
        return node

    def visit_BinOp(self, node):
        self.generic_visit(node)
        op = type(node.op)
        if op not in BINARY:
            return node
        return self._binop(op, node.left, node.right, node)

    def _binop(self, op, left, right, like):
        def rebuild(operands):
            return ast.copy_location(ast.BinOp(operands[0], op(), operands[1]), like)
        return self._typed(op, BINARY[op], like, (left, right), rebuild)

    def visit_UnaryOp(self, node):
        self.generic_visit(node)
        op = type(node.op)
        if op is ast.Not:
            return _known(node, bool)
        if op not in UNARY:
            return node

        def rebuild(operands):
            return ast.copy_location(ast.UnaryOp(op(), operands[0]), node)
        return self._typed(op, UNARY[op], node, (node.operand,), rebuild)

    def visit_Compare(self, node):
        self.generic_visit(node)
        if len(node.ops) != 1 or type(node.ops[0]) not in COMPARE:
            return node
        op = type(node.ops[0])

        def rebuild(operands):
            return ast.copy_location(ast.Compare(operands[0], [op()], [operands[1]]), node)
        return self._typed(op, COMPARE[op], node, (node.left, node.comparators[0]), rebuild)

    def visit_Call(self, node):
        self.generic_visit(node)
        cast_to = self._scalar_type_called(node)
        if cast_to is not None:  # `uint64(x)`: a C conversion (numba's type object is slow)
            return _known(self._convert(node.args[0], cast_to, node), cast_to)
        if isinstance(node.func, ast.Attribute) and node.func.attr in _WIDTH_SENSITIVE:
            # locals hold integers as Python ints; these intrinsics need the type's width
            node.args = [self._convert(a, dtype.type, a) if isinstance(a, ast.Name) and
                         (dtype := self._dtype(self.types.by_name.get(a.id))) is not None and
                         dtype.kind in "iu" else a for a in node.args]
        return node

    # --- array accesses
    def _compilable(self, node) -> tuple | None:
        """(name, ndim, index expressions) of a subscript whose access can be compiled."""
        if not isinstance(node.value, ast.Name) or node.value.id not in self.arrays:
            return None
        ndim = self.arrays[node.value.id][0].ndim
        elts = index_parts(node)
        if len(elts) != ndim or not all(thread_access.pure(e) for e in elts) or \
                any(isinstance(e, (ast.Slice, ast.Starred)) for e in elts):
            return None
        for e in elts:  # a name must be an integer (not a slice or a tuple held in a local)
            if isinstance(e, ast.Name) and e.id in self.scan.bound:
                dtype = self._dtype(self.types.by_name.get(e.id))
                if dtype is None or dtype.kind not in "iub":
                    return None
            if isinstance(e, ast.Constant) and type(e.value) is not int:
                return None
        return node.value.id, ndim, elts

    def visit_Subscript(self, node):
        target = self._compilable(node) if isinstance(node.ctx, ast.Load) else None
        self.generic_visit(node)
        if target is None:
            value = node.value
            if isinstance(value, ast.Attribute) and value.attr in ("shape", "strides") and \
                    isinstance(value.value, ast.Name) and value.value.id in self.array_names:
                node._gg_cls = int  # an array's shape: Python ints
            return node
        return self._load(target[0], node)

    def _load(self, name, node):
        array, cls = self.arrays[name]
        out = thread_access.load(array, index_parts(node), node)
        return _known(out, cls) if cls is not None else out

    def _store(self, name, target, value, like):
        cls = self.arrays[name][1]
        if cls is not None and issubclass(cls, np.integer) and _cls(value) is not cls:
            value = self._convert(value, cls, value)  # stored as numba stores it (wrapped)
        return thread_access.store(self.arrays[name][0], index_parts(target), value, like)

    def _bind_arrays(self, targets, like) -> list:
        names = [n.id for t in targets for n in ast.walk(t)
                 if isinstance(n, ast.Name) and n.id in self.arrays]
        return [self.arrays[n][0].bind(like) for n in names]

    def visit_Assign(self, node):
        target = node.targets[0]
        compiled = (self._compilable(target) if len(node.targets) == 1 and
                    isinstance(target, ast.Subscript) else None)
        self.generic_visit(node)
        if compiled is not None:
            return self._store(compiled[0], target, node.value, node)
        binds = self._bind_arrays(node.targets, node)
        if len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            t = self._local(node.targets[0].id, node.lineno)
            if t is not None:
                node.value = self._cast(node.value, t, node.value)
            return [node, *binds] if binds else node
        return [node, *self._cast_stmts(node.targets, node), *binds]

    def visit_AnnAssign(self, node):
        self.generic_visit(node)
        if node.value is not None and isinstance(node.target, ast.Name):
            t = self._local(node.target.id, node.lineno)
            if t is not None:
                node.value = self._cast(node.value, t, node.value)
        return node

    def visit_AugAssign(self, node):
        op = type(node.op)
        target = node.target
        compiled = self._compilable(ast.copy_location(
            ast.Subscript(target.value, target.slice, ast.Load()), target)) \
            if isinstance(target, ast.Subscript) and op in BINARY else None
        self.generic_visit(node)
        if op not in BINARY:
            return node
        if isinstance(target, ast.Name):
            t = self._local(target.id, node.lineno)
            if t is None:
                return node
            current = self.visit_Name(ast.copy_location(ast.Name(target.id, ast.Load()), target))
            value = self._binop(op, current, node.value, node)
            stmt = ast.Assign([ast.Name(target.id, ast.Store())], self._cast(value, t, node))
            return ast.copy_location(stmt, node)
        if compiled is not None:  # a[i] op= e  ->  a[i] = a[i] op e, both compiled
            name = compiled[0]
            current = self._load(name, ast.copy_location(
                ast.Subscript(ast.Name(name, ast.Load()), target.slice, ast.Load()), target))
            return self._store(name, target, self._binop(op, current, node.value, node), node)
        if isinstance(target, ast.Subscript):
            base, index = self._temp(), self._temp()
            load = ast.Subscript(ast.Name(base, ast.Load()), ast.Name(index, ast.Load()), ast.Load())
            store = ast.Subscript(ast.Name(base, ast.Load()), ast.Name(index, ast.Load()), ast.Store())
            value = self._call("__gg_bin", op, [ast.copy_location(load, node), node.value], node)
            stmts = [ast.Assign([ast.Name(base, ast.Store())], target.value),
                     ast.Assign([ast.Name(index, ast.Store())], target.slice),
                     ast.Assign([store], value)]
            return [ast.copy_location(s, node) for s in stmts]
        return node

    def _temp(self) -> str:
        self._temps += 1
        return f"__gg_s{self._temps}"

    def visit_For(self, node):
        ranged = isinstance(node.iter, ast.Call) and isinstance(node.iter.func, ast.Name) and \
            node.iter.func.id == "range" and "range" not in self.scan.bound and \
            "range" not in self.func.__globals__
        self.generic_visit(node)
        casts = self._cast_stmts([node.target], node)
        if ranged and isinstance(node.target, ast.Name) and self.classes.get(node.target.id) is int:
            casts = []  # range() yields Python ints, within the loop variable's type
        node.body[:0] = casts
        return node

    def visit_While(self, node):
        self.generic_visit(node)
        node.body[:0] = thread_access.tick(node)
        return node

    def visit_Return(self, node):
        self.generic_visit(node)
        if self.kind == "device" and node.value is not None:
            t = self._type_name(self.types.return_type)
            if t is not None:
                node.value = self._cast(node.value, t, node.value)
        return node

    def preamble(self, fdef) -> list:
        """Statements run at entry (parameters cast to numba's types, the loop budget, the
        compiled arrays' locals); completes the compiled arrays' bindings."""
        out = []
        for name in self.scan.params:
            t = self._type_name(self.types.by_name.get(name))
            if t is not None:
                stmt = ast.Assign([ast.Name(name, ast.Store())],
                                  self._cast(ast.Name(name, ast.Load()), t, fdef))
                out.append(ast.copy_location(stmt, fdef))
        recording = self.access == "record" and any(a.sites for a, _ in self.arrays.values())
        out += thread_access.preamble(self.scan.has_while, recording, fdef)
        for name, (array, _) in self.arrays.items():
            if array.sites:
                out.append(array.bind(fdef, unbound=name not in self.scan.params))
        for array, _ in self.arrays.values():
            array.finish()
        return out


_MISSING = object()
_WIDTH_SENSITIVE = {"popc", "brev", "clz", "ffs"}  # cuda.<name>: the result depends on the width
_codes = BoundedCache(512)


def typed_code(func, types: simt_typing.FunctionTypes, kind: str, mark_end: bool = False,
               access: str | None = None):
    """(code, constants it reads as globals) of `func` rewritten for `types`, or None when it
    has no source (or its closure cannot be rebuilt). `kind`: "kernel" | "device"; `access`:
    compile element accesses (`thread_access`)."""
    key = (func.__code__, id(types), kind, mark_end, access)
    hit = _codes.get(key)
    # the entry holds its `types`: an id is only that object's while it lives (once a bounded
    # typing cache drops it, another FunctionTypes may get the same id)
    if hit is not None and hit[0] is types:
        return hit[1]
    result = None
    try:
        result = _build(func, types, kind, mark_end, access)
    except (OSError, TypeError, SyntaxError, IndexError, KeyError, ValueError):
        result = None
    _codes[key] = (types, result)
    return result


def _build(func, types, kind, mark_end, access):
    code = func.__code__
    # the lines of the file: numba's types are keyed by them, and so are the compiled accesses
    tree, _ = parse_function(func)
    fdef = tree.body[0]
    if not isinstance(fdef, ast.FunctionDef) or fdef.name != func.__name__:
        return None
    fdef.decorator_list = []
    rewrite = _Rewrite(func, types, kind, _Scan(fdef), access)
    body = [s for stmt in fdef.body for s in _as_list(rewrite.visit(stmt))]
    fdef.body = rewrite.preamble(fdef) + body
    if mark_end:
        append_return(fdef, _END_MARKER)
    ast.fix_missing_locations(tree)
    if code.co_freevars:  # rebuild inside a factory so the free variables stay free
        factory = ast.FunctionDef("__gg_factory", arguments(code.co_freevars),
                                  [fdef, ast.Return(name_node(fdef.name))], [], None)
        ast.copy_location(factory, fdef)
        ast.fix_missing_locations(factory)
        tree = ast.Module([factory], type_ignores=[])
        new = define(tree, code.co_filename, "__gg_factory")(*[None] * len(code.co_freevars))
    else:
        new = define(tree, code.co_filename, func.__name__)
    new = new.__code__
    if new.co_freevars != code.co_freevars:
        return None
    return new, dict(rewrite.consts)


def _as_list(result):
    return result if isinstance(result, list) else [result]


def _direct_names(target) -> list:
    """The names an assignment target binds that the rewrite casts: the target itself, or the
    names directly in a tuple target."""
    if isinstance(target, ast.Name):
        return [target]
    return [e for e in getattr(target, "elts", ()) if isinstance(e, ast.Name)]


# the globals the rewritten code reads: the value helpers, the operators by node name
HELPERS = {"__gg_cast": cast, "__gg_bin": binop, "__gg_un": unop}
for _node, _fn in (*BINARY.items(), *COMPARE.items(), *UNARY.items()):
    HELPERS[f"__gg_op_{_node.__name__}"] = _fn
