"""CUDA vector types in compiled kernels (`float3(x, y, z)`, `v.x`, `v * 2.0 + w`) and the
`cupric.device.vector` intrinsics (dot, length, normalize, cross, min, max).

A vector is a `VectorType`: a tuple of scalars in registers, so construction, fields and
elementwise arithmetic are plain scalar code per component (the optimizer vectorizes
loads and stores where it can). Arithmetic follows the classes in
`cupric.device.vector`, which the simulator runs: both operands of the same vector type,
or a vector and a scalar (broadcast); the result has the vector's type, each component
cast to its scalar type (integers wrap); floats take + - * /, integers + - * // % & | ^
<< >>.
"""

from __future__ import annotations

import ast

from cupric.compiler.codegen.values import KValue
from cupric.compiler.ir.values import const_float, const_int
from cupric.compiler.lowering.registry import register
from cupric.compiler.typing.ktypes import VectorType, WeakType
from cupric.types import ScalarType

__all__ = ["type_vector", "vector_binop_type", "vector_arith", "vector_unary"]

_FLOAT_OPS = (ast.Add, ast.Sub, ast.Mult, ast.Div)
_INT_OPS = (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod, ast.BitAnd, ast.BitOr,
            ast.BitXor, ast.LShift, ast.RShift)
_FIELDS = "xyzw"


def field_index(vt: VectorType, attr: str) -> int | None:
    """The component of `.x/.y/.z/.w`, or None when `attr` is not a field of `vt`."""
    k = _FIELDS.find(attr) if len(attr) == 1 else -1
    return k if 0 <= k < len(vt.elements) else None


def type_vector(typer, node: ast.Call, cls, arg_types):
    """Type `float3(a, b, c)` / `float3(a)` (the typer's hook for Vector classes)."""
    if node.keywords:
        raise typer.error(node, f"{cls.__name__}() takes its components by position")
    if len(arg_types) not in (1, cls.size):
        raise typer.error(node, f"{cls.__name__} takes {cls.size} components (or one to fill "
                          f"them all), got {len(arg_types)}")
    for a, t in zip(node.args, arg_types):
        if not isinstance(t, (ScalarType, WeakType)):
            raise typer.error(a, f"{cls.__name__} components must be numbers, not {t!r}")
    vt = VectorType(cls)

    def lower(cg, call_node):
        scalar = vt.elements[0]
        comps = [cg.expr(a, scalar) for a in call_node.args]
        if len(comps) == 1:
            comps = comps * cls.size
        return KValue(vt, [c.value for c in comps])

    typer.fn.targets[node] = ("custom", lower)
    return vt


def vector_binop_type(typer, node, op, lt, rt, lnode, rnode):
    """The type of `lt op rt` where one side is a vector (None: not a vector operation)."""
    vt = lt if isinstance(lt, VectorType) else rt
    other = rt if vt is lt else lt
    if isinstance(other, VectorType):
        if other != vt:
            raise typer.error(node, f"vector arithmetic needs two {vt!r} or a {vt!r} and a "
                              f"number, not {lt!r} and {rt!r}")
    elif not isinstance(other, (ScalarType, WeakType)) or (
            isinstance(other, ScalarType) and other.kind == "b"):
        raise typer.error(node, f"cannot combine {vt!r} with {other!r}")
    allowed = _FLOAT_OPS if vt.elements[0].kind == "f" else _INT_OPS
    if not isinstance(op, allowed):
        raise typer.error(node, f"{type(op).__name__} is not defined on {vt!r}",
                          hint="float vectors take + - * /; integer vectors + - * // % & | "
                               "^ << >>")
    return vt


def vector_arith(cg, node, op, left: KValue, right: KValue, rt: VectorType, lnode, rnode):
    """Elementwise `left op right` in vector type `rt`; a scalar operand is broadcast."""
    scalar = rt.elements[0]
    out = []
    for k in range(len(rt.elements)):
        a = left.element(k) if isinstance(left.type, VectorType) else _scalar(cg, left, scalar,
                                                                            lnode)
        c = right.element(k) if isinstance(right.type, VectorType) else _scalar(
            cg, right, scalar, rnode)
        out.append(cg.arith(node, op, a, c, scalar, None, None).value)
    return KValue(rt, out)


def _scalar(cg, kv, scalar, node):
    if isinstance(kv.type, WeakType):
        return cg._weak_to(kv, scalar, node)
    return cg.convert(kv, scalar, node)


def vector_unary(cg, node, operand: KValue, t: VectorType):
    """`-v` / `+v` / `~v` per component."""
    b = cg.b
    vals = []
    for k in range(len(t.elements)):
        v = operand.element(k).value
        if isinstance(node.op, ast.UAdd):
            vals.append(v)
        elif isinstance(node.op, ast.Invert):
            vals.append(b.binop("xor", v, const_int(v.type, -1)))
        elif t.elements[0].kind == "f":
            vals.append(b.binop("fsub", const_float(v.type, -0.0), v))
        else:
            vals.append(b.binop("sub", const_int(v.type, 0), v))
    return KValue(t, vals)


# -- cupric.device.vector ------------------------------------------------------------------

def _vectors(call, what: str, count: int, floats: bool = False) -> VectorType:
    if len(call.arg_types) != count or call.keywords:
        raise TypeError(f"{what} takes {count} vector{'s' if count > 1 else ''}")
    first = call.arg_types[0]
    for t in call.arg_types:
        if not isinstance(t, VectorType):
            raise TypeError(f"{what}: arguments must be vectors (float3, int2, ...), got "
                            f"{t!r}")
        if t != first:
            raise TypeError(f"{what}: both vectors must have the same type, got {first!r} "
                            f"and {t!r}")
    if floats and first.elements[0].kind != "f":
        raise TypeError(f"{what} needs a float vector, got {first!r}")
    return first


def _dot(cg, node, a: KValue, c: KValue, scalar):
    acc = None
    for k in range(len(a.type.elements)):
        term = cg.arith(node, ast.Mult(), a.element(k), c.element(k), scalar, None, None)
        acc = term if acc is None else cg.arith(node, ast.Add(), acc, term, scalar, None, None)
    return acc


def _length(cg, node, v: KValue, scalar):
    sq = _dot(cg, node, v, v, scalar)
    wide = scalar if scalar.bits > 16 else _f32()
    x = cg.convert(sq, wide, node).value
    name = "__nv_sqrtf" if x.type.bits == 32 else "__nv_sqrt"
    r = cg.mcg.call_external(cg.b, name, x.type, [x])
    return cg.convert(KValue(wide, [r]), scalar, node)


def _f32():
    from cupric.types import f32
    return f32


def _dot_infer(call):
    return _vectors(call, "vector.dot", 2).elements[0]


def _dot_lower(cg, call, args):
    return _dot(cg, call.node, args[0], args[1], call.result_type)


def _length_infer(call):
    return _vectors(call, "vector.length", 1, floats=True).elements[0]


def _length_lower(cg, call, args):
    return _length(cg, call.node, args[0], call.result_type)


def _normalize_infer(call):
    return _vectors(call, "vector.normalize", 1, floats=True)


def _normalize_lower(cg, call, args):
    vt = call.result_type
    scalar = vt.elements[0]
    n = _length(cg, call.node, args[0], scalar)
    return KValue(vt, [cg.arith(call.node, ast.Div(), args[0].element(k), n, scalar, None,
                                None).value for k in range(len(vt.elements))])


def _cross_infer(call):
    vt = _vectors(call, "vector.cross", 2)
    if len(vt.elements) != 3:
        raise TypeError(f"vector.cross needs 3-vectors, got {vt!r}")
    return vt


def _cross_lower(cg, call, args):
    vt = call.result_type
    s = vt.elements[0]
    a, c = args
    node = call.node

    def mul(i, j):
        return cg.arith(node, ast.Mult(), a.element(i), c.element(j), s, None, None)

    vals = [cg.arith(node, ast.Sub(), mul(i, j), mul(j, i), s, None, None).value
            for i, j in ((1, 2), (2, 0), (0, 1))]
    return KValue(vt, vals)


def _minmax(name: str):
    what = f"vector.{name}"
    op = ast.Lt() if name == "min" else ast.Gt()

    def infer(call):
        return _vectors(call, what, 2)

    def lower(cg, call, args):
        vt = call.result_type
        vals = []
        for k in range(len(vt.elements)):
            a, c = args[0].element(k), args[1].element(k)
            # As Python's min/max: the second wins only when strictly better.
            better = cg.compare(op, c, a, None, None, call.node)
            vals.append(cg.b.select(better, c.value, a.value))
        return KValue(vt, vals)

    register(what, infer, lower)


register("vector.dot", _dot_infer, _dot_lower)
register("vector.length", _length_infer, _length_lower)
register("vector.normalize", _normalize_infer, _normalize_lower)
register("vector.cross", _cross_infer, _cross_lower)
_minmax("min")
_minmax("max")
