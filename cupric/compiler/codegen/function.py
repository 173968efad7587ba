"""Lowering one typed function (a kernel or a device function specialization) to an NVVM
IR function: locals live in allocas that libNVVM's optimizer promotes to registers;
structured control flow becomes basic blocks; Python semantics (floor division, short
circuits, range loops) are spelled out here.

This module holds the function's frame (signature, parameters, local slots, returns);
the rest of `FunctionCodegen` comes from one module per concept: `statements`,
`expressions` (and conversions), `arrays` (element addresses, loads, stores),
`operators` and `calls`."""

from __future__ import annotations

from cupric.compiler.codegen.arrays import ArrayCodegen
from cupric.compiler.codegen.calls import CallCodegen
from cupric.compiler.codegen.expressions import ExpressionCodegen
from cupric.compiler.codegen.operators import OperatorCodegen
from cupric.compiler.codegen.statements import StatementCodegen, _Loop
from cupric.compiler.codegen.values import KValue, abi_lltypes, flat_lltypes
from cupric.compiler.ir import types as ll
from cupric.compiler.ir.builder import Builder
from cupric.compiler.ir.values import Value, const_int, zero
from cupric.compiler.typing.ktypes import TupleType
from cupric.types import ArrayType, ScalarType, Type, is_bf16

__all__ = ["FunctionCodegen"]


class FunctionCodegen(StatementCodegen, ExpressionCodegen, ArrayCodegen, OperatorCodegen,
                      CallCodegen):
    """Emits one `TypedFunction` into the module of `mcg` (a `ModuleCodegen`).

    Parameters
    ----------
    mcg : ModuleCodegen
    typed : TypedFunction
    symbol : str
        LLVM name of the function.
    noalias : bool
        Kernel only: the launch found that no array argument overlaps another one that
        is written, so array pointers are `noalias` and read-only arrays load through
        the non-coherent cache.
    aligned : bool
        Kernel only: the launch found every array's data pointer 16-byte aligned, so the
        pointers carry `align 16` (neighbouring loads and stores become 128-bit ones).
    """

    def __init__(self, mcg, typed, symbol: str, noalias: bool = False,
                 aligned: bool = False) -> None:
        self.mcg = mcg
        self.typed = typed
        self.src = typed.source
        self.symbol = symbol
        self.noalias = noalias
        self.aligned = aligned
        self.loops: list[_Loop] = []
        self.slots: dict[str, list[Value]] = {}
        self.discarded = None  # the call of the current expression statement

    def error(self, node, message, hint=None):
        return self.src.error(node, message, hint)

    # -- function frame ------------------------------------------------------------------

    def signature(self) -> ll.FunctionType:
        typed = self.typed
        if typed.is_kernel:
            params = [p for t in typed.arg_types for p in abi_lltypes(t)]
            return ll.FunctionType(ll.void, params)
        params = [p for t in typed.arg_types for p in flat_lltypes(t)]
        return ll.FunctionType(self.return_lltype(), params)

    def return_lltype(self) -> ll.LLType:
        flat = flat_lltypes(self.typed.return_type)
        if not flat:
            return ll.void
        if len(flat) == 1:
            return flat[0]
        return ll.StructType(flat)

    def emit(self):
        typed = self.typed
        mcg = self.mcg
        ftype = self.signature()
        names = []
        for name, t in zip(typed.arg_names, typed.arg_types):
            n = len(abi_lltypes(t) if typed.is_kernel else flat_lltypes(t))
            if isinstance(t, ArrayType):
                names += [name] + [f"{name}.shape{k}" for k in range(t.ndim)] + \
                         [f"{name}.stride{k}" for k in range(t.ndim)]
            else:
                names += [name] * n
        if typed.is_kernel:
            fn = mcg.module.add_function(self.symbol, ftype, names)
            mcg.module.mark_kernel(fn)
        else:
            fn = mcg.module.add_function(self.symbol, ftype, names, linkage="internal",
                                         attributes="alwaysinline nounwind")
        self.fn = fn
        index = 0
        for t in typed.arg_types:
            width = len(abi_lltypes(t) if typed.is_kernel else flat_lltypes(t))
            if isinstance(t, ArrayType) and typed.is_kernel and self.noalias:
                fn.arg_attrs[index].append("noalias")
            if isinstance(t, ArrayType) and typed.is_kernel and self.aligned:
                # libNVVM 13.0 fails ("Do not know how to split the result of this
                # operator") on vectorized 2-byte elements under align 8 or 16; align 4
                # still pairs f16/i16 accesses and works on every libNVVM seen.
                fn.arg_attrs[index].append("align 4" if t.dtype.itemsize == 2 else "align 16")
            index += width
        fn.subprogram = mcg.subprogram(self)
        self.entry = fn.append_block("entry")
        self.entry_builder = Builder(fn, self.entry)
        body = fn.append_block("body")
        self.b = Builder(fn, body)
        # Parameters become ordinary locals (they may be reassigned).
        args = list(fn.args)
        eb = self.entry_builder
        for name, t in zip(typed.arg_names, typed.arg_types):
            width = len(abi_lltypes(t) if typed.is_kernel else flat_lltypes(t))
            vals, args = args[:width], args[width:]
            if typed.is_kernel:
                vals = self._from_abi(eb, t, vals)
            self.slots[name] = self._alloca_for(typed.var_types[name])
            value = KValue(t, vals)
            if typed.var_types[name] != t:  # a parameter later assigned a wider type
                body_builder, self.b = self.b, eb
                value = self.convert(value, typed.var_types[name])
                self.b = body_builder
            self._store_slots(eb, self.slots[name], value)
        for name, t in typed.var_types.items():
            if name not in self.slots:
                self.slots[name] = self._alloca_for(t)
                # Zero-filled so a path that skips the assignment reads 0, never poison.
                for slot in self.slots[name]:
                    eb.store(zero(slot.type.pointee), slot)
        self.block(self.src.tree.body)
        if not self.b.terminated:
            self.b.debug_location = None
            self._return_default()
        eb.br(body)
        return fn

    def _from_abi(self, b: Builder, t: Type, vals: list[Value]) -> list[Value]:
        if isinstance(t, ScalarType) and t.kind == "b":
            return [b.icmp("ne", vals[0], const_int(ll.i8, 0))]
        if is_bf16(t):
            from cupric.compiler.lowering.half import bf16_from_bits_value
            return [bf16_from_bits_value(self, vals[0])]
        if isinstance(t, TupleType):
            out = []
            for e in t.elements:
                width = len(abi_lltypes(e))
                out += self._from_abi(b, e, vals[:width])
                vals = vals[width:]
            return out
        return vals

    def _alloca_for(self, t: Type) -> list[Value]:
        return [self.entry_builder.alloca(lt, hint="slot") for lt in flat_lltypes(t)]

    def _store_slots(self, b: Builder, slots: list[Value], kv: KValue) -> None:
        for slot, v in zip(slots, kv.vals):
            b.store(v, slot)

    def _return_default(self) -> None:
        rt = self.return_lltype()
        if rt == ll.void:
            self.b.ret()
        else:
            self.b.ret(zero(rt))

    def _dead_block(self) -> None:
        """Continue after a terminator in a fresh, unreachable block (code after a
        return/break is legal Python and simply never runs)."""
        self.b.position_at_end(self.fn.append_block("dead"))

    def set_location(self, node) -> None:
        self.b.debug_location = self.mcg.location(self, node)

    # -- locals --------------------------------------------------------------------------

    def load_local(self, name: str) -> KValue:
        t = self.typed.var_types[name]
        return KValue(t, [self.b.load(slot) for slot in self.slots[name]])
