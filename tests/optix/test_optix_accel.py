"""CPU lane: acceleration-structure build inputs and denoiser images are validated before
any OptiX call, and packed into the structs OptiX reads at the offsets of the API
reference (OptixBuildInput: 4-byte type, union at 8, padded to 1024)."""

from __future__ import annotations

import numpy as np
import pytest

import cupric.optix.api as ox
from cupric.optix import lib
from cupric.optix.accel import (BUILD_INPUT_TYPES, INDEX_FORMATS, VERTEX_FORMATS, accel_ffi,
                                build_inputs_struct, builtin_is_options_struct,
                                foreign_pointer)
from cupric.optix.denoiser import PIXEL_FORMATS, denoiser_ffi, denoiser_layers

from optix_helpers import FakeDeviceArray

BASE = 0x7F0000000000


def _u32(raw: bytes, offset: int) -> int:
    return int.from_bytes(raw[offset:offset + 4], "little")


def _u64(raw: bytes, offset: int) -> int:
    return int.from_bytes(raw[offset:offset + 8], "little")


def _packed(inputs):
    array, keep = build_inputs_struct(inputs)
    ffi = accel_ffi()
    return bytes(ffi.buffer(array)), array, keep


def test_struct_layouts():
    ffi = accel_ffi()
    assert ffi.sizeof("OptixBuildInput") == 1032
    assert ffi.offsetof("OptixBuildInput", "triangleArray") == 8
    assert ffi.sizeof("OptixAccelEmitDesc") == 16
    assert ffi.sizeof("OptixBuiltinISOptions") == 16
    assert ox.INSTANCE_DTYPE.itemsize == 80
    assert ox.INSTANCE_DTYPE.fields["traversable_handle"][1] == 64
    # Structs shared with cupric.optix._declarations keep their declared layout.
    assert lib.ffi.sizeof("OptixAccelBuildOptions") == 20
    assert lib.ffi.offsetof("OptixAccelBuildOptions", "operation") == 4
    assert lib.ffi.sizeof("OptixAccelBufferSizes") == 24
    assert lib.OPTIX_BUILD_OPERATION_BUILD == 0x2161


def test_indexed_triangles_pack():
    vertices = FakeDeviceArray((5, 3), "f4", ptr=BASE)
    indices = FakeDeviceArray((4, 3), "u4", ptr=BASE + 0x1000)
    triangles = ox.TriangleInput(vertices, indices, flags="disable_anyhit",
                                 primitive_index_offset=7)
    assert triangles.num_primitives == 4
    raw, array, keep = _packed([triangles])
    assert _u32(raw, 0) == BUILD_INPUT_TYPES["triangles"] == 0x2141
    ffi = accel_ffi()
    tri = array[0].triangleArray
    assert tri.vertexBuffers[0] == BASE
    assert _u32(raw, 8 + 8) == 5                    # numVertices
    assert _u32(raw, 8 + 12) == VERTEX_FORMATS[("f4", 3)] == 0x2121
    assert _u32(raw, 8 + 16) == 12                  # vertexStrideInBytes
    assert _u64(raw, 8 + 24) == BASE + 0x1000       # indexBuffer
    assert _u32(raw, 8 + 32) == 4                   # numIndexTriplets
    assert _u32(raw, 8 + 36) == INDEX_FORMATS["u4"] == 0x2103
    assert _u32(raw, 8 + 40) == 12                  # indexStrideInBytes
    assert tri.flags[0] == 1 and tri.numSbtRecords == 1
    assert _u32(raw, 8 + 88) == 7                   # primitiveIndexOffset
    assert ffi.offsetof("OptixBuildInputTriangleArray", "primitiveIndexOffset") == 88
    assert raw[8 + 96:] == bytes(len(raw) - 104)    # micromaps and padding: zero


def test_triangle_list_strided_vertices_and_sbt_records():
    # Vertices inside a 32-byte vertex struct: rows strided, xyz contiguous.
    vertices = FakeDeviceArray((6, 3), "f4", ptr=BASE, strides=(32, 4))
    offsets = FakeDeviceArray((2,), "u1", ptr=BASE + 0x100)
    triangles = ox.TriangleInput(vertices, flags=["none", "disable_anyhit|"
                                                  "disable_triangle_face_culling"],
                                 sbt_index_offsets=offsets)
    assert triangles.num_primitives == 2 and triangles.vertex_stride == 32
    raw, array, keep = _packed([triangles])
    tri = array[0].triangleArray
    assert tri.indexBuffer == 0 and tri.indexFormat == 0
    assert tri.numSbtRecords == 2 and [tri.flags[0], tri.flags[1]] == [0, 5]
    assert tri.sbtIndexOffsetBuffer == BASE + 0x100
    assert (tri.sbtIndexOffsetSizeInBytes, tri.sbtIndexOffsetStrideInBytes) == (1, 1)


def test_half_and_2d_vertex_formats():
    assert ox.TriangleInput(FakeDeviceArray((3, 3), "f2")).vertex_format == 0x2123
    assert ox.TriangleInput(FakeDeviceArray((3, 2), "f4")).vertex_format == 0x2122


@pytest.mark.parametrize("make, match", [
    (lambda: ox.TriangleInput(np.zeros((3, 3), "f4")), "host NumPy"),
    (lambda: ox.TriangleInput(FakeDeviceArray((3, 4), "f4")), "shape"),
    (lambda: ox.TriangleInput(FakeDeviceArray((3, 3), "f8")), "float32"),
    (lambda: ox.TriangleInput(FakeDeviceArray((4, 3), "f4")), "multiple of 3"),
    (lambda: ox.TriangleInput(FakeDeviceArray((0, 3), "f4")), "empty"),
    (lambda: ox.TriangleInput(FakeDeviceArray((3, 3), "f4", strides=(12, 8))),
     "contiguous"),
    (lambda: ox.TriangleInput(FakeDeviceArray((3, 3), "f4", strides=(8, 4))), "overlap"),
    (lambda: ox.TriangleInput(FakeDeviceArray((3, 3), "f4", strides=(14, 4))),
     "multiple of 4"),
    (lambda: ox.TriangleInput(FakeDeviceArray((3, 3), "f4", ptr=BASE + 2)), "aligned"),
    (lambda: ox.TriangleInput(FakeDeviceArray((3, 3), "f4"),
                              FakeDeviceArray((1, 3), "i4")), "uint32 or uint16"),
    (lambda: ox.TriangleInput(FakeDeviceArray((3, 3), "f4"),
                              FakeDeviceArray((1, 4), "u4")), "shape"),
    (lambda: ox.TriangleInput(FakeDeviceArray((3, 3), "f4"), flags=["none", "none"]),
     "sbt_index_offsets"),
    (lambda: ox.TriangleInput(FakeDeviceArray((3, 3), "f4"), flags="no_culling"),
     "unknown geometry flag"),
    (lambda: ox.TriangleInput(FakeDeviceArray((3, 3), "f4"), flags=["none", "none"],
                              sbt_index_offsets=FakeDeviceArray((2,), "u4")), "2 sbt"),
    (lambda: ox.TriangleInput(FakeDeviceArray((3, 3), "f4"),
                              pre_transform=FakeDeviceArray((12,), "f4", ptr=BASE + 4)),
     "16-byte"),
    (lambda: ox.CustomPrimitiveInput(FakeDeviceArray((2, 4), "f4")), "shape"),
    (lambda: ox.CustomPrimitiveInput(FakeDeviceArray((2, 6), "f4", ptr=BASE + 4)),
     "aligned"),
    (lambda: ox.SphereInput(FakeDeviceArray((3, 3), "f4"), FakeDeviceArray((2,), "f4")),
     "2 radii"),
    (lambda: ox.SphereInput(FakeDeviceArray((3, 3), "f4"), FakeDeviceArray((3,), "f8")),
     "float32|f4"),
    (lambda: ox.CurveInput("bezier", FakeDeviceArray((4, 3), "f4"),
                           FakeDeviceArray((4,), "f4"), FakeDeviceArray((1,), "u4")),
     "curve_type"),
    (lambda: ox.CurveInput("round_linear", FakeDeviceArray((4, 3), "f4"),
                           FakeDeviceArray((3,), "f4"), FakeDeviceArray((1,), "u4")),
     "3 widths"),
    (lambda: ox.InstanceInput(FakeDeviceArray((2,), "f4")), "INSTANCE_DTYPE"),
    (lambda: ox.InstanceInput(FakeDeviceArray((2,), ox.INSTANCE_DTYPE, ptr=BASE + 8)),
     "16-byte"),
])
def test_build_input_validation(make, match):
    with pytest.raises((TypeError, ValueError), match=match):
        make()


def test_custom_sphere_curve_instance_inputs_pack():
    aabbs = ox.CustomPrimitiveInput(FakeDeviceArray((3, 6), "f4", ptr=BASE))
    raw, array, _ = _packed([aabbs])
    assert _u32(raw, 0) == 0x2142
    custom = array[0].customPrimitiveArray
    assert custom.aabbBuffers[0] == BASE and custom.numPrimitives == 3
    assert custom.strideInBytes == 24 and custom.numSbtRecords == 1

    spheres = ox.SphereInput(FakeDeviceArray((4, 3), "f4", ptr=BASE),
                             FakeDeviceArray((1,), "f4", ptr=BASE + 0x100))
    raw, array, _ = _packed([spheres])
    assert _u32(raw, 0) == 0x2146
    sphere = array[0].sphereArray
    assert sphere.numVertices == 4 and sphere.singleRadius == 1
    assert sphere.radiusBuffers[0] == BASE + 0x100 and sphere.vertexStrideInBytes == 12

    curves = ox.CurveInput("round_cubic_bspline", FakeDeviceArray((6, 3), "f4", ptr=BASE),
                           FakeDeviceArray((6,), "f4", ptr=BASE + 0x200),
                           FakeDeviceArray((3,), "u4", ptr=BASE + 0x300), endcaps="on")
    raw, array, _ = _packed([curves])
    assert _u32(raw, 0) == 0x2145
    curve = array[0].curveArray
    assert (curve.curveType, curve.numPrimitives, curve.numVertices) == (0x2502, 3, 6)
    assert curve.indexBuffer == BASE + 0x300 and curve.endcapFlags == 1
    assert curve.widthBuffers[0] == BASE + 0x200 and curve.widthStrideInBytes == 4

    instances = ox.InstanceInput(FakeDeviceArray((5,), ox.INSTANCE_DTYPE, ptr=BASE))
    raw, array, _ = _packed([instances])
    assert _u32(raw, 0) == 0x2143
    assert _u64(raw, 8) == BASE and _u32(raw, 16) == 5


def test_build_inputs_must_be_of_one_kind():
    triangles = ox.TriangleInput(FakeDeviceArray((3, 3), "f4"))
    aabbs = ox.CustomPrimitiveInput(FakeDeviceArray((1, 6), "f4"))
    with pytest.raises(ValueError, match="one kind"):
        build_inputs_struct([triangles, aabbs])
    with pytest.raises(ValueError, match="at least one"):
        build_inputs_struct([])
    raw, array, _ = _packed([triangles, ox.TriangleInput(FakeDeviceArray((6, 3), "f4"))])
    assert len(raw) == 2 * 1032 and array[1].triangleArray.numVertices == 6


def test_make_instances():
    transforms = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    records = ox.make_instances([0x1000, 0x2000], transforms, sbt_offsets=[0, 2],
                                visibility_masks=[255, 1])
    assert records.dtype == ox.INSTANCE_DTYPE
    raw = records.view(np.uint8).reshape(2, 80)
    assert np.array_equal(raw[1, :48].copy().view("f4"), transforms[1].ravel())
    assert raw[:, 48:52].copy().view("u4").ravel().tolist() == [0, 1]    # instance ids
    assert raw[:, 52:56].copy().view("u4").ravel().tolist() == [0, 2]    # sbt offsets
    assert raw[:, 56:60].copy().view("u4").ravel().tolist() == [255, 1]  # masks
    assert raw[:, 64:72].copy().view("u8").ravel().tolist() == [0x1000, 0x2000]
    identity = ox.make_instances([1])
    assert np.array_equal(identity["transform"][0], ox.IDENTITY_TRANSFORM)
    with pytest.raises(ValueError, match="8-bit"):
        ox.make_instances([1], visibility_masks=256)
    with pytest.raises(ValueError, match="shape"):
        ox.make_instances([1, 2], np.zeros((2, 4, 4)))


def test_foreign_pointers_and_builtin_options():
    struct = builtin_is_options_struct(0x2506, False, 16)
    pointer = foreign_pointer(struct, "OptixBuiltinISOptions *")
    assert lib.ffi.typeof(pointer) is lib.ffi.typeof("OptixBuiltinISOptions *")
    assert int(lib.ffi.cast("uintptr_t", pointer)) == \
        int(accel_ffi().cast("uintptr_t", struct))
    assert (struct.builtinISModuleType, struct.buildFlags) == (0x2506, 16)


# -- denoiser -----------------------------------------------------------------------------------

def test_denoiser_struct_layouts():
    ffi = denoiser_ffi()
    assert ffi.sizeof("OptixImage2D") == 32
    assert ffi.sizeof("OptixDenoiserLayer") == 104
    assert ffi.sizeof("OptixDenoiserGuideLayer") == 192
    assert ffi.sizeof("OptixDenoiserParams") == 32
    assert ffi.offsetof("OptixDenoiserParams", "hdrAverageColor") == 16
    assert ffi.sizeof("OptixDenoiserOptions") == 12
    assert ffi.sizeof("OptixDenoiserSizes") == 56


def test_denoiser_layers():
    color = FakeDeviceArray((4, 5, 3), "f4", ptr=BASE)
    output = FakeDeviceArray((4, 5, 3), "f4", ptr=BASE + 0x1000)
    albedo = FakeDeviceArray((4, 5, 3), "f4", ptr=BASE + 0x2000)
    normal = FakeDeviceArray((4, 5, 3), "f4", ptr=BASE + 0x3000)
    options = ox.DenoiserOptions(model="hdr", guide_albedo=True, guide_normal=True)
    layer, guides, keep = denoiser_layers(options, (8, 8), color, output, albedo, normal)
    assert (layer.input.data, layer.input.width, layer.input.height) == (BASE, 5, 4)
    assert (layer.input.rowStrideInBytes, layer.input.pixelStrideInBytes) == (60, 12)
    assert layer.input.format == PIXEL_FORMATS[("f4", 3)] == 0x2203
    assert layer.output.data == BASE + 0x1000
    assert guides.albedo.data == BASE + 0x2000 and guides.normal.data == BASE + 0x3000
    assert guides.flow.data == 0
    rgba = FakeDeviceArray((4, 5, 4), "f2")
    layer, _, _ = denoiser_layers(ox.DenoiserOptions(model="ldr"), None, rgba, rgba)
    assert layer.input.format == 0x2202


@pytest.mark.parametrize("change, match", [
    ({"albedo": None}, "guide_albedo=True"),
    ({"output": FakeDeviceArray((4, 6, 3), "f4")}, "output is"),
    ({"output": FakeDeviceArray((4, 5, 4), "f4")}, "pixel format"),
    ({"normal": FakeDeviceArray((3, 5, 3), "f4")}, "normal is"),
    ({"color": FakeDeviceArray((4, 5), "f4")}, "height, width, channels"),
    ({"color": FakeDeviceArray((4, 5, 3), "f8")}, "pixel format"),
    ({"color": np.zeros((4, 5, 3), "f4")}, "host NumPy"),
    ({"max_size": (4, 4)}, "exceeds the set-up size"),
])
def test_denoiser_layer_errors(change, match):
    args = {"color": FakeDeviceArray((4, 5, 3), "f4"),
            "output": FakeDeviceArray((4, 5, 3), "f4"),
            "albedo": FakeDeviceArray((4, 5, 3), "f4"),
            "normal": FakeDeviceArray((4, 5, 3), "f4"), "max_size": None}
    args.update(change)
    options = ox.DenoiserOptions(guide_albedo=True, guide_normal=True)
    with pytest.raises((TypeError, ValueError), match=match):
        denoiser_layers(options, args["max_size"], args["color"], args["output"],
                        args["albedo"], args["normal"])


def test_unexpected_guide_is_refused():
    image = FakeDeviceArray((2, 2, 3), "f4")
    with pytest.raises(ValueError, match="without guide_albedo"):
        denoiser_layers(ox.DenoiserOptions(), None, image, image, albedo=image)
