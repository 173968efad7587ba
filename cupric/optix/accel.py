"""Acceleration structures: the BVHs OptiX traverses.

A geometry acceleration structure (GAS) is built from build inputs of one primitive kind
(triangles, indexed triangles, custom primitives given by their AABBs, spheres, curves);
an instance acceleration structure (IAS) from instances, each a transform plus the
handle of another structure. Builds run on a stream into device memory; a build may
allow compaction (copy into a smaller buffer afterwards) and update (refit to moved
vertices or instances without a rebuild). Every build input is validated (formats,
strides, counts, alignment) before OptiX sees it.
"""

from __future__ import annotations

import threading

import numpy as np

from .options import AccelBuildOptions

__all__ = ["TriangleInput", "CustomPrimitiveInput", "SphereInput", "CurveInput",
           "InstanceInput", "AccelStructure", "INSTANCE_DTYPE", "make_instances",
           "build_inputs_struct", "GEOMETRY_FLAGS", "VERTEX_FORMATS", "INDEX_FORMATS",
           "CURVE_TYPES", "BUILD_INPUT_TYPES", "builtin_is_options_struct",
           "foreign_pointer", "accel_ffi", "IDENTITY_TRANSFORM"]

# OptixBuildInputType
BUILD_INPUT_TYPES = {"triangles": 0x2141, "custom_primitives": 0x2142, "instances": 0x2143,
                     "instance_pointers": 0x2144, "curves": 0x2145, "spheres": 0x2146}
# OptixVertexFormat by (NumPy dtype char, components)
VERTEX_FORMATS = {("f4", 3): 0x2121, ("f4", 2): 0x2122, ("f2", 3): 0x2123,
                  ("f2", 2): 0x2124, ("i2", 3): 0x2125, ("i2", 2): 0x2126}
# OptixIndicesFormat by dtype (three indices per triangle)
INDEX_FORMATS = {"u2": 0x2102, "u4": 0x2103}
# OptixGeometryFlags
GEOMETRY_FLAGS = {"none": 0, "disable_anyhit": 1 << 0, "require_single_anyhit_call": 1 << 1,
                  "disable_triangle_face_culling": 1 << 2}
# OptixPrimitiveType of curves
CURVE_TYPES = {"round_quadratic_bspline": 0x2501, "round_cubic_bspline": 0x2502,
               "round_linear": 0x2503, "round_catmullrom": 0x2504,
               "flat_quadratic_bspline": 0x2505, "round_cubic_bezier": 0x2507}
# OptixCurveEndcapFlags
_ENDCAPS = {"default": 0, "on": 1 << 0}
_TRANSFORM_FORMAT_MATRIX_FLOAT12 = 0x21E1
_PROPERTY_COMPACTED_SIZE = 0x2181
_OPERATION_BUILD, _OPERATION_UPDATE = 0x2161, 0x2162

# Alignments the API reference requires of device data.
ACCEL_BUFFER_BYTE_ALIGNMENT = 128
INSTANCE_BYTE_ALIGNMENT = 16
AABB_BUFFER_BYTE_ALIGNMENT = 8
GEOMETRY_TRANSFORM_BYTE_ALIGNMENT = 16

#: OptixInstance as a NumPy dtype (80 bytes).
INSTANCE_DTYPE = np.dtype({
    "names": ["transform", "instance_id", "sbt_offset", "visibility_mask", "flags",
              "traversable_handle", "pad"],
    "formats": [("<f4", (12,)), "<u4", "<u4", "<u4", "<u4", "<u8", ("<u4", (2,))],
    "offsets": [0, 48, 52, 56, 60, 64, 72],
    "itemsize": 80,
})
#: The 3x4 row-major identity, as OptixInstance.transform holds it.
IDENTITY_TRANSFORM = np.array([1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0], dtype=np.float32)

# The build-input structs, declared from the API reference (cupric.optix._declarations
# keeps them opaque). Enums are declared as int, their C size. The union is padded to
# 1024 bytes as in the API; members this module does not fill (opacity and displacement
# micromaps after `transformFormat`) stay zero, meaning "none".
_CDEF = """
typedef unsigned long long CUdeviceptr;

typedef struct OptixBuildInputTriangleArray {
    const CUdeviceptr *vertexBuffers;
    unsigned int numVertices;
    int vertexFormat;
    unsigned int vertexStrideInBytes;
    CUdeviceptr indexBuffer;
    unsigned int numIndexTriplets;
    int indexFormat;
    unsigned int indexStrideInBytes;
    CUdeviceptr preTransform;
    const unsigned int *flags;
    unsigned int numSbtRecords;
    CUdeviceptr sbtIndexOffsetBuffer;
    unsigned int sbtIndexOffsetSizeInBytes;
    unsigned int sbtIndexOffsetStrideInBytes;
    unsigned int primitiveIndexOffset;
    int transformFormat;
} OptixBuildInputTriangleArray;

typedef struct OptixBuildInputCurveArray {
    int curveType;
    unsigned int numPrimitives;
    const CUdeviceptr *vertexBuffers;
    unsigned int numVertices;
    unsigned int vertexStrideInBytes;
    const CUdeviceptr *widthBuffers;
    unsigned int widthStrideInBytes;
    const CUdeviceptr *normalBuffers;
    unsigned int normalStrideInBytes;
    CUdeviceptr indexBuffer;
    unsigned int indexStrideInBytes;
    unsigned int flag;
    unsigned int primitiveIndexOffset;
    unsigned int endcapFlags;
} OptixBuildInputCurveArray;

typedef struct OptixBuildInputSphereArray {
    const CUdeviceptr *vertexBuffers;
    unsigned int vertexStrideInBytes;
    unsigned int numVertices;
    const CUdeviceptr *radiusBuffers;
    unsigned int radiusStrideInBytes;
    int singleRadius;
    const unsigned int *flags;
    unsigned int numSbtRecords;
    CUdeviceptr sbtIndexOffsetBuffer;
    unsigned int sbtIndexOffsetSizeInBytes;
    unsigned int sbtIndexOffsetStrideInBytes;
    unsigned int primitiveIndexOffset;
} OptixBuildInputSphereArray;

typedef struct OptixBuildInputCustomPrimitiveArray {
    const CUdeviceptr *aabbBuffers;
    unsigned int numPrimitives;
    unsigned int strideInBytes;
    const unsigned int *flags;
    unsigned int numSbtRecords;
    CUdeviceptr sbtIndexOffsetBuffer;
    unsigned int sbtIndexOffsetSizeInBytes;
    unsigned int sbtIndexOffsetStrideInBytes;
    unsigned int primitiveIndexOffset;
} OptixBuildInputCustomPrimitiveArray;

typedef struct OptixBuildInputInstanceArray {
    CUdeviceptr instances;
    unsigned int numInstances;
    unsigned int instanceStride;
} OptixBuildInputInstanceArray;

typedef struct OptixBuildInput {
    int type;
    union {
        OptixBuildInputTriangleArray triangleArray;
        OptixBuildInputCurveArray curveArray;
        OptixBuildInputSphereArray sphereArray;
        OptixBuildInputCustomPrimitiveArray customPrimitiveArray;
        OptixBuildInputInstanceArray instanceArray;
        char pad[1024];
    };
} OptixBuildInput;

typedef struct OptixAccelEmitDesc {
    CUdeviceptr result;
    int type;
} OptixAccelEmitDesc;

typedef struct OptixBuiltinISOptions {
    int builtinISModuleType;
    int usesMotionBlur;
    unsigned int buildFlags;
    unsigned int curveEndcapFlags;
} OptixBuiltinISOptions;
"""

_ffi_state: list = []
_ffi_lock = threading.Lock()


def accel_ffi():
    """The cffi FFI holding the build-input declarations (made on first use)."""
    if not _ffi_state:
        with _ffi_lock:
            if not _ffi_state:
                import cffi
                ffi = cffi.FFI()
                ffi.cdef(_CDEF)
                _ffi_state.append(ffi)
    return _ffi_state[0]


def foreign_pointer(cdata, ctype: str):
    """`cdata` (of `accel_ffi()` or the denoiser's FFI) as a pointer of `cupric.optix.lib`'s
    FFI, where those structs are opaque (or, with the SDK headers, declared alike)."""
    from . import lib
    from cffi import FFI
    address = int(FFI().cast("uintptr_t", cdata))
    return lib.ffi.cast(ctype, address)


def builtin_is_options_struct(primitive_type: int, uses_motion_blur: bool, build_flags: int,
                              endcap_flags: int = 0):
    """A filled ``OptixBuiltinISOptions`` (of `accel_ffi()`)."""
    struct = accel_ffi().new("OptixBuiltinISOptions *")
    struct.builtinISModuleType = primitive_type
    struct.usesMotionBlur = int(uses_motion_blur)
    struct.buildFlags = build_flags
    struct.curveEndcapFlags = endcap_flags
    return struct


# -- device array views ------------------------------------------------------------------------

class _View:
    """ptr, shape, strides (bytes), dtype of a device array, and what keeps it alive."""

    __slots__ = ("ptr", "shape", "strides", "dtype", "owner")

    def __init__(self, ptr, shape, strides, dtype, owner) -> None:
        self.ptr = int(ptr)
        self.shape = tuple(int(s) for s in shape)
        self.strides = tuple(int(s) for s in strides)
        self.dtype = np.dtype(dtype)
        self.owner = owner


def _view(obj, what: str) -> _View:
    if isinstance(obj, np.ndarray):
        raise TypeError(f"{what} is a host NumPy array; build inputs read device memory: "
                        f"copy it with cupric.runtime.to_device first")
    if all(hasattr(obj, a) for a in ("ptr", "shape", "strides", "dtype")):
        return _View(obj.ptr, obj.shape, obj.strides, obj.dtype, obj)
    from cupric.runtime.interop import as_device_array
    try:
        array = as_device_array(obj)
    except TypeError as exc:
        raise TypeError(f"{what}: {exc}") from None
    return _View(array.ptr, array.shape, array.strides, array.dtype, array)


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
            self.offsets = _view(sbt_index_offsets, f"{what} sbt_index_offsets")
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
        self.vertices = _view(vertices, "vertices")
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
            self.indices = _view(indices, "indices")
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
            self.pre_transform = _view(pre_transform, "pre_transform")
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
        self.aabbs = _view(aabbs, "aabbs")
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
        self.centers = _view(centers, "centers")
        if _dtype_key(self.centers.dtype) != "f4":
            raise ValueError(f"centers must be float32, got {self.centers.dtype}")
        self.num_primitives, self.center_stride = _rows(self.centers, "centers", (3,), 4)
        if self.num_primitives == 0:
            raise ValueError("centers is empty")
        self.radii = _view(radii, "radii")
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
        self.vertices = _view(vertices, "vertices")
        if _dtype_key(self.vertices.dtype) != "f4":
            raise ValueError(f"curve vertices must be float32, got {self.vertices.dtype}")
        self.num_vertices, self.vertex_stride = _rows(self.vertices, "vertices", (3,), 4)
        self.widths = _view(widths, "widths")
        count, self.width_stride = _vector(self.widths, "widths", ("f4",))
        if count != self.num_vertices:
            raise ValueError(f"{count} widths for {self.num_vertices} curve vertices")
        self.indices = _view(indices, "indices")
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
        self.instances = _view(instances, "instances")
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


def _accel_options_struct(options: AccelBuildOptions, operation: int):
    from . import lib
    struct = lib.ffi.new("OptixAccelBuildOptions *")
    struct.buildFlags = options.build_flags
    struct.operation = operation
    return struct


def _ordered(stream):
    """`stream`, or the legacy default stream (which OptiX uses for stream 0)."""
    from cupric.runtime.memory import LEGACY_STREAM
    return stream if stream is not None else LEGACY_STREAM


def _stream_value(stream):
    from cupric.runtime.memory import stream_handle
    from . import lib
    return stream_handle(stream), lib.ffi.cast("CUstream", stream_handle(stream))


class AccelStructure:
    """A built acceleration structure: device memory and its traversable handle.

    Made by `DeviceContext.build_accel(inputs, options, stream=...)`.

    Attributes
    ----------
    handle : int
        The OptixTraversableHandle to trace or instance.
    kind : str
        "gas" or "ias".
    buffer : DeviceBuffer
        The structure's memory.
    options : AccelBuildOptions
    inputs : list
        The build inputs (kept for `update`).

    Safety
    ------
    OptiX reads the build inputs' device arrays during the build (on `stream`) and the
    structure's memory during every launch: keep them until that work finished. A GAS
    referenced by an IAS must outlive the IAS's use. Instances hold raw handles: OptiX
    cannot check them.

    Thread safety
    -------------
    Builds, updates and compaction of one structure must not run concurrently.
    """

    __slots__ = ("context", "inputs", "options", "buffer", "_handle", "kind", "sizes",
                 "_compacted_size", "_closed")

    def __init__(self, *args, **kwargs) -> None:
        raise TypeError("build acceleration structures with DeviceContext.build_accel(...)")

    @classmethod
    def _build(cls, context, inputs, options, stream) -> "AccelStructure":
        from . import lib
        from cupric.runtime.memory import empty
        if not isinstance(inputs, (list, tuple)):
            inputs = [inputs]
        options = AccelBuildOptions() if options is None else options
        if not isinstance(options, AccelBuildOptions):
            raise TypeError("options must be an AccelBuildOptions")
        array, keep = build_inputs_struct(inputs)
        c_inputs = foreign_pointer(array, "OptixBuildInput *")
        c_options = _accel_options_struct(options, _OPERATION_BUILD)
        context.device.primary_context().make_current()
        sizes = lib.ffi.new("OptixAccelBufferSizes *")
        context._call(lib.optixAccelComputeMemoryUsage, context.handle, c_options, c_inputs,
                      len(inputs), sizes)
        _, c_stream = _stream_value(stream)
        # Scratch memory lives in stream order (legacy default stream without a stream), so
        # freeing it after the build needs no device-wide wait.
        ordered = _ordered(stream)
        temp = empty(max(int(sizes.tempSizeInBytes), 1), np.uint8, stream=ordered)
        output = empty(max(int(sizes.outputSizeInBytes), 1), np.uint8, stream=stream)
        if output.ptr % ACCEL_BUFFER_BYTE_ALIGNMENT or temp.ptr % ACCEL_BUFFER_BYTE_ALIGNMENT:
            raise RuntimeError("device allocation not 128-byte aligned")
        compacted = None
        emit = lib.ffi.NULL
        emit_count = 0
        if options.allow_compaction:
            compacted = empty(1, np.uint64, stream=stream)
            desc = accel_ffi().new("OptixAccelEmitDesc *")
            desc.result = compacted.ptr
            desc.type = _PROPERTY_COMPACTED_SIZE
            keep.append(desc)
            emit = foreign_pointer(desc, "OptixAccelEmitDesc *")
            emit_count = 1
        handle = lib.ffi.new("OptixTraversableHandle *")
        try:
            context._call(lib.optixAccelBuild, context.handle, c_stream, c_options, c_inputs,
                          len(inputs), temp.ptr, int(sizes.tempSizeInBytes), output.ptr,
                          int(sizes.outputSizeInBytes), handle, emit, emit_count)
        except BaseException:
            output.close(stream=stream)
            if compacted is not None:
                compacted.close(stream=stream)
            raise
        finally:
            temp.close(stream=ordered)  # freed in stream order, after the build
        del keep
        self = cls.__new__(cls)
        self.context = context
        self.inputs = list(inputs)
        self.options = options
        self.buffer = output
        self._handle = int(handle[0])
        self.kind = "ias" if inputs[0].kind == "instances" else "gas"
        self.sizes = (int(sizes.outputSizeInBytes), int(sizes.tempSizeInBytes),
                      int(sizes.tempUpdateSizeInBytes))
        self._compacted_size = compacted
        self._closed = False
        return self

    @property
    def handle(self) -> int:
        if self._closed:
            from cupric.runtime.errors import ClosedError
            raise ClosedError("this AccelStructure is closed")
        return self._handle

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def nbytes(self) -> int:
        return self.buffer.nbytes

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{self.buffer.nbytes} bytes"
        return f"<cupric.optix.AccelStructure {self.kind}, {state}>"

    def compacted_size(self, stream=None) -> int:
        """The size compaction would give (waits for the build on `stream`)."""
        if self._compacted_size is None:
            raise ValueError("build with AccelBuildOptions(allow_compaction=True) to compact")
        self.handle  # raises once closed
        if stream is not None:
            stream.synchronize()
        else:
            from cupric.runtime.context import synchronize
            synchronize()
        return int(self._compacted_size.to_numpy()[0])

    def compact(self, stream=None) -> "AccelStructure":
        """A compacted copy of this structure (optixAccelCompact), or self when
        compaction would not save memory. The original stays valid; close it when no
        launch uses it any more.

        Cost
        ----
        Waits for the build to finish to read the compacted size (one synchronization).
        """
        from . import lib
        from cupric.runtime.memory import empty
        size = self.compacted_size(stream)
        if size >= self.buffer.nbytes:
            return self
        output = empty(size, np.uint8, stream=stream)
        _, c_stream = _stream_value(stream)
        handle = lib.ffi.new("OptixTraversableHandle *")
        try:
            self.context._call(lib.optixAccelCompact, self.context.handle, c_stream,
                               self.handle, output.ptr, size, handle)
        except BaseException:
            output.close(stream=stream)
            raise
        other = type(self).__new__(type(self))
        other.context = self.context
        other.inputs = self.inputs
        other.options = self.options
        other.buffer = output
        other._handle = int(handle[0])
        other.kind = self.kind
        other.sizes = (size,) + self.sizes[1:]
        other._compacted_size = None
        other._closed = False
        return other

    def update(self, inputs=None, stream=None) -> None:
        """Refit the structure to moved geometry or instances (OPTIX_BUILD_OPERATION_UPDATE).

        Parameters
        ----------
        inputs : list, optional
            New build inputs with the same kinds and counts (new vertex positions, AABBs,
            transforms); default: the inputs of the build, whose device data changed.
        """
        from . import lib
        from cupric.runtime.memory import empty
        if not self.options.allow_update:
            raise ValueError("build with AccelBuildOptions(allow_update=True) to update")
        self.handle
        if inputs is None:
            inputs = self.inputs
        elif not isinstance(inputs, (list, tuple)):
            inputs = [inputs]
        inputs = list(inputs)
        if len(inputs) != len(self.inputs):
            raise ValueError(f"an update takes {len(self.inputs)} build inputs, as the build")
        for new, old in zip(inputs, self.inputs):
            if new.kind != old.kind or new.num_primitives != old.num_primitives:
                raise ValueError("an update must keep each input's kind and primitive count "
                                 f"({old.kind}, {old.num_primitives})")
        array, keep = build_inputs_struct(inputs)
        c_inputs = foreign_pointer(array, "OptixBuildInput *")
        c_options = _accel_options_struct(self.options, _OPERATION_UPDATE)
        _, c_stream = _stream_value(stream)
        temp_size = self.sizes[2]
        ordered = _ordered(stream)
        temp = empty(max(temp_size, 1), np.uint8, stream=ordered)
        handle = lib.ffi.new("OptixTraversableHandle *", self._handle)
        try:
            self.context._call(lib.optixAccelBuild, self.context.handle, c_stream, c_options,
                               c_inputs, len(inputs), temp.ptr, temp_size, self.buffer.ptr,
                               self.buffer.nbytes, handle, lib.ffi.NULL, 0)
        finally:
            temp.close(stream=ordered)
        del keep
        self.inputs = inputs
        self._handle = int(handle[0])

    def close(self, stream=None) -> None:
        """Free the structure's memory (in `stream` order when given)."""
        if self._closed:
            return
        self._closed = True
        self.buffer.close(stream=stream)
        if self._compacted_size is not None:
            self._compacted_size.close(stream=stream)

    def __enter__(self):
        self.handle
        return self

    def __exit__(self, *exc) -> None:
        self.close()
