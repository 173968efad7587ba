"""CPU lane: the host side of cupric.optix up to the OptiX calls. Options validate when
made; SBT records pack headers and data where OptiX reads them; program-group, pipeline
and table structs are filled as the API reference lays them out (checked against
cupric.optix._declarations); stack sizes; launch-parameter packing; and importing or
using all of this never opens libnvoptix."""

from __future__ import annotations

import numpy as np
import pytest

import cupric.optix.api as ox
from cupric.optix import lib
from cupric.optix.launch import check_dims, pack_launch_params
from cupric.optix.module import module_compile_options_struct, pipeline_compile_options_struct
from cupric.optix.pipeline import (GROUP_KINDS, StackSizes, accumulate_stack_sizes,
                                   compute_stack_sizes, program_group_desc)
from cupric.optix.program import launch_params_dtype
from cupric.optix.sbt import sbt_struct
from cupric.types import ArrayType, f32, i32, u64

from optix_helpers import FakeDeviceArray, FakeGroup, FakeModule

ffi = lib.ffi


# -- options ---------------------------------------------------------------------------------

@pytest.mark.parametrize("make", [
    lambda: ox.ContextOptions(validation=1),
    lambda: ox.ContextOptions(log_level="verbose"),
    lambda: ox.ContextOptions(log_callback="print"),
    lambda: ox.ContextOptions(cache_sizes=(10, 5)),
    lambda: ox.ContextOptions(cache_sizes=(1, 2, 3)),
    lambda: ox.ContextOptions(cache_location=""),
    lambda: ox.ModuleCompileOptions(max_registers=-1),
    lambda: ox.ModuleCompileOptions(opt_level=4),
    lambda: ox.ModuleCompileOptions(opt_level=True),
    lambda: ox.ModuleCompileOptions(debug_level="verbose"),
    lambda: ox.PipelineCompileOptions(num_payload_values=33),
    lambda: ox.PipelineCompileOptions(num_attribute_values=9),
    lambda: ox.PipelineCompileOptions(num_attribute_values=1),  # triangles need 2
    lambda: ox.PipelineCompileOptions(traversable_graph="two_level"),
    lambda: ox.PipelineCompileOptions(exception_flags=("debug",)),
    lambda: ox.PipelineCompileOptions(exception_flags=("user", "user")),
    lambda: ox.PipelineCompileOptions(primitive_types=()),
    lambda: ox.PipelineCompileOptions(primitive_types=("cube",)),
    lambda: ox.PipelineCompileOptions(launch_params_name="not an identifier"),
    lambda: ox.PipelineLinkOptions(max_trace_depth=32),
    lambda: ox.PipelineLinkOptions(max_traversable_depth=0),
    lambda: ox.AccelBuildOptions(prefer="fast"),
    lambda: ox.AccelBuildOptions(allow_update="yes"),
    lambda: ox.DenoiserOptions(model="ldr2"),
    lambda: ox.DenoiserOptions(guide_normal=True),
])
def test_bad_options_raise_when_made(make):
    with pytest.raises(ValueError):
        make()


def test_options_are_frozen_and_normalized():
    options = ox.PipelineCompileOptions(exception_flags="user", primitive_types=["sphere"],
                                        num_attribute_values=1)
    assert options.exception_flags == ("user",) and options.primitive_types == ("sphere",)
    assert options.exception_mask == 4 and options.primitive_type_mask == 1 << 6
    with pytest.raises(Exception):
        options.num_payload_values = 3
    assert hash(options) == hash(ox.PipelineCompileOptions(
        exception_flags=("user",), primitive_types=("sphere",), num_attribute_values=1))
    assert ox.AccelBuildOptions(allow_update=True, allow_compaction=True).build_flags == \
        1 | 2 | 4
    assert ox.AccelBuildOptions(prefer="fast_build").build_flags == 8
    assert ox.DenoiserOptions(model="aov").model_kind == 0x2324


def test_module_compile_options_struct():
    struct = module_compile_options_struct(
        ox.ModuleCompileOptions(max_registers=64, opt_level=3, debug_level="minimal"))
    assert ffi.typeof(struct) is ffi.typeof("OptixModuleCompileOptions *")
    assert (struct.maxRegisterCount, struct.optLevel, struct.debugLevel) == \
        (64, lib.OPTIX_COMPILE_OPTIMIZATION_LEVEL_3, lib.OPTIX_COMPILE_DEBUG_LEVEL_MINIMAL)
    assert struct.numPayloadTypes == 0 and struct.payloadTypes == ffi.NULL
    default = module_compile_options_struct(ox.ModuleCompileOptions())
    assert (default.optLevel, default.debugLevel) == (lib.OPTIX_COMPILE_OPTIMIZATION_DEFAULT,
                                                       lib.OPTIX_COMPILE_DEBUG_LEVEL_DEFAULT)


def test_pipeline_compile_options_struct():
    options = ox.PipelineCompileOptions(
        num_payload_values=4, num_attribute_values=3, traversable_graph="single_gas",
        exception_flags=("stack_overflow", "trace_depth"),
        primitive_types=("triangle", "sphere"), launch_params_name="params")
    struct, keep = pipeline_compile_options_struct(options)
    assert keep
    assert struct.numPayloadValues == 4 and struct.numAttributeValues == 3
    assert struct.traversableGraphFlags == 1 and struct.exceptionFlags == 3
    assert struct.usesPrimitiveTypeFlags == (1 << 31) | (1 << 6)
    assert ffi.string(struct.pipelineLaunchParamsVariableName) == b"params"
    assert struct.usesMotionBlur == 0 and struct.allowClusteredGeometry == 0


# -- shader binding table ------------------------------------------------------------------------

def test_record_dtype_layout():
    header_only = ox.record_dtype()
    assert header_only.itemsize == 32 and header_only.names == ("header",)
    rgb = ox.record_dtype([("color", "f4", 3)])
    assert rgb.itemsize == 48 and rgb.fields["color"][1] == 32
    mixed = ox.record_dtype(np.dtype([("flag", "u1"), ("ptr", "u8"), ("scale", "f4")],
                                     align=True))
    assert mixed.fields["flag"][1] == 32 and mixed.fields["ptr"][1] == 40
    assert mixed.fields["scale"][1] == 48 and mixed.itemsize == 64
    for dtype in (header_only, rgb, mixed):
        assert dtype.itemsize % ox.SBT_RECORD_ALIGNMENT == 0
        assert dtype.fields["header"][1] == 0
        assert dtype.fields["header"][0].itemsize == ox.SBT_RECORD_HEADER_SIZE
    with pytest.raises(ValueError, match="header"):
        ox.record_dtype([("header", "f4")])
    with pytest.raises(ValueError, match="structured"):
        ox.record_dtype("f4")


def test_make_records_packs_headers_and_data():
    groups = [FakeGroup(1), FakeGroup(2), FakeGroup(1)]
    data = np.array([(1.0, 2.0, 3.0), (4.0, 5.0, 6.0), (7.0, 8.0, 9.0)], dtype="f4")
    structured = np.zeros(3, dtype=[("rgb", "f4", 3), ("id", "u4")])
    structured["rgb"] = data
    structured["id"] = [10, 11, 12]
    records = ox.make_records(groups, structured)
    raw = records.view(np.uint8).reshape(3, -1)
    assert records.dtype.itemsize == 48
    assert (raw[:, :32] == np.array([[1], [2], [1]], dtype=np.uint8)).all()
    assert np.array_equal(raw[:, 32:44].copy().view("f4"), data)
    assert raw[:, 44:48].copy().view("u4").ravel().tolist() == [10, 11, 12]
    # One group for every record; dict and tuple rows.
    single = ox.make_records(FakeGroup(9), [{"k": 3}, (4,)], dtype=[("k", "i4")])
    assert single["k"].tolist() == [3, 4]
    assert bytes(single.view(np.uint8)[:32]) == bytes([9]) * 32
    assert ox.make_records(FakeGroup(5)).shape == (1,)


def test_make_records_validation():
    with pytest.raises(ValueError, match="program groups for"):
        ox.make_records([FakeGroup(1)], [(1,), (2,)], dtype=[("k", "i4")])
    with pytest.raises(ValueError, match="unknown fields"):
        ox.make_records(FakeGroup(1), [{"j": 1}], dtype=[("k", "i4")])
    with pytest.raises(ValueError, match="pass dtype"):
        ox.make_records(FakeGroup(1), [(1,)])

    class ShortHeader:
        def pack_header(self):
            return b"\0" * 16

    with pytest.raises(ValueError, match="32 bytes"):
        ox.make_records(ShortHeader())


def test_create_sbt_validates_before_the_gpu():
    raygen = ox.make_records(FakeGroup(1))
    with pytest.raises(ValueError, match="exactly one record"):
        ox.create_sbt(raygen=ox.make_records([FakeGroup(1), FakeGroup(2)]))
    with pytest.raises(TypeError, match="make_records"):
        ox.create_sbt(raygen=raygen, miss=np.zeros(2, "f4"))
    with pytest.raises(TypeError, match="create_sbt"):
        ox.ShaderBindingTable()


def test_sbt_struct_matches_the_declared_layout():
    table = sbt_struct({"raygen": 0x1000, "miss": 0x2000, "hitgroup": 0x3000},
                       {"miss": 32, "hitgroup": 48}, {"miss": 2, "hitgroup": 5})
    assert ffi.sizeof("OptixShaderBindingTable") == 64
    assert table.raygenRecord == 0x1000 and table.exceptionRecord == 0
    assert (table.missRecordBase, table.missRecordStrideInBytes, table.missRecordCount) == \
        (0x2000, 32, 2)
    assert (table.hitgroupRecordBase, table.hitgroupRecordStrideInBytes,
            table.hitgroupRecordCount) == (0x3000, 48, 5)
    raw = bytes(ffi.buffer(table))
    assert int.from_bytes(raw[24:32], "little") == 32 | (2 << 32)


# -- program groups, pipelines ---------------------------------------------------------------------

def test_program_group_descriptors():
    module = FakeModule(0x1000, entries={"__raygen__rg", "__closesthit__ch",
                                         "__intersection__box", "__direct_callable__f"})
    desc, keep = program_group_desc("raygen", {"raygen": (module, "rg")})
    assert desc.kind == GROUP_KINDS["raygen"] == lib.OPTIX_PROGRAM_GROUP_KIND_RAYGEN
    assert int(ffi.cast("uintptr_t", desc.raygen.module)) == 0x1000
    assert ffi.string(desc.raygen.entryFunctionName) == b"__raygen__rg"

    builtin = FakeModule(0x2000, builtin="sphere")
    desc, keep = program_group_desc("hitgroup", {
        "closest_hit": (module, "ch"), "any_hit": (module, None),
        "intersection": (builtin, None)})
    assert desc.kind == lib.OPTIX_PROGRAM_GROUP_KIND_HITGROUP
    assert ffi.string(desc.hitgroup.entryFunctionNameCH) == b"__closesthit__ch"
    assert desc.hitgroup.moduleAH == ffi.NULL and desc.hitgroup.entryFunctionNameAH == ffi.NULL
    assert int(ffi.cast("uintptr_t", desc.hitgroup.moduleIS)) == 0x2000
    assert desc.hitgroup.entryFunctionNameIS == ffi.NULL  # built-in intersection

    desc, _ = program_group_desc("miss", {"miss": (None, None)})
    assert desc.kind == lib.OPTIX_PROGRAM_GROUP_KIND_MISS and desc.miss.module == ffi.NULL

    desc, _ = program_group_desc("callables", {"direct": (module, "__direct_callable__f")})
    assert ffi.string(desc.callables.entryFunctionNameDC) == b"__direct_callable__f"
    assert ffi.sizeof("OptixProgramGroupDesc") == 56


def test_program_group_descriptor_errors():
    module = FakeModule(0x1000, entries={"__raygen__rg"})
    with pytest.raises(ValueError, match="kind"):
        program_group_desc("shadow", {})
    with pytest.raises(ValueError, match="takes"):
        program_group_desc("raygen", {"miss": (module, "rg")})
    with pytest.raises(ValueError, match="needs its program"):
        program_group_desc("raygen", {})
    with pytest.raises(ValueError, match="needs a module"):
        program_group_desc("miss", {"miss": (None, "ms")})
    with pytest.raises(ValueError, match="no program"):
        program_group_desc("raygen", {"raygen": (module, "other")})
    with pytest.raises(ValueError, match="at least one"):
        program_group_desc("hitgroup", {})
    with pytest.raises(ValueError, match="only provides intersection"):
        program_group_desc("hitgroup", {"closest_hit": (FakeModule(1, builtin="sphere"),
                                                        "ch")})


def test_stack_sizes():
    groups = [StackSizes(css_rg=100, css_ms=0, css_ch=0, css_ah=0, css_is=0, css_cc=0,
                         dss_dc=0),
              StackSizes(css_rg=0, css_ms=40, css_ch=0, css_ah=0, css_is=0, css_cc=0,
                         dss_dc=0),
              StackSizes(css_rg=0, css_ms=0, css_ch=60, css_ah=16, css_is=24, css_cc=8,
                         dss_dc=32)]
    total = accumulate_stack_sizes(groups)
    assert total == {"css_rg": 100, "css_ms": 40, "css_ch": 60, "css_ah": 16, "css_is": 24,
                     "css_cc": 8, "dss_dc": 32}
    # Depth 1: raygen + max(ch/ms, is + ah).
    assert compute_stack_sizes(total, ox.PipelineLinkOptions(max_trace_depth=1)) == \
        (0, 0, 100 + 60)
    # Depth 3, two callable levels of each kind.
    link = ox.PipelineLinkOptions(max_trace_depth=3, max_cc_depth=2, max_dc_depth=2)
    cc = 2 * 8
    assert compute_stack_sizes(total, link) == (64, 64, 100 + cc + 2 * (60 + cc) + (60 + cc))
    # Depth 0: raygen only.
    assert compute_stack_sizes(total, ox.PipelineLinkOptions(max_trace_depth=0)) == \
        (0, 0, 100)
    struct = ffi.new("OptixStackSizes *", [1, 2, 3, 4, 5, 6, 7])
    assert list(StackSizes.from_struct(struct).values()) == [1, 2, 3, 4, 5, 6, 7]


def test_objects_have_no_public_constructors():
    for cls in (ox.DeviceContext, ox.Module, ox.ProgramGroup, ox.Pipeline,
                ox.AccelStructure, ox.Denoiser):
        with pytest.raises(TypeError, match="with"):
            cls()


# -- launch parameters --------------------------------------------------------------------------

def test_pack_launch_params():
    types = (ArrayType(f32, 2, "C"), u64, i32)
    dtype = launch_params_dtype(types)
    image = FakeDeviceArray((4, 6), "f4", ptr=0x10000)
    record = pack_launch_params(types, dtype, (image, 0xABCDEF, -3))
    assert record.dtype.itemsize == 56
    raw = record.view(np.uint8)
    assert raw[:48].copy().view("<u8").tolist() == [0x10000, 4, 6, 6, 1, 0xABCDEF]
    assert raw[48:52].copy().view("<i4").tolist() == [-3]
    # A strided view passes its strides in elements.
    view = FakeDeviceArray((4, 3), "f4", ptr=0x20000, strides=(24, 8))
    any_layout = (ArrayType(f32, 2, "A"),)
    record = pack_launch_params(any_layout, launch_params_dtype(any_layout), (view,))
    assert record.view("<u8").tolist() == [0x20000, 4, 3, 6, 2]


def test_pack_launch_params_errors():
    types = (ArrayType(f32, 2, "C"), u64)
    dtype = launch_params_dtype(types)
    good = FakeDeviceArray((4, 6), "f4")
    with pytest.raises(TypeError, match="take 2 launch parameters"):
        pack_launch_params(types, dtype, (good,))
    with pytest.raises(TypeError, match="host NumPy"):
        pack_launch_params(types, dtype, (np.zeros((4, 6), "f4"), 1))
    with pytest.raises(TypeError, match="float64"):
        pack_launch_params(types, dtype, (FakeDeviceArray((4, 6), "f8"), 1))
    with pytest.raises(TypeError, match="1-D array"):
        pack_launch_params(types, dtype, (FakeDeviceArray((24,), "f4"), 1))
    with pytest.raises(TypeError, match="C-contiguous"):
        pack_launch_params(types, dtype, (FakeDeviceArray((4, 6), "f4", strides=(4, 16)), 1))
    with pytest.raises(TypeError, match="does not fit"):
        pack_launch_params(types, dtype, (good, -1))


def test_check_dims():
    assert check_dims(7) == (7, 1, 1)
    assert check_dims((4, 3)) == (4, 3, 1)
    assert check_dims((2, 3, 4)) == (2, 3, 4)
    for bad in ((), (0, 1), (1, 2, 3, 4), (2.0,), (2**16, 2**15)):
        with pytest.raises(ValueError):
            check_dims(bad)


def test_nothing_here_opened_the_optix_runtime():
    # Every test above ran without the driver: declarations only.
    assert lib._state.runtime is None and lib._state.table is None
