"""An NVVM IR module as text: functions made of basic blocks, declarations, globals,
metadata (kernel annotations, debug info, IR version). `Module.render()` gives the text
that libNVVM parses; nothing here loads libNVVM, so it is unit-testable anywhere."""

from __future__ import annotations

import re

from cupric.compiler.ir.types import FunctionType, LLType, PointerType
from cupric.compiler.ir.values import Value

__all__ = ["Module", "Function", "Block", "GlobalVariable"]

# Identical to cupric.compiler.nvvm's contract; kept here so the builder has no backend
# dependency (tests check the two agree).
DATALAYOUT = ("e-p:64:64:64-i1:8:8-i8:8:8-i16:16:16-i32:32:32-i64:64:64-i128:128:128-"
              "f32:32:32-f64:64:64-v16:16:16-v32:32:32-v64:64:64-v128:128:128-n16:32:64")
TRIPLE = "nvptx64-nvidia-cuda"
NVVM_IR_VERSION = (2, 0)
# Debug-info version libNVVM 12/13 expect in `!nvvmir.version` when a module carries
# debug metadata (its 3rd and 4th operands; libNVVM refuses the module without them).
NVVM_DEBUG_VERSION = (3, 2)

_PLAIN_NAME = re.compile(r"[A-Za-z_.$][\w.$]*\Z")
_NOT_LOCAL_CHARS = re.compile(r"[^\w.]")
_NOT_SYMBOL_CHARS = re.compile(r"[^\w.$]")


def symbol(name: str) -> str:
    """`@name`, quoted when the name has characters LLVM identifiers cannot hold."""
    return f"@{name}" if _PLAIN_NAME.match(name) else '@"' + name.replace('"', "\\22") + '"'


class Block:
    """A basic block: a label and its instruction lines; closed by one terminator."""

    __slots__ = ("name", "lines", "terminated")

    def __init__(self, name: str) -> None:
        self.name = name
        self.lines: list[str] = []
        self.terminated = False

    @property
    def ref(self) -> str:
        return f"%{self.name}"


class Function:
    """A function definition.

    Parameters
    ----------
    module : Module
    name : str
        Symbol name (without `@`).
    type : FunctionType
    arg_names : list of str
        Names of the parameters (made unique, prefixed `%`).
    linkage : str
        `""` (external, for kernels) or `"internal"` (device functions).
    """

    def __init__(self, module: Module, name: str, type: FunctionType, arg_names,
                 linkage: str = "", attributes: str = "nounwind") -> None:
        self.module = module
        self.name = name
        self.type = type
        self.linkage = linkage
        self.attributes = attributes
        self.arg_attrs: list[list[str]] = [[] for _ in type.args]
        self.blocks: list[Block] = []
        self.subprogram: int | None = None
        self._names: dict[str, int] = {}
        self.args = [Value(t, "%" + self._unique(n)) for t, n in zip(type.args, arg_names)]

    def _unique(self, base: str) -> str:
        base = _NOT_LOCAL_CHARS.sub("_", base) or "v"
        n = self._names.get(base, 0)
        self._names[base] = n + 1
        return base if n == 0 else f"{base}.{n}"

    def new_name(self, hint: str = "v") -> str:
        """A fresh local name (`%hint`, `%hint.1`, ...)."""
        return self._unique(hint)

    def append_block(self, hint: str = "bb") -> Block:
        block = Block(self._unique(hint))
        self.blocks.append(block)
        return block

    @property
    def ref(self) -> str:
        return symbol(self.name)

    def render(self) -> str:
        params = []
        for arg, attrs in zip(self.args, self.arg_attrs):
            params.append(" ".join([str(arg.type), *attrs, arg.ref]))
        linkage = f"{self.linkage} " if self.linkage else ""
        dbg = f" !dbg !{self.subprogram}" if self.subprogram is not None else ""
        head = (f"define {linkage}{self.type.ret} {self.ref}({', '.join(params)}) "
                f"{self.attributes}{dbg} {{")
        out = [head]
        for i, block in enumerate(self.blocks):
            if i:
                out.append("")
            out.append(f"{block.name}:")
            out.extend("  " + line for line in block.lines)
        out.append("}")
        return "\n".join(out)


class GlobalVariable:
    """A module-level variable, e.g. a shared-memory array (`addrspace(3)`)."""

    def __init__(self, name: str, type: LLType, addrspace: int, initializer: str = "undef",
                 linkage: str = "internal", align: int = 16) -> None:
        self.name = name
        self.type = type
        self.addrspace = addrspace
        self.initializer = initializer
        self.linkage = linkage
        self.align = align

    @property
    def pointer(self) -> Value:
        return Value(PointerType(self.type, self.addrspace), symbol(self.name))

    def render(self) -> str:
        space = f" addrspace({self.addrspace})" if self.addrspace else ""
        return (f"{symbol(self.name)} = {self.linkage}{space} global {self.type} "
                f"{self.initializer}, align {self.align}")


class Module:
    """An NVVM IR module.

    Metadata nodes are numbered as they are added (`add_metadata` returns the number;
    identical nodes are shared unless `distinct`); `render()` appends the kernel
    annotations, debug-info flags and `!nvvmir.version`.
    """

    def __init__(self, name: str = "cupric") -> None:
        self.name = name
        self.functions: list[Function] = []
        self.declarations: dict[str, tuple[FunctionType, str]] = {}
        self.globals: dict[str, GlobalVariable] = {}
        self.kernels: list[Function] = []
        self._metadata: list[str] = []
        self._md_index: dict[str, int] = {}
        self.compile_unit: int | None = None
        self._symbols: set[str] = set()

    # -- symbols ---------------------------------------------------------------------------

    def unique_symbol(self, base: str) -> str:
        name = _NOT_SYMBOL_CHARS.sub("_", base)
        candidate, n = name, 0
        while candidate in self._symbols:
            n += 1
            candidate = f"{name}.{n}"
        self._symbols.add(candidate)
        return candidate

    def add_function(self, name: str, type: FunctionType, arg_names, *, linkage: str = "",
                     attributes: str = "nounwind") -> Function:
        self._symbols.add(name)
        fn = Function(self, name, type, arg_names, linkage, attributes)
        self.functions.append(fn)
        return fn

    def declare(self, name: str, type: FunctionType, attributes: str = "nounwind") -> Value:
        """Declare an external function (libdevice `__nv_*`, `llvm.nvvm.*`) once."""
        known = self.declarations.get(name)
        if known is not None and known[0] != type:
            raise ValueError(f"@{name} declared as {known[0]} and as {type}")
        self.declarations[name] = (type, attributes)
        return Value(type.pointer(), symbol(name))

    def add_global(self, var: GlobalVariable) -> GlobalVariable:
        self._symbols.add(var.name)
        self.globals[var.name] = var
        return var

    def mark_kernel(self, fn: Function) -> None:
        self.kernels.append(fn)

    # -- metadata --------------------------------------------------------------------------

    def add_metadata(self, text: str, distinct: bool = False) -> int:
        """Add a metadata node (`text` without the `!N = ` prefix); returns its number."""
        if not distinct and text in self._md_index:
            return self._md_index[text]
        index = len(self._metadata)
        self._metadata.append(("distinct " if distinct else "") + text)
        if not distinct:
            self._md_index[text] = index
        return index

    # -- text ------------------------------------------------------------------------------

    def render(self) -> str:
        out = [f"; ModuleID = '{self.name}'",
               f'target datalayout = "{DATALAYOUT}"',
               f'target triple = "{TRIPLE}"', ""]
        for var in self.globals.values():
            out.append(var.render())
        if self.globals:
            out.append("")
        for name in sorted(self.declarations):
            type, attrs = self.declarations[name]
            params = ", ".join(str(a) for a in type.args)
            out.append(f"declare {type.ret} {symbol(name)}({params}) {attrs}".rstrip())
        if self.declarations:
            out.append("")
        for fn in self.functions:
            out.append(fn.render())
            out.append("")
        metadata = list(self._metadata)
        named = []
        if self.kernels:
            refs = []
            for fn in self.kernels:
                refs.append(len(metadata))
                metadata.append(f'!{{{fn.type}* {fn.ref}, !"kernel", i32 1}}')
            named.append("!nvvm.annotations = !{" + ", ".join(f"!{r}" for r in refs) + "}")
        if self.compile_unit is not None:
            named.append(f"!llvm.dbg.cu = !{{!{self.compile_unit}}}")
            flags = len(metadata)
            metadata.append('!{i32 2, !"Dwarf Version", i32 4}')
            metadata.append('!{i32 2, !"Debug Info Version", i32 3}')
            named.append(f"!llvm.module.flags = !{{!{flags}, !{flags + 1}}}")
        version = len(metadata)
        major, minor = NVVM_IR_VERSION
        if self.compile_unit is not None:
            dmajor, dminor = NVVM_DEBUG_VERSION
            metadata.append(f"!{{i32 {major}, i32 {minor}, i32 {dmajor}, i32 {dminor}}}")
        else:
            metadata.append(f"!{{i32 {major}, i32 {minor}}}")
        named.append(f"!nvvmir.version = !{{!{version}}}")
        out.extend(named)
        out.append("")
        out.extend(f"!{i} = {text}" for i, text in enumerate(metadata))
        return "\n".join(out) + "\n"
