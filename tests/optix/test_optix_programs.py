"""CPU lane: OptiX programs written in Python compile through libNVVM (sm_90) into PTX
with the entry names OptiX looks for, the `_optix_*` calls of each device function, and
the launch-parameter variable laid out as the host packs it. Errors surface at compile
time, located in the program."""

from __future__ import annotations

import re

import pytest

import cupric
import cupric.optix.api as ox
from cupric.compiler.errors import CompileError
from cupric.device import optix
from cupric.optix.program import fit_ptx_version, launch_params_dtype
from cupric.types import Array, ArrayType, f32, i32, u32, u64
from cupric.types import f64 as f64_

IMAGE = Array[f32, 2, "C"]


@ox.raygen
def render(image: IMAGE, handle: u64):
    x, y, _ = optix.launch_index()
    w, h, _ = optix.launch_dimensions()
    hit, depth = optix.trace(handle, (x + 0.5, y + 0.5, -1.0), (0.0, 0.0, 1.0), 0.0, 1e16,
                             u32(0), u32(0), ray_flags=optix.RAY_FLAG_DISABLE_ANYHIT)
    if hit != 0 and x < w and y < h:
        image[y, x] = f32(depth)
    else:
        image[y, x] = -1.0


@ox.miss
def background(image: IMAGE, handle: u64):
    optix.set_payload(0, 0)


@ox.closest_hit(name="shade")
def closest(image: IMAGE, handle: u64):
    u, v = optix.triangle_barycentrics()
    color = optix.sbt_data(f32, 4)
    optix.set_payload(0, optix.primitive_index() + 1)
    optix.set_payload(1, u32(optix.ray_tmax() * color[0] + u + v))


@ox.any_hit
def skip_backfaces():
    if optix.hit_kind() == optix.HIT_KIND_TRIANGLE_BACK_FACE:
        optix.ignore_intersection()
    else:
        optix.terminate_ray()


@ox.intersection
def sphere_hit():
    ox_, oy, oz = optix.object_ray_origin()
    dx, dy, dz = optix.object_ray_direction()
    b = ox_ * dx + oy * dy + oz * dz
    t = -b
    if t > optix.ray_tmin():
        optix.report_intersection(t, 0, u32(1), u32(2), u32(3))


@ox.exception
def on_exception(image: IMAGE, handle: u64):
    x, y, _ = optix.launch_index()
    image[y, x] = f32(optix.exception_code())


# Everything a hit has: OptiX allows these only in closest-hit (some also in any-hit and
# intersection) programs, and refuses the module otherwise.
@ox.closest_hit
def instanced():
    n = optix.transform_list_size()
    if n > 0:
        h = optix.transform_list_handle(0)
        if optix.transform_type(h) == 4:
            m = optix.instance_transform(h)
            inv = optix.instance_inverse_transform(h)
            optix.set_payload(2, u32(m[3] + inv[7]))
    optix.set_payload(3, optix.instance_id() + optix.instance_index() + optix.sbt_gas_index())
    optix.set_payload(4, optix.get_attribute(1) + optix.ray_flags())
    g = optix.gas_traversable_handle() + optix.sbt_data_pointer()
    optix.set_payload(5, u32(g))
    wx, wy, wz = optix.world_ray_origin()
    vx, vy, vz = optix.world_ray_direction()
    optix.set_payload(6, u32(wx + wy + wz + vx + vy + vz + optix.ray_time()))
    optix.set_payload(7, optix.get_payload(7))
    optix.throw_exception(7)


@ox.direct_callable
def tint():
    x, _, _ = optix.launch_index()
    weight = optix.sbt_data(f32, 1)
    if weight[0] < 0.0 and x == 0:
        optix.throw_exception(5)


ALL = [render, background, closest, skip_backfaces, sphere_hit, on_exception, instanced,
       tint]


@pytest.fixture(scope="module")
def compiled():
    return ox.compile_ptx(ALL, arch="sm_90")


def _entry_body(ptx: str, name: str) -> str:
    start = ptx.index(f".entry {name}(")
    end = ptx.find(".entry ", start + 1)
    return ptx[start:end if end > 0 else len(ptx)]


def test_entry_names_are_optix_program_names(compiled):
    ptx = compiled.ptx
    for name in ("__raygen__render", "__miss__background", "__closesthit__shade",
                 "__anyhit__skip_backfaces", "__intersection__sphere_hit",
                 "__exception__on_exception", "__closesthit__instanced",
                 "__direct_callable__tint"):
        assert re.search(rf"\.visible \.entry {name}\(\s*\)", ptx), name
    assert list(compiled.entries) == [p.entry_name for p in ALL]
    assert ".target sm_90" in ptx


def test_launch_params_are_one_visible_const_variable(compiled):
    # Array[f32, 2]: pointer, 2 shapes, 2 strides; then the u64 handle: 6 x 8 bytes.
    assert re.search(r"\.visible \.const \.align 16 \.b8 cupric_launch_params\[48\];",
                     compiled.ptx)
    assert compiled.params_dtype.itemsize == 48
    assert [compiled.params_dtype.fields[f"p{k}"][1] for k in range(6)] == \
        [0, 8, 16, 24, 32, 40]
    raygen = _entry_body(compiled.ptx, "__raygen__render")
    assert "ld.const" in raygen and "cupric_launch_params" in raygen


def test_device_functions_lower_to_optix_calls(compiled):
    ptx = compiled.ptx
    raygen = _entry_body(ptx, "__raygen__render")
    for axis in "xyz":
        assert f"_optix_get_launch_index_{axis}, ();" in raygen
        assert f"_optix_get_launch_dimension_{axis}, ();" in raygen
    closest_body = _entry_body(ptx, "__closesthit__shade")
    for call in ("_optix_get_triangle_barycentrics", "_optix_get_sbt_data_ptr_64",
                 "_optix_read_primitive_idx", "_optix_get_ray_tmax", "_optix_set_payload"):
        assert call in closest_body, call
    anyhit = _entry_body(ptx, "__anyhit__skip_backfaces")
    for call in ("_optix_get_hit_kind", "_optix_ignore_intersection",
                 "_optix_terminate_ray"):
        assert call in anyhit, call
    isect = _entry_body(ptx, "__intersection__sphere_hit")
    assert "_optix_report_intersection_3, (" in isect
    assert "_optix_get_object_ray_origin_x" in isect and "_optix_get_ray_tmin" in isect
    assert "_optix_get_exception_code" in _entry_body(ptx, "__exception__on_exception")
    callable_body = _entry_body(ptx, "__closesthit__instanced")
    for call in ("_optix_get_transform_list_size", "_optix_get_transform_list_handle",
                 "_optix_get_transform_type_from_handle",
                 "_optix_get_instance_transform_from_handle",
                 "_optix_get_instance_inverse_transform_from_handle",
                 "_optix_read_instance_id", "_optix_read_instance_idx",
                 "_optix_read_sbt_gas_idx", "_optix_get_attribute_1", "_optix_get_ray_flags",
                 "_optix_get_gas_traversable_handle", "_optix_get_world_ray_origin_x",
                 "_optix_get_world_ray_direction_z", "_optix_get_ray_time",
                 "_optix_get_payload", "_optix_throw_exception_0"):
        assert call in callable_body, call
    tint_body = _entry_body(ptx, "__direct_callable__tint")
    for call in ("_optix_get_launch_index_x", "_optix_get_sbt_data_ptr_64",
                 "_optix_throw_exception_0"):
        assert call in tint_body, call


def test_trace_passes_all_operands(compiled):
    raygen = _entry_body(compiled.ptx, "__raygen__render")
    match = re.search(r"call \(([^)]*)\), _optix_trace_typed_32, \(([^)]*)\);", raygen)
    assert match, raygen
    outs = [s.strip() for s in match.group(1).split(",")]
    ins = [s.strip() for s in match.group(2).split(",")]
    assert len(outs) == 32
    # type, handle, 9 floats, mask, flags, sbt offset, stride, miss index, count, 32 payloads
    assert len(ins) == 2 + 9 + 6 + 32
    assert ins[1].startswith("%rd")
    assert all(r.startswith("%f") for r in ins[2:11])


def test_every_optix_intrinsic_has_a_lowering_rule():
    import cupric.compiler.lowering.optix  # noqa: F401  (registers the rules)
    from cupric.compiler.lowering.registry import RULES
    missing = sorted(name for name in optix.INTRINSICS if name not in RULES)
    assert not missing
    assert all(len(i.doc) > 20 for i in optix.INTRINSICS.values())
    # Kept out of the kernel-wide registry, which promises simulator implementations.
    from cupric.device import REGISTRY
    assert not set(optix.INTRINSICS) & set(REGISTRY)


def test_intrinsics_refuse_to_run_outside_programs():
    with pytest.raises(optix.OptixProgramError, match="simulator"):
        optix.launch_index()
    with pytest.raises(TypeError, match="runs inside Pipeline.launch"):
        render(None, 0)


def test_plain_kernels_refuse_optix_functions():
    import cupric
    import cupric.compiler.lowering.optix  # noqa: F401  (the rules are known)

    @cupric.kernel
    def kernel(out: Array[i32, 1]):
        x, y, z = optix.launch_index()
        out[0] = x

    with pytest.raises(CompileError, match="only in OptiX programs"):
        kernel.inspect_ptx(arch="sm_90")


def test_program_decorators():
    @ox.raygen(name="camera")
    def rg():
        pass

    assert rg.entry_name == "__raygen__camera" and rg.kind == "raygen"
    assert ox.program("miss")(rg.py_func).entry_name == "__miss__rg"
    with pytest.raises(ValueError, match="kind"):
        ox.program("shadow")
    with pytest.raises(ValueError, match="C identifier"):
        ox.raygen(rg.py_func, name="not valid")
    with pytest.raises(ValueError, match="two programs"):
        ox.compile_ptx([rg, rg])


def _compile_error(source_func, match):
    with pytest.raises(CompileError, match=match):
        ox.compile_ptx([ox.raygen(source_func)], arch="sm_90")


def test_compile_errors_are_located():
    def bad_payload_index():
        optix.get_payload(40)

    def bad_origin(h: u64):
        optix.trace(h, 1.0, (0.0, 0.0, 1.0), 0.0, 1.0)

    def bad_keyword(h: u64):
        optix.trace(h, (0.0, 0.0, 0.0), (0.0, 0.0, 1.0), 0.0, 1.0, ray_color=1)

    def returns_value():
        return 1

    def too_many_attributes():
        optix.report_intersection(1.0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9)

    _compile_error(bad_payload_index, "payload index")
    _compile_error(bad_origin, "origin")
    _compile_error(bad_keyword, "unknown keyword")
    _compile_error(returns_value, "must not return")
    _compile_error(too_many_attributes, "8 attributes")


def test_trace_without_payload_and_with_one():
    @ox.raygen
    def none_or_one(out: Array[u32, 1], h: u64):
        optix.trace(h, (0.0, 0.0, 0.0), (0.0, 0.0, 1.0), 0.0, 1.0)
        out[0] = optix.trace(h, (0.0, 0.0, 0.0), (0.0, 0.0, 1.0), 0.0, 1.0, 5,
                             sbt_offset=1, sbt_stride=2, miss_index=1, visibility_mask=3)

    ptx = ox.compile_ptx([none_or_one], arch="sm_90").ptx
    assert ptx.count("_optix_trace_typed_32") == 2


def test_params_must_agree_or_be_given():
    @ox.miss
    def other(image: Array[f64_, 1], handle: u64):
        pass

    with pytest.raises(TypeError, match="annotated"):
        ox.compile_ptx([render, other])

    @ox.miss
    def unannotated(image, handle):
        optix.set_payload(0, 1)

    with pytest.raises(TypeError, match="annotate every parameter"):
        ox.compile_ptx([unannotated])
    compiled = ox.compile_ptx([unannotated], params="Array[f32, 2, 'C'], u64", arch="sm_90")
    assert compiled.param_types == (ArrayType(f32, 2, "C"), u64)


def test_launch_params_dtype_matches_the_c_layout():
    from cupric.types import bool_, u8
    dtype = launch_params_dtype((u8, f32, bool_, ArrayType(i32, 1, "C"), u64))
    # u8@0, f32@4, bool(i8)@8, ptr@16, shape@24, stride@32, u64@40
    assert [dtype.fields[f"p{k}"][1] for k in range(7)] == [0, 4, 8, 16, 24, 32, 40]
    assert dtype.itemsize == 48
    assert launch_params_dtype(()).itemsize == 0


def test_every_optix_intrinsic_says_where_it_may_be_called():
    assert set(optix.AVAILABILITY) == set(optix.INTRINSICS)
    assert all(kinds and kinds <= set(optix.PROGRAM_KINDS)
               for kinds in optix.AVAILABILITY.values())
    assert set(optix.PROGRAM_KINDS) == set(ox.program.__globals__["PROGRAM_KINDS"])


def test_a_function_outside_its_program_kinds_is_a_compile_error():
    # OptiX refuses such a module as a whole (OPTIX_ERROR_INVALID_FUNCTION_USE, "Illegal
    # call to optixGetObjectRayOrigin in function __closesthit__..."): cupric says where.
    @ox.closest_hit
    def object_ray_in_closest_hit():
        ox_, oy, oz = optix.object_ray_origin()
        optix.set_payload(0, u32(ox_))

    with pytest.raises(CompileError) as info:
        ox.compile_ptx([object_ray_in_closest_hit], arch="sm_90")
    text = str(info.value)
    assert "object_ray_origin() cannot be called in a closest-hit program" in text
    assert "any-hit and intersection programs only" in text
    assert "world_to_object_point(world_ray_origin())" in text  # the hint
    assert "optix.object_ray_origin()" in text.splitlines()[1]  # the source line

    @ox.any_hit
    def trace_in_any_hit(handle: u64):
        optix.trace(handle, (0.0, 0.0, 0.0), (0.0, 0.0, 1.0), 0.0, 1.0)

    with pytest.raises(CompileError, match="trace\\(\\) cannot be called in an any-hit"):
        ox.compile_ptx([trace_in_any_hit], arch="sm_90")

    # Through a device function called by the program, too.
    @cupric.device_function
    def helper():
        return optix.exception_code()

    @ox.raygen
    def code_in_raygen(image: IMAGE, handle: u64):
        image[0, 0] = f32(helper())

    with pytest.raises(CompileError, match="exception_code\\(\\) cannot be called in a "
                                           "ray-generation program"):
        ox.compile_ptx([code_in_raygen], arch="sm_90")


def test_fit_ptx_version():
    ptx = "//\n.version 9.5\n.target sm_90\n"
    assert fit_ptx_version(ptx, (9, 0)) == "//\n.version 9.0\n.target sm_90\n"
    assert fit_ptx_version(ptx, (9, 7)) == ptx
    assert fit_ptx_version(ptx, None) == ptx
    with pytest.raises(ValueError):
        fit_ptx_version(".target sm_90\n", (9, 0))


def test_transforms_walk_the_transform_list():
    # An any-hit program: OptiX gives object-space rays only to any-hit and intersection.
    @ox.any_hit
    def to_world():
        ox_, oy, oz = optix.object_ray_origin()
        wx, wy, wz = optix.object_to_world_point((ox_, oy, oz))
        nx, ny, nz = optix.world_to_object_normal((0.0, 0.0, 1.0))
        vx, vy, vz = optix.object_to_world_vector(optix.object_ray_direction())
        a, b, c = optix.world_to_object_point((wx, wy, wz))
        d, e, f = optix.object_to_world_normal((nx, ny, nz))
        g, h, k = optix.world_to_object_vector((vx, vy, vz))
        optix.set_payload(0, u32(wx + ny + vz + a + e + k))

    ptx = ox.compile_ptx([to_world], arch="sm_90").ptx
    body = _entry_body(ptx, "__anyhit__to_world")
    assert body.count("_optix_get_transform_list_size") == 6
    assert body.count("_optix_get_transform_list_handle") == 6
    assert body.count("_optix_get_static_transform_from_handle") == 6
    # Forward matrices for object-to-world points/vectors and world-to-object normals.
    assert body.count("_optix_get_instance_transform_from_handle") == 3
    assert body.count("_optix_get_instance_inverse_transform_from_handle") == 3
    assert body.count("trap;") == 6  # motion transforms
    with pytest.raises(CompileError, match="3-tuple"):
        @ox.closest_hit
        def bad():
            optix.object_to_world_point(1.0)
        ox.compile_ptx([bad], arch="sm_90")


def test_compile_is_remembered(compiled):
    assert ox.compile_ptx(ALL, arch="sm_90") is compiled

