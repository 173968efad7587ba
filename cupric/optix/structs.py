"""The OptiX structs cupric fills itself, and device-array views of build-input data.

The build-input structs (`OptixBuildInput` and its members, `OptixInstance`,
`OptixBuiltinISOptions`) are declared here from the OptiX API reference, with the enum
values and alignments they take; `cupric.optix.lib` keeps them opaque, so a filled
struct crosses over as a pointer (`foreign_pointer`).
"""

from __future__ import annotations

import threading

import numpy as np

__all__ = ["BUILD_INPUT_TYPES", "VERTEX_FORMATS", "INDEX_FORMATS", "GEOMETRY_FLAGS",
           "CURVE_TYPES", "ACCEL_BUFFER_BYTE_ALIGNMENT", "INSTANCE_BYTE_ALIGNMENT",
           "AABB_BUFFER_BYTE_ALIGNMENT", "GEOMETRY_TRANSFORM_BYTE_ALIGNMENT",
           "INSTANCE_DTYPE", "IDENTITY_TRANSFORM", "accel_ffi", "foreign_pointer",
           "builtin_is_options_struct", "device_view"]

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


def device_view(obj, what: str) -> _View:
    """A view of the device array `obj` (a DeviceBuffer, or anything with the CUDA Array
    Interface or DLPack); `what` names it in errors. Host arrays are refused."""
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
