"""The IR builder on its own (no libNVVM): type spellings, exact constants, operand type
checks, module text (header, declarations, kernel annotations, metadata), and that its
header agrees with the backend's contract."""

from __future__ import annotations

import math

import pytest

from cupric.compiler import ir
from cupric.compiler.ir import types as ll
from cupric.compiler.ir.values import const_float, const_int


def test_type_spellings():
    assert str(ll.float.pointer(ll.GLOBAL)) == "float addrspace(1)*"
    assert str(ll.i8.pointer()) == "i8*"
    assert str(ll.StructType([ll.i32, ll.ArrayType(ll.i8, 4), ll.double])) == \
        "{i32, [4 x i8], double}"
    fn = ll.FunctionType(ll.void, [ll.float, ll.float.pointer(ll.GLOBAL)])
    assert str(fn) == "void (float, float addrspace(1)*)"
    assert ll.IntType(32) == ll.i32 and hash(ll.IntType(32)) == hash(ll.i32)


def test_constants_are_exact():
    assert const_float(ll.double, 1.0).ref == "0x3FF0000000000000"
    assert const_float(ll.float, 0.1).ref == "0x3FB99999A0000000"  # 0.1f widened exactly
    assert const_float(ll.half, 1.0).ref == "0xH3C00"
    assert const_float(ll.float, math.inf).ref == "0x7FF0000000000000"
    assert const_float(ll.float, math.nan).ref == "0x7FF8000000000000"
    assert const_int(ll.i8, 200).ref == "-56"  # wraps to the width, signed text
    assert const_int(ll.i1, 1).ref == "true"


def _function():
    module = ir.Module("m")
    fn = module.add_function("k", ll.FunctionType(ll.void, [ll.float, ll.i32]), ["x", "n"])
    b = ir.Builder(fn, fn.append_block("entry"))
    return module, fn, b


def test_builder_checks_operand_types():
    module, fn, b = _function()
    x, n = fn.args
    with pytest.raises(ir.IRTypeError, match="operand types differ"):
        b.binop("fadd", x, n)
    with pytest.raises(ir.IRTypeError, match="needs integers"):
        b.binop("add", x, x)
    with pytest.raises(ir.IRTypeError, match="branch condition must be i1"):
        b.cbranch(n, fn.blocks[0], fn.blocks[0])
    with pytest.raises(ir.IRTypeError, match="store of float through i32"):
        b.store(x, b.alloca(ll.i32))
    b.ret()
    with pytest.raises(ir.IRTypeError, match="after terminator"):
        b.binop("add", n, n)


def test_module_text():
    module, fn, b = _function()
    x, n = fn.args
    y = b.binop("fmul", x, const_float(ll.float, 2.0))
    ext = module.declare("__nv_sqrtf", ll.FunctionType(ll.float, [ll.float]))
    assert ext.ref == "@__nv_sqrtf"
    b.call("__nv_sqrtf", ll.FunctionType(ll.float, [ll.float]), [y])
    b.ret()
    module.mark_kernel(fn)
    text = module.render()
    from cupric.compiler.nvvm import IR_DATALAYOUT, IR_TRIPLE
    assert f'target datalayout = "{IR_DATALAYOUT}"' in text
    assert f'target triple = "{IR_TRIPLE}"' in text
    assert "declare float @__nv_sqrtf(float) nounwind" in text
    assert "define void @k(float %x, i32 %n) nounwind {" in text
    assert "%v = fmul float %x, 0x4000000000000000" in text
    assert '!{void (float, i32)* @k, !"kernel", i32 1}' in text
    assert "!nvvmir.version = !{!1}" in text and "!1 = !{i32 2, i32 0}" in text


def test_debug_metadata_uses_the_debug_ir_version():
    module, fn, b = _function()
    module.compile_unit = module.add_metadata('!DICompileUnit(language: DW_LANG_Python)',
                                              distinct=True)
    b.ret()
    text = module.render()
    assert "!llvm.dbg.cu = !{!0}" in text
    assert '!{i32 2, !"Debug Info Version", i32 3}' in text
    assert "!{i32 2, i32 0, i32 3, i32 2}" in text


def test_metadata_nodes_are_shared_unless_distinct():
    module = ir.Module()
    a = module.add_metadata("!{}")
    assert module.add_metadata("!{}") == a
    assert module.add_metadata("!{}", distinct=True) != a


def test_symbols_are_quoted_when_needed():
    from cupric.compiler.ir.module import symbol
    assert symbol("saxpy") == "@saxpy"
    assert symbol("a b") == '@"a b"'
