"""Typing of calls: casts (`f32(x)`, `np.float32(x)`, `int(x)`), math functions, the
builtins kernels allow (len, min, max, abs), vector constructors, print, cupric.device
intrinsics (typed by their lowering rule) and device functions (typed for the argument
types, through the specialization context). What each call denotes is recorded in
`TypedFunction.targets`.
"""

from __future__ import annotations

import ast
import types as pytypes

import numpy as np

from cupric.compiler.lowering.mathlib import MATH
from cupric.compiler.lowering.registry import Call, rule_for
from cupric.compiler.typing.common import UNKNOWN, _describe, _is_float
from cupric.compiler.typing.ktypes import (NONE, ObjectType, TupleType, WeakType, is_scalar,
                                           materialize)
from cupric.compiler.typing.promote import PromotionError, promote
from cupric.device.registry import Dim3, Intrinsic, Namespace
from cupric.device.vector import Vector
from cupric.types import ArrayType, ScalarType, Type, bool_, f64, i64, scalar_from_dtype

_BUILTIN_NAMES = ("range", "len", "min", "max", "abs", "int", "float", "bool")


class CallTyping:
    """The `Typer`'s calls (a mixin: `self` is the Typer)."""

    def _e_Call(self, node: ast.Call) -> Type:
        ft = self.expr(node.func)
        if ft is UNKNOWN:
            return UNKNOWN
        if not isinstance(ft, ObjectType):
            raise self.error(node.func, f"{_describe(ft)} is not callable")
        obj = ft.obj
        if obj is print:
            from cupric.compiler.lowering.io import type_print
            return type_print(self, node)
        if node.keywords and not isinstance(obj, Intrinsic):
            raise self.error(node.keywords[0], "keyword arguments are not supported in "
                             "kernel calls; pass arguments by position")
        arg_types = [self.expr(a) for a in node.args]
        consts = [self.fn.consts.get(a) for a in node.args]
        if UNKNOWN in arg_types:
            return UNKNOWN
        for a, t in zip(node.args, arg_types):
            # Intrinsics may take compile-time objects (the dtype of shared.array).
            if (isinstance(t, ObjectType) and not isinstance(obj, Intrinsic)) or t == NONE:
                raise self.error(a, f"{_describe(t)} cannot be passed as an argument")
        if isinstance(obj, ScalarType):
            return self._cast(node, obj, arg_types)
        if isinstance(obj, type) and issubclass(obj, np.generic):
            try:
                return self._cast(node, scalar_from_dtype(obj), arg_types)
            except TypeError:
                pass
        if isinstance(obj, type) and issubclass(obj, Vector):  # float3(x, y, z)
            from cupric.compiler.lowering.vector import type_vector
            return type_vector(self, node, obj, arg_types)
        if obj in MATH:
            return self._math(node, MATH[obj], arg_types)
        if isinstance(obj, Intrinsic):
            keywords = {}
            for kw in node.keywords:
                if kw.arg is None:
                    raise self.error(kw, "**keywords are not supported in kernels")
                if isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, str):
                    keywords[kw.arg] = kw.value.value  # scope="block", order="acquire"
                    continue
                kt = self.expr(kw.value)
                if isinstance(kt, ObjectType):  # dtype=f32
                    keywords[kw.arg] = kt.obj
                    continue
                if kw.value not in self.fn.consts:
                    raise self.error(kw.value, f"the keyword argument {kw.arg}= must be a "
                                     "compile-time constant")
                keywords[kw.arg] = self.fn.consts[kw.value]
            return self._intrinsic_call(node, obj, arg_types, consts, keywords)
        if getattr(obj, "_cupric_device_function", False):
            return self._device_call(node, obj, arg_types)
        if getattr(obj, "_cupric_kernel", False):
            raise self.error(node, f"kernel {obj.__name__} cannot be called from kernel code",
                             hint="make it a @cupric.device_function to call it here")
        builtin = next((n for n in _BUILTIN_NAMES if obj is _builtin(n)), None)
        if builtin is not None:
            return self._builtin(node, builtin, arg_types, consts)
        if isinstance(obj, (Dim3, Namespace)):
            raise self.error(node, f"{obj!r} is not callable; use its attributes")
        name = getattr(obj, "__name__", repr(obj))
        if isinstance(obj, (pytypes.FunctionType,)):
            raise self.error(node.func, f"{name}() is a plain Python function and cannot be "
                             "called from kernel code",
                             hint=f"decorate {name} with @cupric.device_function")
        raise self.error(node.func, f"{name} cannot be called from kernel code",
                         hint="kernels call casts, math functions, len/min/max/abs, "
                         "cupric.device intrinsics and device functions")

    def _cast(self, node, target: ScalarType, arg_types) -> Type:
        if len(arg_types) != 1:
            raise self.error(node, f"{target!r}() takes exactly one argument")
        if not is_scalar(arg_types[0]):
            raise self.error(node.args[0], f"cannot cast {_describe(arg_types[0])} to "
                             f"{target!r}")
        self.fn.targets[node] = ("cast", target)
        return target

    def _math(self, node, mf, arg_types) -> Type:
        if len(arg_types) != mf.arity:
            raise self.error(node, f"math.{mf.name}() takes {mf.arity} argument"
                             f"{'s' if mf.arity > 1 else ''}, got {len(arg_types)}")
        for a, t in zip(node.args, arg_types):
            if not is_scalar(t):
                raise self.error(a, f"math.{mf.name}() needs numbers, not {_describe(t)}")
        t = arg_types[0]
        for other in arg_types[1:]:
            t = promote(t, other)
        ft = t if _is_float(t) and isinstance(t, ScalarType) else f64
        self.fn.targets[node] = ("math", mf, ft)
        if mf.returns == "int":
            return i64
        if mf.returns == "bool":
            return bool_
        return ft

    def _intrinsic_call(self, node, intrinsic: Intrinsic, arg_types, consts,
                        keywords) -> Type:
        rule = rule_for(intrinsic.name)
        if rule is None:
            raise self.error(node, f"cupric.device.{intrinsic.name} has no compiler lowering "
                             "(it runs only in the simulator for now)")
        call = Call(arg_types, consts, keywords, node)
        try:
            t = rule.infer(call)
        except TypeError as exc:
            message = str(exc)
            if not message.startswith(intrinsic.name):
                message = f"{intrinsic.name}: {message}"
            if "compile-time constant" in message and isinstance(node, ast.Call):
                # Name the argument that is not constant (shared.array(n, f32)).
                names = [ast.unparse(a) for a in node.args
                         if a not in self.fn.consts and not isinstance(self.fn.types.get(a),
                                                                        ObjectType)]
                if names:
                    message += f"; {', '.join(repr(n) for n in names)} is not a " \
                               "compile-time constant"
            raise self.error(node, message) from None
        call.result_type = t
        self.fn.targets[node] = ("intrinsic", rule, call)
        if isinstance(node, ast.Call):
            for i in rule.writes:
                if i < len(node.args):
                    self._refuse_module_array_write(node.args[i])
                if i < len(node.args) and isinstance(node.args[i], ast.Name):
                    self.written.add(node.args[i].id)
        return t

    def _device_call(self, node, devfn, arg_types) -> Type:
        concrete = [materialize(t) for t in arg_types]
        callee = self.ctx.type_device(devfn, concrete, self.src, node)
        self.fn.targets[node] = ("device", callee)
        for i in callee.writes:
            if i < len(node.args) and isinstance(node.args[i], ast.Name):
                self.written.add(node.args[i].id)
        return callee.return_type

    def _builtin(self, node, name: str, arg_types, consts) -> Type:
        n = len(arg_types)
        if name == "range":
            raise self.error(node, "range() is only allowed as the iterable of a for loop")
        if name == "len":
            if n != 1:
                raise self.error(node, "len() takes exactly one argument")
            t = arg_types[0]
            if isinstance(t, ArrayType):
                if t.ndim == 0:
                    raise self.error(node, "len() of a 0-d array")
                self.fn.targets[node] = ("builtin", "len")
                return i64
            if isinstance(t, TupleType):
                return self._const(node, len(t.elements))
            raise self.error(node.args[0], f"len() of {_describe(t)}; len works on arrays "
                             "and tuples")
        if name in ("min", "max"):
            if n < 2:
                raise self.error(node, f"{name}() in kernels takes two or more numbers")
            for a, t in zip(node.args, arg_types):
                if not is_scalar(t):
                    raise self.error(a, f"{name}() needs numbers, not {_describe(t)}")
            if all(isinstance(t, WeakType) for t in arg_types) and None not in consts:
                value = (min if name == "min" else max)(consts)
                if any(isinstance(c, float) for c in consts):
                    value = float(value)  # promoted, as min/max of typed values are
                return self._const(node, value)
            t = arg_types[0]
            for other in arg_types[1:]:
                try:
                    t = promote(t, other)
                except PromotionError as exc:
                    raise self.error(node, f"{name}(): {exc}") from None
            # All-literal operands (not constant, e.g. `0 if c else 1`) stay weak.
            self.fn.targets[node] = ("builtin", name, t)
            return t
        if name == "abs":
            if n != 1 or not is_scalar(arg_types[0]):
                raise self.error(node, "abs() takes one number")
            t = arg_types[0]
            if isinstance(t, WeakType) and consts[0] is not None:
                return self._const(node, abs(consts[0]))
            t = i64 if t == bool_ else t  # a weak operand stays weak, as Python's abs(0)
            self.fn.targets[node] = ("builtin", "abs", t)
            return t
        # int(), float(), bool()
        target = {"int": i64, "float": f64, "bool": bool_}[name]
        if n == 0:
            return self._const(node, {"int": 0, "float": 0.0, "bool": False}[name])
        return self._cast(node, target, arg_types)


def _builtin(name: str):
    import builtins
    return getattr(builtins, name)
