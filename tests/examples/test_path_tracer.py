"""examples/path_tracer.py: one scene, three backends (simulator, CUDA kernel with a
software BVH, OptiX) sharing the shading device functions of examples/_tracer_shading.py.

CPU lane: the host BVH builder (every primitive in exactly one leaf, boxes containing
their children and primitives, depth within the device stack, its SAH cost below a
median-split tree's), BVH traversal against a brute-force loop over every primitive on
the simulator and against a float64 NumPy reference, the scenes' meshes, the materials'
scatter statistics, the CUDA kernel compiled for sm_90 with no local memory but the BVH
stack and no spills, a tiny render on the simulator (rays counted), the OptiX programs'
PTX entries, and the script without a GPU. GPU lane (``-m gpu``): cuda and optix images
agree at equal sample counts and trace the same number of rays (both scenes), the
OptiX sphere modes agree where they should, the cuda kernel agrees with the simulator,
the script runs every backend (and the denoiser where the driver has its weights).
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

import cupric
from cupric.device import float3, grid, local
from cupric.types import Array, f32, i32

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
SCRIPT = EXAMPLES / "path_tracer.py"


def _load_example():
    # The example is a script: load it from its path under a name that cannot clash.
    # Its helpers (_tracer_shading, _tracer_bvh, _common) are found through examples/,
    # which the script puts on sys.path itself.
    spec = importlib.util.spec_from_file_location("cupric_example_path_tracer", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


pt = _load_example()
import _tracer_bvh as tb  # noqa: E402  (on sys.path once the example is loaded)
import _tracer_shading as ts  # noqa: E402


def random_scene(rng, spheres=60, triangles=40) -> tuple[np.ndarray, np.ndarray]:
    centers = rng.uniform(-5, 5, size=(spheres, 3))
    radii = rng.uniform(0.05, 0.8, size=(spheres, 1))
    tri_centers = rng.uniform(-5, 5, size=(triangles, 1, 3))
    corners = tri_centers + rng.normal(0, 0.7, size=(triangles, 3, 3))
    return (np.concatenate([centers, radii], axis=1).astype(np.float32),
            corners.reshape(triangles, 9).astype(np.float32))


# -- the BVH builder -----------------------------------------------------------------------------

def _walk(bvh):
    """Yield (node, parent box or None, child box, leaf (first, count) or None) over the
    tree from the root, checking the layout as it goes."""
    todo = [(0, None)]
    seen = set()
    children = bvh.children
    boxes = bvh.child_boxes()
    while todo:
        node, parent_box = todo.pop()
        assert node not in seen, f"node {node} is reached twice"
        seen.add(node)
        for side in range(2):
            ref = int(children[node, side])
            if ref >= 0:
                assert 0 < ref < len(bvh.nodes)
                todo.append((ref, boxes[node, side]))
                yield node, parent_box, boxes[node, side], None
            else:
                yield node, parent_box, boxes[node, side], tb.decode_leaf(ref)
    assert seen == set(range(len(bvh.nodes))), "some nodes are unreachable"


@pytest.mark.parametrize("which", ["example", "random", "one", "two"])
def test_bvh_reaches_every_primitive_once(rng, which):
    if which == "example":
        scene = pt.make_scene()
        spheres, triangles = scene.spheres, scene.triangles
    elif which == "random":
        spheres, triangles = random_scene(rng)
    else:
        spheres, triangles = random_scene(rng, spheres=1 if which == "one" else 2,
                                          triangles=0)
    bvh = tb.build_bvh(spheres, triangles)
    total = len(spheres) + len(triangles)
    assert sorted(bvh.prim_ids.tolist()) == list(range(total))
    covered = []
    empty = 0
    for _node, _parent, box, leaf in _walk(bvh):
        if leaf is not None:
            first, count = leaf
            assert count <= tb.LEAF_SIZE
            empty += count == 0
            if count == 0:  # an empty child: inverted box, no ray enters
                assert np.all(box[:3] > box[3:])
            covered += bvh.prim_ids[first:first + count].tolist()
    assert sorted(covered) == list(range(total)), "each primitive in exactly one leaf"
    assert empty == (1 if total == 1 else 0)
    assert 1 <= bvh.depth <= tb.STACK_SIZE
    assert bvh.nodes.dtype == np.float32 and bvh.nodes.shape == (len(bvh.nodes), 16)


def test_bvh_bounds_contain_children_and_primitives(rng):
    spheres, triangles = random_scene(rng)
    bvh = tb.build_bvh(spheres, triangles)
    boxes = tb.primitive_bounds(spheres, triangles)

    def contains(outer, inner):
        return np.all(outer[:3] <= inner[:3]) and np.all(outer[3:] >= inner[3:])

    for node, parent_box, box, leaf in _walk(bvh):
        if parent_box is not None:
            assert contains(parent_box, box), node
        if leaf is not None:
            first, count = leaf
            for prim in bvh.prim_ids[first:first + count]:
                assert contains(box.astype(np.float64), boxes[prim]), (node, prim)


def _sah_cost(bvh):
    """The SAH cost of a tree recomputed from its nodes (traversal and intersection costs
    1 each, relative to the root's box)."""
    def half_area(box):
        d = np.maximum(box[3:].astype(np.float64) - box[:3], 0)
        return d[0] * d[1] + d[1] * d[2] + d[2] * d[0]

    boxes = bvh.child_boxes()
    root = np.concatenate([np.minimum(boxes[0, 0, :3], boxes[0, 1, :3]),
                           np.maximum(boxes[0, 0, 3:], boxes[0, 1, 3:])])
    cost = half_area(root) * tb.TRAVERSAL_COST
    for node, _parent, box, leaf in _walk(bvh):
        if leaf is None:
            cost += half_area(box) * tb.TRAVERSAL_COST
        else:
            cost += half_area(box) * leaf[1] * tb.INTERSECTION_COST
    return cost / half_area(root)


def test_bvh_sah_beats_median_splits(rng, monkeypatch):
    """Clustered primitives (three dense clumps, a few far outliers): the surface area
    heuristic's tree is cheaper than one of median splits, and its reported cost is the
    one recomputed from its nodes."""
    centers = np.concatenate([rng.normal(c, 0.3, size=(300, 3)) for c in
                              ((0, 0, 0), (8, 1, 0), (0, 6, -5))] + [rng.uniform(-20, 20, (12, 3))])
    corners = centers[:, None, :] + rng.normal(0, 0.05, size=(len(centers), 3, 3))
    triangles = corners.reshape(-1, 9).astype(np.float32)
    spheres = np.zeros((0, 4), np.float32)
    sah = tb.build_bvh(spheres, triangles)
    assert sah.sah_cost == pytest.approx(_sah_cost(sah), rel=1e-4)
    monkeypatch.setattr(tb, "SAH_DEPTH", 0)  # every split at the median
    median = tb.build_bvh(spheres, triangles)
    assert median.sah_cost == pytest.approx(_sah_cost(median), rel=1e-4)
    assert sah.sah_cost < 0.8 * median.sah_cost, (sah.sah_cost, median.sah_cost)


def test_bvh_refuses_bad_input():
    with pytest.raises(ValueError, match="at least one primitive"):
        tb.build_bvh(np.zeros((0, 4), np.float32), np.zeros((0, 9), np.float32))
    with pytest.raises(ValueError, match="leaf_size"):
        tb.build_bvh(np.ones((3, 4), np.float32), np.zeros((0, 9), np.float32), leaf_size=16)


# -- intersection: BVH traversal vs brute force --------------------------------------------------

@cupric.kernel
def trace_rays(origins: Array[f32, 2, "C"], directions: Array[f32, 2, "C"],
               hits: Array[i32, 2, "C"], depths: Array[f32, 2, "C"],
               nodes: Array[f32, 2, "C"], prim_ids: Array[i32, 1, "C"],
               spheres: Array[f32, 2, "C"], triangles: Array[f32, 2, "C"]):
    """Column 0: the BVH's closest hit; column 1: every primitive tested in turn."""
    i = grid(1)
    if i >= origins.shape[0]:
        return
    stack = local.array(tb.STACK_SIZE, i32)
    origin = float3(origins[i, 0], origins[i, 1], origins[i, 2])
    direction = float3(directions[i, 0], directions[i, 1], directions[i, 2])
    t, prim = tb.closest_hit(stack, nodes, prim_ids, spheres, triangles, origin, direction,
                             f32(ts.T_MIN), f32(ts.T_FAR))
    hits[i, 0] = prim
    depths[i, 0] = t
    best = f32(ts.T_FAR)
    found = i32(-1)
    count = spheres.shape[0]
    for k in range(count + triangles.shape[0]):
        if k < count:
            s = ts.hit_sphere(spheres, k, origin, direction, f32(ts.T_MIN), best)
        else:
            s = ts.hit_triangle(triangles, k - count, origin, direction, f32(ts.T_MIN), best)
        if s > f32(ts.T_MIN):
            best = s
            found = i32(k)
    hits[i, 1] = found
    depths[i, 1] = best


def numpy_closest(spheres, triangles, origins, directions):
    """float64 reference: (primitive or -1, t) of the nearest hit beyond T_MIN."""
    o = origins.astype(np.float64)
    d = directions.astype(np.float64)
    best = np.full(len(o), np.inf)
    prim = np.full(len(o), -1)
    for k, (cx, cy, cz, r) in enumerate(spheres.astype(np.float64)):
        oc = o - (cx, cy, cz)
        a = np.sum(d * d, axis=1)
        hb = np.sum(oc * d, axis=1)
        disc = hb * hb - a * (np.sum(oc * oc, axis=1) - r * r)
        root = np.sqrt(np.maximum(disc, 0))
        for t in ((-hb - root) / a, (-hb + root) / a):
            closer = (disc >= 0) & (t > ts.T_MIN) & (t < best)
            best[closer], prim[closer] = t[closer], k
    base = len(spheres)
    for k, tri in enumerate(triangles.astype(np.float64).reshape(-1, 3, 3)):
        e1, e2 = tri[1] - tri[0], tri[2] - tri[0]
        p = np.cross(d, e2)
        det = p @ e1
        s = o - tri[0]
        with np.errstate(divide="ignore", invalid="ignore"):
            u = np.sum(s * p, axis=1) / det
            q = np.cross(s, e1)
            v = np.sum(d * q, axis=1) / det
            t = (q @ e2) / det
        closer = (u >= 0) & (v >= 0) & (u + v <= 1) & (t > ts.T_MIN) & (t < best)
        best[closer], prim[closer] = t[closer], base + k
    return prim, best


@pytest.mark.parametrize("which", ["random", "mesh"])
def test_bvh_traversal_matches_brute_force(rng, which):
    if which == "random":
        spheres, triangles = random_scene(rng, spheres=24, triangles=16)
        n = 512
    else:
        # A closed lumpy mesh (1280 triangles: a deeper tree) around a few spheres.
        spheres, _ = random_scene(rng, spheres=6, triangles=0)
        triangles = pt.displaced_sphere((0.0, 0.0, 0.0), 4.0, 3, 0.1).astype(np.float32)
        n = 128
    bvh = tb.build_bvh(spheres, triangles)
    # Half the rays start far out and aim near a primitive's centre (most hit), half
    # start anywhere inside the scene with any direction (rays from inside spheres,
    # grazing boxes).
    far = rng.normal(size=(n // 2, 3))
    far = 12 * far / np.linalg.norm(far, axis=1, keepdims=True)
    targets = np.concatenate([spheres[:, :3], triangles.reshape(-1, 3, 3).mean(axis=1)])
    chosen = targets[rng.integers(0, len(targets), size=n // 2)]
    aim = chosen + rng.normal(0, 0.3, size=(n // 2, 3)) - far
    inside = rng.uniform(-5, 5, size=(n - n // 2, 3))
    anywhere = rng.normal(size=(n - n // 2, 3))
    origins = np.concatenate([far, inside]).astype(np.float32)
    directions = np.concatenate([aim, anywhere])
    directions = (directions / np.linalg.norm(directions, axis=1, keepdims=True)).astype(np.float32)
    # Every fourth ray from inside runs along an axis: zero direction components
    # (infinite slabs).
    along = np.arange(n // 2, n, 4)
    directions[along] = 0.0
    directions[along, rng.integers(0, 3, size=len(along))] = rng.choice([-1.0, 1.0],
                                                                         size=len(along))
    hits = np.full((n, 2), -7, dtype=np.int32)
    depths = np.full((n, 2), np.nan, dtype=np.float32)
    trace_rays.simulate[(n + 63) // 64, 64](origins, directions, hits, depths, bvh.nodes,
                                            bvh.prim_ids, spheres, triangles)
    # The BVH finds what testing every primitive finds, at the same distance (the same
    # f32 functions; only the order of the tests differs).
    assert np.array_equal(hits[:, 0], hits[:, 1])
    assert np.array_equal(depths[:, 0], depths[:, 1])
    assert (hits[:, 0] >= 0).sum() > n // 5 and (hits[:, 0] < 0).sum() > 10
    # And a float64 reference agrees but for the odd ray within rounding of an edge.
    prim, t = numpy_closest(spheres, triangles, origins, directions)
    same = prim == hits[:, 0]
    assert same.mean() > 0.99, np.flatnonzero(~same)
    hit = same & (prim >= 0)
    relative = np.abs(depths[hit, 0] - t[hit]) / t[hit]
    # Grazing sphere hits lose digits to the discriminant's cancellation in f32.
    assert np.quantile(relative, 0.95) < 1e-5 and relative.max() < 1e-2, relative.max()


# -- shading -------------------------------------------------------------------------------------

@cupric.kernel
def scatter_many(materials: Array[f32, 2, "C"], material: i32, incoming: Array[f32, 1, "C"],
                 normal_in: Array[f32, 1, "C"], front: i32, out: Array[f32, 2, "C"]):
    i = grid(1)
    if i >= out.shape[0]:
        return
    state = ts.rng_seed(i, 0, 1234)
    direction = float3(incoming[0], incoming[1], incoming[2])
    normal = float3(normal_in[0], normal_in[1], normal_in[2])
    bounced, attenuation, alive, state = ts.scatter(materials, material, direction, normal,
                                                    front, state)
    out[i, 0] = bounced.x
    out[i, 1] = bounced.y
    out[i, 2] = bounced.z
    out[i, 3] = f32(alive)
    out[i, 4] = attenuation.x


def _scatter(kind, param, incoming, normal=(0.0, 0.0, 1.0), front=1, n=2048):
    materials = np.array([[kind, 0.25, 0.5, 0.75, param]], dtype=np.float32)
    incoming = np.asarray(incoming, np.float32)
    incoming = incoming / np.linalg.norm(incoming)
    out = np.full((n, 5), np.nan, dtype=np.float32)
    scatter_many.simulate[n // 128, 128](materials, 0, incoming,
                                         np.asarray(normal, np.float32), front, out)
    return out


def test_lambertian_is_cosine_weighted():
    out = _scatter(ts.LAMBERTIAN, 0.0, (0.3, -0.2, -1.0))
    directions = out[:, :3]
    np.testing.assert_allclose(np.linalg.norm(directions, axis=1), 1.0, atol=1e-5)
    cos = directions[:, 2]
    assert (cos >= -1e-6).all() and (out[:, 3] == 1).all() and (out[:, 4] == 0.25).all()
    # Cosine-weighted hemisphere: E[cos] = 2/3, E[cos^2] = 1/2 (std of the mean ~0.005).
    assert abs(cos.mean() - 2 / 3) < 0.02 and abs((cos ** 2).mean() - 0.5) < 0.02


def test_metal_reflects_and_fuzz_spreads():
    incoming = np.array([0.6, 0.0, -0.8], np.float32)
    sharp = _scatter(ts.METAL, 0.0, incoming, n=256)
    np.testing.assert_allclose(sharp[:, :3], np.tile([0.6, 0.0, 0.8], (256, 1)), atol=1e-5)
    fuzzy = _scatter(ts.METAL, 0.5, incoming)
    alive = fuzzy[:, 3] == 1
    assert alive.mean() > 0.9  # a few perturbations point under the surface: absorbed
    assert (fuzzy[alive, 2] > 0).all()
    spread = np.degrees(np.arccos(np.clip(fuzzy[alive, :3] @ [0.6, 0.0, 0.8], -1, 1)))
    assert 3 < spread.mean() < 30


def test_dielectric_fresnel_and_snell():
    # Normal incidence on glass (n = 1.5): Schlick's reflectance is exactly r0 = 0.04.
    head_on = _scatter(ts.DIELECTRIC, 1.5, (0.0, 0.0, -1.0), n=4096)
    reflected = head_on[:, 2] > 0
    assert abs(reflected.mean() - 0.04) < 0.012
    np.testing.assert_allclose(head_on[~reflected, :3],
                               np.tile([0, 0, -1], ((~reflected).sum(), 1)), atol=1e-5)
    # Entering at 45 degrees: the refracted ray obeys sin(out) = sin(in) / 1.5.
    oblique = _scatter(ts.DIELECTRIC, 1.5, (1.0, 0.0, -1.0), n=512)
    through = oblique[:, 2] < 0
    assert through.mean() > 0.85
    np.testing.assert_allclose(oblique[through, 0], np.sin(np.pi / 4) / 1.5, atol=1e-5)
    # From inside at 60 degrees (past the critical angle, 41.8): always reflected.
    trapped = _scatter(ts.DIELECTRIC, 1.5, (np.sin(np.pi / 3), 0.0, -np.cos(np.pi / 3)),
                       front=0, n=256)
    assert (trapped[:, 2] > 0).all()


# -- the kernels ---------------------------------------------------------------------------------

def test_kernel_compiles_for_sm90_with_only_the_bvh_stack_in_local_memory():
    ptx = pt.render_kernel.inspect_ptx(pt.KERNEL_SIGNATURE, arch="sm_90")
    assert ".target sm_90" in ptx and ".entry render_kernel" in ptx
    depots = re.findall(r"\.local\s+\.align\s+\d+\s+\.b8\s+__local_depot\d+\[(\d+)\]", ptx)
    # One local array: the traversal stack (libdevice's sin/cos would add their own
    # table; the shading uses sincospi to avoid it).
    assert depots == [str(4 * tb.STACK_SIZE)], depots
    artifact = pt.render_kernel.compile(pt.KERNEL_SIGNATURE, arch="sm_90")
    if artifact.cubin is None:
        pytest.skip("no nvJitLink/ptxas here to report spills (the PTX check passed)")
    usage = artifact.resource_usage["render_kernel"]
    assert usage.spill_stores == 0 and usage.spill_loads == 0, usage
    assert usage.stack_bytes == 4 * tb.STACK_SIZE, usage


def test_optix_programs_compile_to_ptx():
    from cupric.optix.api import compile_ptx
    compiled = compile_ptx(list(pt.OPTIX_PROGRAMS), params=pt.OPTIX_PARAMS, arch="sm_90")
    ptx = compiled.ptx
    for entry in ("__raygen__tracer_raygen", "__miss__tracer_miss", "__closesthit__tracer_hit",
                  "__intersection__tracer_sphere"):
        assert f".entry {entry}" in ptx
    # The OptiX intrinsics each program needs, by the names OptiX links in PTX.
    for call in ("_optix_trace_typed_32", "_optix_read_primitive_idx",
                 "_optix_get_ray_tmax", "_optix_set_payload",
                 "_optix_get_launch_index_x", "_optix_report_intersection_0",
                 "_optix_get_object_ray_origin_x"):
        assert call in ptx, call


def test_tiny_render_on_the_simulator():
    scene = pt.make_scene()
    result = pt.render_simulator(scene, 16, 12, 2, seed=3, progress=False)
    image = result.image
    assert image.shape == (12, 16, 3) and image.dtype == np.float32
    assert np.isfinite(image).all() and (image >= 0).all()
    assert image.reshape(-1, 3).std(axis=0).min() > 0.02, "all one colour"
    assert image[0].mean() > image[-1].mean()  # sky above, darker ground below
    assert result.samples_per_second > 0
    # At least one ray per path, at most max_depth (8); the sky's rows end at once.
    paths = 16 * 12 * 2
    assert paths < result.rays < 8 * paths and result.rays_per_second > 0
    again = pt.render_simulator(scene, 16, 12, 2, seed=3, progress=False).image
    assert np.array_equal(image, again), "the same seed renders the same image"
    other = pt.render_simulator(scene, 16, 12, 2, seed=4, progress=False).image
    assert not np.array_equal(image, other)


def test_camera_focus_and_aim():
    camera = pt.make_camera(64, 48)
    origin, lower_left, horizontal, vertical = (camera[3 * k:3 * k + 3].astype(np.float64)
                                                for k in range(4))
    center = lower_left + horizontal / 2 + vertical / 2
    # The focus plane's centre is the look-at point: it is in focus.
    np.testing.assert_allclose(center, (0.0, 0.5, 0.0), atol=1e-4)
    np.testing.assert_allclose(np.linalg.norm(horizontal) / np.linalg.norm(vertical), 64 / 48,
                               rtol=1e-5)
    assert camera[18] == np.float32(0.06)


def test_script_without_a_gpu(tmp_path):
    env = dict(os.environ, CUPRIC_SIMULATOR="1")
    out = tmp_path / "render.png"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--backend", "all", "--cpu-size",
                           "8x6", "--cpu-spp", "1", "--no-progress", "--denoise", "--out",
                           str(out)],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "cupric CPU simulator" in proc.stderr
    assert "cuda and optix backends are skipped" in proc.stderr
    assert "--denoise needs a GPU" in proc.stderr
    assert "cpu    8x6, 1 spp" in proc.stdout and "paths/s" in proc.stdout
    if out.exists():
        from PIL import Image
        with Image.open(out) as image:
            assert image.size == (8, 6)
    else:  # no Pillow: a PPM beside it
        assert "wrote a PPM" in proc.stderr
        assert out.with_suffix(".ppm").read_bytes().startswith(b"P6\n8 6\n255\n")


def test_ppm_without_pillow(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "PIL", None)  # makes `from PIL import Image` fail
    image = np.zeros((2, 3, 3), np.float32)
    image[0, 0] = (1.0, 0.5, 4.0)
    written = pt.save_png(image, str(tmp_path / "x.png"))
    assert written.endswith("x.ppm")
    data = pathlib.Path(written).read_bytes()
    assert data.startswith(b"P6\n3 2\n255\n")
    assert data[len(b"P6\n3 2\n255\n"):][:3] == bytes([255, 186, 255])


def test_bad_arguments_are_refused():
    with pytest.raises(SystemExit):
        pt.parse_args(["--spp", "0"])
    with pytest.raises(SystemExit):
        pt.parse_args(["--cpu-size", "48by32"])
    with pytest.raises(SystemExit):
        pt.parse_args(["--optix-spheres", "mesh"])
    with pytest.raises(SystemExit):
        pt.parse_args(["--scene", "huge"])
    args = pt.parse_args(["--cpu-size", "20x10"])
    assert args.cpu_size == (20, 10) and args.optix_spheres == "custom"
    assert args.scene == "showcase"
    with pytest.raises(ValueError, match="kind"):
        pt.make_scene("huge")


# -- the scenes ----------------------------------------------------------------------------------

def test_icosphere_is_a_closed_unit_sphere():
    vertices, faces = pt.icosphere(3)
    assert faces.shape == (20 * 4 ** 3, 3)
    np.testing.assert_allclose(np.linalg.norm(vertices, axis=1), 1.0, atol=1e-12)
    edges = np.sort(faces[:, [0, 1, 1, 2, 2, 0]].reshape(-1, 2), axis=1)
    unique, counts = np.unique(edges, axis=0, return_counts=True)
    assert (counts == 2).all(), "every edge is shared by exactly two faces"
    assert len(vertices) - len(unique) + len(faces) == 2  # Euler: a sphere
    corners = vertices[faces]
    normals = np.cross(corners[:, 1] - corners[:, 0], corners[:, 2] - corners[:, 0])
    assert (np.sum(normals * corners.mean(axis=1), axis=1) > 0).all(), "wound outward"


def test_heavy_scene():
    showcase = pt.make_scene()
    heavy = pt.make_scene("heavy", terrain_cells=20, blob_level=2)
    assert heavy.triangles.shape == (2 * 20 ** 2 + 20 + 20 * 4 ** 2, 9)
    assert heavy.prim_material.shape == (heavy.primitive_count,)
    assert heavy.prim_material.max() == len(heavy.materials) - 1
    assert len(heavy.spheres) == len(showcase.spheres)
    np.testing.assert_array_equal(heavy.spheres[:3], showcase.spheres[:3])
    # The terrain is nearly flat where the small spheres rest, hilly far away.
    ground = heavy.triangles[:2 * 20 ** 2].reshape(-1, 3)
    r = np.hypot(ground[:, 0], ground[:, 2])
    assert np.abs(ground[r < 8, 1]).max() <= 0.02 + 1e-6
    assert np.abs(ground[r > 25, 1]).max() > 0.5
    # No small sphere inside the lumpy one (radius 1 +- 12%).
    (cx, _, cz), radius = pt.BLOB
    small = heavy.spheres[3:]
    assert (np.hypot(small[:, 0] - cx, small[:, 2] - cz) > 1.12 * radius + 0.2).all()
    # The default heavy scene: about a million triangles.
    assert 2 * 600 ** 2 + 20 * 4 ** 7 > 1_000_000


# -- GPU lane ------------------------------------------------------------------------------------

def _optix_or_skip():
    from cupric.optix import lib
    if not lib.is_available():
        pytest.skip(f"the driver has no OptiX runtime for ABI {lib.abi_version()}")


@pytest.fixture(scope="module")
def optix_renderer():
    _optix_or_skip()
    renderer = pt.OptixRenderer(pt.make_scene())
    yield renderer
    renderer.close()


def _cuda_vs_optix(scene, optix_renderer, w=96, h=64, spp=16):
    cuda = pt.CudaRenderer(scene)
    a = cuda.render(w, h, spp, seed=5, progress=False)
    b = optix_renderer.render(w, h, spp, seed=5, progress=False)
    other_seed = cuda.render(w, h, spp, seed=6, progress=False)
    for image in (a.image, b.image):
        assert np.isfinite(image).all() and (image >= 0).all()
    same = pt.mean_abs_diff(a.image, b.image)
    noise = pt.mean_abs_diff(a.image, other_seed.image)
    print(f"cuda vs optix {same:.5f}, cuda seed 5 vs 6 {noise:.5f}; rays {a.rays} vs {b.rays}")
    assert same < 0.01 and same < 0.25 * noise, (same, noise)
    # No bias either: the mean colours agree closely.
    np.testing.assert_allclose(a.image.mean(axis=(0, 1)), b.image.mean(axis=(0, 1)), atol=0.005)
    # Both count the rays they trace: the same paths, but for the rare one that rounding
    # sends another way.
    assert w * h * spp <= a.rays <= w * h * spp * 8
    assert abs(a.rays - b.rays) <= 2e-3 * a.rays, (a.rays, b.rays)


@pytest.mark.gpu
def test_gpu_cuda_and_optix_agree(optix_renderer):
    """Same pixels, samples and seed draw the same random numbers in both backends, so
    the images differ only where rounding sends a path another way (OptiX's sphere and
    watertight triangle tests vs the kernel's): far less than two seeds differ."""
    _cuda_vs_optix(pt.make_scene(), optix_renderer)


@pytest.mark.gpu
def test_gpu_cuda_and_optix_agree_on_a_heavy_scene():
    """The heavy scene, made lighter (a 200x200 terrain, a lumpy sphere of 20480
    triangles): thousands of small triangles through both BVHs."""
    _optix_or_skip()
    scene = pt.make_scene("heavy", terrain_cells=200, blob_level=5)
    renderer = pt.OptixRenderer(scene)
    try:
        _cuda_vs_optix(scene, renderer)
    finally:
        renderer.close()


@pytest.mark.gpu
def test_gpu_sphere_modes_agree(optix_renderer):
    """OptiX's built-in spheres for the opaque spheres and custom ones for glass
    ("auto") against every sphere through the kernel's `hit_sphere` as a custom primitive
    (the default), on the same traversal: the built-in test agrees with the kernel's
    where OptiX uses it. (With every sphere built in, glass renders wrong: OptiX culls
    the exit hits of rays refracted into it; see
    tests/optix/test_optix_gpu.py::test_builtin_spheres_cull_exit_hits.)"""
    assert optix_renderer.spheres_mode == "custom"
    auto = pt.OptixRenderer(pt.make_scene(), spheres="auto")
    try:
        with_auto = auto.render(96, 64, 16, seed=5, progress=False)
    finally:
        auto.close()
    custom = optix_renderer.render(96, 64, 16, seed=5, progress=False)
    noise = pt.mean_abs_diff(custom.image, optix_renderer.render(96, 64, 16, seed=6,
                                                                 progress=False).image)
    same = pt.mean_abs_diff(custom.image, with_auto.image)
    print(f"custom vs auto spheres {same:.5f}, custom seed 5 vs 6 {noise:.5f}")
    assert same < 0.01 and same < 0.25 * noise, (same, noise)
    assert abs(custom.rays - with_auto.rays) <= 2e-3 * custom.rays


@pytest.mark.gpu
def test_gpu_cuda_matches_the_simulator():
    scene = pt.make_scene()
    w, h, spp = 16, 12, 2
    gpu = pt.render_cuda(scene, w, h, spp, seed=9, progress=False).image
    cpu = pt.render_simulator(scene, w, h, spp, seed=9, progress=False).image
    other = pt.render_simulator(scene, w, h, spp, seed=10, progress=False).image
    same = pt.mean_abs_diff(gpu, cpu)
    noise = pt.mean_abs_diff(cpu, other)
    print(f"gpu vs simulator {same:.5f}, simulator seed 9 vs 10 {noise:.5f}")
    assert same < 0.02 and same < 0.25 * noise, (same, noise)


@pytest.mark.gpu
def test_gpu_progressive_batches_sum_to_one_launch():
    """Accumulating in batches of samples gives the image of one launch of all of them."""
    scene = pt.make_scene()
    one = pt.render_cuda(scene, 32, 24, 8, seed=2, batch=8, progress=False).image
    batched = pt.render_cuda(scene, 32, 24, 8, seed=2, batch=3, progress=False).image
    np.testing.assert_allclose(one, batched, rtol=1e-5, atol=1e-6)


@pytest.mark.gpu
def test_gpu_denoiser_lowers_the_error(optix_renderer):
    scene = pt.make_scene()
    w, h = 96, 64
    reference = pt.render_cuda(scene, w, h, 256, seed=1, progress=False).image
    noisy = optix_renderer.render(w, h, 4, seed=2, progress=False).image
    try:
        clean = optix_renderer.denoise(noisy)
    except pt.ox.DenoiserUnavailableError as exc:
        pytest.skip(f"OptiX denoiser unavailable on this machine: {exc.description}")
    assert np.isfinite(clean).all()
    assert pt.mean_abs_diff(clean, reference) < pt.mean_abs_diff(noisy, reference)


@pytest.mark.gpu
def test_gpu_script_runs_every_backend(tmp_path):
    _optix_or_skip()
    out = tmp_path / "render.png"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--backend", "all", "--width", "64",
                           "--height", "48", "--spp", "8", "--cpu-size", "12x8",
                           "--cpu-spp", "1", "--no-progress", "--denoise", "--out", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    for backend in ("cpu", "cuda", "optix"):
        # A PPM stands in for the PNG where Pillow is missing (the script says so).
        assert any((tmp_path / f"render_{backend}.{ext}").exists() for ext in ("png", "ppm"))
        assert any(line.startswith(backend) and "paths/s" in line
                   for line in proc.stdout.splitlines()), proc.stdout
    assert "cuda vs optix at 8 spp: mean abs difference" in proc.stdout
    assert "cpu vs cuda at 12x8, 1 spp: mean abs difference" in proc.stdout
    assert ("denoised: wrote" in proc.stdout
            or "OptiX denoiser is unavailable" in proc.stderr), (proc.stdout, proc.stderr)
