"""Lowering of `cupric.device.shared` and `cupric.device.local`: static shared arrays
(one `addrspace(3)` global per call site), typed views of the block's dynamic shared
memory (one `extern` zero-sized `addrspace(3)` array), and per-thread arrays (allocas).

The arrays they return index like kernel arrays (`SpaceArrayType`): a pointer in the
array's address space plus constant shapes and strides, so loads and stores compile to
ld.shared/st.shared (or ld.local) and the optimizer folds the index arithmetic. The
helpers at the bottom (constants, element addresses, strings) serve the other tables.
"""

from __future__ import annotations

import ast

import numpy as np

from cupric.compiler.codegen.values import KValue, memory_lltype, struct_field_index
from cupric.compiler.ir import types as ll
from cupric.compiler.ir.builder import is_constant
from cupric.compiler.ir.module import GlobalVariable, symbol
from cupric.compiler.ir.values import Value, const_int
from cupric.compiler.lowering.registry import register
from cupric.compiler.typing.ktypes import (ObjectType, SpaceArrayType, StructType, WeakType,
                                           struct_type)
from cupric.compiler.typing.ktypes import is_scalar
from cupric.types import ArrayType, ScalarType, scalar_from_dtype

__all__ = ["STATIC_SHARED_LIMIT", "array_value", "resolve_dtype", "constant_shape",
           "array_index", "string_pointer", "module_state", "ConstGlobal"]

#: Bytes of static shared memory one kernel may declare (CUDA's limit without opt-in).
STATIC_SHARED_LIMIT = 48 * 1024


def module_state(cg, key: str, factory):
    """Per-module state of a lowering table (kept on the ModuleCodegen)."""
    state = cg.mcg.lowering_state
    if key not in state:
        state[key] = factory()
    return state[key]


class ConstGlobal(GlobalVariable):
    """A module-level `constant` (read-only data: strings, constant-memory arrays)."""

    def render(self) -> str:
        space = f" addrspace({self.addrspace})" if self.addrspace else ""
        return (f"{symbol(self.name)} = {self.linkage}{space} constant {self.type} "
                f"{self.initializer}, align {self.align}")


class ExternGlobal(GlobalVariable):
    """A declaration without initializer (`extern __shared__` dynamic shared memory)."""

    def render(self) -> str:
        space = f" addrspace({self.addrspace})" if self.addrspace else ""
        return (f"{symbol(self.name)} = external{space} global {self.type}, "
                f"align {self.align}")


# -- argument helpers ------------------------------------------------------------------------

def resolve_dtype(obj, what: str):
    """The element type an intrinsic's `dtype` argument names: a scalar (f32,
    np.float32, 'f4') or a struct (a structured dtype, or a class with scalar
    annotations)."""
    if isinstance(obj, (ScalarType, StructType)):
        return obj
    if isinstance(obj, type) and getattr(obj, "__annotations__", None) and not issubclass(
            obj, np.generic):
        return struct_type(obj)
    try:
        dt = np.dtype(obj)
    except TypeError:
        raise TypeError(f"{what}: dtype must be a cupric scalar type (f32, i32, ...), a "
                        f"NumPy scalar type or a structured dtype, got {obj!r}") from None
    if dt.names is not None:
        return struct_type(dt)
    return scalar_from_dtype(dt)


def constant_shape(value, what: str) -> tuple[int, ...]:
    """A shape argument: an int or a tuple of positive compile-time constant ints."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        value = (int(value),)
    if not isinstance(value, tuple) or not value or not all(
            isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in value):
        raise TypeError(f"{what}: shape must be an int or a tuple of compile-time constant "
                        f"ints")
    if any(v <= 0 for v in value):
        raise TypeError(f"{what}: every dimension must be positive, got {value}")
    return tuple(int(v) for v in value)


def _argument(call, index: int, name: str, default=None, *, obj: bool = False):
    """Positional argument `index` or keyword `name`: its constant value (or, with
    `obj`, the compile-time object a name denotes)."""
    if index < len(call.arg_types):
        if obj:
            t = call.arg_types[index]
            return t.obj if isinstance(t, ObjectType) else None
        return call.consts[index]
    return call.keywords.get(name, default)


def array_value(cg, at: ArrayType, data: Value, shape) -> KValue:
    """A C-contiguous array KValue over `data` with `shape` (ints or i64 Values)."""
    shapes = [const_int(ll.i64, s) if isinstance(s, int) else s for s in shape]
    strides = []
    acc = None
    for s in reversed(shapes):
        strides.append(const_int(ll.i64, 1) if acc is None else acc)
        acc = s if acc is None else _mul(cg, acc, s)
    return KValue(at, [data] + shapes + list(reversed(strides)))


def _mul(cg, a: Value, b: Value) -> Value:
    if is_constant(a) and is_constant(b):  # static shapes: strides are constants too
        return const_int(ll.i64, a.value * b.value)
    return cg.b.binop("mul", a, b)


def array_index(cg, array: KValue, index: KValue, node, name=None) -> Value:
    """Element address of `array[index]` where `index` is an int or a tuple of ints (the
    index argument of atomics)."""
    at = array.type
    items = ([index.element(k) for k in range(len(index.type.elements))]
             if hasattr(index.type, "elements") else [index])
    if len(items) != at.ndim:
        raise cg.error(node, f"a {at.ndim}-D array needs {at.ndim} indices, got {len(items)}")
    idx = [cg.to_i64(_concrete(cg, item, node)) for item in items]
    return cg.element_address(array, idx, node, name)


def _concrete(cg, kv: KValue, node) -> KValue:
    if isinstance(kv.type, WeakType):
        return cg.convert(kv, kv.type.default, node)
    return kv


def string_pointer(cg, text: str) -> Value:
    """A generic `i8*` to a NUL-terminated constant string (one global per text)."""
    strings = module_state(cg, "strings", dict)
    data = text.encode("utf-8") + b"\0"
    name = strings.get(data)
    if name is None:
        name = cg.mcg.module.unique_symbol("cupric_str")
        body = "".join(chr(c) if 32 <= c < 127 and c not in (34, 92) else f"\\{c:02X}"
                       for c in data)
        cg.mcg.module.add_global(ConstGlobal(name, ll.ArrayType(ll.i8, len(data)),
                                             ll.CONSTANT, f'c"{body}"', "private", 1))
        strings[data] = name
    n = len(data)
    inner = (f"getelementptr inbounds ([{n} x i8], [{n} x i8] addrspace(4)* "
             f"{symbol(name)}, i64 0, i64 0)")
    return Value(ll.PointerType(ll.i8), f"addrspacecast (i8 addrspace(4)* {inner} to i8*)")


def checked_scalar(t, what: str, *, kinds="iuf", bits=None):
    """Validate one scalar argument type (weak literals count as their default)."""
    if isinstance(t, WeakType):
        t = t.default
    if not isinstance(t, ScalarType) or t.kind not in kinds or (bits and t.bits not in bits):
        raise TypeError(f"{what}, got {t!r}")
    return t


# -- shared.array ----------------------------------------------------------------------------

def _static_infer(space: int, what: str):
    def infer(call):
        shape = constant_shape(_argument(call, 0, "shape"), what)
        dtype_obj = _argument(call, 1, "dtype", obj=True)
        if dtype_obj is None:
            raise TypeError(f"{what}(shape, dtype): give the element type, e.g. f32")
        dtype = resolve_dtype(dtype_obj, what)
        extra = set(call.keywords) - {"shape", "dtype"}
        if extra or len(call.arg_types) > 2:
            raise TypeError(f"{what} takes (shape, dtype)")
        return SpaceArrayType(dtype, len(shape), space)
    return infer


def _shared_array_lower(cg, call, args):
    at = call.result_type
    shape = _shape_of(call)
    count = int(np.prod(shape))
    elem = memory_lltype(at.dtype)
    nbytes = count * _element_size(at.dtype)
    used = module_state(cg, "static_shared", lambda: [0])
    used[0] += nbytes
    if used[0] > STATIC_SHARED_LIMIT:
        raise cg.error(call.node, f"static shared memory of this kernel reaches {used[0]} "
                       f"bytes, past the {STATIC_SHARED_LIMIT}-byte limit",
                       hint="use shared.dynamic with shared_bytes= at launch for more")
    name = cg.mcg.module.unique_symbol(f"{cg.symbol}_shared")
    gtype = ll.ArrayType(elem, count)
    cg.mcg.module.add_global(GlobalVariable(name, gtype, ll.SHARED, "undef", "internal",
                                            max(16, _element_align(at.dtype))))
    base = Value(ll.PointerType(gtype, ll.SHARED), symbol(name))
    zero = const_int(ll.i64, 0)
    data = cg.b.gep(base, [zero, zero], inbounds=True,
                    result_type=ll.PointerType(elem, ll.SHARED))
    return array_value(cg, at, data, shape)


def type_struct_field_store(typer, target, vt, value_node) -> None:
    """Type `arr[i].field = v` (the typer's hook for attribute targets): allowed on
    shared and local arrays of structs; struct arguments stay read-only values."""
    sub = target.value
    at = typer.expr(sub.value) if isinstance(sub, ast.Subscript) else None
    if not (isinstance(at, ArrayType) and isinstance(at.dtype, StructType)):
        raise typer.error(target, "attributes cannot be assigned in kernels (struct "
                          "arguments are read-only values)",
                          hint="fields of shared/local arrays of structs can: a[i].x = v")
    st = typer.expr(sub)
    if target.attr not in st.fields:
        raise typer.error(target, f"{st!r} has no field '{target.attr}'",
                          hint=f"fields: {', '.join(st.names)}")
    if not is_scalar(vt) and vt is not _unknown():
        raise typer.error(value_node or target, f"cannot store {vt!r} into the field "
                          f"{target.attr} ({st.fields[target.attr][0]!r})")
    if isinstance(sub.value, ast.Name):
        typer.written.add(sub.value.id)
    typer.fn.types[target] = st.fields[target.attr][0]


def _unknown():
    from cupric.compiler.typing.infer import UNKNOWN
    return UNKNOWN


def store_struct_field(cg, target, value: KValue) -> None:
    """Emit `arr[i].field = value` (typed by `type_struct_field_store`)."""
    sub = target.value
    array = cg.expr(sub.value)
    ptr = cg.element_pointer(array, sub)
    st = array.type.dtype
    ft = st.fields[target.attr][0]
    field = cg.b.gep(ptr, [const_int(ll.i32, 0), const_int(ll.i32, struct_field_index(
        st, target.attr))], inbounds=True, result_type=ll.PointerType(
        memory_lltype(ft), ptr.type.addrspace))
    v = cg.convert(value, ft, target).value
    if ft.kind == "b":
        v = cg.b.cast("zext", v, ll.i8)
    cg.b.store(v, field, align=ft.itemsize)


def _element_size(t) -> int:
    return t.size if isinstance(t, StructType) else t.itemsize


def _element_align(t) -> int:
    return t.align if isinstance(t, StructType) else t.itemsize


def _shape_of(call):
    return constant_shape(_argument(call, 0, "shape"), "array")


def _local_array_lower(cg, call, args):
    at = call.result_type
    shape = _shape_of(call)
    count = int(np.prod(shape))
    elem = memory_lltype(at.dtype)
    slot = cg.entry_builder.alloca(ll.ArrayType(elem, count),
                                   align=max(8, _element_align(at.dtype)), hint="local")
    zero = const_int(ll.i64, 0)
    data = cg.b.gep(slot, [zero, zero], inbounds=True, result_type=ll.PointerType(elem))
    return array_value(cg, at, data, shape)


# -- shared.dynamic --------------------------------------------------------------------------

def _dynamic_infer(call):
    dtype_obj = _argument(call, 0, "dtype", obj=True)
    if dtype_obj is None:
        raise TypeError("shared.dynamic(dtype, offset=0, count=None): give the element type")
    dtype = resolve_dtype(dtype_obj, "shared.dynamic")
    if set(call.keywords) - {"dtype", "offset", "count"} or len(call.arg_types) > 3:
        raise TypeError("shared.dynamic takes (dtype, offset=0, count=None)")
    for k, name in ((1, "offset"), (2, "count")):
        if k < len(call.arg_types):
            checked_scalar(call.arg_types[k], f"shared.dynamic: {name} must be an integer",
                           kinds="iu")
        elif name in call.keywords and call.keywords[name] is not None and not isinstance(
                call.keywords[name], int):
            raise TypeError(f"shared.dynamic: {name}= must be an integer")
    offset = call.consts[1] if len(call.arg_types) > 1 else call.keywords.get("offset", 0)
    if isinstance(offset, int) and offset % _element_size(dtype):
        raise TypeError(f"shared.dynamic: offset {offset} is not a multiple of the item size "
                        f"({_element_size(dtype)} bytes)")
    return SpaceArrayType(dtype, 1, ll.SHARED)


def dynamic_shared_base(cg) -> Value:
    """`i8 addrspace(3)*` to the start of the block's dynamic shared memory."""
    name = module_state(cg, "dynamic_shared", lambda: cg.mcg.module.unique_symbol(
        "cupric_dynamic_shared"))
    if name not in cg.mcg.module.globals:
        cg.mcg.module.add_global(ExternGlobal(name, ll.ArrayType(ll.i8, 0), ll.SHARED,
                                              align=16))
    gtype = ll.ArrayType(ll.i8, 0)
    zero = const_int(ll.i64, 0)
    return cg.b.gep(Value(ll.PointerType(gtype, ll.SHARED), symbol(name)), [zero, zero],
                    inbounds=True, result_type=ll.PointerType(ll.i8, ll.SHARED))


def _int_arg(cg, call, args, k: int, name: str, default):
    if k < len(args):
        return cg.to_i64(_concrete(cg, args[k], call.node))
    value = call.keywords.get(name, default)
    return None if value is None else const_int(ll.i64, value)


def _dynamic_lower(cg, call, args):
    at = call.result_type
    b = cg.b
    offset = _int_arg(cg, call, args, 1, "offset", 0)
    count = _int_arg(cg, call, args, 2, "count", None)
    base = dynamic_shared_base(cg)
    ptr = b.gep(base, [offset], inbounds=True)
    elem = memory_lltype(at.dtype)
    data = b.cast("bitcast", ptr, ll.PointerType(elem, ll.SHARED))
    if count is None:
        # As many items as fit: (%dynamic_smem_size - offset) / itemsize.
        size = b.inline_asm(ll.FunctionType(ll.i32, []), "mov.u32 $0, %dynamic_smem_size;",
                            "=r", [], side_effects=False)
        size = b.cast("zext", size, ll.i64)
        count = b.binop("udiv", b.binop("sub", size, offset),
                        const_int(ll.i64, _element_size(at.dtype)))
    return array_value(cg, at, data, [count])


register("shared.array", _static_infer(ll.SHARED, "shared.array"), _shared_array_lower)
register("local.array", _static_infer(ll.GENERIC, "local.array"), _local_array_lower)
register("shared.dynamic", _dynamic_infer, _dynamic_lower)
