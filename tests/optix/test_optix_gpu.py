"""cupric.optix on the GPU lane: a device context, modules compiled from cupric
programs, pipelines, shader binding tables and acceleration structures, rendering small
images compared with NumPy references (and with a plain cupric kernel tracing the same
triangles); compaction, refit, instancing, custom primitives, SBT data; and the AI
denoiser lowering the error of a noisy image. Outputs are poisoned with NaN first.

Run on a GPU machine with ``python3 -m pytest -q -m gpu tests/optix``.
"""

from __future__ import annotations

import numpy as np
import pytest

import cupric
import cupric.optix.api as ox
from cupric import runtime as rt
from cupric.device import bits, grid, optix
from cupric.types import Array, f32, u32, u64

pytestmark = pytest.mark.gpu

W, H = 48, 32
IMAGE = Array[f32, 3, "C"]


# -- programs ------------------------------------------------------------------------------------

@ox.raygen
def camera(image: IMAGE, handle: u64):
    x, y, _ = optix.launch_index()
    w, h, _ = optix.launch_dimensions()
    px = (x + 0.5) / w * 2.0 - 1.0
    py = (y + 0.5) / h * 2.0 - 1.0
    hit, u, v = optix.trace(handle, (px, py, -1.0), (0.0, 0.0, 1.0), 0.0, 100.0,
                            u32(0), u32(0), u32(0))
    image[y, x, 0] = f32(hit)
    image[y, x, 1] = bits.bitcast(u, f32)
    image[y, x, 2] = bits.bitcast(v, f32)


@ox.miss
def nothing(image: IMAGE, handle: u64):
    optix.set_payload(0, 0)
    optix.set_payload(1, bits.bitcast(f32(-1.0), u32))
    optix.set_payload(2, bits.bitcast(f32(-1.0), u32))


@ox.closest_hit
def barycentrics(image: IMAGE, handle: u64):
    u, v = optix.triangle_barycentrics()
    optix.set_payload(0, optix.primitive_index() + 1)
    optix.set_payload(1, bits.bitcast(u, u32))
    optix.set_payload(2, bits.bitcast(v, u32))


@ox.closest_hit
def which_instance(image: IMAGE, handle: u64):
    optix.set_payload(0, optix.instance_id() + 1)
    optix.set_payload(1, bits.bitcast(optix.ray_tmax(), u32))
    optix.set_payload(2, bits.bitcast(f32(optix.instance_index()), u32))


@ox.closest_hit
def world_hit(image: IMAGE, handle: u64):
    # The world ray carried into object space, its hit point there carried back to world
    # space, must be where the world-space ray is at tmax (OptiX leaves object-space
    # directions unnormalized, so t is the same in both spaces). A closest-hit program
    # has no object-space ray of its own: OptiX allows optixGetObjectRayOrigin/Direction
    # only in intersection and any-hit programs.
    t = optix.ray_tmax()
    rx, ry, rz = optix.world_ray_origin()
    sx, sy, sz = optix.world_ray_direction()
    ox_, oy, oz = optix.world_to_object_point((rx, ry, rz))
    dx, dy, dz = optix.world_to_object_vector((sx, sy, sz))
    wx, wy, wz = optix.object_to_world_point((ox_ + t * dx, oy + t * dy, oz + t * dz))
    optix.set_payload(0, optix.instance_id() + 1)
    optix.set_payload(1, bits.bitcast(wx - (rx + t * sx), u32))
    back_x, back_y, back_z = optix.world_to_object_point((wx, wy, wz))
    optix.set_payload(2, bits.bitcast(back_y - (oy + t * dy), u32))


@ox.closest_hit
def which_sphere(image: IMAGE, handle: u64):
    # primitive_index, not instance_id: traced as a lone GAS (no instance above the hit),
    # OptiX 9.0 on driver 580 returned instance_id 0xFFFFFFFF, not the 0 that its API
    # reference states (measured on an H200 with built-in spheres).
    optix.set_payload(0, optix.primitive_index() + 1)
    optix.set_payload(1, bits.bitcast(optix.ray_tmax(), u32))
    optix.set_payload(2, bits.bitcast(f32(optix.instance_index()), u32))


@ox.closest_hit
def sbt_color(image: IMAGE, handle: u64):
    color = optix.sbt_data(f32, 2)
    optix.set_payload(0, 1)
    optix.set_payload(1, bits.bitcast(color[0], u32))
    optix.set_payload(2, bits.bitcast(color[1], u32))


@ox.intersection
def unit_sphere():
    # A sphere of radius 0.5 at the origin of object space; reports the entry distance.
    ox_, oy, oz = optix.object_ray_origin()
    dx, dy, dz = optix.object_ray_direction()
    a = dx * dx + dy * dy + dz * dz
    b = ox_ * dx + oy * dy + oz * dz
    c = ox_ * ox_ + oy * oy + oz * oz - 0.25
    disc = b * b - a * c
    if disc >= 0.0:
        t = (-b - disc ** 0.5) / a
        optix.report_intersection(t, 0, bits.bitcast(f32(t), u32))


@ox.closest_hit
def sphere_depth(image: IMAGE, handle: u64):
    optix.set_payload(0, 1)
    optix.set_payload(1, optix.get_attribute(0))
    optix.set_payload(2, bits.bitcast(optix.ray_tmax(), u32))


# The same scene through another backend: a plain CUDA kernel testing every triangle
# (rays along +z from z = -1, so t is the triangle's depth + 1).
@cupric.kernel
def brute_force(image: IMAGE, vertices: Array[f32, 2, "C"], triangles: Array[u32, 2, "C"]):
    x, y = grid(2)
    if x >= image.shape[1] or y >= image.shape[0]:
        return
    px = f32((x + 0.5) / image.shape[1] * 2.0 - 1.0)
    py = f32((y + 0.5) / image.shape[0] * 2.0 - 1.0)
    best = f32(1e30)
    image[y, x, 0] = 0.0
    image[y, x, 1] = -1.0
    image[y, x, 2] = -1.0
    for k in range(triangles.shape[0]):
        a = triangles[k, 0]
        b = triangles[k, 1]
        c = triangles[k, 2]
        e1x = vertices[b, 0] - vertices[a, 0]
        e1y = vertices[b, 1] - vertices[a, 1]
        e2x = vertices[c, 0] - vertices[a, 0]
        e2y = vertices[c, 1] - vertices[a, 1]
        det = e1x * e2y - e1y * e2x
        sx = px - vertices[a, 0]
        sy = py - vertices[a, 1]
        u = (sx * e2y - sy * e2x) / det
        v = (e1x * sy - e1y * sx) / det
        t = vertices[a, 2] + 1.0
        if u >= 0.0 and v >= 0.0 and u + v <= 1.0 and t < best:
            best = t
            image[y, x, 0] = f32(k + 1)
            image[y, x, 1] = u
            image[y, x, 2] = v


# -- references -----------------------------------------------------------------------------------

def rays():
    """Origins and direction of the camera's rays, as the raygen program makes them."""
    x = (np.arange(W) + 0.5) / W * 2.0 - 1.0
    y = (np.arange(H) + 0.5) / H * 2.0 - 1.0
    px, py = np.meshgrid(x, y)
    return px.astype(np.float32).astype(np.float64), py.astype(np.float32).astype(np.float64)


def reference_triangles(vertices, triangles):
    """(hit primitive + 1, u, v) per pixel for rays along +z (float64 Moller-Trumbore),
    and a mask of pixels too close to an edge to compare exactly."""
    px, py = rays()
    out = np.zeros((H, W, 3))
    out[..., 1:] = -1.0
    best = np.full((H, W), np.inf)
    edge = np.zeros((H, W), dtype=bool)
    origin = np.stack([px, py, np.full_like(px, -1.0)], axis=-1)
    direction = np.array([0.0, 0.0, 1.0])
    for index, (a, b, c) in enumerate(triangles):
        v0, v1, v2 = (np.asarray(vertices[k], dtype=np.float64) for k in (a, b, c))
        e1, e2 = v1 - v0, v2 - v0
        p = np.cross(direction, e2)
        det = e1 @ p
        s = origin - v0
        u = (s @ p) / det
        q = np.cross(s, e1)
        v = (q @ direction) / det
        t = (q @ e2) / det
        inside = (u >= 0) & (v >= 0) & (u + v <= 1) & (t > 0)
        margin = np.minimum(np.minimum(u, v), 1 - u - v)
        edge |= np.abs(margin) < 1e-4
        closer = inside & (t < best)
        best[closer] = t[closer]
        out[closer, 0] = index + 1
        out[closer, 1] = u[closer]
        out[closer, 2] = v[closer]
    return out, edge


def poisoned_image():
    return rt.to_device(np.full((H, W, 3), np.nan, dtype=np.float32))


# -- fixtures -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def ctx():
    from cupric.optix import lib
    if not lib.is_available():
        pytest.skip("the driver has no OptiX runtime for ABI "
                    f"{lib.abi_version()} (libnvoptix)")
    device = rt.Device(0)
    device.make_current()
    context = ox.create_context(device, ox.ContextOptions(validation=True))
    yield context
    context.close()


PIPELINE_OPTIONS = ox.PipelineCompileOptions(num_payload_values=3, num_attribute_values=2,
                                             primitive_types=("triangle", "custom"))


@pytest.fixture(scope="module")
def module(ctx):
    return ctx.compile_module([camera, nothing, barycentrics, which_instance, world_hit,
                               sbt_color,
                               unit_sphere, sphere_depth],
                              ox.ModuleCompileOptions(), PIPELINE_OPTIONS)


def render(ctx, module, closest, handle, *, intersection=None, hit_data=None,
           data_dtype=None):
    groups = [ctx.raygen_group(module, camera), ctx.miss_group(module, nothing),
              ctx.hit_group(module, closest_hit=closest, intersection=intersection)]
    with ctx.create_pipeline(groups, PIPELINE_OPTIONS,
                             ox.PipelineLinkOptions(max_trace_depth=1)) as pipeline:
        hit_records = (ox.make_records(groups[2]) if hit_data is None
                       else ox.make_records(groups[2], hit_data, dtype=data_dtype))
        with ox.create_sbt(raygen=ox.make_records(groups[0]),
                           miss=ox.make_records(groups[1]),
                           hitgroup=hit_records) as sbt:
            image = poisoned_image()
            pipeline.launch(sbt, (W, H), image, handle)
            rt.synchronize()
            result = image.to_numpy()
    for group in groups:
        group.close()
    return result


def assert_matches(result, expected, edge):
    assert not np.isnan(result).any(), "a pixel was never written"
    keep = ~edge
    assert np.array_equal(result[keep, 0], expected[keep, 0])
    np.testing.assert_allclose(result[keep, 1:], expected[keep, 1:], atol=2e-5)
    assert (expected[..., 0] > 0).sum() > W * H // 8  # the scene is visible


TRIANGLE = np.array([[-0.6, -0.7, 0.0], [0.7, -0.5, 0.0], [0.1, 0.8, 0.0]], dtype=np.float32)
QUAD = np.array([[-0.8, -0.8, 0.2], [0.8, -0.8, 0.2], [0.8, 0.8, 0.2], [-0.8, 0.8, 0.2]],
                dtype=np.float32)
QUAD_INDICES = np.array([[0, 1, 2], [0, 2, 3]], dtype=np.uint32)


# -- tests ----------------------------------------------------------------------------------------

def test_context(ctx):
    assert ctx.get_property("max_trace_depth") >= 31
    assert ctx.get_property("max_instances_per_ias") > 1000
    assert isinstance(ctx.log, list)


def test_module_compiles_cupric_ptx(ctx, module):
    assert module.compiled.params_dtype.itemsize == 8 * (1 + 3 + 3) + 8
    assert "__raygen__camera" in module.ptx


def test_triangle_gas_render_matches_numpy(ctx, module):
    vertices = rt.to_device(TRIANGLE)
    with ctx.build_accel([ox.TriangleInput(vertices)]) as gas:
        result = render(ctx, module, barycentrics, gas.handle)
    expected, edge = reference_triangles(TRIANGLE, [(0, 1, 2)])
    assert_matches(result, expected, edge)


def test_render_matches_a_plain_cupric_kernel(ctx, module):
    """The same scene through another backend: `brute_force`, a plain cupric kernel."""
    vertices = rt.to_device(QUAD)
    indices = rt.to_device(QUAD_INDICES)
    with ctx.build_accel([ox.TriangleInput(vertices, indices)]) as gas:
        optix_image = render(ctx, module, barycentrics, gas.handle)
    kernel_image = poisoned_image()
    brute_force[(W // 16, H // 16), (16, 16)](kernel_image, vertices, indices)
    rt.synchronize()
    expected, edge = reference_triangles(QUAD, QUAD_INDICES)
    assert_matches(optix_image, expected, edge)
    assert_matches(kernel_image.to_numpy(), expected, edge)


def test_compaction_keeps_the_image(ctx, module):
    vertices = rt.to_device(QUAD)
    indices = rt.to_device(QUAD_INDICES)
    options = ox.AccelBuildOptions(allow_compaction=True)
    gas = ctx.build_accel([ox.TriangleInput(vertices, indices)], options)
    size = gas.compacted_size()
    assert 0 < size <= gas.nbytes
    compact = gas.compact()
    assert compact.nbytes <= gas.nbytes
    before = render(ctx, module, barycentrics, gas.handle)
    after = render(ctx, module, barycentrics, compact.handle)
    assert np.array_equal(before, after)
    expected, edge = reference_triangles(QUAD, QUAD_INDICES)
    assert_matches(after, expected, edge)
    if compact is not gas:
        compact.close()
    gas.close()


def test_update_refits_moved_vertices(ctx, module):
    vertices = rt.to_device(TRIANGLE)
    gas = ctx.build_accel([ox.TriangleInput(vertices)], ox.AccelBuildOptions(allow_update=True))
    moved = TRIANGLE + np.array([0.25, -0.1, 0.0], dtype=np.float32)
    vertices.copy_from(moved)
    gas.update()
    result = render(ctx, module, barycentrics, gas.handle)
    expected, edge = reference_triangles(moved, [(0, 1, 2)])
    assert_matches(result, expected, edge)
    gas.close()


def test_instances(ctx, module):
    vertices = rt.to_device(TRIANGLE * np.float32(0.5))
    gas = ctx.build_accel([ox.TriangleInput(vertices)])
    transforms = np.zeros((2, 3, 4), dtype=np.float32)
    transforms[:, :, :3] = np.eye(3)
    transforms[0, :, 3] = [-0.45, 0.0, 0.5]
    transforms[1, :, 3] = [0.45, 0.0, 0.25]
    instances = rt.to_device(ox.make_instances([gas, gas], transforms,
                                                instance_ids=[10, 20]))
    ias = ctx.build_accel([ox.InstanceInput(instances)])
    result = render(ctx, module, which_instance, ias.handle)
    assert not np.isnan(result).any()
    for k, shift in enumerate(([-0.45, 0.0, 0.0], [0.45, 0.0, 0.0])):
        moved = TRIANGLE * np.float32(0.5) + np.array(shift, dtype=np.float32)
        expected, edge = reference_triangles(moved, [(0, 1, 2)])
        inside = (expected[..., 0] > 0) & ~edge
        assert inside.sum() > 20
        assert (result[inside, 0] == [11, 21][k]).all()
        assert (result[inside, 2] == k).all()
        np.testing.assert_allclose(result[inside, 1], [1.5, 1.25][k], rtol=1e-6)
    # Object/world transforms: the object-space hit carried to world space lands on the
    # world ray (and back).
    scaled = transforms.copy()
    scaled[1, :, :3] = np.diag([1.5, 0.5, 1.0])
    instances.copy_from(ox.make_instances([gas, gas], scaled, instance_ids=[10, 20]))
    ias2 = ctx.build_accel([ox.InstanceInput(instances)])
    result = render(ctx, module, world_hit, ias2.handle)
    hit = result[..., 0] > 0
    assert hit.sum() > 40 and set(np.unique(result[hit, 0])) == {11, 21}
    np.testing.assert_allclose(result[hit, 1], 0.0, atol=1e-5)
    np.testing.assert_allclose(result[hit, 2], 0.0, atol=1e-5)
    ias2.close()
    ias.close()
    gas.close()


def test_custom_primitive_sphere(ctx, module):
    aabbs = rt.to_device(np.array([[-0.5, -0.5, -0.5, 0.5, 0.5, 0.5]], dtype=np.float32))
    with ctx.build_accel([ox.CustomPrimitiveInput(aabbs)]) as gas:
        result = render(ctx, module, sphere_depth, gas.handle, intersection=unit_sphere)
    px, py = rays()
    r2 = px * px + py * py
    inside = r2 < 0.25 - 1e-4
    outside = r2 > 0.25 + 1e-4
    assert (result[inside, 0] == 1).all() and (result[outside, 0] == 0).all()
    depth = 1.0 - np.sqrt(np.maximum(0.25 - r2, 0.0))
    np.testing.assert_allclose(result[inside, 1], depth[inside], atol=1e-5)
    np.testing.assert_allclose(result[inside, 2], depth[inside], atol=1e-5)


def test_sbt_record_data_reaches_the_program(ctx, module):
    vertices = rt.to_device(TRIANGLE)
    data = np.array([(0.25, 0.75)], dtype=[("a", "f4"), ("b", "f4")])
    with ctx.build_accel([ox.TriangleInput(vertices)]) as gas:
        result = render(ctx, module, sbt_color, gas.handle, hit_data=data)
    expected, edge = reference_triangles(TRIANGLE, [(0, 1, 2)])
    inside = (expected[..., 0] > 0) & ~edge
    assert (result[inside, 1] == 0.25).all() and (result[inside, 2] == 0.75).all()


@pytest.mark.parametrize("model, guides", [("hdr", False), ("hdr", True), ("ldr", False)])
def test_denoiser_lowers_error(ctx, rng, model, guides):
    height, width = 64, 96
    y, x = np.mgrid[0:height, 0:width]
    clean = np.stack([0.5 + 0.4 * np.sin(x / 9.0), 0.5 + 0.4 * np.cos(y / 7.0),
                      np.full_like(x, 0.5, dtype=np.float64)], axis=-1).astype(np.float32)
    noisy = np.clip(clean + rng.normal(0, 0.08, clean.shape), 0, 1).astype(np.float32)
    options = ox.DenoiserOptions(model=model, guide_albedo=guides, guide_normal=guides)
    try:
        denoiser = ctx.create_denoiser(options)
    except ox.DenoiserUnavailableError as exc:
        # The driver install lacks the denoiser's weights file: the environment cannot
        # run the denoiser at all, which is not a cupric failure. The error names the file.
        pytest.skip(f"OptiX denoiser unavailable on this machine: {exc.description}")
    with denoiser:
        denoiser.setup(width, height)
        color = rt.to_device(noisy)
        output = rt.to_device(np.full_like(noisy, np.nan))
        extra = {}
        if guides:
            extra["albedo"] = rt.to_device(clean)
            normal = np.zeros_like(clean)
            normal[..., 2] = 1.0
            extra["normal"] = rt.to_device(normal)
        denoiser.invoke(color, output, **extra)
        rt.synchronize()
        result = output.to_numpy()
    assert not np.isnan(result).any()
    error_before = np.mean((noisy - clean) ** 2)
    error_after = np.mean((result - clean) ** 2)
    assert error_after < 0.5 * error_before, (error_before, error_after)


def test_closing_order_is_safe(ctx):
    # Objects keep what they use alive: dropping the module before its group and
    # pipeline must not destroy it first.
    import gc
    import weakref
    module = ctx.compile_module([camera, nothing], pipeline_options=PIPELINE_OPTIONS)
    group = ctx.raygen_group(module, camera)
    module_ref = weakref.ref(module)
    del module
    gc.collect()
    # The group kept its module alive and open, so OptiX still packs its header.
    assert module_ref() is not None and not module_ref().closed
    assert group.modules == (module_ref(),)
    header = group.pack_header()
    assert len(header) == 32 and any(header)
    pipeline = ctx.create_pipeline([group, ctx.miss_group()], PIPELINE_OPTIONS)
    pipeline.close()
    assert pipeline.closed and not group.closed
    assert group.pack_header() == header  # closing the pipeline left the group usable
    group.close()
    assert group.closed
    with pytest.raises(rt.ClosedError):
        group.pack_header()


def test_closing_the_context_first_is_safe(ctx):
    """Closing a context closes what was made from it (newest first), and objects that
    die afterwards, or died before without being released yet, never reach OptiX with a
    handle the context took with it (this crashed inside optixPipelineDestroy once)."""
    import gc
    context = ox.create_context(rt.Device(0))
    module = context.compile_module([camera, nothing], pipeline_options=PIPELINE_OPTIONS)
    dropped = context.compile_module([camera], pipeline_options=PIPELINE_OPTIONS)
    groups = [context.raygen_group(module, camera), context.miss_group(module, nothing)]
    pipeline = context.create_pipeline(groups, PIPELINE_OPTIONS)
    del dropped
    gc.collect()  # its release is queued, not run
    context.close()
    assert pipeline.closed and module.closed and all(g.closed for g in groups)
    with pytest.raises(rt.ClosedError):
        groups[0].pack_header()
    with pytest.raises(rt.ClosedError):
        pipeline.set_stack_sizes()
    del pipeline, groups, module
    gc.collect()
    rt.synchronize()  # drains queued releases


@pytest.mark.parametrize("instanced", [False, True], ids=["gas", "instance"])
def test_builtin_spheres(ctx, instanced):
    """Spheres through OptiX's built-in intersection module, traced directly and through
    an identity instance: which sphere each pixel hits and at what distance, against the
    analytic ones; pixels clear of both spheres miss."""
    options = ox.PipelineCompileOptions(num_payload_values=3, num_attribute_values=2,
                                        primitive_types=("sphere",))
    module = ctx.compile_module([camera, nothing, which_sphere], pipeline_options=options)
    spheres = ctx.builtin_intersection_module("sphere", pipeline_options=options)
    centers = rt.to_device(np.array([[-0.4, 0.0, 0.5], [0.45, 0.1, 0.2]], dtype=np.float32))
    radii = rt.to_device(np.array([0.3, 0.25], dtype=np.float32))
    gas = ctx.build_accel([ox.SphereInput(centers, radii)])
    groups = [ctx.raygen_group(module, camera), ctx.miss_group(module, nothing),
              ctx.hit_group(module, closest_hit=which_sphere, intersection_module=spheres)]
    pipeline = ctx.create_pipeline(groups, options)
    sbt = ox.create_sbt(raygen=ox.make_records(groups[0]), miss=ox.make_records(groups[1]),
                        hitgroup=ox.make_records(groups[2]))
    ias = instances = None
    if instanced:
        instances = rt.to_device(ox.make_instances([gas]))
        ias = ctx.build_accel([ox.InstanceInput(instances)])
    image = poisoned_image()
    pipeline.launch(sbt, (W, H), image, (ias or gas).handle)
    rt.synchronize()
    result = image.to_numpy()
    px, py = rays()
    depth = np.full((H, W), np.inf)
    nearest = np.zeros((H, W), dtype=np.int64)  # 1 + index of the sphere hit first
    clear = np.ones((H, W), dtype=bool)  # rays well away from both spheres
    for index, ((cx, cy, cz), r) in enumerate((((-0.4, 0.0, 0.5), 0.3),
                                              ((0.45, 0.1, 0.2), 0.25))):
        d2 = (px - cx) ** 2 + (py - cy) ** 2
        inside = d2 < r * r - 1e-3
        clear &= d2 > r * r + 1e-3
        t = (cz + 1.0) - np.sqrt(np.maximum(r * r - d2, 0.0))
        closer = inside & (t < depth)
        nearest[closer] = index + 1
        depth = np.where(closer, t, depth)
    hit = np.isfinite(depth)
    assert hit.sum() > 40 and clear.sum() > 40
    assert not np.isnan(result).any(), "a pixel was never written"
    # What each pixel saw, for a failure message: the miss program writes (0, -1, -1), the
    # closest-hit program (sphere + 1, t, instance index); a trace that ran neither
    # returns its (0, 0, 0).
    seen = {k: np.unique(result[hit, k], return_counts=True) for k in range(3)}
    assert np.array_equal(result[hit, 0], nearest[hit]), (
        f"wrong or no sphere hit: per-channel (values, counts) over the {hit.sum()} "
        f"pixels the spheres cover: {seen}")
    np.testing.assert_allclose(result[hit, 1], depth[hit], atol=1e-4)
    assert (result[hit, 2] == 0).all()  # the one instance, or none
    assert (result[clear, 0] == 0).all() and (result[clear, 1] == -1).all()
    for obj in (sbt, pipeline, *groups, *([ias] if ias else []), gas, spheres, module):
        obj.close()


def test_builtin_spheres_cull_exit_hits(ctx):
    """OptiX's built-in spheres report no hit for a ray that starts inside the sphere
    (exit hits are culled, as the OptiX guide says of curves and spheres; measured with
    OptiX 9.0, driver 580, on an H200), where a custom primitive reports whatever its
    intersection program reports. examples/path_tracer.py relies on this being so (its
    glass spheres, whose refracted rays start inside, go to a custom intersector), and
    docs/optix.md states it: if this test fails, OptiX changed, and both should too."""
    options = ox.PipelineCompileOptions(num_payload_values=3, num_attribute_values=2,
                                        primitive_types=("sphere",))
    module = ctx.compile_module([camera, nothing, which_sphere], pipeline_options=options)
    spheres = ctx.builtin_intersection_module("sphere", pipeline_options=options)
    # Every ray of `camera` starts at z = -1 within |x|, |y| < 1: inside this sphere.
    centers = rt.to_device(np.array([[0.0, 0.0, -1.0]], dtype=np.float32))
    radii = rt.to_device(np.array([3.0], dtype=np.float32))
    gas = ctx.build_accel([ox.SphereInput(centers, radii)])
    groups = [ctx.raygen_group(module, camera), ctx.miss_group(module, nothing),
              ctx.hit_group(module, closest_hit=which_sphere, intersection_module=spheres)]
    pipeline = ctx.create_pipeline(groups, options)
    sbt = ox.create_sbt(raygen=ox.make_records(groups[0]), miss=ox.make_records(groups[1]),
                        hitgroup=ox.make_records(groups[2]))
    image = poisoned_image()
    pipeline.launch(sbt, (W, H), image, gas.handle)
    rt.synchronize()
    result = image.to_numpy()
    hits = int((result[..., 0] != 0).sum())
    assert not np.isnan(result).any()
    assert hits == 0, (f"{hits} of {W * H} rays from inside a built-in sphere hit it: OptiX "
                       "now reports exit hits (update examples/path_tracer.py's "
                       "--optix-spheres and docs/optix.md)")
    for obj in (sbt, pipeline, *groups, gas, spheres, module):
        obj.close()
