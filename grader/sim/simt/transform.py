"""AST transform: a kernel's (or device function's) Python source -> a lockstep function.

The generated function `f(__c, *params)` runs every lane of a batch of blocks at once: locals are
numpy vectors over the lanes (or scalars while uniform) and `__c` (a `Ctx`) owns the active-mask
stack, memory and collectives. Control flow keeps its shape:

    if c: A else: B        ->  if __c.if_(c): A'        # pushes top & c; False when no lane
                               if __c.else_(): B'       # parent & ~c
                               __c.endif()
    while c: A             ->  __c.loop_push()
                               while __c.loop_test(c): A'
                               __c.loop_pop()
    for i in range(..): A  ->  __c.loop_push(); for __v in __c.range(..): i = ...; A'; ...
    x = e                  ->  x = __c.assign(x, e', dtype)   # cast to numba's type, where(mask)
    a[i] = e               ->  __c.store(a, (i,), e')

The generated code keeps the student's line numbers and file name, so a traceback points at
their source; `__c.line = N` before each statement tells the instrument which line it is.
Anything else raises `SimtUnsupported` naming the feature and line.
"""

from __future__ import annotations

import ast
import builtins
import itertools

import numpy as np

from ..ast_tools import (COMPARE, SCOPES, arguments, define, index_parts, parse_function,
                         stored_names)
from ..ast_tools import name_node as _name
from ..kernel_graph import is_cuda_dispatcher
from . import intrinsics
from .intrinsics import Intrinsic
from .typing import BINOPS, FunctionTypes, as_dtype
from .unsupported import SimtUnsupported

C = "__c"  # the context parameter of generated functions
_EXITS = (ast.Return, ast.Break, ast.Continue)
_SITES = itertools.count()  # array declaration sites, unique across all generated functions
_COMPARE = tuple(COMPARE)


def _ctx(method: str, *args: ast.expr, keywords=()) -> ast.Call:
    func = ast.Attribute(ast.Name(C, ast.Load()), method, ast.Load())
    return ast.Call(func, list(args), list(keywords))


def _lambda(body: ast.expr) -> ast.Lambda:
    return ast.Lambda(arguments(), body)


def _set_line(line: int) -> ast.stmt:
    return ast.Assign([ast.Attribute(_name(C), "line", ast.Store())], ast.Constant(line))


def _contains(nodes, kinds) -> bool:
    return any(isinstance(n, kinds) for top in nodes for n in ast.walk(top))


def _is_barrier(node, resolve) -> bool:
    for n in ast.walk(node):
        if isinstance(n, ast.Call):
            hit = resolve(n.func)
            if isinstance(hit, Intrinsic) and hit.kind == "ctx" and hit.name in intrinsics.BARRIERS:
                return True
    return False


class Transformer:
    """Transforms one function for one argument-type signature."""

    def __init__(self, py_func, types: FunctionTypes, kind: str):
        self.py_func, self.types, self.kind = py_func, types, kind
        self.filename = py_func.__code__.co_filename
        self.env = dict(py_func.__globals__)
        if py_func.__closure__:  # numba freezes closure variables, and so do we
            self.env.update(zip(py_func.__code__.co_freevars,
                                (cell.cell_contents for cell in py_func.__closure__)))
        self.generated_globals: dict = {"np": np}
        self._counter = itertools.count()
        self.line = py_func.__code__.co_firstlineno
        self._target = None

    # --- entry -----------------------------------------------------------------------------

    def build(self):
        try:
            tree, first = parse_function(self.py_func)
        except (OSError, TypeError) as err:
            raise SimtUnsupported(f"no source for {self.py_func.__name__!r}") from err
        fdef = tree.body[0]
        if not isinstance(fdef, ast.FunctionDef):
            raise SimtUnsupported("kernel source is not a plain function definition", first)
        args = fdef.args
        if args.vararg or args.kwarg or args.kwonlyargs or args.posonlyargs:
            raise SimtUnsupported("*args, **kwargs or keyword-only parameters", fdef.lineno)
        self.params = [a.arg for a in args.args]
        for node in ast.walk(fdef):
            if isinstance(node, (ast.Global, ast.Nonlocal)):
                raise SimtUnsupported("global/nonlocal statement", node.lineno)
            if isinstance(node, SCOPES) and node is not fdef:
                raise SimtUnsupported("nested function or lambda", node.lineno)
        self.locals = stored_names(fdef) - set(self.params)
        body = [ast.Assign([_name(n, True) for n in sorted(self.locals)], ast.Constant(None))] \
            if self.locals else []
        body += self.block(fdef.body)
        body.append(ast.Return(_ctx("result")))
        gen = ast.FunctionDef(fdef.name, arguments([C, *self.params]), body, [], None,
                              type_params=[])
        ast.copy_location(gen, fdef)
        module = ast.Module([gen], type_ignores=[])
        for node in ast.walk(module):  # nodes we made inherit the line of the statement they serve
            if not hasattr(node, "lineno"):
                node.lineno, node.col_offset = fdef.lineno, 0
        ast.fix_missing_locations(module)
        return define(module, self.filename, fdef.name, dict(self.generated_globals))

    def fail(self, feature: str, node=None):
        raise SimtUnsupported(feature, getattr(node, "lineno", self.line), self.filename)

    def const(self, value) -> ast.expr:
        """A constant as numba types it (ints int64, floats float64), bound in the globals."""
        if value is None or isinstance(value, str):
            return ast.Constant(value)
        if isinstance(value, bool):
            value = np.bool_(value)
        elif isinstance(value, int):
            value = np.int64(value) if -2**63 <= value < 2**63 else np.uint64(value)
        elif isinstance(value, float):
            value = np.float64(value)
        key = f"__k{next(self._counter)}"
        self.generated_globals[key] = value
        return _name(key)

    def dtype_of(self, name: str, line: int):
        ty = self.types.local(name, line)
        return None if ty is None else as_dtype(ty)

    def is_array(self, name: str) -> bool:
        from numba.core import types

        ty = self.types.by_name.get(name)
        return isinstance(ty, types.Array)

    # --- statements ------------------------------------------------------------------------

    def block(self, stmts) -> list[ast.stmt]:
        out = []
        for i, stmt in enumerate(stmts):
            self.line = stmt.lineno
            new = self.stmt(stmt)
            for n in new:
                ast.copy_location(n, stmt)
            out.extend(new)
            if isinstance(stmt, _EXITS):
                break  # the rest is unreachable for these lanes, as in Python
            rest = stmts[i + 1:]
            if rest and _contains([stmt], _EXITS):
                # some lanes may have left: run the rest only while any remain
                guard = ast.If(_ctx("any"), self.block(rest) or [ast.Pass()], [])
                out.append(ast.copy_location(guard, rest[0]))
                break
        return out or [ast.Pass()]

    def stmt(self, node) -> list[ast.stmt]:
        line = _set_line(node.lineno)
        method = getattr(self, "stmt_" + type(node).__name__, None)
        if method is None:
            self.fail(_STATEMENT_NAMES.get(type(node), type(node).__name__ + " statement"), node)
        return [line] + method(node)

    def stmt_Pass(self, node):
        return []

    def stmt_Expr(self, node):
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return []  # docstring
        if isinstance(node.value, ast.Call):
            hit = self.resolve(node.value.func)
            if isinstance(hit, Intrinsic) and hit.kind == "atomic":
                return [ast.Expr(self.atomic(hit, node.value, need_old=False))]
        return [ast.Expr(self.expr(node.value))]

    def _assign(self, node):
        if len(node.targets) == 1:
            return self.store_to(node.targets[0], self.expr(node.value), node)
        tmp = f"__t{next(self._counter)}"
        out = [ast.Assign([_name(tmp, True)], self.expr(node.value))]
        for target in node.targets:
            out += self.store_to(target, _name(tmp), node)
        return out

    def stmt_AnnAssign(self, node):
        if node.value is None:
            return []
        return self.store_to(node.target, self.expr(node.value), node)

    def stmt_AugAssign(self, node):
        op = BINOPS.get(type(node.op).__name__)
        if op is None:
            self.fail(f"operator {type(node.op).__name__}", node)
        opname = ast.Constant(type(node.op).__name__)
        target = node.target
        if isinstance(target, ast.Name):
            value = _ctx("binop", opname, self.expr(ast.Name(target.id, ast.Load())),
                         self.expr(node.value))
            return self.store_to(target, value, node)
        if isinstance(target, ast.Subscript):
            array, index = self.subscript(target)
            tmp = f"__t{next(self._counter)}"
            load = _ctx("load", array, _name(tmp))
            store = _ctx("store", array, _name(tmp), _ctx("binop", opname, load, self.expr(node.value)))
            return [ast.Assign([_name(tmp, True)], index), ast.Expr(store)]
        self.fail("augmented assignment to this target", node)

    def stmt_Assign(self, node):
        # the variable a declaration is assigned to names the array in diagnostics
        single = len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
        self._target = node.targets[0].id if single else None
        try:
            return self._assign(node)
        finally:
            self._target = None

    def store_to(self, target, value: ast.expr, node) -> list[ast.stmt]:
        if isinstance(target, ast.Name):
            dtype = self.dtype_of(target.id, node.lineno)
            dt = self.const(dtype) if dtype is not None else ast.Constant(None)
            return [ast.Assign([_name(target.id, True)],
                               _ctx("assign", _name(target.id), value, dt))]
        if isinstance(target, ast.Subscript):
            array, index = self.subscript(target)
            return [ast.Expr(_ctx("store", array, index, value))]
        if isinstance(target, (ast.Tuple, ast.List)):
            tmp = f"__t{next(self._counter)}"
            out = [ast.Assign([_name(tmp, True)], _ctx("unpack", value, ast.Constant(len(target.elts))))]
            for i, elt in enumerate(target.elts):
                item = ast.Subscript(_name(tmp), ast.Constant(i), ast.Load())
                out += self.store_to(elt, item, node)
            return out
        self.fail(f"assignment to {type(target).__name__}", node)

    def stmt_If(self, node):
        if node.orelse and _is_barrier(ast.Module(node.body, []), self.resolve) \
                and _is_barrier(ast.Module(node.orelse, []), self.resolve):
            self.fail("syncthreads in both branches of an if", node)
        out = [ast.If(_ctx("if_", self.expr(node.test)), self.block(node.body), [])]
        if node.orelse:
            out.append(ast.If(_ctx("else_"), self.block(node.orelse), []))
        out.append(ast.Expr(_ctx("endif")))
        return out

    def stmt_While(self, node):
        if node.orelse:
            self.fail("while ... else", node)
        self.reject_spin_wait(node)
        test = _ctx("loop_test", self.expr(node.test))
        # lanes that took `continue` rejoin before the test, which runs under the loop's mask
        body = [_set_line(node.lineno), ast.Expr(_ctx("loop_head")),
                ast.If(ast.UnaryOp(ast.Not(), test), [ast.Break()], [])]
        body += self.block(node.body)
        return [ast.Expr(_ctx("loop_push")), ast.While(ast.Constant(True), body, []),
                ast.Expr(_ctx("loop_pop"))]

    def stmt_For(self, node):
        if node.orelse:
            self.fail("for ... else", node)
        it = node.iter
        hit = self.resolve(it.func) if isinstance(it, ast.Call) else None
        if not (isinstance(hit, Intrinsic) and hit.name == "range" and hit.kind == "builtin"):
            self.fail("for-loop over a non-range iterator", node)
        if it.keywords or not 1 <= len(it.args) <= 3:
            self.fail("range() with these arguments", node)
        if not isinstance(node.target, ast.Name):
            self.fail("for-loop target that is not a plain name", node)
        self.reject_spin_wait(node)
        var = f"__v{next(self._counter)}"
        body = self.store_to(node.target, _name(var), node) + self.block(node.body)
        loop = ast.For(_name(var, True), _ctx("range", *[self.expr(a) for a in it.args]), body, [])
        return [ast.Expr(_ctx("loop_push")), loop, ast.Expr(_ctx("loop_pop"))]

    def reject_spin_wait(self, node):
        # a lock (`while cas(...) != 0`) needs one lane to progress while others wait: lockstep
        # would spin forever
        for n in ast.walk(node):
            if isinstance(n, ast.Call):
                hit = self.resolve(n.func)
                if isinstance(hit, Intrinsic) and hit.kind == "atomic" and \
                        hit.name in ("cas", "compare_and_swap", "exch"):
                    self.fail("spin-wait (loop around atomic cas/exch) needing forward progress", node)

    def stmt_Return(self, node):
        if node.value is not None and self.kind == "kernel":
            self.fail("kernel returning a value", node)
        value = self.expr(node.value) if node.value is not None else ast.Constant(None)
        return [ast.If(_ctx("ret", value), [ast.Return(_ctx("result"))], [])]

    def stmt_Break(self, node):
        return [ast.Expr(_ctx("brk"))]

    def stmt_Continue(self, node):
        return [ast.Expr(_ctx("cont"))]

    # --- expressions -----------------------------------------------------------------------

    def resolve(self, node):
        """The object a non-local name or attribute chain refers to, or None for locals."""
        if isinstance(node, ast.Name):
            if node.id in self.locals or node.id in self.params:
                return None
            if node.id in self.env:
                obj = self.env[node.id]
            elif hasattr(builtins, node.id):
                obj = getattr(builtins, node.id)
            else:
                self.fail(f"unknown name {node.id!r}", node)
            hit = intrinsics.lookup(obj)
            return hit if hit is not None else _Object(obj)
        if isinstance(node, ast.Attribute):
            base = self.resolve(node.value)
            if base is None:
                return None
            if isinstance(base, Intrinsic):
                if base.kind == "dim" and node.attr in ("x", "y", "z"):
                    return Intrinsic("dimattr", base.name, node.attr)
                self.fail(f"attribute {node.attr!r} of {base.name}", node)
            try:
                obj = getattr(base.obj, node.attr)
            except AttributeError:
                self.fail(f"unknown attribute {node.attr!r}", node)
            hit = intrinsics.lookup(obj)
            return hit if hit is not None else _Object(obj)
        return None

    def expr(self, node) -> ast.expr:
        method = getattr(self, "expr_" + type(node).__name__, None)
        if method is None:
            self.fail(_EXPRESSION_NAMES.get(type(node), type(node).__name__ + " expression"), node)
        return method(node)

    def global_value(self, hit, node) -> ast.expr:
        if isinstance(hit, Intrinsic):
            if hit.kind == "dimattr":
                return _ctx("dim", ast.Constant(hit.name), ast.Constant(hit.payload))
            if hit.kind == "value":
                return _ctx(hit.name)
            if hit.kind == "cast":
                return self.const(hit.payload)
            self.fail(f"{hit.name} used as a value", node)
        obj = hit.obj
        if isinstance(obj, (bool, int, float, np.number, np.bool_)):
            return self.const(obj)
        if isinstance(obj, np.ndarray):  # numba freezes global arrays into constant memory
            return _ctx("const_array_like", self.const(obj))
        if isinstance(obj, (tuple, np.dtype)):
            return self.const(obj)
        self.fail(f"global {type(obj).__name__} {getattr(node, 'id', '')!r}".rstrip(" '"), node)

    def expr_Name(self, node):
        hit = self.resolve(node)
        if hit is None:
            return _name(node.id)
        return self.global_value(hit, node)

    def expr_Constant(self, node):
        if isinstance(node.value, (str, bytes)):
            self.fail("string constant", node)
        return self.const(node.value)

    def expr_Attribute(self, node):
        hit = self.resolve(node)
        if hit is not None:
            return self.global_value(hit, node)
        if isinstance(node.value, ast.Name) and node.attr in ("shape", "size", "ndim"):
            return ast.Attribute(self.expr(node.value), node.attr, ast.Load())
        if isinstance(node.value, ast.Name):  # a field of a namedtuple: its position
            fields = getattr(self.types.by_name.get(node.value.id), "fields", None)
            if isinstance(fields, tuple) and node.attr in fields:
                return _ctx("item", self.expr(node.value), self.const(fields.index(node.attr)))
        self.fail(f"attribute .{node.attr} of a local value", node)

    def expr_Tuple(self, node):
        return ast.Tuple([self.expr(e) for e in node.elts], ast.Load())

    expr_List = expr_Tuple

    def expr_BinOp(self, node):
        name = type(node.op).__name__
        if name not in BINOPS:
            self.fail(f"operator {name}", node)
        return _ctx("binop", ast.Constant(name), self.expr(node.left), self.expr(node.right))

    def expr_UnaryOp(self, node):
        if isinstance(node.op, ast.Not):
            return _ctx("not_", self.expr(node.operand))
        if isinstance(node.op, ast.UAdd):
            return self.expr(node.operand)
        return _ctx("unop", ast.Constant(type(node.op).__name__), self.expr(node.operand))

    def expr_BoolOp(self, node):
        method = "and_" if isinstance(node.op, ast.And) else "or_"
        values = [self.expr(v) for v in node.values]
        result = values[-1]
        for value in reversed(values[:-1]):  # a and b and c -> and_(a, lambda: and_(b, lambda: c))
            result = _ctx(method, value, _lambda(result))
        return result

    def expr_Compare(self, node):
        for op in node.ops:
            if not isinstance(op, _COMPARE):
                self.fail(f"comparison {type(op).__name__}", node)
        operands = [self.expr(node.left)] + [self.expr(c) for c in node.comparators]
        parts = [ast.Compare(operands[i], [op], [operands[i + 1]]) for i, op in enumerate(node.ops)]
        result = parts[-1]
        for part in reversed(parts[:-1]):
            result = _ctx("and_", part, _lambda(result))
        return result

    def expr_IfExp(self, node):
        return _ctx("select", self.expr(node.test), _lambda(self.expr(node.body)),
                    _lambda(self.expr(node.orelse)))

    def subscript(self, node) -> tuple[ast.expr, ast.expr]:
        """(array expression, index tuple expression) of `a[i, j]` or `a[i][j]`."""
        indices = []
        base = node
        while isinstance(base, ast.Subscript):
            parts = index_parts(base)
            if any(isinstance(p, ast.Slice) for p in parts):
                self.fail("array slice", node)
            indices[:0] = parts
            base = base.value
        if isinstance(base, ast.Name) and (base.id in self.params or base.id in self.locals):
            if not self.is_array(base.id):
                self.fail(f"indexing {base.id!r}, which is not an array", node)
            ndim = getattr(self.types.by_name.get(base.id), "ndim", None)
            if ndim is not None and len(indices) < ndim and not any(
                    isinstance(p, ast.Name) and self.is_tuple(p.id) for p in indices):
                self.fail("partial indexing (a view of an array)", node)
            array = _name(base.id)
        else:
            hit = self.resolve(base)
            if hit is None or isinstance(hit, Intrinsic) or not isinstance(hit.obj, np.ndarray):
                self.fail("indexing this expression", node)
            array = self.global_value(hit, base)
        return array, ast.Tuple([self.index_part(p) for p in indices], ast.Load())

    def index_part(self, node) -> ast.expr:
        """One part of an index; a tuple-valued local (`g = cuda.grid(2); a[g]`) is unpacked
        into one index per dimension."""
        if isinstance(node, ast.Name) and self.is_tuple(node.id):
            return ast.Starred(self.expr(node), ast.Load())
        return self.expr(node)

    def is_tuple(self, name: str) -> bool:
        from numba.core import types

        return isinstance(self.types.by_name.get(name), types.BaseTuple)

    def expr_Subscript(self, node):
        value = node.value
        # tuples (shapes, cuda.grid(2) results) index as Python tuples
        if isinstance(value, ast.Attribute) and value.attr == "shape" or \
                isinstance(value, ast.Name) and value.id in self.locals | set(self.params) and \
                not self.is_array(value.id):
            if isinstance(node.slice, ast.Slice):
                self.fail("tuple slice", node)
            return _ctx("item", self.expr(value), self.expr(node.slice))
        array, index = self.subscript(node)
        return _ctx("load", array, index)

    def is_grid_sync(self, node) -> bool:
        """`g.sync()` of a grid group local, or `cuda.cg.this_grid().sync()`."""
        func = node.func
        if not (isinstance(func, ast.Attribute) and func.attr == "sync"):
            return False
        if isinstance(func.value, ast.Name) and func.value.id in self.locals | set(self.params):
            return type(self.types.by_name.get(func.value.id)).__name__ == "GridGroup"
        if isinstance(func.value, ast.Call):
            hit = self.resolve(func.value.func)
            return isinstance(hit, Intrinsic) and hit.name == "this_grid"
        return False

    def expr_Call(self, node):
        if self.is_grid_sync(node):
            if node.args or node.keywords:
                self.fail("arguments to a grid group's sync()", node)
            return _ctx("grid_sync")
        hit = self.resolve(node.func)
        if hit is None:
            self.fail("call of a local value or method", node)
        if isinstance(hit, _Object) and hit.obj is print:
            self.fail("print", node)
        if any(k.arg is None for k in node.keywords) or any(isinstance(a, ast.Starred) for a in node.args):
            self.fail("*args or **kwargs in a call", node)
        args = [self.expr(a) for a in node.args]
        keywords = [ast.keyword(k.arg, self.expr(k.value)) for k in node.keywords]
        if isinstance(hit, _Object):
            obj = hit.obj
            if is_cuda_dispatcher(obj):
                if keywords:
                    self.fail("keyword arguments to a device function", node)
                return _ctx("call", self.const_object(obj), *args)
            self.fail(f"call to {ast.unparse(node.func)}", node)
        if hit.kind == "ctx":
            if hit.name in ("shared_array", "local_array"):
                # each declaration is its own array, even two on one line; named for messages
                keywords += [ast.keyword("site", ast.Constant(next(_SITES))),
                             ast.keyword("name", ast.Constant(self._target))]
            return _ctx(hit.name, *args, keywords=keywords)
        if hit.kind == "atomic":
            return self.atomic(hit, node, need_old=True)
        if keywords:
            self.fail(f"keyword arguments to {hit.name}", node)
        if hit.kind == "math":
            py_fn, np_fn = hit.payload
            return _ctx("math", self.const_object(py_fn), self.const_object(np_fn), *args)
        if hit.kind == "cast":
            if len(args) != 1:
                self.fail(f"{hit.name}() with {len(args)} arguments", node)
            return _ctx("cast", args[0], self.const(hit.payload))
        if hit.kind == "builtin":
            if hit.name == "range":
                self.fail("range() outside a for-loop header", node)
            return _ctx("builtin_" + hit.name, *args)
        self.fail(f"call to {ast.unparse(node.func)}", node)

    def atomic(self, hit, node, need_old: bool) -> ast.expr:
        if node.keywords:
            self.fail(f"keyword arguments to atomic.{hit.name}", node)
        args = [self.expr(a) for a in node.args]
        return _ctx("atomic", ast.Constant(hit.name), ast.Constant(need_old), *args)

    def const_object(self, obj) -> ast.expr:
        key = f"__o{next(self._counter)}"
        self.generated_globals[key] = obj
        return _name(key)


class _Object:
    """A resolved non-intrinsic global (module, constant, dispatcher, ...)."""

    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj


_STATEMENT_NAMES = {
    ast.Raise: "raise", ast.Assert: "assert", ast.Try: "try/except", ast.With: "with",
    ast.Delete: "del", ast.Import: "import", ast.ImportFrom: "import",
}
_EXPRESSION_NAMES = {
    ast.Lambda: "lambda", ast.ListComp: "list comprehension", ast.GeneratorExp: "generator",
    ast.JoinedStr: "f-string", ast.Slice: "slice", ast.Dict: "dict", ast.Set: "set",
    ast.Starred: "starred expression", ast.NamedExpr: "walrus operator",
}
