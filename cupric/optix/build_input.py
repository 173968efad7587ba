"""Build inputs of acceleration structures: what a GAS or an IAS is built from.

Triangles (indexed or not), custom primitives given by their AABBs, spheres and curves
make a geometry acceleration structure; instances (a transform plus the handle of
another structure each) an instance acceleration structure. Every input is validated
(formats, strides, counts, alignment) when it is made, before OptiX sees it, and fills
its `OptixBuildInput` (`build_inputs_struct`) when a build is queued.
"""

from __future__ import annotations

import numpy as np

from .structs import (AABB_BUFFER_BYTE_ALIGNMENT, BUILD_INPUT_TYPES, CURVE_TYPES,
                      GEOMETRY_FLAGS, GEOMETRY_TRANSFORM_BYTE_ALIGNMENT, IDENTITY_TRANSFORM,
                      INDEX_FORMATS, INSTANCE_BYTE_ALIGNMENT, INSTANCE_DTYPE,
                      VERTEX_FORMATS, _ENDCAPS, _TRANSFORM_FORMAT_MATRIX_FLOAT12, _View,
                      accel_ffi, device_view)

__all__ = ["TriangleInput", "CustomPrimitiveInput", "SphereInput", "CurveInput",
           "InstanceInput", "make_instances", "build_inputs_struct"]


def _dtype_key(dtype: np.dtype) -> str:
    return f"{dtype.kind}{dtype.itemsize}"


def _u32(name: str, value: int) -> int:
    if not 0 <= value < 2**32:
        raise ValueError(f"{name} = {value} does not fit OptiX's 32-bit field")
    return value


def _rows(view: _View, what: str, columns: tuple, row_align: int) -> tuple[int, int]:
    """(count, row stride in bytes) of a (n, k) array whose k components are packed."""
    if len(view.shape) != 2 or view.shape[1] not in columns:
        raise ValueError(f"{what} must have shape (n, {' or '.join(map(str, columns))}), "
                         f"got {view.shape}")
    count, width = view.shape
    if view.strides[1] != view.dtype.itemsize:
        raise ValueError(f"{what}: the {width} components of each row must be contiguous "
                         f"(column stride {view.strides[1]}, item size {view.dtype.itemsize})")
    stride = view.strides[0] if count > 1 else width * view.dtype.itemsize
    if stride < width * view.dtype.itemsize:
        raise ValueError(f"{what}: row stride {stride} is smaller than a row "
                         f"({width * view.dtype.itemsize} bytes); rows must not overlap")
    if stride % row_align:
        raise ValueError(f"{what}: row stride {stride} is not a multiple of {row_align} bytes")
    if view.ptr % row_align:
        raise ValueError(f"{what}: device address {view.ptr:#x} is not {row_align}-byte "
                         f"aligned")
    return count, _u32(f"{what} stride", stride)


def _vector(view: _View, what: str, kinds: tuple) -> tuple[int, int]:
    """(count, stride) of a 1-D device array of one of `kinds` ("u4", ...)."""
    if len(view.shape) != 1:
        raise ValueError(f"{what} must be 1-D, got shape {view.shape}")
    if _dtype_key(view.dtype) not in kinds:
        raise ValueError(f"{what} must have dtype {' or '.join(kinds)}, got {view.dtype}")
    stride = view.strides[0] if view.shape[0] > 1 else view.dtype.itemsize
    if stride <= 0 or stride % view.dtype.itemsize:
        raise ValueError(f"{what}: stride {stride} is not a positive multiple of the item "
                         f"size {view.dtype.itemsize}")
    if view.ptr % view.dtype.itemsize:
        raise ValueError(f"{what}: device address {view.ptr:#x} is not aligned to its "
                         f"item size")
    return view.shape[0], _u32(f"{what} stride", stride)


def _flags(flags, what: str) -> list[int]:
    """Geometry flags per SBT record: a name, an int, or a sequence of those."""
    items = [flags] if isinstance(flags, (str, int)) else list(flags)
    if not items:
        raise ValueError(f"{what}: give at least one geometry flag entry (one per SBT record)")
    out = []
    for item in items:
        if isinstance(item, str):
            names = item.split("|")
            value = 0
            for name in names:
                name = name.strip()
                if name not in GEOMETRY_FLAGS:
                    raise ValueError(f"{what}: unknown geometry flag {name!r}; known: "
                                     f"{', '.join(GEOMETRY_FLAGS)}")
                value |= GEOMETRY_FLAGS[name]
            out.append(value)
        elif isinstance(item, int) and not isinstance(item, bool):
            if item & ~0x7 or item < 0:
                raise ValueError(f"{what}: geometry flags {item:#x} are not OptixGeometryFlags")
            out.append(item)
        else:
            raise TypeError(f"{what}: geometry flags are names or ints, got {item!r}")
    return out


class _SbtIndexing:
    """Per-primitive SBT record offsets, needed with more than one SBT record."""

    def __init__(self, flags, sbt_index_offsets, count: int, what: str) -> None:
        self.flags = _flags(flags, f"{what} flags")
        self.offsets = None
        self.offset_size = self.offset_stride = 0
        if len(self.flags) > 1:
            if sbt_index_offsets is None:
                raise ValueError(f"{what}: {len(self.flags)} SBT records need "
                                 f"sbt_index_offsets (one per primitive)")
            self.offsets = device_view(sbt_index_offsets, f"{what} sbt_index_offsets")
            n, stride = _vector(self.offsets, f"{what} sbt_index_offsets", ("u1", "u2", "u4"))
            if n != count:
                raise ValueError(f"{what}: {n} sbt_index_offsets for {count} primitives")
            self.offset_size = self.offsets.dtype.itemsize
            self.offset_stride = stride
        elif sbt_index_offsets is not None:
            raise ValueError(f"{what}: sbt_index_offsets only apply with several SBT records "
                             f"(give one flags entry per record)")

    def fill(self, array, keep: list) -> None:
        ffi = accel_ffi()
        flags = ffi.new("unsigned int[]", self.flags)
        keep.append(flags)
        array.flags = flags
        array.numSbtRecords = len(self.flags)
        if self.offsets is not None:
            array.sbtIndexOffsetBuffer = self.offsets.ptr
            array.sbtIndexOffsetSizeInBytes = self.offset_size
            array.sbtIndexOffsetStrideInBytes = self.offset_stride
            keep.append(self.offsets.owner)


# -- build inputs ---------------------------------------------------------------------------------

class TriangleInput:
    """Triangles for a GAS: a vertex array and, for indexed triangles, an index array.

    Parameters
    ----------
    vertices : device array, shape (n, 3) or (n, 2)
        float32, float16 or int16 (snorm16) components; rows may be strided (a view of a
        wider vertex struct), components contiguous.
    indices : device array, shape (m, 3), optional
        uint32 or uint16 vertex indices; without it every three vertices are a triangle.
    flags : str, int or sequence
        Geometry flags ("none", "disable_anyhit", "require_single_anyhit_call",
        "disable_triangle_face_culling", combined with "|"), one entry per SBT record.
    sbt_index_offsets : device array, optional
        uint8/16/32 SBT record offset per triangle (needed with several records).
    pre_transform : device array of 12 float32, optional
        A 3x4 row-major transform applied to the vertices at build time (16-byte aligned).
    primitive_index_offset : int
        Added to `optix.primitive_index()` of this input's triangles.

    Raises
    ------
    TypeError, ValueError
        At construction, for anything OptiX would refuse: host arrays, formats, shapes,
        strides, alignments, counts.
    """

    kind = "triangles"

    def __init__(self, vertices, indices=None, *, flags="none", sbt_index_offsets=None,
                 pre_transform=None, primitive_index_offset: int = 0) -> None:
        self.vertices = device_view(vertices, "vertices")
        key = (_dtype_key(self.vertices.dtype), self.vertices.shape[-1]
               if len(self.vertices.shape) == 2 else None)
        if key not in VERTEX_FORMATS:
            raise ValueError(f"vertices must be (n, 3) or (n, 2) of float32, float16 or int16; "
                             f"got shape {self.vertices.shape} of {self.vertices.dtype}")
        self.vertex_format = VERTEX_FORMATS[key]
        self.num_vertices, self.vertex_stride = _rows(self.vertices, "vertices", (2, 3),
                                                      self.vertices.dtype.itemsize)
        if self.num_vertices == 0:
            raise ValueError("vertices is empty")
        _u32("vertex count", self.num_vertices)
        if indices is None:
            self.indices = None
            if self.num_vertices % 3:
                raise ValueError(f"{self.num_vertices} vertices without indices: a triangle "
                                 f"list needs a multiple of 3")
            self.num_triangles = self.num_vertices // 3
            self.index_format = 0
            self.index_stride = 0
        else:
            self.indices = device_view(indices, "indices")
            kind = _dtype_key(self.indices.dtype)
            if kind not in INDEX_FORMATS:
                raise ValueError(f"indices must be uint32 or uint16, got {self.indices.dtype}")
            self.index_format = INDEX_FORMATS[kind]
            self.num_triangles, self.index_stride = _rows(self.indices, "indices", (3,),
                                                          self.indices.dtype.itemsize)
            if self.num_triangles == 0:
                raise ValueError("indices is empty")
        _u32("triangle count", self.num_triangles)
        self.sbt = _SbtIndexing(flags, sbt_index_offsets, self.num_triangles, "triangles")
        self.pre_transform = None
        if pre_transform is not None:
            self.pre_transform = device_view(pre_transform, "pre_transform")
            if self.pre_transform.shape not in ((12,), (3, 4)) or \
                    _dtype_key(self.pre_transform.dtype) != "f4":
                raise ValueError("pre_transform must be 12 float32 (a 3x4 row-major matrix)")
            if self.pre_transform.ptr % GEOMETRY_TRANSFORM_BYTE_ALIGNMENT:
                raise ValueError("pre_transform must be 16-byte aligned")
        if isinstance(primitive_index_offset, bool) or not isinstance(primitive_index_offset,
                                                                      int):
            raise TypeError("primitive_index_offset must be an int")
        self.primitive_index_offset = _u32("primitive_index_offset", primitive_index_offset)

    @property
    def num_primitives(self) -> int:
        return self.num_triangles

    def fill(self, build_input, keep: list) -> None:
        ffi = accel_ffi()
        build_input.type = BUILD_INPUT_TYPES["triangles"]
        array = build_input.triangleArray
        vertex_buffers = ffi.new("CUdeviceptr[]", [self.vertices.ptr])
        keep += [vertex_buffers, self.vertices.owner]
        array.vertexBuffers = vertex_buffers
        array.numVertices = self.num_vertices
        array.vertexFormat = self.vertex_format
        array.vertexStrideInBytes = self.vertex_stride
        if self.indices is not None:
            keep.append(self.indices.owner)
            array.indexBuffer = self.indices.ptr
            array.numIndexTriplets = self.num_triangles
            array.indexFormat = self.index_format
            array.indexStrideInBytes = self.index_stride
        if self.pre_transform is not None:
            keep.append(self.pre_transform.owner)
            array.preTransform = self.pre_transform.ptr
            array.transformFormat = _TRANSFORM_FORMAT_MATRIX_FLOAT12
        array.primitiveIndexOffset = self.primitive_index_offset
        self.sbt.fill(array, keep)


class CustomPrimitiveInput:
    """Custom primitives for a GAS, given by their bounding boxes; an intersection
    program decides hits.

    Parameters
    ----------
    aabbs : device array, shape (n, 6) float32
        minX, minY, minZ, maxX, maxY, maxZ per primitive; rows 8-byte aligned.
    flags, sbt_index_offsets, primitive_index_offset
        As for `TriangleInput`.
    """

    kind = "custom_primitives"

    def __init__(self, aabbs, *, flags="none", sbt_index_offsets=None,
                 primitive_index_offset: int = 0) -> None:
        self.aabbs = device_view(aabbs, "aabbs")
        if _dtype_key(self.aabbs.dtype) != "f4":
            raise ValueError(f"aabbs must be float32, got {self.aabbs.dtype}")
        self.num_primitives, self.stride = _rows(self.aabbs, "aabbs", (6,),
                                                 AABB_BUFFER_BYTE_ALIGNMENT)
        if self.num_primitives == 0:
            raise ValueError("aabbs is empty")
        self.sbt = _SbtIndexing(flags, sbt_index_offsets, self.num_primitives, "aabbs")
        self.primitive_index_offset = _u32("primitive_index_offset", int(primitive_index_offset))

    def fill(self, build_input, keep: list) -> None:
        ffi = accel_ffi()
        build_input.type = BUILD_INPUT_TYPES["custom_primitives"]
        array = build_input.customPrimitiveArray
        buffers = ffi.new("CUdeviceptr[]", [self.aabbs.ptr])
        keep += [buffers, self.aabbs.owner]
        array.aabbBuffers = buffers
        array.numPrimitives = self.num_primitives
        array.strideInBytes = self.stride
        array.primitiveIndexOffset = self.primitive_index_offset
        self.sbt.fill(array, keep)


class SphereInput:
    """Built-in spheres for a GAS (needs "sphere" in the pipeline's primitive types and
    the built-in sphere intersection module).

    Parameters
    ----------
    centers : device array, shape (n, 3) float32
    radii : device array, shape (n,) or (1,) float32
        One radius per sphere, or a single radius for all.
    flags, sbt_index_offsets, primitive_index_offset
        As for `TriangleInput`.
    """

    kind = "spheres"

    def __init__(self, centers, radii, *, flags="none", sbt_index_offsets=None,
                 primitive_index_offset: int = 0) -> None:
        self.centers = device_view(centers, "centers")
        if _dtype_key(self.centers.dtype) != "f4":
            raise ValueError(f"centers must be float32, got {self.centers.dtype}")
        self.num_primitives, self.center_stride = _rows(self.centers, "centers", (3,), 4)
        if self.num_primitives == 0:
            raise ValueError("centers is empty")
        self.radii = device_view(radii, "radii")
        count, self.radius_stride = _vector(self.radii, "radii", ("f4",))
        self.single_radius = count == 1 and self.num_primitives != 1
        if count != self.num_primitives and not self.single_radius:
            raise ValueError(f"{count} radii for {self.num_primitives} spheres (give one per "
                             f"sphere, or one for all)")
        self.sbt = _SbtIndexing(flags, sbt_index_offsets, self.num_primitives, "spheres")
        self.primitive_index_offset = _u32("primitive_index_offset", int(primitive_index_offset))

    def fill(self, build_input, keep: list) -> None:
        ffi = accel_ffi()
        build_input.type = BUILD_INPUT_TYPES["spheres"]
        array = build_input.sphereArray
        centers = ffi.new("CUdeviceptr[]", [self.centers.ptr])
        radii = ffi.new("CUdeviceptr[]", [self.radii.ptr])
        keep += [centers, radii, self.centers.owner, self.radii.owner]
        array.vertexBuffers = centers
        array.vertexStrideInBytes = self.center_stride
        array.numVertices = self.num_primitives
        array.radiusBuffers = radii
        array.radiusStrideInBytes = self.radius_stride
        array.singleRadius = int(self.single_radius)
        array.primitiveIndexOffset = self.primitive_index_offset
        self.sbt.fill(array, keep)


class CurveInput:
    """Built-in curves for a GAS (needs the curve type in the pipeline's primitive types
    and its built-in intersection module).

    Parameters
    ----------
    curve_type : str
        A `CURVE_TYPES` name, e.g. "round_cubic_bspline" or "round_linear".
    vertices : device array, shape (n, 3) float32
        Control points.
    widths : device array, shape (n,) float32
        Curve width at each control point.
    indices : device array, shape (m,) uint32
        Index of the first control point of each segment (m segments).
    flags : str or int
        One geometry flags entry (curves have one SBT record per input).
    primitive_index_offset : int
    endcaps : str
        "default" or "on" (end caps on round curves).
    """

    kind = "curves"

    def __init__(self, curve_type: str, vertices, widths, indices, *, flags="none",
                 primitive_index_offset: int = 0, endcaps: str = "default") -> None:
        if curve_type not in CURVE_TYPES:
            raise ValueError(f"curve_type must be one of {', '.join(CURVE_TYPES)}, got "
                             f"{curve_type!r}")
        if endcaps not in _ENDCAPS:
            raise ValueError(f"endcaps must be 'default' or 'on', got {endcaps!r}")
        self.curve_type = curve_type
        self.endcaps = endcaps
        self.vertices = device_view(vertices, "vertices")
        if _dtype_key(self.vertices.dtype) != "f4":
            raise ValueError(f"curve vertices must be float32, got {self.vertices.dtype}")
        self.num_vertices, self.vertex_stride = _rows(self.vertices, "vertices", (3,), 4)
        self.widths = device_view(widths, "widths")
        count, self.width_stride = _vector(self.widths, "widths", ("f4",))
        if count != self.num_vertices:
            raise ValueError(f"{count} widths for {self.num_vertices} curve vertices")
        self.indices = device_view(indices, "indices")
        self.num_primitives, self.index_stride = _vector(self.indices, "indices", ("u4",))
        if self.num_primitives == 0:
            raise ValueError("indices is empty: a curve input needs segments")
        flag_list = _flags(flags, "curve flags")
        if len(flag_list) != 1:
            raise ValueError("a curve input has one SBT record: give one flags entry")
        self.flag = flag_list[0]
        self.primitive_index_offset = _u32("primitive_index_offset", int(primitive_index_offset))

    def fill(self, build_input, keep: list) -> None:
        ffi = accel_ffi()
        build_input.type = BUILD_INPUT_TYPES["curves"]
        array = build_input.curveArray
        vertices = ffi.new("CUdeviceptr[]", [self.vertices.ptr])
        widths = ffi.new("CUdeviceptr[]", [self.widths.ptr])
        keep += [vertices, widths, self.vertices.owner, self.widths.owner, self.indices.owner]
        array.curveType = CURVE_TYPES[self.curve_type]
        array.numPrimitives = self.num_primitives
        array.vertexBuffers = vertices
        array.numVertices = self.num_vertices
        array.vertexStrideInBytes = self.vertex_stride
        array.widthBuffers = widths
        array.widthStrideInBytes = self.width_stride
        array.indexBuffer = self.indices.ptr
        array.indexStrideInBytes = self.index_stride
        array.flag = self.flag
        array.primitiveIndexOffset = self.primitive_index_offset
        array.endcapFlags = _ENDCAPS[self.endcaps]


def make_instances(handles, transforms=None, *, instance_ids=None, sbt_offsets=None,
                   visibility_masks=255, flags=0) -> np.ndarray:
    """Host `INSTANCE_DTYPE` records for an instance AS (copy them to the device).

    Parameters
    ----------
    handles : sequence of int or AccelStructure
        The child traversable handle of each instance.
    transforms : array-like, shape (n, 3, 4) or (n, 12), optional
        Object-to-world 3x4 row-major transforms; default identity.
    instance_ids, sbt_offsets : sequence of int, optional
        Default: the instance's index / 0.
    visibility_masks, flags : int or sequence of int
    """
    handles = [int(h.handle) if hasattr(h, "handle") else int(h) for h in handles]
    n = len(handles)
    if n == 0:
        raise ValueError("an instance AS needs at least one instance")
    out = np.zeros(n, dtype=INSTANCE_DTYPE)
    if transforms is None:
        out["transform"] = IDENTITY_TRANSFORM
    else:
        t = np.asarray(transforms, dtype=np.float32)
        if t.shape not in ((n, 3, 4), (n, 12)):
            raise ValueError(f"transforms must have shape ({n}, 3, 4) or ({n}, 12), got "
                             f"{t.shape}")
        out["transform"] = t.reshape(n, 12)
    out["instance_id"] = np.arange(n) if instance_ids is None else instance_ids
    out["sbt_offset"] = 0 if sbt_offsets is None else sbt_offsets
    masks = np.asarray(visibility_masks)
    if np.any(masks < 0) or np.any(masks > 255):
        raise ValueError("visibility masks are 8-bit (0..255)")
    out["visibility_mask"] = masks
    out["flags"] = flags
    out["traversable_handle"] = handles
    return out


class InstanceInput:
    """Instances for an IAS.

    Parameters
    ----------
    instances : device array of INSTANCE_DTYPE, 1-D
        Contiguous (stride 80 bytes) and 16-byte aligned; see `make_instances`.
    """

    kind = "instances"

    def __init__(self, instances) -> None:
        self.instances = device_view(instances, "instances")
        if self.instances.dtype != INSTANCE_DTYPE:
            raise ValueError(f"instances must have cupric.optix.INSTANCE_DTYPE (OptixInstance, "
                             f"80 bytes), got {self.instances.dtype}")
        if len(self.instances.shape) != 1 or self.instances.shape[0] == 0:
            raise ValueError(f"instances must be a non-empty 1-D array, got shape "
                             f"{self.instances.shape}")
        self.num_primitives = self.instances.shape[0]
        stride = self.instances.strides[0] if self.num_primitives > 1 else 80
        if stride != 80:
            raise ValueError(f"instances must be contiguous (stride 80), got {stride}")
        if self.instances.ptr % INSTANCE_BYTE_ALIGNMENT:
            raise ValueError("instances must be 16-byte aligned")

    def fill(self, build_input, keep: list) -> None:
        build_input.type = BUILD_INPUT_TYPES["instances"]
        keep.append(self.instances.owner)
        build_input.instanceArray.instances = self.instances.ptr
        build_input.instanceArray.numInstances = self.num_primitives
        build_input.instanceArray.instanceStride = 0  # 0: tightly packed OptixInstances


def build_inputs_struct(inputs):
    """An ``OptixBuildInput[n]`` (of `accel_ffi()`) for validated inputs, and the objects
    it refers to (keep them alive until the build is queued).

    Raises
    ------
    ValueError
        Mixed kinds (a GAS takes inputs of one primitive kind; an IAS one instance input).
    """
    inputs = list(inputs)
    if not inputs:
        raise ValueError("an acceleration structure needs at least one build input")
    for item in inputs:
        if not hasattr(item, "fill") or not hasattr(item, "kind"):
            raise TypeError(f"expected build inputs (TriangleInput, CustomPrimitiveInput, "
                            f"SphereInput, CurveInput, InstanceInput), got {item!r}")
    kinds = {item.kind for item in inputs}
    if len(kinds) > 1:
        raise ValueError(f"the build inputs of one acceleration structure must be of one "
                         f"kind, got {', '.join(sorted(kinds))}")
    if "instances" in kinds and len(inputs) > 1:
        raise ValueError("an instance acceleration structure takes one InstanceInput")
    ffi = accel_ffi()
    array = ffi.new("OptixBuildInput[]", len(inputs))
    keep: list = []
    for k, item in enumerate(inputs):
        item.fill(array[k], keep)
    return array, keep
