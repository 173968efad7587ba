"""The software BVH of examples/path_tracer.py's CUDA backend: a binned-SAH tree built on
the host with NumPy, flattened into one array of 64-byte nodes, and traversed on the
device nearer child first with a short stack in a local array. (Not an example itself.)

Build (`build_bvh`): top-down, one tree level at a time, every node of a level at once in
vectorized NumPy. The primitives are kept in three orders, sorted by centroid along x, y
and z; a node owns the same contiguous range in all three. Along each axis its range is
cut into `BINS` bins of equal centroid width (runs of the sorted order, so the bins' boxes
are `np.minimum.reduceat` / `np.maximum.reduceat` over those runs), the surface area
heuristic is swept over the bin boundaries of the three axes, and the cheapest split
(or a leaf, when the SAH says a leaf of at most `LEAF_SIZE` primitives costs less) wins.
The split is a prefix of the node's range in the chosen axis's order; the two other
orders are partitioned stably in O(n) (segmented prefix sums), so nothing is sorted
again after the three sorts at the start. The three axes' work runs on three threads
(NumPy releases the GIL in its loops). Nodes whose centroids coincide split at the
median; below `SAH_DEPTH` levels every split is a median split, so the depth stays within
the device stack.

Layout, for N inner nodes (node 0 is the root):
- ``nodes`` f32 (N, 16): the boxes of both children (child 0: min x, y, z, max x, y, z in
  columns 0-5; child 1 in 6-11), then the two child references as i32 bit patterns
  (columns 12, 13; read with `bits.bitcast`), two columns of padding: one 64-byte row
  per node, both children's boxes in one cache line, so the traversal tests the two
  boxes of a node together and descends into the nearer one first.
- a child reference ``r >= 0`` is an inner node; ``r < 0`` a leaf, ``~r = first << 4 |
  count``: the primitives ``prim_ids[first:first + count]`` (count <= 15; count 0 is an
  empty child, whose box is inverted so no ray enters it).
- ``prim_ids`` i32: primitive indices in one space, spheres first then triangles.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

import cupric
from cupric.device import bits, float3
from cupric.types import f32, i32

from _tracer_shading import hit_sphere, hit_triangle

#: Entries of the traversal stack (one per level where both children were entered).
STACK_SIZE = 64
#: Largest leaf the SAH may choose (a node of more primitives always splits).
LEAF_SIZE = 4
#: Bins per axis of the binned SAH.
BINS = 16
#: Levels built with the SAH; deeper nodes split at the median (depth <= SAH_DEPTH +
#: log2(primitives)), so that the tree's depth fits the stack.
SAH_DEPTH = 40
#: Relative costs of one traversal step (a node: two box tests) and one primitive test.
TRAVERSAL_COST = 1.0
INTERSECTION_COST = 1.0
NODE_FLOATS = 16
_LEAF_BITS = 4


_POOL: ThreadPoolExecutor | None = None


def _pool() -> ThreadPoolExecutor:
    """Three threads for the three axes: NumPy releases the GIL in its array loops."""
    global _POOL
    if _POOL is None:
        _POOL = ThreadPoolExecutor(max_workers=3, thread_name_prefix="bvh-axis")
    return _POOL


@dataclass
class BVH:
    nodes: np.ndarray  # (N, 16) float32, see the module docstring
    prim_ids: np.ndarray  # (P,) int32
    depth: int  # inner levels from the root to the deepest leaf (the root alone: 1)
    sah_cost: float  # the tree's SAH cost (node and primitive tests per random ray)

    @property
    def children(self) -> np.ndarray:
        """(N, 2) int32 child references (a view of the nodes' columns 12-13)."""
        return self.nodes.view(np.int32)[:, 12:14]

    def child_boxes(self) -> np.ndarray:
        """(N, 2, 6) float32 child boxes."""
        return self.nodes[:, :12].reshape(-1, 2, 6)


def leaf_ref(first, count):
    """The child reference of a leaf of `count` primitives from prim_ids[first]."""
    return ~((np.asarray(first, np.int64) << _LEAF_BITS) | count)


def decode_leaf(ref) -> tuple[int, int]:
    """(first, count) of a leaf reference (ref < 0)."""
    x = ~int(ref)
    return x >> _LEAF_BITS, x & ((1 << _LEAF_BITS) - 1)


def primitive_bounds(spheres: np.ndarray, triangles: np.ndarray) -> np.ndarray:
    """(P, 6) float64 boxes of the spheres (n, 4: centre, radius) then triangles (m, 9)."""
    spheres = np.asarray(spheres, np.float64).reshape(-1, 4)
    triangles = np.asarray(triangles, np.float64).reshape(-1, 9)
    centers, radii = spheres[:, :3], spheres[:, 3:4]
    sphere_boxes = np.concatenate([centers - radii, centers + radii], axis=1)
    corners = triangles.reshape(-1, 3, 3)
    triangle_boxes = np.concatenate([corners.min(axis=1), corners.max(axis=1)], axis=1)
    return np.concatenate([sphere_boxes, triangle_boxes])


def _half_area(lo, hi):
    d = np.maximum(hi - lo, 0.0)
    return d[..., 0] * d[..., 1] + d[..., 1] * d[..., 2] + d[..., 2] * d[..., 0]


def _segment_boxes(boxes, starts):
    """(lo, hi) unions of the rows of `boxes` (k, 6) over the ranges that begin at
    `starts` (each running to the next start, the last to the end)."""
    return (np.minimum.reduceat(boxes[:, :3], starts, axis=0),
            np.maximum.reduceat(boxes[:, 3:], starts, axis=0))


def _sweep(lo, hi):
    """Half areas of the left and right boxes of every split of rows of sorted boxes
    (k, c, 3): (k, c - 1) each, split j putting elements 0..j on the left."""
    left_area = _half_area(np.minimum.accumulate(lo, axis=1),
                           np.maximum.accumulate(hi, axis=1))[:, :-1]
    right_area = _half_area(np.minimum.accumulate(lo[:, ::-1], axis=1),
                            np.maximum.accumulate(hi[:, ::-1], axis=1))[:, ::-1][:, 1:]
    return left_area, right_area


def _best_splits(boxes, cents, starts, counts, segment, pool):
    """Per node: (SAH cost A_left * n_left + A_right * n_right of its best split, or inf
    where no split separates anything; its axis; its left count).

    `boxes[a]` and `cents[a]` are the active primitives' boxes and centroid coordinate
    along a, in the order sorted along axis a. Nodes of more than `BINS` primitives are
    binned (BINS bins of equal centroid width); smaller ones are swept exactly, every
    split between two sorted primitives, grouped by size so that each group is one
    (nodes, size) array. Both cost O(primitives) a level.
    """
    m = len(starts)
    best_cost = np.full(m, np.inf, np.float32)
    best_axis = np.zeros(m, np.int64)
    best_left = np.zeros(m, np.int64)
    large = np.flatnonzero(counts > BINS)
    small_sizes = [int(c) for c in np.unique(counts[counts <= BINS]) if c >= 2]
    if len(large):
        everything = len(large) == m
        if not everything:
            rank = np.full(m, -1)
            rank[large] = np.arange(len(large))
            in_large = rank[segment] >= 0
            seg_l = rank[segment[in_large]]
        else:
            seg_l = segment
        first_l, last_l = starts[large], starts[large] + counts[large] - 1
        k = len(large)

    def axis_candidates(axis):
        """(nodes, cost, left count) of the best splits along `axis`, by node group."""
        candidates = []  # (nodes, cost, left count)
        if len(large):
            c = cents[axis] if everything else cents[axis][in_large]
            bx = boxes[axis] if everything else boxes[axis][in_large]
            cmin, cmax = cents[axis][first_l], cents[axis][last_l]
            extent = cmax - cmin
            scale = np.where(extent > 0, BINS / np.where(extent > 0, extent, 1), 0)
            b = np.minimum(((c - cmin[seg_l]) * scale[seg_l]).astype(np.int64), BINS - 1)
            key = seg_l * BINS + b  # nondecreasing: each node's range is sorted on axis
            run_start = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
            run_lo, run_hi = _segment_boxes(bx, run_start)
            lo = np.full((k * BINS, 3), np.inf, np.float32)
            hi = np.full((k * BINS, 3), -np.inf, np.float32)
            n = np.zeros(k * BINS, np.int64)
            run_key = key[run_start]
            lo[run_key], hi[run_key] = run_lo, run_hi
            n[run_key] = np.diff(np.r_[run_start, len(key)])
            left_area, right_area = _sweep(lo.reshape(k, BINS, 3), hi.reshape(k, BINS, 3))
            left_n = np.cumsum(n.reshape(k, BINS), axis=1)[:, :-1]
            right_n = counts[large, None] - left_n
            cost = left_area * left_n + right_area * right_n
            cost[(left_n == 0) | (right_n == 0)] = np.inf
            j = np.argmin(cost, axis=1)
            rows = np.arange(k)
            candidates.append((large, cost[rows, j], left_n[rows, j]))
        for size in small_sizes:
            nodes_c = np.flatnonzero(counts == size)
            bx = boxes[axis][starts[nodes_c, None] + np.arange(size)]
            left_area, right_area = _sweep(bx[..., :3], bx[..., 3:])
            left_n = np.arange(1, size)
            cost = left_area * left_n + right_area * (size - left_n)
            j = np.argmin(cost, axis=1)
            candidates.append((nodes_c, cost[np.arange(len(nodes_c)), j], j + 1))
        return candidates

    for axis, candidates in enumerate(pool.map(axis_candidates, range(3))):
        for nodes_c, cost, left in candidates:
            better = cost < best_cost[nodes_c]
            chosen = nodes_c[better]
            best_cost[chosen] = cost[better]
            best_axis[chosen] = axis
            best_left[chosen] = left[better]
    return best_cost.astype(np.float64), best_axis, best_left


def _single_leaf(boxes) -> BVH:
    """The tree of one primitive: a root with that leaf and an empty child."""
    nodes = np.zeros((1, NODE_FLOATS), np.float32)
    big = np.finfo(np.float32).max
    nodes[0, :6] = boxes[0]
    nodes[0, 6:9], nodes[0, 9:12] = big, -big
    nodes.view(np.int32)[0, 12:14] = [leaf_ref(0, 1), leaf_ref(0, 0)]
    return BVH(nodes=nodes, prim_ids=np.zeros(1, np.int32), depth=1,
               sah_cost=TRAVERSAL_COST + INTERSECTION_COST)


def build_bvh(spheres: np.ndarray, triangles: np.ndarray, leaf_size: int = LEAF_SIZE) -> BVH:
    """Binned-SAH BVH over every sphere and triangle (see the module docstring).

    Raises
    ------
    ValueError
        No primitives, a leaf size outside 1..15, more primitives than leaf references
        address (2**27), or a tree deeper than the device stack.
    """
    exact = primitive_bounds(spheres, triangles)
    total = len(exact)
    if total == 0:
        raise ValueError("a BVH needs at least one primitive")
    if not 1 <= leaf_size < (1 << _LEAF_BITS):
        raise ValueError(f"leaf_size must be in 1..{(1 << _LEAF_BITS) - 1}, got {leaf_size}")
    if total >= 1 << (31 - _LEAF_BITS):
        raise ValueError(f"{total} primitives: at most {(1 << (31 - _LEAF_BITS)) - 1}")
    # f32 boxes rounded outward (to nearest could shave a sliver off a primitive): every
    # union of them is exact in f32 and contains its primitives.
    boxes = np.concatenate([
        np.nextafter(exact[:, :3].astype(np.float32), np.float32(-np.inf)),
        np.nextafter(exact[:, 3:].astype(np.float32), np.float32(np.inf))], axis=1)
    if total == 1:
        return _single_leaf(boxes)
    centroids = 0.5 * (boxes[:, :3] + boxes[:, 3:])
    # Per axis: the active primitives' ids, boxes and centroid coordinate, sorted along
    # the axis within each node's range (the same ranges in all three).
    ids = [np.argsort(centroids[:, a], kind="stable").astype(np.int32) for a in range(3)]
    bxs = [boxes[i] for i in ids]
    cents = [np.ascontiguousarray(centroids[i, a]) for a, i in enumerate(ids)]
    pool = _pool()
    prim_ids = np.empty(total, np.int32)
    placed = 0
    inner_count = 0
    starts = np.array([0])
    counts = np.array([total])
    slots = np.array([-1])  # each node's place 2 * parent + side; the root has none
    level = 0
    filled = []  # (slots, lo, hi, refs) of each level's nodes, written at the end
    sah_cost = 0.0
    root_area = None
    while True:
        m = len(starts)
        segment = np.repeat(np.arange(m), counts)
        local = np.arange(len(segment)) - np.repeat(starts, counts)
        lo, hi = _segment_boxes(bxs[0], starts)
        area = _half_area(lo.astype(np.float64), hi.astype(np.float64))
        if root_area is None:
            root_area = max(float(area[0]), 1e-30)
        if level < SAH_DEPTH:
            split_cost, axis, left = _best_splits(bxs, cents, starts, counts, segment, pool)
        else:
            split_cost = np.full(m, np.inf)
            axis = np.zeros(m, np.int64)
            left = np.zeros(m, np.int64)
        # Median split where the SAH found none (coincident centroids) or is not used.
        median = ~np.isfinite(split_cost)
        if median.any():
            last = starts + counts - 1
            spread = np.stack([cents[a][last] - cents[a][starts] for a in range(3)], axis=1)
            axis[median] = np.argmax(spread[median], axis=1)
            left[median] = counts[median] // 2
        with np.errstate(invalid="ignore", over="ignore"):
            sah_split = TRAVERSAL_COST + INTERSECTION_COST * split_cost / np.maximum(area, 1e-30)
        leaf = (counts <= leaf_size) & (INTERSECTION_COST * counts <= sah_split)
        leaf |= counts == 1
        if level == 0:
            leaf[:] = False  # the root is an inner node (one primitive: _single_leaf)
        leaf_nodes = np.flatnonzero(leaf)
        if len(leaf_nodes):
            members = ids[0][leaf[segment]]
            prim_ids[placed:placed + len(members)] = members
            firsts = placed + np.r_[0, np.cumsum(counts[leaf_nodes])[:-1]]
            placed += len(members)
            filled.append((slots[leaf_nodes], lo[leaf_nodes], hi[leaf_nodes],
                           leaf_ref(firsts, counts[leaf_nodes])))
            sah_cost += INTERSECTION_COST * float(np.sum(area[leaf_nodes] * counts[leaf_nodes]))
        inner = np.flatnonzero(~leaf)
        if len(inner) == 0:
            break
        node_ids = inner_count + np.arange(len(inner))
        inner_count += len(inner)
        sah_cost += TRAVERSAL_COST * float(np.sum(area[inner]))
        filled.append((slots[inner], lo[inner], hi[inner], node_ids))
        # Which primitives go left: a prefix of each splitting node's range in the order
        # of its split axis.
        split = ~leaf
        is_left = np.zeros(total, bool)
        for a in range(3):
            chosen = split[segment] & (axis[segment] == a) & (local < left[segment])
            is_left[ids[a][chosen]] = True
        keep = split[segment]
        everything = bool(keep.all())
        rank = np.full(m, -1)
        rank[inner] = np.arange(len(inner))
        seg = rank[segment if everything else segment[keep]]
        inner_counts = counts[inner]
        left_counts = left[inner]
        new_starts = np.r_[0, np.cumsum(inner_counts)[:-1]]
        local_k = np.arange(len(seg)) - new_starts[seg]

        def partition(a):
            """Axis a's arrays, each splitting node's left primitives first (stable)."""
            order = ids[a] if everything else ids[a][keep]
            flags = is_left[order]
            before = np.cumsum(flags) - flags  # left elements before each (exclusive)
            left_before = before - before[new_starts][seg]
            position = new_starts[seg] + np.where(flags, left_before,
                                                  left_counts[seg] + local_k - left_before)
            fresh_ids = np.empty_like(order)
            fresh_ids[position] = order
            bx = bxs[a] if everything else bxs[a][keep]
            fresh_bx = np.empty_like(bx)
            fresh_bx[position] = bx
            cen = cents[a] if everything else cents[a][keep]
            fresh_cen = np.empty_like(cen)
            fresh_cen[position] = cen
            return fresh_ids, fresh_bx, fresh_cen

        ids, bxs, cents = (list(x) for x in zip(*pool.map(partition, range(3))))
        starts = np.stack([new_starts, new_starts + left_counts], axis=1).reshape(-1)
        counts = np.stack([left_counts, inner_counts - left_counts], axis=1).reshape(-1)
        slots = np.stack([2 * node_ids, 2 * node_ids + 1], axis=1).reshape(-1)
        level += 1
    depth = level  # levels holding inner nodes: the stack holds at most one per level
    if depth > STACK_SIZE:
        raise ValueError(f"BVH depth {depth} needs more than the device stack's "
                         f"{STACK_SIZE} entries")
    if placed != total:
        raise AssertionError(f"the BVH build placed {placed} of {total} primitives")
    big = np.finfo(np.float32).max
    lo_all = np.full((2 * inner_count, 3), big, np.float32)  # empty children: inverted
    hi_all = np.full((2 * inner_count, 3), -big, np.float32)
    ref_all = np.full(2 * inner_count, leaf_ref(0, 0), np.int64)
    for slot, lo, hi, ref in filled:
        child = slot >= 0
        lo_all[slot[child]] = lo[child]
        hi_all[slot[child]] = hi[child]
        ref_all[slot[child]] = ref[child]
    nodes = np.zeros((inner_count, NODE_FLOATS), np.float32)
    nodes[:, :12] = np.concatenate([lo_all, hi_all], axis=1).reshape(inner_count, 12)
    nodes.view(np.int32)[:, 12:14] = ref_all.reshape(inner_count, 2)
    return BVH(nodes=nodes, prim_ids=prim_ids, depth=depth, sah_cost=sah_cost / root_area)


@cupric.device_function
def child_entry(nodes, node, side, origin, inv_dir, t_min, t_max):
    """Where the ray enters child `side` (0 or 1) of inner node `node`: the slab test on
    its box, t = (plane - origin) * inv_dir (a difference first: exact for planes close
    to the origin, where origin * inv_dir would cancel). Returns the entry distance
    (>= t_min), or -1 when the ray misses the box in (t_min, t_max)."""
    base = side * 6
    tx0 = (nodes[node, base + 0] - origin.x) * inv_dir.x
    tx1 = (nodes[node, base + 3] - origin.x) * inv_dir.x
    ty0 = (nodes[node, base + 1] - origin.y) * inv_dir.y
    ty1 = (nodes[node, base + 4] - origin.y) * inv_dir.y
    tz0 = (nodes[node, base + 2] - origin.z) * inv_dir.z
    tz1 = (nodes[node, base + 5] - origin.z) * inv_dir.z
    near = max(max(min(tx0, tx1), min(ty0, ty1)), max(min(tz0, tz1), t_min))
    far = min(min(max(tx0, tx1), max(ty0, ty1)), min(max(tz0, tz1), t_max))
    if near <= far:
        return near
    return f32(-1.0)


@cupric.device_function
def intersect_leaf(ref, prim_ids, spheres, triangles, origin, direction, t_min, closest, hit):
    """Test the primitives of leaf reference `ref` (< 0); returns the new (closest, hit)."""
    code = ~ref
    first = code >> i32(4)
    count = spheres.shape[0]
    for j in range(first, first + (code & i32(15))):
        prim = prim_ids[j]
        if prim < count:
            t = hit_sphere(spheres, prim, origin, direction, t_min, closest)
        else:
            t = hit_triangle(triangles, prim - count, origin, direction, t_min, closest)
        if t > t_min:
            closest = t
            hit = prim
    return closest, hit


@cupric.device_function
def safe_inverse(d):
    """1/d, with |d| < 1e-20 taken as 1e-20 of its sign: finite slabs, never 0 * inf
    (NaN) for a ray that runs in a box's plane."""
    if abs(d) < f32(1e-20):
        return f32(1e20) if d >= f32(0.0) else f32(-1e20)
    return f32(1.0) / d


@cupric.device_function
def closest_hit(stack, nodes, prim_ids, spheres, triangles, origin, direction, t_min,
                t_max):
    """(t, primitive) of the nearest hit in (t_min, t_max), primitive -1 for none.

    `stack` is the caller's local i32 array of STACK_SIZE entries. At each inner node both
    children's boxes are tested (one 64-byte row); leaves that the ray enters are tested
    at once, and of two inner children the nearer is entered first, the other pushed.
    A popped node's boxes are tested again against the closest hit found meanwhile.
    """
    inv_dir = float3(safe_inverse(direction.x), safe_inverse(direction.y),
                     safe_inverse(direction.z))
    closest = t_max
    hit = i32(-1)
    node = i32(0)
    top = i32(0)
    while node >= 0:
        near0 = child_entry(nodes, node, 0, origin, inv_dir, t_min, closest)
        near1 = child_entry(nodes, node, 1, origin, inv_dir, t_min, closest)
        ref0 = bits.bitcast(nodes[node, 12], i32)
        ref1 = bits.bitcast(nodes[node, 13], i32)
        enter0 = near0 >= f32(0.0)
        enter1 = near1 >= f32(0.0)
        if enter0 and ref0 < 0:
            closest, hit = intersect_leaf(ref0, prim_ids, spheres, triangles, origin,
                                          direction, t_min, closest, hit)
            enter0 = False
        if enter1 and ref1 < 0:
            closest, hit = intersect_leaf(ref1, prim_ids, spheres, triangles, origin,
                                          direction, t_min, closest, hit)
            enter1 = False
        if enter0 and enter1:
            if near1 < near0:
                node = ref1
                stack[top] = ref0
            else:
                node = ref0
                stack[top] = ref1
            top += 1
        elif enter0:
            node = ref0
        elif enter1:
            node = ref1
        elif top > 0:
            top -= 1
            node = stack[top]
        else:
            node = i32(-1)
    return closest, hit
