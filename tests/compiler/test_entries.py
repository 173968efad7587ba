"""The compiler's hook for custom entry points (`cupric.compiler.entries`): functions
wrapped in parameterless entries that read their parameters from a `.const` variable."""

from __future__ import annotations

import numpy as np
import pytest

from cupric.compiler.entries import Entry, emit_module, params_dtype
from cupric.compiler.errors import CompileError
from cupric.types import Array, bool_, f32, i32


def scale(out: Array[f32, 1], factor: f32, flag: bool_):
    if flag:
        out[0] = out[0] * factor


def nothing():
    pass


def returns():
    return 1


PARAMS = (Array[f32, 1], f32, bool_)


def test_entries_read_their_parameters_from_the_constant_variable():
    ir = emit_module([Entry("__first__scale", scale, True), Entry("__second__x", nothing, False)],
                     PARAMS, params_name="my_params", module_name="unit")
    assert "@my_params = addrspace(4) externally_initialized global" in ir
    assert "define void @__first__scale()" in ir and "define void @__second__x()" in ir
    # the pointer, one shape and one stride, the f32, the bool as one byte
    assert "{float addrspace(1)*, i64, i64, float, i8} zeroinitializer, align 16" in ir
    assert ir.count('!"kernel", i32 1') == 2


def test_entry_state_is_seen_by_the_lowering_rules(monkeypatch):
    from cupric.compiler.codegen import module as codegen_module
    seen = []
    real = codegen_module.ModuleCodegen.device_function

    def spy(self, typed):
        seen.append((self.lowering_state.get("module_item"),
                     self.lowering_state.get("entry_item")))
        return real(self, typed)
    monkeypatch.setattr(codegen_module.ModuleCodegen, "device_function", spy)
    emit_module([Entry("__a__one", nothing, False, {"entry_item": 1}),
                 Entry("__a__two", nothing, False, {"entry_item": 2})], (),
                params_name="p", state={"module_item": "m"})
    assert seen == [("m", 1), ("m", 2)]


def test_an_entry_returning_a_value_is_refused():
    with pytest.raises(CompileError, match="OptiX program returns\\(\\) must not return") \
            as info:
        emit_module([Entry("__x__r", returns, False)], (), params_name="p",
                     what="OptiX program", return_hint="use payloads")
    assert "use payloads" in str(info.value)


def test_params_dtype_matches_the_struct():
    dtype = params_dtype(PARAMS)
    assert dtype.names == ("p0", "p1", "p2", "p3", "p4")
    assert [dtype.fields[n][1] for n in dtype.names] == [0, 8, 16, 24, 28]
    assert dtype.itemsize == 32
    assert params_dtype(()).itemsize == 0
    assert dtype.fields["p0"][0] == np.uint64


def test_the_module_compiles_to_ptx_entries():
    from cupric.compiler import nvvm, toolchain
    from cupric.compiler.errors import ToolchainNotFoundError
    from cupric.compiler.options import CompileOptions
    try:
        toolchain.libnvvm()
    except ToolchainNotFoundError as exc:
        pytest.skip(f"no libNVVM here: {exc}")
    ir = emit_module([Entry("__first__scale", scale, True)], PARAMS, params_name="my_params")
    ptx = nvvm.compile_ir([ir], CompileOptions(arch="sm_90")).ptx
    assert ".entry __first__scale()" in ptx
    assert ".const .align 16 .b8 my_params[32]" in ptx
