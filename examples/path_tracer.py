"""A path tracer with three backends sharing one Python source for the shading: spheres
and a triangle mesh with diffuse, metal and glass materials, seen through a thin-lens
camera (depth of field), accumulated progressively, written as a PNG (Pillow).

    python3 examples/path_tracer.py [--backend cpu|cuda|optix|all] [--scene showcase|heavy]
        [--width 640 --height 360 --spp 64] [--cpu-size 48x32 --cpu-spp 4]
        [--max-depth 8] [--seed 1] [--optix-spheres custom|auto|builtin] [--denoise]
        [--out FILE.png]

Scenes: ``showcase`` (default): 17 spheres, a ground of two triangles and an icosahedron;
``heavy``: the same spheres on a finely tessellated, displaced terrain and beside a
displaced sphere mesh, about a million triangles, where tracing rays (traversal) costs
more than shading them.

Backends:
- ``cuda``: `render_kernel`, a cupric kernel, one thread per pixel, an iterative path
  loop, and a software BVH (binned SAH, built on the host with NumPy, 64-byte nodes
  traversed nearer child first with a stack in a local array; examples/_tracer_bvh.py).
- ``optix``: OptiX traces the rays through an instance AS over one GAS per kind of
  primitive; `tracer_raygen` runs the same path loop and `tracer_hit` reports the
  primitive and distance. OptiX uses the RT cores where the GPU has them
  (`DeviceContext.rtcore_version` > 0); on a GPU without them (H100, H200: compute
  GPUs) it traverses in software on the SMs.
- ``cpu``: the SAME `render_kernel` run on cupric's CPU simulator (not a separate NumPy
  renderer), at a small size (``--cpu-size``, default 48x32, ``--cpu-spp`` 4): every
  simulated thread is Python, so it measures the simulator, not a CPU renderer.

OptiX spheres (``--optix-spheres``): OptiX's built-in sphere intersector culls exit hits:
a ray that starts inside a sphere does not hit it (measured with OptiX 9.0, driver 580;
OptiX documents this "back-face culling" for curves and spheres), so light refracted
into a glass sphere would never leave it through the sphere. ``custom`` (default) gives
every sphere to `tracer_sphere`, the kernel's own `hit_sphere` as a custom primitive
(the CUDA backend's test exactly); ``auto`` only the glass ones, the opaque ones going
to the built-in intersector (meant for GPUs whose RT cores intersect spheres; on an H200
the third GAS costs more than the built-in test saves); ``builtin`` all of them (glass
renders wrong; for comparison).

Both GPU backends and the simulator call the device functions of
examples/_tracer_shading.py (camera, random numbers, materials, sky, normals), so they
draw the same random numbers for the same pixel, sample and seed: images agree up to
the rare path that floating-point differences in the intersection send another way.
With ``--backend all`` the script renders the cuda and optix images at the same size and
sample count and prints their mean absolute difference (and the simulator's against the
cuda backend at the CPU size). Per backend it prints samples (paths: pixels x samples
per pixel) and rays per second; rays are counted exactly (each pixel's thread adds the
rays it traced to a per-pixel counter). ``--denoise`` runs OptiX's AI denoiser on the
result (the driver must carry its weights file; see docs/optix.md). Without a GPU only
the cpu backend runs, with a notice.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from dataclasses import dataclass

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cupric  # noqa: E402
import cupric.optix.api as ox  # noqa: E402  (imports nothing from the driver)
from cupric.device import bits, float3, grid, local, optix  # noqa: E402
from cupric.types import Array, f32, i32, u32, u64  # noqa: E402

from _common import on_gpu, output_path  # noqa: E402
from _tracer_bvh import STACK_SIZE, BVH, build_bvh, closest_hit  # noqa: E402
from _tracer_shading import (CAMERA_FLOATS, DIELECTRIC, LAMBERTIAN, METAL, T_FAR,  # noqa: E402
                             T_MIN, hit_sphere, primary_ray, shade_hit, sky)

IMAGE = Array[f32, 3, "C"]
F32_1D = Array[f32, 1, "C"]
F32_2D = Array[f32, 2, "C"]
I32_1D = Array[i32, 1, "C"]
I32_2D = Array[i32, 2, "C"]
BLOCK = (16, 8)
#: The kernel's signature, for `inspect_ptx` and the tests.
KERNEL_SIGNATURE = ("Array[f32, 3, 'C'], Array[i32, 2, 'C'], Array[f32, 1, 'C'], "
                    "Array[f32, 2, 'C'], Array[i32, 1, 'C'], Array[f32, 2, 'C'], "
                    "Array[f32, 2, 'C'], Array[f32, 2, 'C'], Array[i32, 1, 'C'], "
                    "i32, i32, u32, i32")
SCENES = ("showcase", "heavy")
SPHERE_MODES = ("custom", "auto", "builtin")


# -- the scene -----------------------------------------------------------------------------------

@dataclass
class Scene:
    spheres: np.ndarray  # (n, 4) f32: centre, radius
    triangles: np.ndarray  # (m, 9) f32: three vertices
    materials: np.ndarray  # (k, 5) f32: kind, albedo r, g, b, fuzz or index of refraction
    prim_material: np.ndarray  # (n + m,) i32: material of each primitive (spheres first)

    @property
    def primitive_count(self) -> int:
        return len(self.spheres) + len(self.triangles)


_ICOSAHEDRON_FACES = np.array([
    (0, 11, 5), (0, 5, 1), (0, 1, 7), (0, 7, 10), (0, 10, 11), (1, 5, 9), (5, 11, 4),
    (11, 10, 2), (10, 7, 6), (7, 1, 8), (3, 9, 4), (3, 4, 2), (3, 2, 6), (3, 6, 8),
    (3, 8, 9), (4, 9, 5), (2, 4, 11), (6, 2, 10), (8, 6, 7), (9, 8, 1)])


def _icosahedron_vertices() -> np.ndarray:
    phi = (1 + 5 ** 0.5) / 2
    v = np.array([[-1, phi, 0], [1, phi, 0], [-1, -phi, 0], [1, -phi, 0],
                  [0, -1, phi], [0, 1, phi], [0, -1, -phi], [0, 1, -phi],
                  [phi, 0, -1], [phi, 0, 1], [-phi, 0, -1], [-phi, 0, 1]], dtype=np.float64)
    return v / np.linalg.norm(v[0])


def icosahedron(center, radius) -> np.ndarray:
    """(20, 9) triangles of a regular icosahedron (the triangle mesh of the scene)."""
    v = _icosahedron_vertices() * radius + np.asarray(center, dtype=np.float64)
    return v[_ICOSAHEDRON_FACES].reshape(-1, 9)


def icosphere(level: int) -> tuple[np.ndarray, np.ndarray]:
    """(vertices on the unit sphere, faces) of an icosahedron subdivided `level` times
    (each triangle into four, shared edge midpoints): 20 * 4**level faces."""
    vertices = _icosahedron_vertices()
    faces = _ICOSAHEDRON_FACES.copy()
    for _ in range(level):
        edges = np.sort(faces[:, [0, 1, 1, 2, 2, 0]].reshape(-1, 2), axis=1)
        unique, inverse = np.unique(edges, axis=0, return_inverse=True)
        middle = vertices[unique[:, 0]] + vertices[unique[:, 1]]
        middle /= np.linalg.norm(middle, axis=1, keepdims=True)
        m = (len(vertices) + inverse.reshape(-1)).reshape(-1, 3)  # midpoints of 01, 12, 20
        vertices = np.concatenate([vertices, middle])
        a, b, c = faces[:, 0], faces[:, 1], faces[:, 2]
        faces = np.concatenate([np.stack([a, m[:, 0], m[:, 2]], 1),
                                np.stack([b, m[:, 1], m[:, 0]], 1),
                                np.stack([c, m[:, 2], m[:, 1]], 1), m])
    return vertices, faces


def displaced_sphere(center, radius: float, level: int, amplitude: float) -> np.ndarray:
    """(20 * 4**level, 9) triangles of a lumpy sphere: an icosphere whose radius varies
    by up to `amplitude` (relative) with a few octaves of sines."""
    v, faces = icosphere(level)
    x, y, z = v[:, 0], v[:, 1], v[:, 2]
    bumps = (0.5 * np.sin(3.1 * x + 1.7) * np.sin(2.3 * y - 0.4) * np.sin(2.7 * z + 0.9)
             + 0.3 * np.sin(7.3 * x - 5.1 * z + 0.3) + 0.2 * np.sin(17.0 * y + 11.0 * x))
    points = np.asarray(center, np.float64) + radius * v * (1.0 + amplitude * bumps)[:, None]
    return points[faces].reshape(-1, 9)


def terrain(cells: int, half: float = 30.0) -> np.ndarray:
    """(2 * cells**2, 9) triangles of a height field over [-half, half]^2: nearly flat
    (a few centimetres of ripples) under the spheres, hills rising beyond 8 units."""
    xs = np.linspace(-half, half, cells + 1)
    x, z = np.meshgrid(xs, xs, indexing="ij")
    r = np.hypot(x, z)
    ramp = np.clip((r - 8.0) / 22.0, 0.0, 1.0)
    amplitude = 0.02 + 2.5 * ramp * ramp * (3 - 2 * ramp)
    h = amplitude * (0.5 * np.sin(0.35 * x + 0.6) * np.cos(0.3 * z - 0.4)
                     + 0.3 * np.sin(0.9 * x + 1.1 * z) + 0.2 * np.sin(2.3 * x - 1.7 * z + 0.3))
    grid = np.stack([x, h, z], axis=-1)
    p00, p10 = grid[:-1, :-1], grid[1:, :-1]
    p01, p11 = grid[:-1, 1:], grid[1:, 1:]
    first = np.concatenate([p00, p01, p11], axis=-1).reshape(-1, 9)
    second = np.concatenate([p00, p11, p10], axis=-1).reshape(-1, 9)
    return np.concatenate([first, second])


#: The heavy scene's lumpy sphere: centre (x, y, z), radius.
BLOB = ((-2.0, 1.1, -2.4), 1.0)


def make_scene(kind: str = "showcase", small_spheres: int = 14, *, terrain_cells: int = 600,
               blob_level: int = 7) -> Scene:
    """The fixed scenes (a fixed generator, so every run and backend sees the same one).

    ``showcase``: a ground of two triangles, three large spheres (glass, diffuse, metal),
    an icosahedron of polished metal, and small spheres of random materials.
    ``heavy``: the same but on a displaced terrain of ``2 * terrain_cells**2`` triangles,
    beside a lumpy sphere of ``20 * 4**blob_level`` triangles (defaults: 720,000 and
    327,680).
    """
    if kind not in SCENES:
        raise ValueError(f"kind must be one of {', '.join(SCENES)}, got {kind!r}")
    rng = np.random.default_rng(2026)
    materials = [(LAMBERTIAN, 0.5, 0.5, 0.5, 0.0),  # 0 ground
                 (DIELECTRIC, 1.0, 1.0, 1.0, 1.5),  # 1 glass
                 (LAMBERTIAN, 0.4, 0.2, 0.1, 0.0),  # 2 brown
                 (METAL, 0.7, 0.6, 0.5, 0.0),  # 3 mirror
                 (METAL, 0.3, 0.7, 0.8, 0.25)]  # 4 brushed teal (the mesh)
    spheres = [(0.0, 1.0, 0.0, 1.0), (-4.0, 1.0, 0.0, 1.0), (4.0, 1.0, 0.0, 1.0)]
    sphere_material = [1, 2, 3]
    keep_clear = [(0, 0), (-4, 0), (4, 0), (1.8, 2.4)]  # the large spheres and the mesh
    if kind == "heavy":
        keep_clear.append((BLOB[0][0], BLOB[0][2]))
    placed = 0
    while placed < small_spheres:
        x, z = rng.uniform(-6.0, 6.0), rng.uniform(-3.0, 4.0)
        if min(np.hypot(x - cx, z - cz) for cx, cz in keep_clear) < 1.4:
            continue
        choice = rng.uniform()
        colour = rng.uniform(0.1, 0.9, size=3)
        if choice < 0.6:
            materials.append((LAMBERTIAN, *colour, 0.0))
        elif choice < 0.85:
            materials.append((METAL, *(0.5 + 0.5 * colour), rng.uniform(0.0, 0.4)))
        else:
            materials.append((DIELECTRIC, 1.0, 1.0, 1.0, 1.5))
        spheres.append((x, 0.2, z, 0.2))
        sphere_material.append(len(materials) - 1)
        placed += 1
    mesh = icosahedron((1.8, 0.75, 2.4), 0.75)
    if kind == "showcase":
        ground = np.array([[-30, 0, -30, 30, 0, 30, 30, 0, -30],
                           [-30, 0, -30, -30, 0, 30, 30, 0, 30]], dtype=np.float64)
        triangles = np.concatenate([ground, mesh])
        triangle_material = [0] * len(ground) + [4] * len(mesh)
    else:
        ground = terrain(terrain_cells)
        materials.append((LAMBERTIAN, 0.65, 0.3, 0.2, 0.0))  # terracotta (the lumpy sphere)
        blob = displaced_sphere(BLOB[0], BLOB[1], blob_level, 0.12)
        triangles = np.concatenate([ground, mesh, blob])
        triangle_material = np.concatenate([np.zeros(len(ground), np.int64),
                                            np.full(len(mesh), 4),
                                            np.full(len(blob), len(materials) - 1)])
    return Scene(spheres=np.array(spheres, dtype=np.float32),
                 triangles=np.ascontiguousarray(triangles, dtype=np.float32),
                 materials=np.array(materials, dtype=np.float32),
                 prim_material=np.concatenate([sphere_material,
                                               triangle_material]).astype(np.int32))


def make_camera(width: int, height: int, look_from=(13.0, 2.0, 3.0), look_at=(0.0, 0.5, 0.0),
                vfov_degrees: float = 22.0, aperture: float = 0.12,
                focus_distance: float | None = None) -> np.ndarray:
    """The camera table of _tracer_shading.camera_ray: a thin lens of diameter `aperture`
    focused at `focus_distance` (default: the look-at point)."""
    origin = np.asarray(look_from, dtype=np.float64)
    target = np.asarray(look_at, dtype=np.float64)
    if focus_distance is None:
        focus_distance = float(np.linalg.norm(origin - target))
    half_height = math.tan(math.radians(vfov_degrees) / 2)
    view_height = 2.0 * half_height
    view_width = view_height * width / height
    w = (origin - target) / np.linalg.norm(origin - target)
    u = np.cross((0.0, 1.0, 0.0), w)
    u /= np.linalg.norm(u)
    v = np.cross(w, u)
    horizontal = focus_distance * view_width * u
    vertical = focus_distance * view_height * v
    lower_left = origin - horizontal / 2 - vertical / 2 - focus_distance * w
    table = np.concatenate([origin, lower_left, horizontal, vertical, u, v, [aperture / 2]])
    assert table.shape == (CAMERA_FLOATS,)
    return table.astype(np.float32)


# -- the CUDA backend (and, on the simulator, the cpu one) ---------------------------------------

@cupric.kernel
def render_kernel(accum: IMAGE, rays: I32_2D, camera: F32_1D, materials: F32_2D,
                  prim_material: I32_1D, spheres: F32_2D, triangles: F32_2D, nodes: F32_2D,
                  prim_ids: I32_1D, first_sample: i32, samples: i32, seed: u32,
                  max_depth: i32):
    """Add `samples` paths per pixel (samples first_sample, first_sample + 1, ...) to
    accum[y, x, :] (RGB sums; divide by the total sample count to get the image), and
    the number of rays they traced to rays[y, x]."""
    x, y = grid(2)
    height = accum.shape[0]
    width = accum.shape[1]
    if x >= width or y >= height:
        return
    stack = local.array(STACK_SIZE, i32)
    total = float3(f32(0.0), f32(0.0), f32(0.0))
    traced = i32(0)
    for k in range(i32(samples)):
        origin, direction, state = primary_ray(camera, x, y, width, height,
                                               i32(first_sample) + k, seed)
        throughput = float3(f32(1.0), f32(1.0), f32(1.0))
        radiance = float3(f32(0.0), f32(0.0), f32(0.0))
        depth = i32(0)
        while depth < i32(max_depth):
            t, prim = closest_hit(stack, nodes, prim_ids, spheres, triangles, origin,
                                  direction, f32(T_MIN), f32(T_FAR))
            traced += 1
            if prim < 0:
                radiance = throughput * sky(direction)
                break
            origin, direction, attenuation, alive, state = shade_hit(
                materials, prim_material, spheres, triangles, prim, t, origin, direction,
                state)
            if alive == 0:
                break
            throughput = throughput * attenuation
            depth += 1
        # A path past max_depth brings no light (radiance stays 0), as an absorbed one.
        if math.isfinite(radiance.x + radiance.y + radiance.z):
            total = total + radiance
    accum[y, x, 0] += total.x
    accum[y, x, 1] += total.y
    accum[y, x, 2] += total.z
    rays[y, x] += traced


# -- the OptiX backend ---------------------------------------------------------------------------
# Every program takes the pipeline's launch parameters (docs/optix.md): the same list.

@ox.raygen
def tracer_raygen(accum: IMAGE, rays: I32_2D, camera: F32_1D, materials: F32_2D,
                  prim_material: I32_1D, spheres: F32_2D, triangles: F32_2D, handle: u64,
                  first_sample: i32, samples: i32, seed: u32, max_depth: i32):
    x, y, _ = optix.launch_index()
    width = accum.shape[1]
    height = accum.shape[0]
    total = float3(f32(0.0), f32(0.0), f32(0.0))
    traced = i32(0)
    for k in range(samples):
        origin, direction, state = primary_ray(camera, x, y, width, height,
                                               first_sample + k, seed)
        throughput = float3(f32(1.0), f32(1.0), f32(1.0))
        radiance = float3(f32(0.0), f32(0.0), f32(0.0))
        depth = i32(0)
        while depth < max_depth:
            # Payload: 1 + the primitive (0 = missed), and the hit distance's bits.
            found, t_bits = optix.trace(handle, (origin.x, origin.y, origin.z),
                                        (direction.x, direction.y, direction.z),
                                        f32(T_MIN), f32(T_FAR), u32(0), u32(0),
                                        ray_flags=optix.RAY_FLAG_DISABLE_ANYHIT)
            traced += 1
            if found == u32(0):
                radiance = throughput * sky(direction)
                break
            origin, direction, attenuation, alive, state = shade_hit(
                materials, prim_material, spheres, triangles, i32(found) - 1,
                bits.bitcast(t_bits, f32), origin, direction, state)
            if alive == 0:
                break
            throughput = throughput * attenuation
            depth += 1
        if math.isfinite(radiance.x + radiance.y + radiance.z):
            total = total + radiance
    accum[y, x, 0] += total.x
    accum[y, x, 1] += total.y
    accum[y, x, 2] += total.z
    rays[y, x] += traced


@ox.miss
def tracer_miss(accum: IMAGE, rays: I32_2D, camera: F32_1D, materials: F32_2D,
                prim_material: I32_1D, spheres: F32_2D, triangles: F32_2D, handle: u64,
                first_sample: i32, samples: i32, seed: u32, max_depth: i32):
    optix.set_payload(0, u32(0))


@ox.closest_hit
def tracer_hit(accum: IMAGE, rays: I32_2D, camera: F32_1D, materials: F32_2D,
               prim_material: I32_1D, spheres: F32_2D, triangles: F32_2D, handle: u64,
               first_sample: i32, samples: i32, seed: u32, max_depth: i32):
    # Every GAS is built with the primitive index offset of its first primitive in the
    # one index space of the shading code (spheres, then triangles), so OptiX's
    # primitive index is already that index.
    optix.set_payload(0, u32(optix.primitive_index() + 1))
    optix.set_payload(1, bits.bitcast(optix.ray_tmax(), u32))


@ox.intersection
def tracer_sphere(accum: IMAGE, rays: I32_2D, camera: F32_1D, materials: F32_2D,
                  prim_material: I32_1D, spheres: F32_2D, triangles: F32_2D, handle: u64,
                  first_sample: i32, samples: i32, seed: u32, max_depth: i32):
    # Spheres as custom primitives: the CUDA kernel's own `hit_sphere` on OptiX's
    # traversal. Unlike OptiX's built-in spheres it finds the exit of a ray that starts
    # inside, which glass needs (see the module docstring).
    k = i32(optix.primitive_index())
    ox_, oy, oz = optix.object_ray_origin()
    dx, dy, dz = optix.object_ray_direction()
    t = hit_sphere(spheres, k, float3(ox_, oy, oz), float3(dx, dy, dz), optix.ray_tmin(),
                   optix.ray_tmax())
    if t > f32(0.0):
        optix.report_intersection(t, 0)


OPTIX_PROGRAMS = (tracer_raygen, tracer_miss, tracer_hit, tracer_sphere)
OPTIX_PARAMS = ("Array[f32, 3, 'C'], Array[i32, 2, 'C'], Array[f32, 1, 'C'], "
                "Array[f32, 2, 'C'], Array[i32, 1, 'C'], Array[f32, 2, 'C'], "
                "Array[f32, 2, 'C'], u64, i32, i32, u32, i32")
PIPELINE_OPTIONS = ox.PipelineCompileOptions(num_payload_values=2, num_attribute_values=2,
                                             traversable_graph="single_level_instancing",
                                             primitive_types=("triangle", "sphere", "custom"))


# -- renderers -----------------------------------------------------------------------------------

def _progress(total: int, label: str):
    """A tqdm bar over the samples; tqdm is optional (pip install tqdm)."""
    try:
        from tqdm import tqdm
    except ImportError:
        print("tqdm is not installed (pip install tqdm): no progress bar", file=sys.stderr)
        return None
    return tqdm(total=total, desc=label, unit="spp", leave=False, file=sys.stderr)


def _batches(spp: int, batch: int):
    first = 0
    while first < spp:
        count = min(batch, spp - first)
        yield first, count
        first += count


@dataclass
class Render:
    image: np.ndarray  # (height, width, 3) float32, linear radiance (mean over samples)
    seconds: float  # the timed launches
    spp: int
    rays: int  # rays traced by the timed launches (counted by every pixel's thread)

    @property
    def samples_per_second(self) -> float:
        h, w, _ = self.image.shape
        return h * w * self.spp / self.seconds

    @property
    def rays_per_second(self) -> float:
        return self.rays / self.seconds


def render_simulator(scene: Scene, width: int, height: int, spp: int, *, seed: int = 1,
                     max_depth: int = 8, bvh: BVH | None = None,
                     progress: bool = True) -> Render:
    """`render_kernel` on the CPU simulator (NumPy arrays), one launch per sample."""
    bvh = bvh or build_bvh(scene.spheres, scene.triangles)
    accum = np.zeros((height, width, 3), dtype=np.float32)
    rays = np.zeros((height, width), dtype=np.int32)
    camera = make_camera(width, height)
    blocks = ((width + BLOCK[0] - 1) // BLOCK[0], (height + BLOCK[1] - 1) // BLOCK[1])
    bar = _progress(spp, "cpu (simulator)") if progress else None
    t0 = time.perf_counter()
    for first, count in _batches(spp, 1):
        render_kernel.simulate[blocks, BLOCK](
            accum, rays, camera, scene.materials, scene.prim_material, scene.spheres,
            scene.triangles, bvh.nodes, bvh.prim_ids, first, count, seed, max_depth)
        if bar is not None:
            bar.update(count)
    seconds = time.perf_counter() - t0
    if bar is not None:
        bar.close()
    return Render(accum / np.float32(spp), seconds, spp, int(rays.sum(dtype=np.int64)))


class CudaRenderer:
    """`render_kernel` on the GPU over one scene: its BVH is built once (host, NumPy;
    `build_seconds`) and uploaded with the scene."""

    def __init__(self, scene: Scene):
        from cupric import runtime as rt
        self.scene = scene
        t0 = time.perf_counter()
        self.bvh = build_bvh(scene.spheres, scene.triangles)
        self.build_seconds = time.perf_counter() - t0
        self.data = [rt.to_device(a) for a in (scene.materials, scene.prim_material,
                                               scene.spheres, scene.triangles,
                                               self.bvh.nodes, self.bvh.prim_ids)]

    def render(self, width: int, height: int, spp: int, *, seed: int = 1,
               max_depth: int = 8, batch: int = 4, progress: bool = True,
               warm_up: bool = True) -> Render:
        """`batch` samples per launch, timed after a warm-up launch that compiles the
        kernel or loads it from the cache (``warm_up=False``: the first launch, compile
        included, is timed too)."""
        from cupric import runtime as rt
        camera = rt.to_device(make_camera(width, height))
        accum = rt.to_device(np.zeros((height, width, 3), dtype=np.float32))
        rays = rt.to_device(np.zeros((height, width), dtype=np.int32))
        blocks = ((width + BLOCK[0] - 1) // BLOCK[0], (height + BLOCK[1] - 1) // BLOCK[1])
        materials, prim_material, spheres, triangles, nodes, prim_ids = self.data

        def launch(image, counter, first, count):
            render_kernel[blocks, BLOCK](image, counter, camera, materials, prim_material,
                                         spheres, triangles, nodes, prim_ids, first, count,
                                         seed, max_depth)

        if warm_up:  # one sample into scratch arrays, so compilation is not timed
            launch(rt.to_device(np.zeros((height, width, 3), dtype=np.float32)),
                   rt.to_device(np.zeros((height, width), dtype=np.int32)), 0, 1)
            rt.synchronize()
        bar = _progress(spp, "cuda") if progress else None
        t0 = time.perf_counter()
        for first, count in _batches(spp, batch):
            launch(accum, rays, first, count)
            if bar is not None:
                rt.synchronize()  # the bar shows finished samples, not queued launches
                bar.update(count)
        rt.synchronize()
        image = accum.to_numpy()  # the image on the host
        seconds = time.perf_counter() - t0
        if bar is not None:
            bar.close()
        return Render(image / np.float32(spp), seconds, spp,
                      int(rays.to_numpy().sum(dtype=np.int64)))


def render_cuda(scene: Scene, width: int, height: int, spp: int, **options) -> Render:
    """One `CudaRenderer` render (BVH built here); options as `CudaRenderer.render`."""
    return CudaRenderer(scene).render(width, height, spp, **options)


class OptixRenderer:
    """The OptiX pipeline, scene acceleration structures and SBT for one scene.

    One GAS per kind of primitive, under one instance AS with identity transforms:
    built-in spheres, custom-primitive spheres (`tracer_sphere`), triangles; instance k
    uses hit group k. ``spheres`` chooses which spheres go where: "custom" (all, the
    default), "auto" (opaque ones built in, glass ones custom: OptiX's built-in spheres
    cull the exit hits that rays refracted into glass need) or "builtin" (all). The
    renderer orders its copy of the spheres so that each GAS holds a contiguous range,
    and builds each GAS with the primitive index offset of its first primitive, so that
    OptiX's primitive index is the shading code's index. Timings: `compile_seconds`
    (modules, groups, pipeline), `build_seconds` (every acceleration structure,
    compacted).
    """

    def __init__(self, scene: Scene, spheres: str = "custom"):
        from cupric import runtime as rt
        from cupric.optix import lib
        if spheres not in SPHERE_MODES:
            raise ValueError(f"spheres must be one of {', '.join(SPHERE_MODES)}, got "
                             f"{spheres!r}")
        if not lib.is_available():
            raise RuntimeError(f"the driver has no OptiX runtime for ABI {lib.abi_version()} "
                               "(libnvoptix.so.1)")
        self.scene = scene
        self.spheres_mode = spheres
        n = len(scene.spheres)
        glass = scene.materials[scene.prim_material[:n], 0] == DIELECTRIC
        builtin = {"auto": ~glass, "builtin": np.ones(n, bool), "custom": np.zeros(n, bool)}
        builtin = builtin[spheres]
        self.sphere_order = np.concatenate([np.flatnonzero(builtin), np.flatnonzero(~builtin)])
        ordered = scene.spheres[self.sphere_order]
        prim_material = np.concatenate([scene.prim_material[:n][self.sphere_order],
                                        scene.prim_material[n:]])
        n_builtin = int(builtin.sum())
        self.ctx = ox.create_context()
        ctx = self.ctx
        self.rtcore_version = ctx.rtcore_version
        self._objects = []  # SBT and acceleration structures, closed before the context
        t0 = time.perf_counter()
        self.module = ctx.compile_module(list(OPTIX_PROGRAMS), ox.ModuleCompileOptions(),
                                         PIPELINE_OPTIONS)
        hit_groups, inputs, self._keep = [], [], []
        if n_builtin:
            sphere_module = ctx.builtin_intersection_module("sphere",
                                                            pipeline_options=PIPELINE_OPTIONS)
            hit_groups.append(ctx.hit_group(self.module, closest_hit=tracer_hit,
                                            intersection_module=sphere_module))
            centers = rt.to_device(np.ascontiguousarray(ordered[:n_builtin, :3]))
            radii = rt.to_device(np.ascontiguousarray(ordered[:n_builtin, 3]))
            self._keep += [centers, radii]
            inputs.append(ox.SphereInput(centers, radii, flags="disable_anyhit"))
        if n_builtin < n:
            hit_groups.append(ctx.hit_group(self.module, closest_hit=tracer_hit,
                                            intersection=tracer_sphere))
            custom = ordered[n_builtin:]
            aabbs = rt.to_device(np.ascontiguousarray(np.concatenate(
                [custom[:, :3] - custom[:, 3:], custom[:, :3] + custom[:, 3:]], axis=1)))
            self._keep.append(aabbs)
            inputs.append(ox.CustomPrimitiveInput(aabbs, flags="disable_anyhit",
                                                  primitive_index_offset=n_builtin))
        if len(scene.triangles):
            hit_groups.append(ctx.hit_group(self.module, closest_hit=tracer_hit))
            vertices = rt.to_device(np.ascontiguousarray(scene.triangles.reshape(-1, 3)))
            self._keep.append(vertices)
            inputs.append(ox.TriangleInput(vertices, flags="disable_anyhit",
                                           primitive_index_offset=n))
        self.groups = [ctx.raygen_group(self.module, tracer_raygen),
                       ctx.miss_group(self.module, tracer_miss), *hit_groups]
        self.pipeline = ctx.create_pipeline(self.groups, PIPELINE_OPTIONS,
                                            ox.PipelineLinkOptions(max_trace_depth=1))
        self.sbt = ox.create_sbt(raygen=ox.make_records(self.groups[0]),
                                 miss=ox.make_records(self.groups[1]),
                                 hitgroup=ox.make_records(self.groups[2:]))
        self._objects.append(self.sbt)
        self.compile_seconds = time.perf_counter() - t0
        t0 = time.perf_counter()
        self.gases = [self._build([build_input]) for build_input in inputs]
        self.instances = rt.to_device(ox.make_instances(
            self.gases, sbt_offsets=list(range(len(self.gases)))))
        self.ias = self._build([ox.InstanceInput(self.instances)])
        rt.synchronize()
        self.build_seconds = time.perf_counter() - t0
        self.data = [rt.to_device(a) for a in (scene.materials, prim_material, ordered,
                                               scene.triangles)]

    def _build(self, inputs):
        """An acceleration structure, compacted (the uncompacted one is closed)."""
        built = self.ctx.build_accel(inputs, ox.AccelBuildOptions(allow_compaction=True))
        compact = built.compact()
        if compact is not built:
            built.close()
        self._objects.append(compact)
        return compact

    def render(self, width: int, height: int, spp: int, *, seed: int = 1, max_depth: int = 8,
               batch: int = 4, progress: bool = True, warm_up: bool = True) -> Render:
        """As `CudaRenderer.render` (OptiX compiled its modules in the constructor)."""
        from cupric import runtime as rt
        camera = rt.to_device(make_camera(width, height))
        accum = rt.to_device(np.zeros((height, width, 3), dtype=np.float32))
        rays = rt.to_device(np.zeros((height, width), dtype=np.int32))
        params = (camera, *self.data, self.ias.handle)
        if warm_up:
            self.pipeline.launch(self.sbt, (width, height),
                                 rt.to_device(np.zeros((height, width, 3), np.float32)),
                                 rt.to_device(np.zeros((height, width), np.int32)), *params,
                                 0, 1, seed, max_depth)
            rt.synchronize()
        bar = _progress(spp, "optix") if progress else None
        t0 = time.perf_counter()
        for first, count in _batches(spp, batch):
            self.pipeline.launch(self.sbt, (width, height), accum, rays, *params, first,
                                 count, seed, max_depth)
            if bar is not None:
                rt.synchronize()
                bar.update(count)
        rt.synchronize()
        image = accum.to_numpy()
        seconds = time.perf_counter() - t0
        if bar is not None:
            bar.close()
        return Render(image / np.float32(spp), seconds, spp,
                      int(rays.to_numpy().sum(dtype=np.int64)))

    def denoise(self, image: np.ndarray) -> np.ndarray:
        """OptiX's HDR denoiser on a linear image (height, width, 3).

        Raises
        ------
        cupric.optix.api.DenoiserUnavailableError
            The driver installation lacks the denoiser's weights file.
        """
        from cupric import runtime as rt
        height, width, _ = image.shape
        with self.ctx.create_denoiser(ox.DenoiserOptions(model="hdr")) as denoiser:
            denoiser.setup(width, height)
            color = rt.to_device(np.ascontiguousarray(image, dtype=np.float32))
            output = rt.to_device(np.zeros_like(image, dtype=np.float32))
            denoiser.invoke(color, output)
            rt.synchronize()
            return output.to_numpy()

    def close(self) -> None:
        """Release the OptiX objects; closing the context closes what it made."""
        for obj in reversed(self._objects):
            obj.close()
        self.ctx.close()


# -- output and comparison -----------------------------------------------------------------------

def to_srgb8(image: np.ndarray) -> np.ndarray:
    """8-bit sRGB-ish (gamma 2.2) of a linear image, clipped to [0, 1]."""
    return (np.clip(image, 0.0, 1.0) ** (1 / 2.2) * 255.0 + 0.5).astype(np.uint8)


def save_png(image: np.ndarray, path: str) -> str:
    """Write the image as a PNG (Pillow), or as a binary PPM beside it without Pillow;
    returns the path written."""
    try:
        from PIL import Image
    except ImportError:
        ppm = os.path.splitext(path)[0] + ".ppm"
        h, w, _ = image.shape
        with open(ppm, "wb") as fh:
            fh.write(f"P6\n{w} {h}\n255\n".encode())
            fh.write(np.ascontiguousarray(to_srgb8(image)).tobytes())
        print("Pillow is not installed (python3 -m pip install pillow): wrote a PPM "
              "instead of a PNG",
              file=sys.stderr)
        return ppm
    Image.fromarray(to_srgb8(image)).save(path)
    return path


def mean_abs_diff(a: np.ndarray, b: np.ndarray) -> float:
    """Mean absolute difference of two linear images, radiance clipped to [0, 1] as
    displayed (a rare very bright path must not dominate the comparison)."""
    return float(np.mean(np.abs(np.clip(a, 0, 1) - np.clip(b, 0, 1))))


def _path_with_suffix(path: str, suffix: str) -> str:
    stem, ext = os.path.splitext(path)
    return f"{stem}_{suffix}{ext or '.png'}"


def _size(text: str) -> tuple[int, int]:
    try:
        w, h = (int(v) for v in text.lower().split("x"))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected WIDTHxHEIGHT, got {text!r}") from exc
    if w <= 0 or h <= 0:
        raise argparse.ArgumentTypeError(f"sizes must be positive, got {text!r}")
    return w, h


#: Paths (pixels x samples) the simulator backend traces, about a minute at most.
SIMULATOR_MAX_PATHS = 65536


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=("cpu", "cuda", "optix", "all"), default="all")
    parser.add_argument("--scene", choices=SCENES, default="showcase",
                        help="showcase (default) or heavy (about a million triangles)")
    parser.add_argument("--width", type=int, default=640)
    parser.add_argument("--height", type=int, default=360)
    parser.add_argument("--spp", type=int, default=64, help="samples per pixel (GPU)")
    parser.add_argument("--cpu-size", type=_size, default=(48, 32),
                        help="WIDTHxHEIGHT of the simulator render (default 48x32)")
    parser.add_argument("--cpu-spp", type=int, default=4,
                        help="samples per pixel of the simulator render (default 4)")
    parser.add_argument("--max-depth", type=int, default=8, help="bounces per path")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--batch", type=int, default=4, help="samples per GPU launch")
    parser.add_argument("--denoise", action="store_true",
                        help="also write an OptiX-denoised image (needs a GPU)")
    parser.add_argument("--optix-spheres", choices=SPHERE_MODES, default="custom",
                        help="OptiX sphere intersection: custom (default: the kernel's own "
                             "test as a custom primitive), auto (built-in for opaque spheres, "
                             "custom for glass, whose exit hits the built-in one culls) or "
                             "builtin (glass renders wrong)")
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--out", default=None,
                        help="image file (default: out/path_tracer.png in the checkout; "
                        "with several backends, one file each, suffixed)")
    args = parser.parse_args(argv)
    args.out = str(output_path(args.out, "path_tracer.png"))
    for name in ("width", "height", "spp", "cpu_spp", "max_depth", "batch"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name.replace('_', '-')} must be positive")
    if not 0 <= args.seed < 2 ** 32:
        parser.error("--seed must be in [0, 2**32)")
    w, h = args.cpu_size
    if w * h * args.cpu_spp > SIMULATOR_MAX_PATHS:
        # Every simulated path runs in Python (about a millisecond each): refuse what
        # would take minutes, naming the limit (--width/--height size the GPU renders).
        paths = w * h * args.cpu_spp
        parser.error(f"--cpu-size {w}x{h} with --cpu-spp {args.cpu_spp} is {paths} "
                     f"paths, past the CPU simulator's limit of {SIMULATOR_MAX_PATHS} "
                     f"(e.g. 64x64 at 16 spp); --width/--height size the GPU backends")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    scene = make_scene(args.scene)
    progress = not args.no_progress
    gpu = on_gpu("the path tracer")
    backends = ["cpu", "cuda", "optix"] if args.backend == "all" else [args.backend]
    if not gpu:
        if backends != ["cpu"]:
            print("notice: no GPU: the cuda and optix backends are skipped; rendering with "
                  "the cpu backend only", file=sys.stderr)
        backends = ["cpu"]
    print(f"scene {args.scene}: {len(scene.spheres)} spheres, {len(scene.triangles)} "
          f"triangles, {len(scene.materials)} materials")
    renders: dict[str, Render] = {}
    cuda = optix_renderer = None
    bvh = None
    try:
        for backend in backends:
            if backend == "cpu":
                w, h = args.cpu_size
                bvh = bvh or (cuda.bvh if cuda else build_bvh(scene.spheres, scene.triangles))
                result = render_simulator(scene, w, h, args.cpu_spp, seed=args.seed,
                                          max_depth=args.max_depth, bvh=bvh,
                                          progress=progress)
            elif backend == "cuda":
                cuda = CudaRenderer(scene)
                print(f"cuda   BVH: {len(cuda.bvh.nodes)} nodes, depth {cuda.bvh.depth}, "
                      f"built in {cuda.build_seconds:.3f} s (host, NumPy)")
                result = cuda.render(args.width, args.height, args.spp, seed=args.seed,
                                     max_depth=args.max_depth, batch=args.batch,
                                     progress=progress)
            else:
                optix_renderer = optix_renderer or OptixRenderer(scene, args.optix_spheres)
                rtcore = optix_renderer.rtcore_version
                none = "" if rtcore else " (none: OptiX traverses in software)"
                print(f"optix  RT cores: rtcore version {rtcore}{none}; acceleration "
                      f"structures built in {optix_renderer.build_seconds:.3f} s")
                result = optix_renderer.render(args.width, args.height, args.spp,
                                               seed=args.seed, max_depth=args.max_depth,
                                               batch=args.batch, progress=progress)
            renders[backend] = result
            h, w, _ = result.image.shape
            out = args.out if len(backends) == 1 else _path_with_suffix(args.out, backend)
            print(f"{backend:6s} {w}x{h}, {result.spp} spp: {result.seconds:.3f} s, "
                  f"{result.samples_per_second / 1e6:.3f} Msamples/s "
                  f"({result.samples_per_second:.4g} paths/s), "
                  f"{result.rays_per_second / 1e6:.1f} Mrays/s ({result.rays} rays); "
                  f"wrote {save_png(result.image, out)}")
        if "cuda" in renders and "optix" in renders:
            print(f"cuda vs optix at {args.spp} spp: mean abs difference "
                  f"{mean_abs_diff(renders['cuda'].image, renders['optix'].image):.5f}; "
                  f"optix/cuda rays per second "
                  f"{renders['optix'].rays_per_second / renders['cuda'].rays_per_second:.2f}")
        if "cpu" in renders and cuda is not None:
            w, h = args.cpu_size
            small = cuda.render(w, h, args.cpu_spp, seed=args.seed, max_depth=args.max_depth,
                                batch=args.batch, progress=False)
            print(f"cpu vs cuda at {w}x{h}, {args.cpu_spp} spp: mean abs difference "
                  f"{mean_abs_diff(renders['cpu'].image, small.image):.5f}")
        if args.denoise:
            if not gpu:
                print("--denoise needs a GPU (OptiX): skipped", file=sys.stderr)
            else:
                source = renders.get("optix") or renders.get("cuda")
                if source is None:
                    print("--denoise denoises a cuda or optix render: none was made",
                          file=sys.stderr)
                else:
                    optix_renderer = optix_renderer or OptixRenderer(scene, args.optix_spheres)
                    try:
                        clean = optix_renderer.denoise(source.image)
                    except ox.DenoiserUnavailableError as exc:
                        print(f"--denoise: the OptiX denoiser is unavailable on this machine "
                              f"({exc.description}); the driver installation lacks its "
                              f"weights file {exc.weights_file}. The noisy image was kept.",
                              file=sys.stderr)
                    else:
                        out = _path_with_suffix(args.out, "denoised")
                        print(f"denoised: wrote {save_png(clean, out)}")
    finally:
        if optix_renderer is not None:
            optix_renderer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
