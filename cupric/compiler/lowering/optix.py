"""Lowering of `cupric.device.optix`: the OptiX device functions inside OptiX programs.

OptiX device functions are not LLVM intrinsics: a program calls `_optix_*` functions in
PTX (`call (%r1), _optix_get_launch_index_x, ();`) that OptiX's own compiler resolves
when it builds a module. NVVM IR cannot declare them (libNVVM would demand a body), so
each becomes an inline-PTX `call` through `asm sideeffect`, the way CUDA C++ programs
reach them through OptiX's device headers.

The programs' entry points are emitted by `cupric.optix` through the compiler's hook for
custom entries (`cupric.compiler.entries`); it sets two lowering-state items these rules
read: ``optix_programs`` (the module is an OptiX module) and ``optix_program_kind`` (the
kind of the program being emitted, e.g. ``"closest_hit"``).
"""

from __future__ import annotations

from cupric.compiler.codegen.values import KValue
from cupric.compiler.ir import types as ll
from cupric.compiler.ir.values import Value, const_float, const_int
from cupric.compiler.lowering.registry import register as _register
from cupric.compiler.typing.ktypes import NONE, TupleType, WeakType
from cupric.device.optix import ALTERNATIVES, AVAILABILITY
from cupric.types import ArrayType, ScalarType, bool_, f32, i32, u32, u64

__all__ = ["register"]

#: Program kind (as `cupric.optix.PROGRAM_KINDS` names them) -> its name in messages.
_KIND_WORDS = {"raygen": "ray-generation", "miss": "miss", "closest_hit": "closest-hit",
               "any_hit": "any-hit", "intersection": "intersection",
               "exception": "exception", "direct_callable": "direct-callable",
               "continuation_callable": "continuation-callable"}


def _check_availability(cg, name: str, node) -> None:
    """Refuse an OptiX device function in a program kind OptiX does not allow it in.

    OptiX would refuse the whole module (OPTIX_ERROR_INVALID_FUNCTION_USE) with a log
    naming the C function and the PTX entry; this names the Python line instead. Device
    functions called by a program are checked under the kind of the program whose
    compilation first reaches them (they are emitted once per module), which can only miss
    a misuse that OptiX then still reports, never refuse a legal call.
    """
    kind = cg.mcg.lowering_state.get("optix_program_kind")
    allowed = AVAILABILITY.get(name)
    if kind is None or allowed is None or kind in allowed:
        return
    words = [_KIND_WORDS[k] for k in _KIND_WORDS if k in allowed]
    where = words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]
    article = "an" if _KIND_WORDS[kind][0] in "aeiou" else "a"
    raise cg.error(node, f"cupric.device.{name}() cannot be called in {article} "
                         f"{_KIND_WORDS[kind]} program (OptiX allows it in {where} "
                         f"programs only)", hint=ALTERNATIVES.get(name))


def register(name: str, infer, lower) -> None:
    """Register an OptiX intrinsic's rule; its lowering first checks `AVAILABILITY`."""
    def checked(cg, call, args):
        _check_availability(cg, name, call.node)
        return lower(cg, call, args)

    _register(name, infer, checked)


# -- inline PTX helpers -----------------------------------------------------------------------

_CONSTRAINT = {"i32": "r", "i64": "l", "float": "f"}


def _ptx_call(cg, function: str, results: list[ll.LLType], args: list[Value]):
    """Emit `call (outs), function, (ins);` as inline PTX; returns the result Values."""
    if not cg.mcg.lowering_state.get("optix_programs"):
        # Only OptiX resolves `_optix_*` calls: a CUDA kernel using them would fail to
        # load with an unresolved-symbol error far from the cause.
        raise cg.error(cg.src.tree, "OptiX device functions (cupric.device.optix) work only "
                       "in OptiX programs", hint="decorate the function with "
                       "cupric.optix.raygen, miss, closest_hit, ... and compile it with "
                       "DeviceContext.compile_module")
    outs = ", ".join(f"${k}" for k in range(len(results)))
    ins = ", ".join(f"${len(results) + k}" for k in range(len(args)))
    text = "call "
    if results:
        text += f"({outs}), "
    text += f"{function}, ({ins});"
    constraints = [f"={_CONSTRAINT[str(t)]}" for t in results]
    constraints += [_CONSTRAINT[str(a.type)] for a in args]
    if not results:
        ret = ll.void
    elif len(results) == 1:
        ret = results[0]
    else:
        ret = ll.StructType(results)
    value = cg.b.inline_asm(ll.FunctionType(ret, [a.type for a in args]), text,
                            ",".join(constraints), args, side_effects=True)
    if not results:
        return []
    if len(results) == 1:
        return [value]
    return [cg.b.extractvalue(value, k) for k in range(len(results))]


def _scalar(cg, kv: KValue, to: ScalarType, node) -> Value:
    return cg.convert(kv, to, node).value


def _triple(cg, kv: KValue, node, what: str) -> list[Value]:
    t = kv.type
    if not isinstance(t, TupleType) or len(t.elements) != 3:
        raise cg.error(node, f"{what} must be a 3-tuple (x, y, z) or a float3")
    return [_scalar(cg, kv.element(k), f32, node) for k in range(3)]


def _is_scalar(t) -> bool:
    return isinstance(t, (ScalarType, WeakType))


def _is_triple(t) -> bool:
    return isinstance(t, TupleType) and len(t.elements) == 3 and all(
        _is_scalar(e) for e in t.elements)


def _constant_index(call, position: int, limit: int, what: str) -> int:
    value = call.consts[position] if position < len(call.consts) else None
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < limit:
        raise TypeError(f"{what} must be a constant 0..{limit - 1}")
    return value


def _check_no_keywords(call) -> None:
    if call.keywords:
        raise TypeError(f"takes no keyword arguments, got {', '.join(call.keywords)}")


# -- rules: getters -----------------------------------------------------------------------------

def _getter(name: str, functions: list[str], kinds: list, result) -> None:
    """A no-argument intrinsic reading one or more `_optix_*` values."""
    def infer(call):
        _check_no_keywords(call)
        if call.arg_types:
            raise TypeError("takes no arguments")
        return result

    def lower(cg, call, args):
        vals = []
        for function, kind in zip(functions, kinds):
            lltype = ll.float if kind == f32 else ll.i64 if kind == u64 else ll.i32
            vals += _ptx_call(cg, function, [lltype], [])
        return KValue(call.result_type, vals)

    register(name, infer, lower)


def _xyz(name: str, stem: str, kind) -> None:
    _getter(name, [f"_optix_{stem}_{axis}" for axis in "xyz"], [kind] * 3,
            TupleType([kind] * 3))


_xyz("optix.launch_index", "get_launch_index", i32)
_xyz("optix.launch_dimensions", "get_launch_dimension", i32)
_xyz("optix.world_ray_origin", "get_world_ray_origin", f32)
_xyz("optix.world_ray_direction", "get_world_ray_direction", f32)
_xyz("optix.object_ray_origin", "get_object_ray_origin", f32)
_xyz("optix.object_ray_direction", "get_object_ray_direction", f32)
_getter("optix.ray_tmin", ["_optix_get_ray_tmin"], [f32], f32)
_getter("optix.ray_tmax", ["_optix_get_ray_tmax"], [f32], f32)
_getter("optix.ray_time", ["_optix_get_ray_time"], [f32], f32)
_getter("optix.ray_flags", ["_optix_get_ray_flags"], [u32], u32)
_getter("optix.hit_kind", ["_optix_get_hit_kind"], [u32], u32)
_getter("optix.primitive_index", ["_optix_read_primitive_idx"], [i32], i32)
_getter("optix.instance_index", ["_optix_read_instance_idx"], [i32], i32)
_getter("optix.instance_id", ["_optix_read_instance_id"], [i32], i32)
_getter("optix.sbt_gas_index", ["_optix_read_sbt_gas_idx"], [i32], i32)
_getter("optix.sbt_data_pointer", ["_optix_get_sbt_data_ptr_64"], [u64], u64)
_getter("optix.transform_list_size", ["_optix_get_transform_list_size"], [i32], i32)
_getter("optix.gas_traversable_handle", ["_optix_get_gas_traversable_handle"], [u64], u64)
_getter("optix.exception_code", ["_optix_get_exception_code"], [i32], i32)


def _barycentrics_infer(call):
    _check_no_keywords(call)
    if call.arg_types:
        raise TypeError("takes no arguments")
    return TupleType([f32, f32])


def _barycentrics_lower(cg, call, args):
    vals = _ptx_call(cg, "_optix_get_triangle_barycentrics", [ll.float, ll.float], [])
    return KValue(call.result_type, vals)


register("optix.triangle_barycentrics", _barycentrics_infer, _barycentrics_lower)


# -- rules: payload and attribute registers ------------------------------------------------------

def _get_payload_infer(call):
    _check_no_keywords(call)
    if len(call.arg_types) != 1:
        raise TypeError("takes one argument, the payload register index")
    _constant_index(call, 0, 32, "the payload index")
    return u32


def _get_payload_lower(cg, call, args):
    index = const_int(ll.i32, call.consts[0])
    return KValue(u32, _ptx_call(cg, "_optix_get_payload", [ll.i32], [index]))


def _set_payload_infer(call):
    _check_no_keywords(call)
    if len(call.arg_types) != 2 or not _is_scalar(call.arg_types[1]):
        raise TypeError("takes two arguments: the payload register index and a number")
    _constant_index(call, 0, 32, "the payload index")
    return NONE


def _set_payload_lower(cg, call, args):
    index = const_int(ll.i32, call.consts[0])
    value = _scalar(cg, args[1], u32, call.node)
    _ptx_call(cg, "_optix_set_payload", [], [index, value])
    return KValue(NONE, [])


def _attribute_infer(call):
    _check_no_keywords(call)
    if len(call.arg_types) != 1:
        raise TypeError("takes one argument, the attribute register index")
    _constant_index(call, 0, 8, "the attribute index")
    return u32


def _attribute_lower(cg, call, args):
    return KValue(u32, _ptx_call(cg, f"_optix_get_attribute_{call.consts[0]}", [ll.i32], []))


register("optix.get_payload", _get_payload_infer, _get_payload_lower)
register("optix.set_payload", _set_payload_infer, _set_payload_lower)
register("optix.get_attribute", _attribute_infer, _attribute_lower)


# -- rules: trace ---------------------------------------------------------------------------------

_TRACE_KEYWORDS = {"ray_time": 0.0, "visibility_mask": 255, "ray_flags": 0, "sbt_offset": 0,
                   "sbt_stride": 1, "miss_index": 0}


def _trace_infer(call):
    types = call.arg_types
    if len(types) < 5:
        raise TypeError("takes (handle, origin, direction, tmin, tmax, *payload)")
    if not _is_scalar(types[0]):
        raise TypeError("the handle must be an integer (a u64 traversable handle)")
    for k, what in ((1, "origin"), (2, "direction")):
        if not _is_triple(types[k]):
            raise TypeError(f"the {what} must be a 3-tuple (x, y, z) or a float3")
    for k, what in ((3, "tmin"), (4, "tmax")):
        if not _is_scalar(types[k]):
            raise TypeError(f"{what} must be a number")
    payload = types[5:]
    if len(payload) > 32:
        raise TypeError(f"at most 32 payload values, got {len(payload)}")
    for t in payload:
        if not _is_scalar(t):
            raise TypeError("payload values must be numbers (u32 registers)")
    for name, value in call.keywords.items():
        if name not in _TRACE_KEYWORDS:
            raise TypeError(f"unknown keyword {name}= (known: {', '.join(_TRACE_KEYWORDS)})")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"{name}= must be a constant number")
        if name != "ray_time" and (not isinstance(value, int) or not 0 <= value < 2**32):
            raise TypeError(f"{name}= must be a constant integer 0..2**32-1")
    if not payload:
        return NONE
    if len(payload) == 1:
        return u32
    return TupleType([u32] * len(payload))


def _trace_lower(cg, call, args):
    node = call.node
    keywords = {**_TRACE_KEYWORDS, **call.keywords}
    handle = _scalar(cg, args[0], u64, node)
    origin = _triple(cg, args[1], node, "origin")
    direction = _triple(cg, args[2], node, "direction")
    tmin = _scalar(cg, args[3], f32, node)
    tmax = _scalar(cg, args[4], f32, node)
    payload = [_scalar(cg, a, u32, node) for a in args[5:]]
    count = len(payload)
    ins = [const_int(ll.i32, 0), handle] + origin + direction + [
        tmin, tmax, const_float(ll.float, float(keywords["ray_time"]))]
    ins += [const_int(ll.i32, int(keywords[k])) for k in
            ("visibility_mask", "ray_flags", "sbt_offset", "sbt_stride", "miss_index")]
    ins.append(const_int(ll.i32, count))
    # Registers past the payload are passed as zero, as the trace needs all 32 operands.
    ins += payload + [const_int(ll.i32, 0)] * (32 - count)
    outs = _ptx_call(cg, "_optix_trace_typed_32", [ll.i32] * 32, ins)
    if count == 0:
        return KValue(NONE, [])
    return KValue(call.result_type, outs[:count])


register("optix.trace", _trace_infer, _trace_lower)


# -- rules: steering traversal ------------------------------------------------------------------

def _report_infer(call):
    _check_no_keywords(call)
    types = call.arg_types
    if len(types) < 2 or len(types) > 10 or not all(_is_scalar(t) for t in types):
        raise TypeError("takes (t, hit_kind, *attributes) with up to 8 attributes, all "
                        "numbers")
    return bool_


def _report_lower(cg, call, args):
    node = call.node
    t = _scalar(cg, args[0], f32, node)
    kind = _scalar(cg, args[1], u32, node)
    attributes = [_scalar(cg, a, u32, node) for a in args[2:]]
    (accepted,) = _ptx_call(cg, f"_optix_report_intersection_{len(attributes)}", [ll.i32],
                            [t, kind] + attributes)
    return KValue(bool_, [cg.b.icmp("ne", accepted, const_int(ll.i32, 0))])


def _void_rule(name: str, function: str) -> None:
    def infer(call):
        _check_no_keywords(call)
        if call.arg_types:
            raise TypeError("takes no arguments")
        return NONE

    def lower(cg, call, args):
        _ptx_call(cg, function, [], [])
        return KValue(NONE, [])

    register(name, infer, lower)


register("optix.report_intersection", _report_infer, _report_lower)
_void_rule("optix.ignore_intersection", "_optix_ignore_intersection")
_void_rule("optix.terminate_ray", "_optix_terminate_ray")


def _throw_infer(call):
    _check_no_keywords(call)
    if len(call.arg_types) != 1 or not _is_scalar(call.arg_types[0]):
        raise TypeError("takes one argument, the exception code")
    code = call.consts[0]
    if code is not None and not (isinstance(code, int) and 0 <= code < 2**30):
        raise TypeError("user exception codes are 0..2**30-1")
    return NONE


def _throw_lower(cg, call, args):
    code = _scalar(cg, args[0], i32, call.node)
    _ptx_call(cg, "_optix_throw_exception_0", [], [code])
    return KValue(NONE, [])


register("optix.throw_exception", _throw_infer, _throw_lower)


# -- rules: transforms and SBT data ---------------------------------------------------------------

def _one_argument(name: str, function: str, arg_type, result, result_kind) -> None:
    def infer(call):
        _check_no_keywords(call)
        if len(call.arg_types) != 1 or not _is_scalar(call.arg_types[0]):
            raise TypeError("takes one integer argument")
        return result

    def lower(cg, call, args):
        value = _scalar(cg, args[0], arg_type, call.node)
        lltype = ll.i64 if result_kind == u64 else ll.i32
        return KValue(result, _ptx_call(cg, function, [lltype], [value]))

    register(name, infer, lower)


_one_argument("optix.transform_list_handle", "_optix_get_transform_list_handle", u32, u64,
              u64)
_one_argument("optix.transform_type", "_optix_get_transform_type_from_handle", u64, i32, i32)


def _global_array(cg, address: Value, dtype: ScalarType, count: int) -> KValue:
    from cupric.compiler.codegen.values import memory_lltype
    from cupric.compiler.lowering.memory import array_value
    at = ArrayType(dtype, 1, "C")
    pointer = cg.b.cast("inttoptr", address, ll.PointerType(memory_lltype(dtype), ll.GLOBAL))
    return array_value(cg, at, pointer, [count])


def _matrix_rule(name: str, function: str) -> None:
    def infer(call):
        _check_no_keywords(call)
        if len(call.arg_types) != 1 or not _is_scalar(call.arg_types[0]):
            raise TypeError("takes one argument, an instance's traversable handle (u64)")
        return ArrayType(f32, 1, "C")

    def lower(cg, call, args):
        handle = _scalar(cg, args[0], u64, call.node)
        (address,) = _ptx_call(cg, function, [ll.i64], [handle])
        return _global_array(cg, address, f32, 12)

    register(name, infer, lower)


_matrix_rule("optix.instance_transform", "_optix_get_instance_transform_from_handle")
_matrix_rule("optix.instance_inverse_transform",
             "_optix_get_instance_inverse_transform_from_handle")


def _sbt_data_infer(call):
    from cupric.compiler.lowering.memory import resolve_dtype
    _check_no_keywords(call)
    if len(call.arg_types) != 2:
        raise TypeError("takes (dtype, n): a scalar type and a constant element count")
    dtype = resolve_dtype(getattr(call.arg_types[0], "obj", None), "sbt_data")
    count = call.consts[1]
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise TypeError("the element count must be a positive constant")
    return ArrayType(dtype, 1, "C")


def _sbt_data_lower(cg, call, args):
    (address,) = _ptx_call(cg, "_optix_get_sbt_data_ptr_64", [ll.i64], [])
    return _global_array(cg, address, call.result_type.dtype, call.consts[1])


register("optix.sbt_data", _sbt_data_infer, _sbt_data_lower)


# -- rules: object/world transforms of points, vectors and normals ----------------------------
#
# OptiX gives the transforms between the traced root and the hit primitive as a list of
# handles (0 nearest the root); each is an instance or a static transform with both its
# object-to-world matrix and the inverse (3x4 row-major, in global memory). Composing
# them walks that list: towards the root (last index first) for object-to-world, from the
# root for world-to-object. Normals go through the inverse transpose, which swaps the
# matrix used. Motion transforms would need interpolation at the ray time: they trap.

_TRANSFORM_INSTANCE, _TRANSFORM_STATIC = 4, 1
_STATIC_FORWARD_OFFSET, _STATIC_INVERSE_OFFSET = 16, 64


def _transform_rule(name: str, to_world: bool, kind: str) -> None:
    def infer(call):
        _check_no_keywords(call)
        if len(call.arg_types) != 1 or not _is_triple(call.arg_types[0]):
            raise TypeError(f"takes one 3-tuple (x, y, z) or float3, the {kind}")
        return TupleType([f32] * 3)

    def lower(cg, call, args):
        return _emit_transform(cg, _triple(cg, args[0], call.node, kind), to_world, kind)

    register(name, infer, lower)


def _emit_transform(cg, xyz: list[Value], to_world: bool, kind: str) -> KValue:
    b, eb, fn = cg.b, cg.entry_builder, cg.fn
    forward = to_world != (kind == "normal")  # which matrix of each transform
    slots = [eb.alloca(ll.float) for _ in range(3)]
    counter = eb.alloca(ll.i32)
    matrix_slot = eb.alloca(ll.i64)
    for slot, value in zip(slots, xyz):
        b.store(value, slot)
    (count,) = _ptx_call(cg, "_optix_get_transform_list_size", [ll.i32], [])
    b.store(count if to_world else const_int(ll.i32, 0), counter)
    head, body, instance, not_instance, static, motion, apply, done = (
        fn.append_block(f"xform.{part}") for part in
        ("head", "body", "instance", "other", "static", "motion", "apply", "done"))
    b.br(head)

    b.position_at_end(head)
    k = b.load(counter)
    more = b.icmp("sgt", k, const_int(ll.i32, 0)) if to_world else b.icmp("slt", k, count)
    b.cbranch(more, body, done)

    b.position_at_end(body)
    index = b.binop("sub", k, const_int(ll.i32, 1)) if to_world else k
    (handle,) = _ptx_call(cg, "_optix_get_transform_list_handle", [ll.i64], [index])
    (kind_value,) = _ptx_call(cg, "_optix_get_transform_type_from_handle", [ll.i32], [handle])
    b.cbranch(b.icmp("eq", kind_value, const_int(ll.i32, _TRANSFORM_INSTANCE)), instance,
              not_instance)

    b.position_at_end(instance)
    function = ("_optix_get_instance_transform_from_handle" if forward
                else "_optix_get_instance_inverse_transform_from_handle")
    (address,) = _ptx_call(cg, function, [ll.i64], [handle])
    b.store(address, matrix_slot)
    b.br(apply)

    b.position_at_end(not_instance)
    b.cbranch(b.icmp("eq", kind_value, const_int(ll.i32, _TRANSFORM_STATIC)), static, motion)

    b.position_at_end(static)
    (address,) = _ptx_call(cg, "_optix_get_static_transform_from_handle", [ll.i64], [handle])
    offset = _STATIC_FORWARD_OFFSET if forward else _STATIC_INVERSE_OFFSET
    b.store(b.binop("add", address, const_int(ll.i64, offset)), matrix_slot)
    b.br(apply)

    b.position_at_end(motion)
    b.inline_asm(ll.FunctionType(ll.void, []), "trap;", "", [], side_effects=True)
    b.unreachable()

    b.position_at_end(apply)
    pointer = b.cast("inttoptr", b.load(matrix_slot), ll.PointerType(ll.float, ll.GLOBAL))
    m = [b.load(b.gep(pointer, [const_int(ll.i64, e)]), align=4) for e in range(12)]
    x, y, z = (b.load(slot) for slot in slots)
    out = []
    for row in range(3):
        if kind == "normal":  # the transpose of the 3x3 part
            terms = [(m[row], x), (m[4 + row], y), (m[8 + row], z)]
        else:
            terms = [(m[4 * row], x), (m[4 * row + 1], y), (m[4 * row + 2], z)]
        total = b.binop("fmul", *terms[0])
        for a, v in terms[1:]:
            total = b.binop("fadd", total, b.binop("fmul", a, v))
        if kind == "point":
            total = b.binop("fadd", total, m[4 * row + 3])
        out.append(total)
    for slot, value in zip(slots, out):
        b.store(value, slot)
    step = const_int(ll.i32, -1 if to_world else 1)
    b.store(b.binop("add", k, step), counter)
    b.br(head)

    b.position_at_end(done)
    return KValue(TupleType([f32] * 3), [b.load(slot) for slot in slots])


for _kind in ("point", "vector", "normal"):
    _transform_rule(f"optix.object_to_world_{_kind}", True, _kind)
    _transform_rule(f"optix.world_to_object_{_kind}", False, _kind)
