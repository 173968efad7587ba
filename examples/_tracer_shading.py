"""Shared device code of examples/path_tracer.py: random numbers, the thin-lens camera,
materials (Lambertian, fuzzy metal, dielectric with Schlick's reflectance), the sky, and
ray-primitive intersection (spheres, Moller-Trumbore triangles, slab test on boxes).

Every function is a `@cupric.device_function`: the CUDA kernel (software BVH) and the
OptiX raygen program both call them, and the CPU simulator runs them as plain Python, so
the three backends share one source for the shading. (Not an example itself.)

Conventions: vectors are `float3` (registers); scalars are f32; the random state is a
gpu_rand generator (a tuple of two u32) carried through every call and returned with
its new value (device functions cannot mutate their caller's locals). Angles go through `sincospi` (sin and cos of pi*x): its
argument reduction is exact and register-only, where `sin`/`cos` of libdevice keep a
local-memory table for the slow path of huge arguments. Integers are cast explicitly
with `u32(...)` because the simulator passes kernel scalars as NumPy int64, and u32
arithmetic must wrap at 32 bits on both paths.
"""

from __future__ import annotations

import math

import cupric
from cupric.device import float3, vector
from cupric.device import math as device_math
from cupric.gpu_rand.device_rng import device_rng
from cupric.types import f32, i32, u32, u64

# Material kinds (column 0 of the materials table).
LAMBERTIAN = 0
METAL = 1
DIELECTRIC = 2

# Camera table layout (one f32 vector of CAMERA_FLOATS): origin, lower-left corner of the
# focus plane, its horizontal and vertical spans, the lens basis u and v, lens radius.
CAMERA_FLOATS = 19

# The per-path generator: gpu_rand's xoroshiro64** (two u32 words: the smallest state of
# the family, so the whole path's generator lives in two registers).
RNG = device_rng("xoroshiro64**")
_WEYL = u64(0x9E3779B97F4A7C15)  # SplitMix64's increment: seeds land far apart

# Smallest ray distance accepted: keeps a bounced ray from hitting the surface it left
# (f32 rounding puts its origin a little above or below it).
T_MIN = 1e-3
T_FAR = 1e30


# -- random numbers ------------------------------------------------------------------------------

@cupric.device_function
def rng_seed(pixel, sample, seed):
    """Initial state of the generator of one pixel's one sample: counter-based, so any
    sample of any pixel can be drawn in any order (progressive accumulation, and every
    backend gets the same numbers for the same pixel, sample and seed). The key packs
    pixel and sample into 64 bits and moves by a Weyl step per seed; gpu_rand's
    seed_from_u64 (SplitMix64) hashes it into a xoroshiro64** state."""
    key = ((u64(u32(pixel)) << 32) | u64(u32(sample))) + u64(u32(seed)) * _WEYL
    return RNG.seed_from_u64(key)


@cupric.device_function
def random01(state):
    """(uniform f32 in [0, 1), new state): the top 24 bits of one next_u32, exact."""
    return RNG.uniform_f32(state)


@cupric.device_function
def random_unit_vector(state):
    """A direction uniform on the unit sphere (z uniform in [-1, 1], azimuth uniform)."""
    u1, state = random01(state)
    u2, state = random01(state)
    z = f32(1.0) - f32(2.0) * u1
    r = math.sqrt(max(f32(0.0), f32(1.0) - z * z))
    sin_a, cos_a = device_math.sincospi(f32(2.0) * u2)
    return float3(r * cos_a, r * sin_a, z), state


@cupric.device_function
def random_in_unit_disk(state):
    """(x, y) uniform in the unit disk (polar: r = sqrt(u) keeps the density uniform)."""
    u1, state = random01(state)
    u2, state = random01(state)
    r = math.sqrt(u1)
    sin_a, cos_a = device_math.sincospi(f32(2.0) * u2)
    return r * cos_a, r * sin_a, state


# -- camera and sky ------------------------------------------------------------------------------

@cupric.device_function
def camera_ray(camera, s, t, state):
    """The ray through image coordinates (s, t) in [0, 1]^2 (t up) from a random point of
    a thin lens: points on the focus plane are sharp, others blur (depth of field)."""
    origin = float3(camera[0], camera[1], camera[2])
    lower_left = float3(camera[3], camera[4], camera[5])
    horizontal = float3(camera[6], camera[7], camera[8])
    vertical = float3(camera[9], camera[10], camera[11])
    lens_u = float3(camera[12], camera[13], camera[14])
    lens_v = float3(camera[15], camera[16], camera[17])
    lens_radius = camera[18]
    dx, dy, state = random_in_unit_disk(state)
    offset = lens_u * (dx * lens_radius) + lens_v * (dy * lens_radius)
    start = origin + offset
    target = lower_left + horizontal * f32(s) + vertical * f32(t)
    return start, vector.normalize(target - start), state


@cupric.device_function
def sky(direction):
    """Radiance of a ray that leaves the scene: a white-to-blue vertical gradient."""
    k = f32(0.5) * (vector.normalize(direction).y + f32(1.0))
    return float3(f32(1.0) - k * f32(0.5), f32(1.0) - k * f32(0.3), f32(1.0))


# -- materials -----------------------------------------------------------------------------------

@cupric.device_function
def reflect(v, n):
    return v - n * (f32(2.0) * vector.dot(v, n))


@cupric.device_function
def refract(unit_v, n, eta):
    """Snell's law for a unit direction entering a surface of normal n (facing the ray)
    with index ratio eta; the caller has checked that no total internal reflection."""
    cos_theta = min(-vector.dot(unit_v, n), f32(1.0))
    perpendicular = (unit_v + n * cos_theta) * eta
    parallel = n * (-math.sqrt(abs(f32(1.0) - vector.dot(perpendicular, perpendicular))))
    return perpendicular + parallel


@cupric.device_function
def schlick(cosine, eta):
    """Schlick's approximation of the Fresnel reflectance."""
    r0 = (f32(1.0) - eta) / (f32(1.0) + eta)
    r0 = r0 * r0
    m = f32(1.0) - cosine
    return r0 + (f32(1.0) - r0) * m * m * m * m * m


@cupric.device_function
def face_forward(normal, direction):
    """(normal turned against the ray, 1 if the ray hit the outside face else 0)."""
    if vector.dot(direction, normal) < f32(0.0):
        return normal, i32(1)
    return normal * f32(-1.0), i32(0)


@cupric.device_function
def scatter(materials, material, direction, normal, front, state):
    """Bounce a ray that hit a surface of `materials[material]` (kind, r, g, b, param).

    Returns (new direction, attenuation, 1 if the path continues else 0, state).
    `normal` faces the incoming ray; `front` says whether the ray came from outside.
    """
    kind = i32(materials[material, 0])
    albedo = float3(materials[material, 1], materials[material, 2], materials[material, 3])
    param = materials[material, 4]
    unit = vector.normalize(direction)
    if kind == LAMBERTIAN:
        # Cosine-weighted around the normal: normal + a uniform unit vector.
        offset, state = random_unit_vector(state)
        bounced = normal + offset
        if vector.dot(bounced, bounced) < f32(1e-12):
            bounced = normal  # the two cancelled: any direction off the surface will do
        return vector.normalize(bounced), albedo, i32(1), state
    if kind == METAL:
        # Mirror direction perturbed inside a ball of radius `param` (the fuzz); a
        # perturbation that points under the surface absorbs the ray.
        offset, state = random_unit_vector(state)
        u, state = random01(state)
        bounced = reflect(unit, normal) + offset * (param * math.cbrt(u))
        alive = i32(1) if vector.dot(bounced, normal) > f32(0.0) else i32(0)
        return vector.normalize(bounced), albedo, alive, state
    # Dielectric, index of refraction `param`: reflect (total internal reflection, or
    # with Schlick's probability) or refract; the albedo tints the transmitted light.
    eta = f32(1.0) / param if front == 1 else param
    cos_theta = min(-vector.dot(unit, normal), f32(1.0))
    sin_theta = math.sqrt(max(f32(0.0), f32(1.0) - cos_theta * cos_theta))
    u, state = random01(state)
    if eta * sin_theta > f32(1.0) or schlick(cos_theta, eta) > u:
        bounced = reflect(unit, normal)
    else:
        bounced = refract(unit, normal, eta)
    return vector.normalize(bounced), albedo, i32(1), state


# -- geometry ------------------------------------------------------------------------------------

@cupric.device_function
def hit_sphere(spheres, k, origin, direction, t_min, t_max):
    """Nearest t in (t_min, t_max) where the ray meets sphere k (cx, cy, cz, r), or -1.
    Tests the far root too, so rays from inside (through glass) find their exit."""
    center = float3(spheres[k, 0], spheres[k, 1], spheres[k, 2])
    radius = spheres[k, 3]
    oc = origin - center
    a = vector.dot(direction, direction)
    half_b = vector.dot(oc, direction)
    c = vector.dot(oc, oc) - radius * radius
    disc = half_b * half_b - a * c
    if disc < f32(0.0):
        return f32(-1.0)
    root = math.sqrt(disc)
    t = (-half_b - root) / a
    if t <= t_min or t >= t_max:
        t = (-half_b + root) / a
        if t <= t_min or t >= t_max:
            return f32(-1.0)
    return t


@cupric.device_function
def hit_triangle(triangles, k, origin, direction, t_min, t_max):
    """Moller-Trumbore: nearest t in (t_min, t_max) on triangle k (9 floats: three
    vertices), or -1. Both faces count (glass and thin walls need the back face)."""
    v0 = float3(triangles[k, 0], triangles[k, 1], triangles[k, 2])
    e1 = float3(triangles[k, 3], triangles[k, 4], triangles[k, 5]) - v0
    e2 = float3(triangles[k, 6], triangles[k, 7], triangles[k, 8]) - v0
    p = vector.cross(direction, e2)
    det = vector.dot(e1, p)
    if abs(det) < f32(1e-12):
        return f32(-1.0)  # the ray runs parallel to the triangle's plane
    inv = f32(1.0) / det
    s = origin - v0
    u = vector.dot(s, p) * inv
    if u < f32(0.0) or u > f32(1.0):
        return f32(-1.0)
    q = vector.cross(s, e1)
    v = vector.dot(direction, q) * inv
    if v < f32(0.0) or u + v > f32(1.0):
        return f32(-1.0)
    t = vector.dot(e2, q) * inv
    if t <= t_min or t >= t_max:
        return f32(-1.0)
    return t


@cupric.device_function
def hit_box(bounds, node, origin, inv_dir, t_min, t_max):
    """Slab test: does the ray enter node's box (minx, miny, minz, maxx, maxy, maxz)
    before t_max? `inv_dir` is 1/direction per axis (inf for a zero component works:
    IEEE gives +-inf slabs)."""
    tx0 = (bounds[node, 0] - origin.x) * inv_dir.x
    tx1 = (bounds[node, 3] - origin.x) * inv_dir.x
    ty0 = (bounds[node, 1] - origin.y) * inv_dir.y
    ty1 = (bounds[node, 4] - origin.y) * inv_dir.y
    tz0 = (bounds[node, 2] - origin.z) * inv_dir.z
    tz1 = (bounds[node, 5] - origin.z) * inv_dir.z
    near = max(max(min(tx0, tx1), min(ty0, ty1)), max(min(tz0, tz1), t_min))
    far = min(min(max(tx0, tx1), max(ty0, ty1)), min(max(tz0, tz1), t_max))
    return near <= far


@cupric.device_function
def surface_normal(spheres, triangles, prim, point):
    """Outward unit normal at `point` of primitive `prim` (spheres first, then
    triangles, in one index space); a triangle's is the normalized cross of its edges."""
    count = spheres.shape[0]
    if prim < count:
        center = float3(spheres[prim, 0], spheres[prim, 1], spheres[prim, 2])
        return (point - center) * (f32(1.0) / spheres[prim, 3])
    k = prim - count
    v0 = float3(triangles[k, 0], triangles[k, 1], triangles[k, 2])
    e1 = float3(triangles[k, 3], triangles[k, 4], triangles[k, 5]) - v0
    e2 = float3(triangles[k, 6], triangles[k, 7], triangles[k, 8]) - v0
    return vector.normalize(vector.cross(e1, e2))


# -- the two halves of a path step that every backend shares ---------------------------------------

@cupric.device_function
def primary_ray(camera, x, y, width, height, sample, seed):
    """The camera ray of pixel (x, y) (row 0 at the top) for one sample: a jittered
    position in the pixel (antialiasing) through a random point of the lens. Returns
    (origin, direction, generator state)."""
    state = rng_seed(u32(y * width + x), u32(sample), u32(seed))
    jx, state = random01(state)
    jy, state = random01(state)
    s = (f32(x) + jx) / f32(width)
    t = f32(1.0) - (f32(y) + jy) / f32(height)
    return camera_ray(camera, s, t, state)


@cupric.device_function
def shade_hit(materials, prim_material, spheres, triangles, prim, t, origin, direction,
              state):
    """After a ray found primitive `prim` at distance t: its normal and material's
    scatter. Returns (next origin, next direction, attenuation, alive, state)."""
    point = origin + direction * t
    outward = surface_normal(spheres, triangles, prim, point)
    normal, front = face_forward(outward, direction)
    bounced, attenuation, alive, state = scatter(materials, prim_material[prim], direction,
                                                 normal, front, state)
    return point, bounced, attenuation, alive, state
