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
from ..kernel_graph import is_numba_dispatcher
from ..kernel_source import has_contents
from . import intrinsics
from .intrinsics import Intrinsic
from .typing import BINOPS, FunctionTypes, as_dtype, is_function_value
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

    def __init__(self, py_func, types: FunctionTypes, kind: str, constants=None):
        self.py_func, self.types, self.kind = py_func, types, kind
        self.filename = py_func.__code__.co_filename
        self.env = dict(py_func.__globals__)
        if py_func.__closure__:
            self.env.update((name, cell.cell_contents) for name, cell in
                            zip(py_func.__code__.co_freevars, py_func.__closure__)
                            if has_contents(cell))
        self.module_constants = {}
        if constants is not None:  # what numba froze at this signature's compile (frozen.py)
            self.env.update(constants.globals)
            self.env.update(constants.cells)
            self.module_constants = constants.attributes
        self.generated_globals: dict = {"np": np}
        self._counter = itertools.count()
        self.line = py_func.__code__.co_firstlineno
        self._target = None

    # --- entry -----------------------------------------------------------------------------

    def build(self):
        try:
            tree, first = parse_function(self.py_func)
        except (OSError, TypeError) as err:  # built by exec, or in an interactive session
            code = self.py_func.__code__
            raise SimtUnsupported(f"no source for {self.py_func.__name__!r}",
                                  code.co_firstlineno, code.co_filename) from err
        fdef = tree.body[0] if isinstance(tree.body[0], ast.FunctionDef) else \
            _lambda_definition(tree, self.py_func)
        if fdef is None:
            raise SimtUnsupported("kernel source is not a plain function definition or a "
                                  "lambda", first, self.filename)
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
            return [ast.Expr(self.expr_Call(node.value, need_old=False))]
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
        target = self.field_subscript(node.target) or node.target
        if isinstance(target, ast.Name):
            value = _ctx("binop", opname, self.expr(ast.Name(target.id, ast.Load())),
                         self.expr(node.value))
            return self.store_to(target, value, node)
        if isinstance(target, ast.Subscript):
            array, index, kind, field = self.subscript(target, fields=True)
            if kind == "view":
                self.fail("assignment to a slice of an array", node)
            tmp = f"__t{next(self._counter)}"
            load = _ctx("load", array, _name(tmp), *field)
            store = _ctx("store", array, _name(tmp), _ctx("binop", opname, load, self.expr(node.value)),
                         *field)
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
            array, index, kind, field = self.subscript(target, fields=True)
            if kind == "view":
                self.fail("assignment to a slice of an array", node)
            return [ast.Expr(_ctx("store", array, index, value, *field))]
        sub = self.field_subscript(target)
        if sub is not None and self.record_field(sub) is not None:
            return self.store_to(sub, value, node)
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
        carried = sorted(self.locals | set(self.params)) if self.may_compact(node.body) else []
        body += self.compaction(carried) + self.block(node.body)
        return [ast.Expr(_ctx("loop_push")), ast.While(ast.Constant(True), body, []),
                *self.expansion(carried), ast.Expr(_ctx("loop_pop"))]

    def may_compact(self, stmts) -> bool:
        """No statement depends on lane positions in the batch (warp collectives, barriers),
        here or in a device function called (compaction.py)."""
        try:
            for n in ast.walk(ast.Module(stmts, [])):
                if isinstance(n, ast.Call):
                    hit = self.resolve(n.func)
                    if hit is None and isinstance(n.func, ast.Name):
                        return False  # a function passed as a value: it could be anything
                    if isinstance(hit, Intrinsic) and hit.kind == "ctx" and \
                            hit.name in intrinsics.LANE_POSITIONED:
                        return False
                    if isinstance(hit, _Object) and is_numba_dispatcher(hit.obj) and \
                            not _device_may_compact(hit.obj.py_func):
                        return False
        except SimtUnsupported:
            return False
        return True

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
        carried = sorted(self.locals | set(self.params)) + [var] \
            if self.may_compact(node.body) else []
        body = self.compaction(carried) + self.store_to(node.target, _name(var), node) + \
            self.block(node.body)
        # a loop that can leave early may be a spin-wait bounded by its range (a flag another warp
        # sets): it keeps LOOP_LIMIT's rule, a plain one runs to its end in lockstep
        exits = [ast.keyword("exits", ast.Constant(True))] if _contains(node.body, (ast.Break, ast.Return)) else []
        loop = ast.For(_name(var, True), _ctx("range", *[self.expr(a) for a in it.args], keywords=exits), body, [])
        # (the counter is carried: bound before the loop, which may run no iteration)
        start = [ast.Assign([_name(var, True)], ast.Constant(None))] if carried else []
        return [*start, ast.Expr(_ctx("loop_push")), loop, *self.expansion(carried),
                ast.Expr(_ctx("loop_pop"))]

    @staticmethod
    def compaction(carried) -> list[ast.stmt]:
        """At the top of a loop body: few lanes left, run the loop on them only (compaction.py);
        `carried`: the names gathered with them."""
        if not carried:
            return []
        names = ast.Tuple([_name(n) for n in carried], ast.Load())
        return [ast.If(_ctx("compact_due"), [ast.Assign(
            [ast.Tuple([_name(n, True) for n in carried], ast.Store())],
            _ctx("compact", names))], [])]

    @staticmethod
    def expansion(carried) -> list[ast.stmt]:
        """After the loop: its compactions undone, the names scattered back."""
        if not carried:
            return []
        return [ast.Assign([ast.Tuple([_name(n, True) for n in carried], ast.Store())],
                           _ctx("expand", ast.Tuple([_name(n) for n in carried], ast.Load())))]

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
            frozen_attr = (node.value.id, node.attr) if isinstance(node.value, ast.Name) else None
            if frozen_attr in self.module_constants:  # an array numba froze (frozen.py)
                return _Object(self.module_constants[frozen_attr])
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
            if hit.kind == "dim":  # `b = cuda.blockIdx`: its (x, y, z), read as `b.x`
                return _ctx("dim3", ast.Constant(hit.name))
            if hit.kind == "atomic":  # passed to a device function (`apply(cuda.atomic.add)`)
                return self.const_object(FunctionValue(hit))
            self.fail(f"{hit.name} used as a value", node)
        obj = hit.obj
        if is_numba_dispatcher(obj):  # a device function passed as a value
            return self.const_object(obj)
        if isinstance(obj, (bool, int, float, np.number, np.bool_)):
            return self.const(obj)
        if isinstance(obj, np.ndarray):  # numba freezes global arrays into constant memory
            return _ctx("const_array_like", self.const(obj),
                        keywords=[ast.keyword("name", ast.Constant(ast.unparse(node)))])
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
        if isinstance(node.value, ast.Name) and (node.attr in ("shape", "size", "ndim") or
                                                 node.attr == "dtype" and self.is_array(node.value.id)):
            return ast.Attribute(self.expr(node.value), node.attr, ast.Load())
        sub = self.field_subscript(node)
        if sub is not None and self.record_field(sub) is not None:
            return self.expr_Subscript(sub)
        self.reject_record_local(node.value, node)
        if isinstance(node.value, ast.Subscript) and node.attr in ("shape", "size", "ndim", "dtype"):
            return _ctx("array_attr", self.expr(node.value), ast.Constant(node.attr))  # a[1:].size
        if isinstance(node.value, ast.Name):  # a field of a namedtuple: its position
            ty = self.types.by_name.get(node.value.id)
            fields = ("x", "y", "z") if type(ty).__name__ == "Dim3" else getattr(ty, "fields", None)
            if isinstance(fields, tuple) and node.attr in fields:
                return _ctx("item", self.expr(node.value), self.const(fields.index(node.attr)))
        if node.attr in ("real", "imag"):  # of a number (complex or not)
            return _ctx("part", self.expr(node.value), ast.Constant(node.attr))
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

    def subscript(self, node, fields: bool = False) -> tuple:
        """(array expression, index tuple expression, kind, field) of `a[i, j]`, `a[i][j]`,
        `a[i, :]`, `a[1:][j]`: kind "element" (an integer per dimension), "view" (a slice, or
        fewer indices than dimensions) or "either" (indexing a view expression: known at run
        time); integer subscripts chain into one index (`a[i][j]` is `a[i, j]`). `field` (with
        `fields`): the field of a record array's element it names (`states[i]["s0"]`), as a
        list of zero or one constant."""
        field = []
        if fields and self.record_field(node) is not None:
            field, node = [ast.Constant(node.slice.value)], node.value
        indices, base = list(index_parts(node)), node.value
        while isinstance(base, ast.Subscript) and not any(
                isinstance(p, ast.Slice) for p in index_parts(base)):
            indices[:0] = index_parts(base)
            base = base.value
        sliced = any(isinstance(p, ast.Slice) for p in indices)
        index = ast.Tuple([self.index_part(p) for p in indices], ast.Load())
        if isinstance(base, ast.Subscript):  # a view, indexed further
            return self.expr(base), index, "either", field
        if isinstance(base, ast.Name) and (base.id in self.params or base.id in self.locals):
            if not self.is_array(base.id):
                self.fail(f"indexing {base.id!r}, which is not an array", node)
            ndim = getattr(self.types.by_name.get(base.id), "ndim", None)
            partial = ndim is not None and len(indices) < ndim and not any(
                isinstance(p, ast.Name) and self.is_tuple(p.id) for p in indices)
            return _name(base.id), index, "view" if sliced or partial else "element", field
        hit = self.resolve(base)
        obj = None if hit is None or isinstance(hit, Intrinsic) else hit.obj
        if _number_tuple(obj) and len(indices) == 1:
            obj = np.asarray(obj)  # a tuple of numbers indexed per lane: a table, as a GPU's
            hit = _Object(obj)
        if not isinstance(obj, np.ndarray):
            self.fail("indexing this expression", node)
        if sliced or len(indices) < obj.ndim:
            self.fail("partial indexing (a view of a global array)", node)
        return self.global_value(hit, base), index, "element", field

    def record_field(self, node) -> str | None:
        """The field `node` (`a[i]["x"]`) names of an element of a record array local, or None."""
        if not (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and
                isinstance(node.slice.value, str)):
            return None
        inner = node.value
        while isinstance(inner, ast.Subscript):
            inner = inner.value
        dtype = getattr(self.types.by_name.get(inner.id), "dtype", None) \
            if isinstance(inner, ast.Name) else None
        return node.slice.value if node.slice.value in (getattr(dtype, "fields", None) or ()) \
            else None

    def reject_record_local(self, value, node):
        """A record element held in a local (`r = a[i]; r["x"]`) is a reference in numba:
        lockstep does not model one (the per-thread executor does)."""
        from numba.core import types

        if isinstance(value, ast.Name) and isinstance(self.types.by_name.get(value.id),
                                                      types.Record):
            self.fail(f"a record element held in a local variable ({value.id!r})", node)

    @staticmethod
    def field_subscript(node):
        """`a[i].x` as `a[i]["x"]` (numba reads a record's field either way), else None."""
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Subscript):
            return ast.copy_location(ast.Subscript(node.value, ast.Constant(node.attr),
                                                   type(node.ctx)()), node)
        return None

    def index_part(self, node) -> ast.expr:
        """One part of an index; a tuple-valued local (`g = cuda.grid(2); a[g]`) is unpacked
        into one index per dimension; a slice is a `slice` object."""
        if isinstance(node, ast.Slice):
            bounds = [ast.Constant(None) if b is None else self.expr(b)
                      for b in (node.lower, node.upper, node.step)]
            return ast.Call(_name("slice"), bounds, [])
        if isinstance(node, ast.Name) and self.is_tuple(node.id):
            return ast.Starred(self.expr(node), ast.Load())
        return self.expr(node)

    def is_array_value(self, node) -> bool:
        """Whether `node` is an array: an array-typed local or parameter, a global array."""
        if isinstance(node, ast.Name) and (node.id in self.locals or node.id in self.params):
            return self.is_array(node.id)
        if isinstance(node, (ast.Name, ast.Attribute)):
            hit = self.resolve(node)
            return isinstance(hit, _Object) and isinstance(hit.obj, np.ndarray)
        return False

    def is_tuple(self, name: str) -> bool:
        from numba.core import types

        return isinstance(self.types.by_name.get(name), types.BaseTuple)

    def expr_Subscript(self, node):
        value = node.value
        self.reject_record_local(value, node)
        # tuples (shapes, cuda.grid(2) results) index as Python tuples
        if isinstance(value, ast.Attribute) and value.attr == "shape" or \
                isinstance(value, ast.Name) and value.id in self.locals | set(self.params) and \
                not self.is_array(value.id):
            if isinstance(node.slice, ast.Slice):
                self.fail("tuple slice", node)
            return _ctx("item", self.expr(value), self.expr(node.slice))
        array, index, kind, field = self.subscript(node, fields=True)
        if field:
            if kind != "element":
                self.fail("a field of a view of a record array", node)
            return _ctx("load", array, index, *field)
        return _ctx({"element": "load", "view": "view", "either": "subscript"}[kind], array,
                    index)

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

    def expr_Call(self, node, need_old: bool = True):
        if self.is_grid_sync(node):
            if node.args or node.keywords:
                self.fail("arguments to a grid group's sync()", node)
            return _ctx("grid_sync")
        hit = self.resolve(node.func)
        if hit is None:
            if isinstance(node.func, ast.Attribute) and not node.args and not node.keywords \
                    and node.func.attr in _METHODS:  # z.conjugate(), i.bit_count()
                return _ctx(_METHODS[node.func.attr], self.expr(node.func.value))
            if isinstance(node.func, ast.Name) and not node.keywords and \
                    is_function_value(self.types.by_name.get(node.func.id)):
                # a parameter holding a function or a type (`op(ary, i, v)`)
                return _ctx("call_value", _name(node.func.id), ast.Constant(need_old),
                            *[self.expr(a) for a in node.args])
            self.fail("call of a local value or method", node)
        if isinstance(hit, _Object) and hit.obj is print:
            return self.print_call(node)
        if any(k.arg is None for k in node.keywords) or any(isinstance(a, ast.Starred) for a in node.args):
            self.fail("*args or **kwargs in a call", node)
        args = [self.expr(a) for a in node.args]
        keywords = [ast.keyword(k.arg, self.expr(k.value)) for k in node.keywords]
        ufunc = hit.obj if isinstance(hit, _Object) else \
            hit.payload[0] if hit.kind == "math" else None
        if isinstance(ufunc, np.ufunc) and not keywords and (
                isinstance(hit, _Object) or any(self.is_array_value(a) for a in node.args)):
            return _ctx("ufunc", self.const_object(ufunc), *args)  # numba-cuda's CUDA ufuncs
        if isinstance(hit, _Object):
            obj = hit.obj
            if is_numba_dispatcher(obj):  # a @numba.jit helper too: a device function
                if keywords:
                    self.fail("keyword arguments to a device function", node)
                passed = [sig for sig in self.types.calls.get(node.lineno, ())
                          if len(sig) == len(args)]
                if passed:  # functions or types among the arguments: numba's types of them
                    if len(passed) > 1:
                        self.fail("two calls passing functions as values on one line", node)
                    keywords = [ast.keyword("argtypes", self.const_object(passed[0]))]
                return _ctx("call", self.const_object(obj), *args, keywords=keywords)
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

    def print_call(self, node) -> ast.expr:
        """`print(...)`: one line per active lane, in lane order (strings as they are)."""
        if node.keywords or any(isinstance(a, ast.Starred) for a in node.args):
            self.fail("print with keyword or starred arguments", node)
        args = [ast.Constant(a.value) if isinstance(a, ast.Constant) and
                isinstance(a.value, str) else self.expr(a) for a in node.args]
        return _ctx("print_", *args)

    def atomic(self, hit, node, need_old: bool) -> ast.expr:
        if node.keywords:
            self.fail(f"keyword arguments to atomic.{hit.name}", node)
        args = [self.expr(a) for a in node.args]
        return _ctx("atomic", ast.Constant(hit.name), ast.Constant(need_old), *args)

    def const_object(self, obj) -> ast.expr:
        key = f"__o{next(self._counter)}"
        self.generated_globals[key] = obj
        return _name(key)


def _lambda_definition(tree, py_func):
    """`def <name>(args): return <body>` for a function that is a lambda (`cuda.reduce(lambda
    a, b: a + b)`, `cuda.jit(device=True)(lambda x: ...)`): the one lambda of its source lines
    with its parameters; None when there is no such lambda or more than one."""
    if py_func.__name__ != "<lambda>":
        return None
    code = py_func.__code__
    params = list(code.co_varnames[:code.co_argcount])
    found = [n for n in ast.walk(tree) if isinstance(n, ast.Lambda) and
             [a.arg for a in n.args.args] == params and n.lineno == code.co_firstlineno]
    if len(found) != 1:
        return None
    node = found[0]
    ret = ast.copy_location(ast.Return(node.body), node.body)
    fdef = ast.FunctionDef("__lambda", node.args, [ret], [], None, type_params=[])
    return ast.copy_location(fdef, node)


# methods of numbers numba-cuda compiles, and the Ctx call doing each (bit_count: cuda.popc)
_METHODS = {"conjugate": "conjugate", "bit_count": "popc"}
_compactable: dict = {}


def _device_may_compact(py_func) -> bool:
    """A device function (and those it calls) uses no lane-positioned operation; False when
    that cannot be told."""
    found = _compactable.get(py_func)
    if found is None:
        _compactable[py_func] = False  # recursion: not compactable
        try:
            t = Transformer(py_func, FunctionTypes(), "device")
            tree, _ = parse_function(py_func)
            t.locals = stored_names(tree.body[0]) - {a.arg for a in tree.body[0].args.args}
            t.params = [a.arg for a in tree.body[0].args.args]
            found = t.may_compact(tree.body[0].body)
        except Exception:  # no source, an unusual definition
            found = False
        if len(_compactable) > 512:
            _compactable.clear()
        _compactable[py_func] = found
    return found


class FunctionValue:
    """An intrinsic passed as a value (`cuda.atomic.add` as a device function's argument)."""

    __slots__ = ("intrinsic",)

    def __init__(self, intrinsic: Intrinsic):
        self.intrinsic = intrinsic
def _number_tuple(obj) -> bool:
    """Whether `obj` is a non-empty tuple of numbers of one type (numba's UniTuple)."""
    return type(obj) is tuple and len(obj) > 0 and len({type(v) for v in obj}) == 1 and \
        isinstance(obj[0], (bool, int, float, np.number, np.bool_))


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
