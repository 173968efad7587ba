"""OptiX device functions: what ray-generation, miss, hit, intersection, exception and
callable programs call. OptiX runs these programs inside its own traversal loop; each
function here reads or steers that loop (launch index, the current ray, payload and
attribute registers, the hit) and compiles to the matching `_optix_*` call in PTX, which
OptiX resolves when it builds the pipeline.

Programs are plain Python decorated with `cupric.optix.raygen`, `miss`, `closest_hit`,
`any_hit`, `intersection`, `exception`, `direct_callable` (see docs/optix.md)::

    from cupric.device import optix

    @cupric.optix.raygen
    def render(image: Array[f32, 2], handle: u64):
        x, y, _ = optix.launch_index()
        hit = optix.trace(handle, (x + 0.5, y + 0.5, -1.0), (0.0, 0.0, 1.0), 0.0, 1e16,
                          u32(0))
        image[y, x] = f32(hit)

Types: launch indices and dimensions, primitive, instance and SBT indices are `i32` (as
`threadIdx`; OptiX keeps them far below 2**31); payload and attribute registers, hit kinds
and ray flags are `u32` bit patterns (reinterpret floats with `cupric.device.bits`); rays
are `f32`; traversable handles `u64`.

These intrinsics are kept in `INTRINSICS`, not in the kernel-wide
`cupric.device.REGISTRY`: that registry promises a simulator implementation of every
entry, and OptiX programs cannot run on the CPU simulator (there is no BVH traversal or
OptiX scheduler to emulate them against). Calling one outside a compiled OptiX program
raises `OptixProgramError` saying so.
"""

from __future__ import annotations

from ._intrinsic import Intrinsic, OutsideKernelError

__all__ = ["INTRINSICS", "AVAILABILITY", "ALTERNATIVES", "PROGRAM_KINDS", "LAUNCH_PARAMS_NAME",
           "OptixProgramError", "MAX_PAYLOAD_VALUES",
           "MAX_ATTRIBUTE_VALUES",
           "HIT_KIND_TRIANGLE_FRONT_FACE", "HIT_KIND_TRIANGLE_BACK_FACE",
           "RAY_FLAG_NONE", "RAY_FLAG_DISABLE_ANYHIT", "RAY_FLAG_ENFORCE_ANYHIT",
           "RAY_FLAG_TERMINATE_ON_FIRST_HIT", "RAY_FLAG_DISABLE_CLOSESTHIT",
           "RAY_FLAG_CULL_BACK_FACING_TRIANGLES", "RAY_FLAG_CULL_FRONT_FACING_TRIANGLES",
           "RAY_FLAG_CULL_DISABLED_ANYHIT", "RAY_FLAG_CULL_ENFORCED_ANYHIT"]

#: Default name of the `.const` launch-parameter variable of cupric's OptiX programs.
LAUNCH_PARAMS_NAME = "cupric_launch_params"

#: Payload registers a trace may carry, and attribute registers an intersection may report.
MAX_PAYLOAD_VALUES = 32
MAX_ATTRIBUTE_VALUES = 8

# Hit kinds of the built-in triangle intersector (OptixHitKind).
HIT_KIND_TRIANGLE_FRONT_FACE = 0xFE
HIT_KIND_TRIANGLE_BACK_FACE = 0xFF

# Ray flags (OptixRayFlags), for trace(..., ray_flags=...).
RAY_FLAG_NONE = 0
RAY_FLAG_DISABLE_ANYHIT = 1 << 0
RAY_FLAG_ENFORCE_ANYHIT = 1 << 1
RAY_FLAG_TERMINATE_ON_FIRST_HIT = 1 << 2
RAY_FLAG_DISABLE_CLOSESTHIT = 1 << 3
RAY_FLAG_CULL_BACK_FACING_TRIANGLES = 1 << 4
RAY_FLAG_CULL_FRONT_FACING_TRIANGLES = 1 << 5
RAY_FLAG_CULL_DISABLED_ANYHIT = 1 << 6
RAY_FLAG_CULL_ENFORCED_ANYHIT = 1 << 7

#: name -> intrinsic, for the compiler's coverage test and docs/optix.md.
INTRINSICS: dict[str, "OptixIntrinsic"] = {}


class OptixProgramError(OutsideKernelError):
    """An OptiX device function was called outside a compiled OptiX program (plain Python
    or the CPU simulator, which cannot run OptiX programs)."""


class OptixIntrinsic(Intrinsic):
    """An OptiX device function; lowered by `cupric.compiler.lowering.optix`."""

    __slots__ = ()

    def __init__(self, name: str, doc: str) -> None:
        # Deliberately not `super().__init__`: see the module docstring on REGISTRY.
        if name in INTRINSICS:
            raise ValueError(f"OptiX intrinsic {name!r} declared twice")
        self.name = name
        self.doc = doc
        INTRINSICS[name] = self

    def __call__(self, *args, **kwargs):
        raise OptixProgramError(
            f"cupric.device.{self.name}() runs only inside an OptiX program compiled with "
            f"cupric.optix (raygen, miss, closest_hit, ...); OptiX programs do not run on "
            f"the CPU simulator")


def _declare(short: str, doc: str) -> OptixIntrinsic:
    return OptixIntrinsic(f"optix.{short}", doc)


# -- launch ---------------------------------------------------------------------------------

launch_index = _declare(
    "launch_index",
    "launch_index() -> (x, y, z): this program invocation's index in the launch grid "
    "(i32 each; optixGetLaunchIndex).")
launch_dimensions = _declare(
    "launch_dimensions",
    "launch_dimensions() -> (width, height, depth): the launch's dimensions as given to "
    "optixLaunch (i32 each).")

# -- tracing and payloads -------------------------------------------------------------------

trace = _declare(
    "trace",
    "trace(handle, origin, direction, tmin, tmax, *payload, ray_time=0.0, "
    "visibility_mask=255, ray_flags=0, sbt_offset=0, sbt_stride=1, miss_index=0): trace "
    "a ray through the traversable `handle` (u64); origin and direction are 3-tuples (or "
    "float3) converted to f32. Up to 32 payload values (converted to u32) travel with "
    "the ray; their values after the trace come back: None for no payload, a u32 for "
    "one, a tuple of u32 for several. Keywords must be compile-time constants.")
get_payload = _declare(
    "get_payload",
    "get_payload(i) -> u32: payload register i (a constant, 0..31) of the ray being "
    "processed (miss, closest-hit, any-hit, intersection programs).")
set_payload = _declare(
    "set_payload",
    "set_payload(i, value): write payload register i (a constant, 0..31) of the current "
    "ray; the caller of trace sees it when the trace returns.")

# -- the current ray ------------------------------------------------------------------------

world_ray_origin = _declare(
    "world_ray_origin", "world_ray_origin() -> (x, y, z): the ray's origin in world space "
    "(f32 each).")
world_ray_direction = _declare(
    "world_ray_direction", "world_ray_direction() -> (x, y, z): the ray's direction in "
    "world space, as traced (not normalized by OptiX).")
object_ray_origin = _declare(
    "object_ray_origin", "object_ray_origin() -> (x, y, z): the ray's origin in the object "
    "space of the current primitive (intersection and any-hit programs).")
object_ray_direction = _declare(
    "object_ray_direction", "object_ray_direction() -> (x, y, z): the ray's direction in "
    "the object space of the current primitive.")
ray_tmin = _declare("ray_tmin", "ray_tmin() -> f32: the tmin the ray was traced with.")
ray_tmax = _declare(
    "ray_tmax", "ray_tmax() -> f32: the current tmax: the closest accepted hit distance "
    "so far (the hit's distance in closest-hit programs).")
ray_time = _declare("ray_time", "ray_time() -> f32: the ray's motion-blur time.")
ray_flags = _declare("ray_flags", "ray_flags() -> u32: the ray flags given to trace.")

# -- the hit ---------------------------------------------------------------------------------

hit_kind = _declare(
    "hit_kind", "hit_kind() -> u32: the hit kind: 0xFE/0xFF for a front/back triangle "
    "face, or what an intersection program reported (0..127).")
triangle_barycentrics = _declare(
    "triangle_barycentrics", "triangle_barycentrics() -> (u, v): barycentric coordinates "
    "of a triangle hit (f32; the hit point is (1-u-v)*v0 + u*v1 + v*v2).")
primitive_index = _declare(
    "primitive_index", "primitive_index() -> i32: index of the hit primitive within its "
    "build input (plus the input's primitive index offset).")
instance_index = _declare(
    "instance_index", "instance_index() -> i32: index of the hit instance in its instance "
    "acceleration structure (0 without instancing).")
instance_id = _declare(
    "instance_id", "instance_id() -> i32: the user id given to the hit instance "
    "(OptixInstance.instanceId). Without an instance above the hit (a GAS traced "
    "directly) the API reference says 0, but OptiX 9.0 (driver 580) returned -1 "
    "(0xFFFFFFFF) for built-in spheres: do not rely on it there.")
sbt_gas_index = _declare(
    "sbt_gas_index", "sbt_gas_index() -> i32: the SBT record index of the hit primitive's "
    "build input within its geometry acceleration structure.")
get_attribute = _declare(
    "get_attribute", "get_attribute(i) -> u32: attribute register i (a constant, 0..7) "
    "as reported by the intersection program (closest-hit, any-hit).")
sbt_data_pointer = _declare(
    "sbt_data_pointer", "sbt_data_pointer() -> u64: device address of the data part of "
    "the current program's SBT record (just after the 32-byte header).")
sbt_data = _declare(
    "sbt_data", "sbt_data(dtype, n) -> 1-D array of n elements of scalar `dtype` (both "
    "constants) over the data part of the current program's SBT record.")

# -- steering traversal -----------------------------------------------------------------------

report_intersection = _declare(
    "report_intersection", "report_intersection(t, hit_kind, *attributes) -> bool: report "
    "a hit at distance t (f32) with a hit kind 0..127 and up to 8 u32 attributes "
    "(intersection programs); True if the hit was accepted.")
ignore_intersection = _declare(
    "ignore_intersection", "ignore_intersection(): discard the current hit and continue "
    "traversal (any-hit programs).")
terminate_ray = _declare(
    "terminate_ray", "terminate_ray(): accept the current hit and stop traversal "
    "(any-hit programs); the closest-hit program then runs.")

# -- transforms --------------------------------------------------------------------------------

transform_list_size = _declare(
    "transform_list_size", "transform_list_size() -> i32: how many transforms lie between "
    "the traced root and the current primitive (0 for a lone GAS).")
transform_list_handle = _declare(
    "transform_list_handle", "transform_list_handle(i) -> u64: the traversable handle of "
    "transform i of the current hit (0 is nearest the root).")
transform_type = _declare(
    "transform_type", "transform_type(handle) -> i32: the OptixTransformType of a "
    "transform handle (4 for an instance, 1 static, 2 matrix motion, 3 SRT motion).")
instance_transform = _declare(
    "instance_transform", "instance_transform(handle) -> 1-D f32 array of 12: the "
    "object-to-world 3x4 row-major matrix of an instance handle (from the transform list).")
instance_inverse_transform = _declare(
    "instance_inverse_transform", "instance_inverse_transform(handle) -> 1-D f32 array "
    "of 12: the world-to-object 3x4 row-major matrix of an instance handle.")
gas_traversable_handle = _declare(
    "gas_traversable_handle", "gas_traversable_handle() -> u64: handle of the geometry "
    "acceleration structure holding the current primitive.")


def _transform(direction: str, kind: str) -> OptixIntrinsic:
    source, target, order = {"object_to_world": ("object", "world", "leaf to root"),
                             "world_to_object": ("world", "object", "root to leaf")}[direction]
    what = {"point": "a point (the translation applies)",
            "vector": "a direction (no translation)",
            "normal": "a surface normal (through the inverse transpose; not "
                      "renormalized)"}[kind]
    return _declare(
        f"{direction}_{kind}",
        f"{direction}_{kind}((x, y, z)) -> (x, y, z): {what} from {source} space to "
        f"{target} space of the current hit, composing the instance and static transforms "
        f"of the transform list ({order}); motion transforms trap.")


object_to_world_point = _transform("object_to_world", "point")
object_to_world_vector = _transform("object_to_world", "vector")
object_to_world_normal = _transform("object_to_world", "normal")
world_to_object_point = _transform("world_to_object", "point")
world_to_object_vector = _transform("world_to_object", "vector")
world_to_object_normal = _transform("world_to_object", "normal")

# -- exceptions --------------------------------------------------------------------------------

exception_code = _declare(
    "exception_code", "exception_code() -> i32: the code of the exception being handled "
    "(exception programs; negative codes are OptiX's own, user codes are >= 0).")
throw_exception = _declare(
    "throw_exception", "throw_exception(code): raise a user exception with code 0..2**30-1; "
    "the pipeline's exception program runs (needs exception flag 'user').")


# -- where each function may be called ------------------------------------------------------
#
# OptiX refuses a module whose program calls a device function outside the program types
# the OptiX API reference lists for it ("Illegal call to optixGetObjectRayOrigin in
# function __closesthit__... with semantic type CLOSESTHIT", OPTIX_ERROR_INVALID_FUNCTION_USE
# for the whole module). cupric checks the same table while compiling, so the error names
# the Python line and says what to use instead.

#: The program kinds, in cupric's names (`cupric.optix.PROGRAM_KINDS` maps them to entry
#: prefixes).
PROGRAM_KINDS = ("raygen", "miss", "closest_hit", "any_hit", "intersection", "exception",
                 "direct_callable", "continuation_callable")

_ANY = frozenset(PROGRAM_KINDS)
_RAY = frozenset({"intersection", "any_hit", "closest_hit", "miss"})
_HIT = frozenset({"intersection", "any_hit", "closest_hit"})


def _kinds(*kinds: str) -> frozenset:
    return frozenset(kinds)


#: Intrinsic name -> the program kinds that may call it (OptiX 9 API reference, "Available
#: in ..." of each optix* device function the intrinsic compiles to).
AVAILABILITY: dict[str, frozenset] = {
    "optix.launch_index": _ANY,
    "optix.launch_dimensions": _ANY,
    "optix.trace": _kinds("raygen", "closest_hit", "miss", "direct_callable",
                          "continuation_callable"),
    "optix.get_payload": _RAY,
    "optix.set_payload": _RAY,
    "optix.world_ray_origin": _RAY,
    "optix.world_ray_direction": _RAY,
    "optix.object_ray_origin": _kinds("intersection", "any_hit"),
    "optix.object_ray_direction": _kinds("intersection", "any_hit"),
    "optix.ray_tmin": _RAY,
    "optix.ray_tmax": _RAY,
    "optix.ray_time": _RAY,
    "optix.ray_flags": _RAY,
    "optix.hit_kind": _kinds("any_hit", "closest_hit"),
    "optix.triangle_barycentrics": _kinds("any_hit", "closest_hit"),
    "optix.primitive_index": _HIT,
    "optix.instance_index": _HIT,
    "optix.instance_id": _HIT,
    "optix.sbt_gas_index": _HIT,
    "optix.get_attribute": _kinds("any_hit", "closest_hit"),
    "optix.sbt_data_pointer": _ANY,
    "optix.sbt_data": _ANY,
    "optix.report_intersection": _kinds("intersection"),
    "optix.ignore_intersection": _kinds("any_hit"),
    "optix.terminate_ray": _kinds("any_hit"),
    "optix.transform_list_size": _HIT,
    "optix.transform_list_handle": _HIT,
    "optix.transform_type": _ANY,
    "optix.instance_transform": _ANY,
    "optix.instance_inverse_transform": _ANY,
    "optix.gas_traversable_handle": _HIT,
    "optix.exception_code": _kinds("exception"),
    "optix.throw_exception": _ANY - {"exception"},
    # The transforms walk the current transform list (optixGetTransformListSize/Handle).
    **{f"optix.{direction}_{kind}": _HIT for direction in ("object_to_world", "world_to_object")
       for kind in ("point", "vector", "normal")},
}

#: What to call instead, where a common mistake has a standard replacement.
ALTERNATIVES = {
    "optix.object_ray_origin": "in closest-hit programs use "
                               "world_to_object_point(world_ray_origin())",
    "optix.object_ray_direction": "in closest-hit programs use "
                                  "world_to_object_vector(world_ray_direction())",
}
