"""OptiX: cupric's own declarations, the SDK-header path, and their agreement."""

from __future__ import annotations

import os

import cffi
import pytest

from cupric.bindings_gen import cache, libraries
from cupric.bindings_gen.generate import generate
from cupric.optix import _declarations

from bindings_helpers import c_layouts, cffi_layouts, compiler


@pytest.fixture(scope="module")
def own_ffi():
    ffi = cffi.FFI()
    ffi.cdef(_declarations.cdef())
    return ffi


def test_function_table_for_abi_105(own_ffi):
    names = [field for field, _ in own_ffi.typeof("OptixFunctionTable").fields]
    assert len(names) == 52
    assert names[:4] == ["optixGetErrorName", "optixGetErrorString",
                         "optixDeviceContextCreate", "optixDeviceContextDestroy"]
    assert names[-1] == "optixDenoiserCreateWithUserModel"
    assert own_ffi.sizeof("OptixFunctionTable") == 52 * own_ffi.sizeof("void *")
    assert _declarations.ABI_VERSION == 105


def test_own_declarations_match_the_c_compiler(own_ffi, tmp_path):
    cc = compiler()
    if cc is None:
        pytest.skip("no C compiler on PATH")
    header = tmp_path / "optix_own.h"
    header.write_text("#include <stddef.h>\n" + _declarations.cdef())
    ours = cffi_layouts(own_ffi)
    theirs = c_layouts(cc, [str(tmp_path)], str(header), ours, str(tmp_path))
    assert {k: v for k, v in ours.items() if theirs[k] != v} == {}
    assert ours["OptixDeviceContextOptions"][0] == 24
    assert ours["OptixShaderBindingTable"][0] == 64
    assert ours["OptixProgramGroupDesc"][0] == 56
    assert ours["OptixPipelineCompileOptions"][0] == 48
    assert ours["OptixModuleCompileOptions"][0] == 40


def test_check_names_results(own_ffi):
    from cupric.optix import lib

    assert lib.check(0) is None
    with pytest.raises(lib.OptixError) as info:
        lib.check(7801)
    assert info.value.name == "OPTIX_ERROR_UNSUPPORTED_ABI_VERSION"
    assert "ABI" in info.value.description
    assert lib.OPTIX_ERROR_INVALID_VALUE == 7001  # constants need no driver
    assert lib.ffi.sizeof("OptixDeviceContextOptions") == 24


def differences(sdk_ffi, own_ffi) -> list[str]:
    """Where SDK-generated and own declarations disagree (types both declare)."""
    out = []
    sdk_table = [f for f, _ in sdk_ffi.typeof("OptixFunctionTable").fields]
    own_table = [f for f, _ in own_ffi.typeof("OptixFunctionTable").fields]
    if sdk_table != own_table:
        out.append(f"function table: {sdk_table} != {own_table}")
    sdk_layouts, own_layouts = cffi_layouts(sdk_ffi), cffi_layouts(own_ffi)
    for name in sorted(set(sdk_layouts) & set(own_layouts)):
        if sdk_layouts[name] != own_layouts[name]:
            out.append(f"{name}: {sdk_layouts[name]} != {own_layouts[name]}")
    for name in own_ffi.list_types()[0]:
        own_type = own_ffi.typeof(name)
        if own_type.kind != "enum" or name not in sdk_ffi.list_types()[0]:
            continue
        sdk_values = sdk_ffi.typeof(name).relements
        for key, value in own_type.relements.items():
            if key in sdk_values and sdk_values[key] != value:
                out.append(f"{name}.{key}: {sdk_values[key]} != {value}")
    return out


def test_sdk_header_path_on_a_stand_in_sdk(own_ffi, tmp_path):
    # No SDK here: hand the generator cupric's declarations as if they were the SDK's
    # optix_function_table.h. This runs the header path end to end, and `differences`
    # then has to find nothing.
    include = tmp_path / "include"
    include.mkdir()
    (include / "optix_function_table.h").write_text(
        "#include <stddef.h>\n#define OPTIX_VERSION 90000\n#define OPTIX_ABI_VERSION 105\n"
        + _declarations.cdef()
    )
    result = generate(libraries.get("optix"), headers=str(include))
    path = tmp_path / "_cupric_optix.py"
    path.write_text(result.text)
    module = cache.import_module(str(path), "optix_standin")
    assert module.DEFINES["OPTIX_ABI_VERSION"] == 105
    assert module.LIBRARY_VERSION == (90000,)
    assert differences(module.ffi, own_ffi) == []


@pytest.mark.skipif(not os.environ.get("OPTIX_ROOT"), reason="OPTIX_ROOT is not set (no OptiX SDK)")
def test_sdk_headers_agree_with_own_declarations(own_ffi):
    module = cache.load_module(libraries.get("optix"))
    if module.DEFINES.get("OPTIX_ABI_VERSION") != _declarations.ABI_VERSION:
        pytest.skip(f"SDK is for ABI {module.DEFINES.get('OPTIX_ABI_VERSION')}, ours for 105")
    assert differences(module.ffi, own_ffi) == []
