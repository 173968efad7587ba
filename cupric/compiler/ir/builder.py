"""The instruction builder: appends typed LLVM 7 instructions to a block and returns
their result values; checks operand types as it goes, so codegen mistakes surface here
as Python errors instead of reaching libNVVM."""

from __future__ import annotations

from cupric.compiler.ir.module import Block, Function, symbol
from cupric.compiler.ir.types import (FloatType, FunctionType, IntType, LLType, PointerType,
                                      StructType, i1, void)
from cupric.compiler.ir.values import Constant, Value

__all__ = ["Builder", "IRTypeError", "is_constant"]

_INT_BINOPS = {"add", "sub", "mul", "sdiv", "udiv", "srem", "urem", "shl", "lshr", "ashr",
               "and", "or", "xor"}
_FLOAT_BINOPS = {"fadd", "fsub", "fmul", "fdiv", "frem"}
_ICMP = {"eq", "ne", "slt", "sle", "sgt", "sge", "ult", "ule", "ugt", "uge"}
_FCMP = {"oeq", "one", "olt", "ole", "ogt", "oge", "ord", "uno", "ueq", "une", "ult",
         "ule", "ugt", "uge", "true", "false"}
_CASTS = {"trunc", "zext", "sext", "fptrunc", "fpext", "fptoui", "fptosi", "uitofp",
          "sitofp", "bitcast", "ptrtoint", "inttoptr", "addrspacecast"}


class IRTypeError(TypeError):
    """An instruction got operands of the wrong IR types (a compiler bug, not user error)."""


def _same(a: Value, b: Value, what: str) -> None:
    if a.type != b.type:
        raise IRTypeError(f"{what}: operand types differ ({a.type} vs {b.type})")


class Builder:
    """Appends instructions at the end of one block of `function`.

    `debug_location` (a metadata node number or None) is attached to every instruction
    as `!dbg`, which is how PTX line info points back at Python lines.
    """

    def __init__(self, function: Function, block: Block | None = None) -> None:
        self.function = function
        self.block = block
        self.debug_location: int | None = None

    # -- placement ---------------------------------------------------------------------

    def position_at_end(self, block: Block) -> None:
        self.block = block

    @property
    def terminated(self) -> bool:
        return self.block.terminated

    def _emit(self, text: str, type: LLType | None = None, hint: str = "v") -> Value | None:
        if self.block.terminated:
            raise IRTypeError(f"instruction after terminator in block {self.block.name}")
        dbg = f", !dbg !{self.debug_location}" if self.debug_location is not None else ""
        if type is None or type == void:
            self.block.lines.append(text + dbg)
            return None
        name = "%" + self.function.new_name(hint)
        self.block.lines.append(f"{name} = {text}{dbg}")
        return Value(type, name)

    def _terminate(self, text: str) -> None:
        self._emit(text)
        self.block.terminated = True

    # -- arithmetic ----------------------------------------------------------------------

    def binop(self, op: str, a: Value, b: Value, flags: str = "", hint: str = "v") -> Value:
        """`op` is an LLVM binary opcode (`add`, `fmul`, `sdiv`, ...)."""
        _same(a, b, op)
        if op in _INT_BINOPS:
            if not isinstance(a.type, IntType):
                raise IRTypeError(f"{op} needs integers, got {a.type}")
        elif op in _FLOAT_BINOPS:
            if not isinstance(a.type, FloatType):
                raise IRTypeError(f"{op} needs floats, got {a.type}")
        else:
            raise IRTypeError(f"unknown binary opcode {op!r}")
        flags = f"{flags} " if flags else ""
        return self._emit(f"{op} {flags}{a.type} {a.ref}, {b.ref}", a.type, hint)

    def icmp(self, pred: str, a: Value, b: Value) -> Value:
        if pred not in _ICMP:
            raise IRTypeError(f"unknown icmp predicate {pred!r}")
        _same(a, b, "icmp")
        return self._emit(f"icmp {pred} {a.type} {a.ref}, {b.ref}", i1, "c")

    def fcmp(self, pred: str, a: Value, b: Value) -> Value:
        if pred not in _FCMP:
            raise IRTypeError(f"unknown fcmp predicate {pred!r}")
        _same(a, b, "fcmp")
        return self._emit(f"fcmp {pred} {a.type} {a.ref}, {b.ref}", i1, "c")

    def select(self, cond: Value, a: Value, b: Value) -> Value:
        if cond.type != i1:
            raise IRTypeError(f"select condition must be i1, got {cond.type}")
        _same(a, b, "select")
        return self._emit(f"select i1 {cond.ref}, {a.typed()}, {b.typed()}", a.type)

    def cast(self, op: str, value: Value, type: LLType) -> Value:
        if op not in _CASTS:
            raise IRTypeError(f"unknown cast {op!r}")
        return self._emit(f"{op} {value.typed()} to {type}", type)

    # -- memory --------------------------------------------------------------------------

    def alloca(self, type: LLType, align: int | None = None, hint: str = "slot") -> Value:
        align = f", align {align}" if align else ""
        return self._emit(f"alloca {type}{align}", PointerType(type), hint)

    def load(self, ptr: Value, align: int | None = None, invariant: int | None = None,
             hint: str = "v") -> Value:
        """Load through a typed pointer; `invariant` is the number of an empty metadata
        node to tag the load `!invariant.load` (read-only data path, ld.global.nc)."""
        if not isinstance(ptr.type, PointerType):
            raise IRTypeError(f"load needs a pointer, got {ptr.type}")
        text = f"load {ptr.type.pointee}, {ptr.typed()}"
        if align:
            text += f", align {align}"
        if invariant is not None:
            text += f", !invariant.load !{invariant}"
        return self._emit(text, ptr.type.pointee, hint)

    def store(self, value: Value, ptr: Value, align: int | None = None) -> None:
        if not isinstance(ptr.type, PointerType) or ptr.type.pointee != value.type:
            raise IRTypeError(f"store of {value.type} through {ptr.type}")
        align = f", align {align}" if align else ""
        self._emit(f"store {value.typed()}, {ptr.typed()}{align}")

    def gep(self, ptr: Value, indices: list[Value], inbounds: bool = False,
            result_type: LLType | None = None, hint: str = "p") -> Value:
        """`getelementptr`; `result_type` must be given when indexing into aggregates."""
        if not isinstance(ptr.type, PointerType):
            raise IRTypeError(f"getelementptr needs a pointer, got {ptr.type}")
        if result_type is None:
            if len(indices) != 1:
                raise IRTypeError("give result_type for multi-index getelementptr")
            result_type = ptr.type
        ib = "inbounds " if inbounds else ""
        idx = "".join(f", {i.typed()}" for i in indices)
        return self._emit(f"getelementptr {ib}{ptr.type.pointee}, {ptr.typed()}{idx}",
                          result_type, hint)

    def atomicrmw(self, op: str, ptr: Value, value: Value, ordering: str = "monotonic",
                  hint: str = "old") -> Value:
        """`atomicrmw op ptr, value ordering`: the old value (`op` is xchg, add, sub, and,
        or, xor, max, min, umax, umin)."""
        if not isinstance(ptr.type, PointerType) or ptr.type.pointee != value.type:
            raise IRTypeError(f"atomicrmw of {value.type} through {ptr.type}")
        return self._emit(f"atomicrmw {op} {ptr.typed()}, {value.typed()} {ordering}",
                          value.type, hint)

    def cmpxchg(self, ptr: Value, expected: Value, desired: Value,
                ordering: str = "monotonic") -> Value:
        """`cmpxchg`: the `{old, success}` pair."""
        _same(expected, desired, "cmpxchg")
        if not isinstance(ptr.type, PointerType) or ptr.type.pointee != expected.type:
            raise IRTypeError(f"cmpxchg of {expected.type} through {ptr.type}")
        return self._emit(f"cmpxchg {ptr.typed()}, {expected.typed()}, {desired.typed()} "
                          f"{ordering} {ordering}", StructType([expected.type, i1]), "cas")

    # -- aggregates ----------------------------------------------------------------------

    def extractvalue(self, agg: Value, index: int) -> Value:
        if not isinstance(agg.type, StructType):
            raise IRTypeError(f"extractvalue needs a struct, got {agg.type}")
        return self._emit(f"extractvalue {agg.typed()}, {index}", agg.type.elements[index])

    def insertvalue(self, agg: Value, value: Value, index: int) -> Value:
        if not isinstance(agg.type, StructType) or agg.type.elements[index] != value.type:
            raise IRTypeError(f"insertvalue of {value.type} into {agg.type}[{index}]")
        return self._emit(f"insertvalue {agg.typed()}, {value.typed()}, {index}", agg.type)

    # -- calls ---------------------------------------------------------------------------

    def call(self, name: str, type: FunctionType, args: list[Value], hint: str = "r",
             attributes: str = "") -> Value | None:
        if len(args) != len(type.args):
            raise IRTypeError(f"@{name} takes {len(type.args)} arguments, got {len(args)}")
        for i, (arg, want) in enumerate(zip(args, type.args)):
            if arg.type != want:
                raise IRTypeError(f"@{name} argument {i}: {arg.type}, expected {want}")
        params = ", ".join(a.typed() for a in args)
        attrs = f" {attributes}" if attributes else ""
        return self._emit(f"call {type.ret} {symbol(name)}({params}){attrs}", type.ret, hint)

    def inline_asm(self, type: FunctionType, asm: str, constraints: str, args: list[Value],
                   side_effects: bool = True) -> Value | None:
        params = ", ".join(a.typed() for a in args)
        se = " sideeffect" if side_effects else ""
        asm = asm.replace("\\", "\\5C").replace('"', "\\22")
        return self._emit(f'call {type.ret} asm{se} "{asm}", "{constraints}"({params})',
                          type.ret, "asm")

    # -- control flow --------------------------------------------------------------------

    def phi(self, type: LLType, incoming: list[tuple[Value, Block]]) -> Value:
        pairs = ", ".join(f"[ {v.ref}, {b.ref} ]" for v, b in incoming)
        for v, _ in incoming:
            if v.type != type:
                raise IRTypeError(f"phi of {type} got {v.type}")
        return self._emit(f"phi {type} {pairs}", type)

    def br(self, target: Block) -> None:
        self._terminate(f"br label {target.ref}")

    def cbranch(self, cond: Value, then: Block, otherwise: Block) -> None:
        if cond.type != i1:
            raise IRTypeError(f"branch condition must be i1, got {cond.type}")
        self._terminate(f"br i1 {cond.ref}, label {then.ref}, label {otherwise.ref}")

    def ret(self, value: Value | None = None) -> None:
        if value is None:
            if self.function.type.ret != void:
                raise IRTypeError(f"ret void in a function returning {self.function.type.ret}")
            self._terminate("ret void")
        else:
            if value.type != self.function.type.ret:
                raise IRTypeError(f"ret {value.type} in a function returning "
                                  f"{self.function.type.ret}")
            self._terminate(f"ret {value.typed()}")

    def unreachable(self) -> None:
        self._terminate("unreachable")


def is_constant(value: Value) -> bool:
    return isinstance(value, Constant) and value.value is not None

