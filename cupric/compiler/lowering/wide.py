"""Lowering of `cupric.device.wide`: `vload`/`vstore` emit one element access per lane at
consecutive addresses, which the optimizer merges into one `ld.global.v<N>` /
`st.global.v<N>` when it can prove the alignment (16-byte aligned arrays, decided at
launch, and an index that is a multiple of the width) and leaves as single accesses
otherwise, so the helpers are correct on any array. `unroll` is expanded on the AST by
`cupric.compiler.frontend.unroll`; a use left here is outside a for statement.
"""

from __future__ import annotations

from cupric.compiler.codegen.values import KValue
from cupric.compiler.ir import types as ll
from cupric.compiler.ir.values import const_int
from cupric.compiler.lowering.memory import array_index
from cupric.compiler.lowering.registry import register, register_iterable
from cupric.compiler.typing.ktypes import NONE, TupleType, WeakType
from cupric.device.wide import WIDTHS
from cupric.types import ArrayType, ScalarType

__all__ = []


register_iterable("unroll", "for k in unroll(4): ...")


def _array_and_index(call, what: str) -> ArrayType:
    at = call.arg_types[0]
    if not isinstance(at, ArrayType) or at.ndim != 1:
        raise TypeError(f"{what}: the first argument must be a 1-D array, got {at!r}")
    if not isinstance(at.dtype, ScalarType):
        raise TypeError(f"{what}: arrays of {at.dtype!r} are not supported (scalar dtypes)")
    it = call.arg_types[1]
    if not ((isinstance(it, WeakType) and it.kind == "int")
            or (isinstance(it, ScalarType) and it.is_integer)):
        raise TypeError(f"{what}: the index must be an integer, got {it!r}")
    return at


def _width(what: str, width) -> int:
    if isinstance(width, bool) or not isinstance(width, int) or width not in WIDTHS:
        raise TypeError(f"{what}: the width must be a constant in {WIDTHS}, got {width!r}")
    return width


def _vload_infer(call):
    if call.keywords or len(call.arg_types) != 3:
        raise TypeError("vload(a, j, width) takes an array, an index and a constant width")
    at = _array_and_index(call, "vload")
    width = _width("vload", call.consts[2])
    return TupleType((at.dtype,) * width)


def _lanes(cg, call, array: KValue, index: KValue, width: int):
    """The element addresses of array[j], ..., array[j + width - 1]."""
    first = array_index(cg, array, index, call.node)
    if width == 1:
        return [first]
    base = cg.to_i64(index) if not isinstance(index.type, WeakType) else \
        cg.to_i64(cg.convert(index, index.type.default, call.node))
    return [first] + [cg.element_address(array, [cg.b.binop("add", base,
                                                             const_int(ll.i64, k))],
                                         call.node)
                      for k in range(1, width)]


def _vload_lower(cg, call, args):
    array, index = args[0], args[1]
    width = len(call.result_type.elements)
    vals = []
    for ptr in _lanes(cg, call, array, index, width):
        vals.extend(cg.load_element(array.type, ptr).vals)
    return KValue(call.result_type, vals)


register("vload", _vload_infer, _vload_lower)


def _vstore_infer(call):
    if call.keywords or len(call.arg_types) != 3:
        raise TypeError("vstore(a, j, values) takes an array, an index and a tuple")
    _array_and_index(call, "vstore")
    vt = call.arg_types[2]
    if not isinstance(vt, TupleType):
        raise TypeError(f"vstore: values must be a tuple of length "
                        f"{WIDTHS}, got {vt!r}")
    _width("vstore", len(vt.elements))
    for t in vt.elements:
        if not isinstance(t, (ScalarType, WeakType)):
            raise TypeError(f"vstore: values must be numbers, got {t!r}")
    return NONE


def _vstore_lower(cg, call, args):
    array, index, values = args
    width = len(values.type.elements)
    for k, ptr in enumerate(_lanes(cg, call, array, index, width)):
        cg.store_element(array.type, ptr, values.element(k), call.node)
    return KValue(NONE, [])


register("vstore", _vstore_infer, _vstore_lower, writes=(0,))
