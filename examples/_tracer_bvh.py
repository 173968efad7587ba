"""The software BVH of examples/path_tracer.py's CUDA backend: built on the host with
NumPy (median splits of the primitives' centroids along the widest axis), flattened into
arrays the kernel reads, and traversed on the device with a stack in a local array.
(Not an example itself.)

Layout, for N nodes (node 0 is the root):
- ``bounds`` f32 (N, 6): min x, y, z then max x, y, z of everything below the node;
- ``meta`` i32 (N, 2): (first, count). A leaf has count > 0 and holds the primitives
  ``prim_ids[first:first + count]``; an inner node has count == 0 and its two children
  are the nodes ``first`` and ``first + 1`` (allocated side by side, so one index says
  both);
- ``prim_ids`` i32: primitive indices in one space, spheres first then triangles.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import cupric
from cupric.device import float3
from cupric.types import f32, i32

from _tracer_shading import hit_box, hit_sphere, hit_triangle

#: Entries of the traversal stack. Traversal pushes two children per inner node popped,
#: so a tree of depth d needs at most d + 1 entries; `build_bvh` checks the depth fits.
STACK_SIZE = 32
LEAF_SIZE = 2


@dataclass
class BVH:
    bounds: np.ndarray  # (N, 6) float32
    meta: np.ndarray  # (N, 2) int32
    prim_ids: np.ndarray  # (P,) int32
    depth: int


def primitive_bounds(spheres: np.ndarray, triangles: np.ndarray) -> np.ndarray:
    """(P, 6) boxes of the spheres (n, 4: centre, radius) then triangles (m, 9)."""
    centers, radii = spheres[:, :3], spheres[:, 3:4]
    sphere_boxes = np.concatenate([centers - radii, centers + radii], axis=1)
    corners = triangles.reshape(-1, 3, 3)
    triangle_boxes = np.concatenate([corners.min(axis=1), corners.max(axis=1)], axis=1)
    return np.concatenate([sphere_boxes, triangle_boxes]).astype(np.float64)


def build_bvh(spheres: np.ndarray, triangles: np.ndarray, leaf_size: int = LEAF_SIZE) -> BVH:
    """Flattened BVH over every sphere and triangle (see the module docstring).

    Raises
    ------
    ValueError
        No primitives, or a tree deeper than the device stack allows.
    """
    boxes = primitive_bounds(np.asarray(spheres, np.float64), np.asarray(triangles, np.float64))
    count = len(boxes)
    if count == 0:
        raise ValueError("a BVH needs at least one primitive")
    centroids = 0.5 * (boxes[:, :3] + boxes[:, 3:])
    order = np.arange(count)
    bounds = [None]
    meta = [None]
    depth = 0
    # Work list of (node, first, last, depth) over ranges of `order`; children are
    # appended as a pair so that node `first` and `first + 1` are siblings.
    work = [(0, 0, count, 1)]
    while work:
        node, lo, hi, level = work.pop()
        depth = max(depth, level)
        members = order[lo:hi]
        box = np.concatenate([boxes[members, :3].min(axis=0), boxes[members, 3:].max(axis=0)])
        bounds[node] = box
        if hi - lo <= leaf_size:
            meta[node] = (lo, hi - lo)
            continue
        spread = centroids[members].max(axis=0) - centroids[members].min(axis=0)
        axis = int(np.argmax(spread))
        # Median split: stable sort keeps the build deterministic for equal centroids.
        order[lo:hi] = members[np.argsort(centroids[members, axis], kind="stable")]
        mid = (lo + hi) // 2
        left = len(bounds)
        bounds.extend([None, None])
        meta.extend([None, None])
        meta[node] = (left, 0)
        work.append((left, lo, mid, level + 1))
        work.append((left + 1, mid, hi, level + 1))
    if depth + 1 > STACK_SIZE:
        raise ValueError(f"BVH depth {depth} needs more than the device stack's "
                         f"{STACK_SIZE} entries")
    # Round the float64 boxes outward to f32, so the f32 boxes still contain every
    # primitive (rounding to nearest could shave a sliver off an edge).
    lower = np.array([b[:3] for b in bounds])
    upper = np.array([b[3:] for b in bounds])
    lower32 = np.nextafter(lower.astype(np.float32), np.float32(-np.inf))
    upper32 = np.nextafter(upper.astype(np.float32), np.float32(np.inf))
    return BVH(bounds=np.ascontiguousarray(np.concatenate([lower32, upper32], axis=1)),
               meta=np.ascontiguousarray(np.array(meta, dtype=np.int32)),
               prim_ids=order.astype(np.int32), depth=depth)


@cupric.device_function
def closest_hit(stack, bounds, meta, prim_ids, spheres, triangles, origin, direction,
                t_min, t_max):
    """(t, primitive) of the nearest hit in (t_min, t_max), primitive -1 for none.

    `stack` is the caller's local i32 array of STACK_SIZE entries: nodes still to visit.
    Children are pushed without testing their boxes; each pop tests its box against the
    current closest t, so subtrees behind a found hit are skipped.
    """
    # 1/0 is +-inf on both paths (IEEE on the GPU, NumPy with errors ignored in the
    # simulator), which the slab test handles.
    inv_dir = float3(f32(1.0) / direction.x, f32(1.0) / direction.y, f32(1.0) / direction.z)
    closest = t_max
    hit = i32(-1)
    count = spheres.shape[0]
    stack[0] = 0
    top = 1
    while top > 0:
        top -= 1
        node = stack[top]
        if hit_box(bounds, node, origin, inv_dir, t_min, closest):
            first = meta[node, 0]
            n = meta[node, 1]
            if n > 0:
                for j in range(first, first + n):
                    prim = prim_ids[j]
                    if prim < count:
                        t = hit_sphere(spheres, prim, origin, direction, t_min, closest)
                    else:
                        t = hit_triangle(triangles, prim - count, origin, direction, t_min,
                                         closest)
                    if t > t_min:
                        closest = t
                        hit = prim
            else:
                stack[top] = first
                stack[top + 1] = first + 1
                top += 2
    return closest, hit

