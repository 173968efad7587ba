"""Calls in kernel code as NVVM IR: casts, libdevice math, the builtins `len`, `abs`,
`min` and `max`, intrinsics through their lowering rules, and device functions (emitted
once per module as internal, always-inlined functions)."""

from __future__ import annotations

import ast

from cupric.compiler.codegen.values import KValue, flat_lltypes
from cupric.compiler.ir import types as ll
from cupric.compiler.ir.values import Value, const_int
from cupric.compiler.typing.ktypes import NONE, WeakType, materialize
from cupric.types import ScalarType, bool_, f32, i64

__all__ = ["CallCodegen"]


class CallCodegen:
    """Calls of `FunctionCodegen` (cupric.compiler.codegen.function)."""

    def _e_Call(self, node: ast.Call) -> KValue:
        target = self.typed.targets[node]
        if target[0] == "custom":  # print(...) and the like lower their own arguments
            return target[1](self, node)
        args = [self.expr(a) for a in node.args]
        return self.call_target(node, target, args, node.args)

    def call_target(self, node, target, args: list[KValue], arg_nodes) -> KValue:
        kind = target[0]
        b = self.b
        if kind == "custom":  # a value the lowering tables build (constant arrays, ...)
            return target[1](self, node)
        if kind == "cast":
            value = args[0]
            literal = self.typed.consts.get(arg_nodes[0])
            if isinstance(literal, int) and isinstance(value.type, WeakType):
                # u64(0x9E3779B97F4A7C15), i32(0xFFFFFFFF): the literal itself, converted
                # as the cast converts (integers wrap), not first squeezed into an i64.
                if target[1].kind == "f":
                    return self.constant(literal, target[1], node)
                from cupric.compiler.typing.semantics import convert
                return self.constant(int(convert(literal, target[1])), target[1], node)
            if isinstance(value.type, WeakType):  # a literal, or `1 if c else 2`
                value = self._weak_to(value, value.type.default, arg_nodes[0])
            return self.convert(value, target[1], node)
        if kind == "math":
            return self.math_call(node, target[1], target[2], args, arg_nodes)
        if kind == "intrinsic":
            rule, call = target[1], target[2]
            return rule.lower(self, call, args)
        if kind == "device":
            return self.device_call(node, target[1], args, arg_nodes)
        if kind == "builtin":
            name = target[1]
            if name == "len":
                return KValue(i64, [args[0].shape(0)])
            t = target[2]
            ct = materialize(t)  # weak results compute in their default type
            vals = [self._weak_to(a, ct, n).value for a, n in zip(args, arg_nodes)]
            if name == "abs":
                v = vals[0]
                if ct.kind == "f":
                    return KValue(t, [self.libdevice("fabs", v.type, [v])])
                if ct.kind == "u":
                    return KValue(t, [v])
                neg = b.icmp("slt", v, const_int(v.type, 0))
                return KValue(t, [b.select(neg, b.binop("sub", const_int(v.type, 0), v), v)])
            result = vals[0]
            op = ast.Lt() if name == "min" else ast.Gt()
            for v in vals[1:]:
                better = self.compare(op, KValue(ct, [v]), KValue(ct, [result]), None, None,
                                      node)
                result = b.select(better, v, result)
            return KValue(t, [result])
        raise self.error(node, f"internal error: call target {kind}")

    def math_call(self, node, mf, ft: ScalarType, args, arg_nodes) -> KValue:
        b = self.b
        compute = f32 if ft.bits == 16 else ft
        vals = [self._weak_to(a, ft, n) for a, n in zip(args, arg_nodes)]
        vals = [self.convert(v, compute, node).value for v in vals]
        name = mf.f32 if compute.bits == 32 else mf.f64
        if mf.returns == "bool":
            r = self.mcg.call_external(b, name, ll.i32, vals)
            return KValue(bool_, [b.icmp("ne", r, const_int(ll.i32, 0))])
        r = self.mcg.call_external(b, name, vals[0].type, vals)
        if mf.returns == "int":
            return KValue(i64, [b.cast("fptosi", r, ll.i64)])
        result = KValue(compute, [r])
        return self.convert(result, ft, node)

    def libdevice(self, base: str, lltype: ll.LLType, args: list[Value]) -> Value:
        name = f"__nv_{base}f" if lltype == ll.float else f"__nv_{base}"
        return self.mcg.call_external(self.b, name, lltype, args)

    def device_call(self, node, callee, args: list[KValue], arg_nodes) -> KValue:
        name, ftype = self.mcg.device_function(callee)
        flat = []
        for a, n, t in zip(args, arg_nodes, callee.arg_types):
            flat += self._weak_to(a, t, n).vals
        r = self.b.call(name, ftype, flat)
        rt = callee.return_type
        widths = flat_lltypes(rt)
        if not widths:
            return KValue(NONE, [])
        if len(widths) == 1:
            return KValue(rt, [r])
        return KValue(rt, [self.b.extractvalue(r, k) for k in range(len(widths))])
