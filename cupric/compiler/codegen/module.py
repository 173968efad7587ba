"""Building the NVVM IR module of one kernel specialization: the kernel, every device
function specialization it reaches, libdevice declarations, and the metadata libNVVM
wants (kernel annotation, `!nvvmir.version`) plus, for line info and debug builds, the
LLVM 7 debug metadata (DICompileUnit, DIFile, DISubprogram, DILocation) that lets PTX
and profilers point at Python lines."""

from __future__ import annotations

import os

from cupric.compiler.codegen.function import FunctionCodegen
from cupric.compiler.ir import Module
from cupric.compiler.ir import types as ll

__all__ = ["ModuleCodegen", "lower_kernel"]


def _escape(text: str) -> str:
    return text.replace("\\", "\\5C").replace('"', "\\22")


class ModuleCodegen:
    """Collects the functions of one module.

    Parameters
    ----------
    name : str
        Module name (shown by libNVVM in messages).
    debug, lineinfo : bool
        Emit full debug info / line tables only.
    fast_math : bool
        Tag float arithmetic `fast` (reassociation, contraction, no NaN/inf guarantees).
    c_division : bool
        Signed `//` and `%` truncate toward zero (C) instead of flooring (Python): one
        instruction less each.
    bounds_check : bool
        Check array indices against the shapes (cupric.compiler.lowering.checks).
    """

    def __init__(self, name: str, *, debug: bool = False, lineinfo: bool = False,
                 fast_math: bool = False, c_division: bool = False,
                 bounds_check: bool = False) -> None:
        self.module = Module(name)
        self.debug = debug
        self.lineinfo = lineinfo or debug
        self.fast_math_flags = "fast" if fast_math else ""
        self.c_division = c_division
        self.bounds_check = bounds_check
        # Per-module state of the lowering tables (shared-memory globals, constant data).
        self.lowering_state: dict = {}
        self._device: dict[int, tuple[str, ll.FunctionType]] = {}
        self._invariant: int | None = None
        self._files: dict[str, int] = {}
        self._compile_unit: int | None = None

    # -- shared helpers used by function codegen and lowering rules ------------------------

    def call_external(self, builder, name: str, ret: ll.LLType, args):
        """Declare `@name` (libdevice, `llvm.nvvm.*`) with the argument types of `args`
        and call it."""
        ftype = ll.FunctionType(ret, [a.type for a in args])
        self.module.declare(name, ftype)
        return builder.call(name, ftype, list(args))

    def invariant_node(self) -> int:
        if self._invariant is None:
            self._invariant = self.module.add_metadata("!{}")
        return self._invariant

    def device_function(self, typed) -> tuple[str, ll.FunctionType]:
        """The LLVM name and type of a device function specialization, emitted once."""
        known = self._device.get(id(typed))
        if known is not None:
            return known
        symbol = self.module.unique_symbol(f"{typed.name}")
        fcg = FunctionCodegen(self, typed, symbol)
        ftype = fcg.signature()
        self._device[id(typed)] = (symbol, ftype)
        fcg.emit()
        return symbol, ftype

    # -- debug info --------------------------------------------------------------------------

    def _file(self, path: str) -> int:
        node = self._files.get(path)
        if node is None:
            directory, name = os.path.split(os.path.abspath(path))
            node = self.module.add_metadata(
                f'!DIFile(filename: "{_escape(name)}", directory: "{_escape(directory)}")')
            self._files[path] = node
        return node

    def _unit(self, path: str) -> int:
        if self._compile_unit is None:
            file = self._file(path)
            # Line info alone: only .loc/.file directives. "LineTablesOnly" would also
            # write .debug_info sections, which ptxas refuses without -g ("Optimized
            # debugging not supported"); DebugDirectivesOnly is what libNVVM accepts.
            kind = "FullDebug" if self.debug else "DebugDirectivesOnly"
            self._compile_unit = self.module.add_metadata(
                f'!DICompileUnit(language: DW_LANG_Python, file: !{file}, producer: '
                f'"cupric", isOptimized: {"false" if self.debug else "true"}, '
                f'runtimeVersion: 0, emissionKind: {kind})', distinct=True)
            self.module.compile_unit = self._compile_unit
        return self._compile_unit

    def subprogram(self, fcg) -> int | None:
        if not self.lineinfo:
            return None
        src = fcg.src
        unit = self._unit(src.filename)
        file = self._file(src.filename)
        types = self.module.add_metadata("!{null}")
        sub_type = self.module.add_metadata(f"!DISubroutineType(types: !{types})")
        line = src.tree.lineno
        return self.module.add_metadata(
            f'!DISubprogram(name: "{_escape(src.name)}", linkageName: "{fcg.symbol}", '
            f"scope: !{file}, file: !{file}, line: {line}, type: !{sub_type}, "
            f"isLocal: {'false' if fcg.typed.is_kernel else 'true'}, isDefinition: true, "
            f"scopeLine: {line}, isOptimized: {'false' if self.debug else 'true'}, "
            f"unit: !{unit})", distinct=True)

    def location(self, fcg, node) -> int | None:
        if fcg.fn.subprogram is None or not hasattr(node, "lineno"):
            return fcg.b.debug_location
        col = node.col_offset + fcg.src.col_offset + 1
        return self.module.add_metadata(
            f"!DILocation(line: {node.lineno}, column: {col}, scope: !{fcg.fn.subprogram})")

    def render(self) -> str:
        return self.module.render()


def lower_kernel(typed, symbol: str, *, noalias: bool = False, aligned: bool = False,
                 debug: bool = False,
                 lineinfo: bool = False, fast_math: bool = False,
                 c_division: bool = False, bounds_check: bool = False) -> str:
    """NVVM IR text of a kernel specialization (`typed` from the typer).

    Parameters
    ----------
    typed : TypedFunction
    symbol : str
        The kernel's entry-point name in PTX.
    noalias : bool
        Array arguments do not overlap any written array (decided at launch).
    aligned : bool
        Every array argument's data is 16-byte aligned (decided at launch).
    """
    mcg = ModuleCodegen(typed.name, debug=debug, lineinfo=lineinfo, fast_math=fast_math,
                        c_division=c_division, bounds_check=bounds_check)
    mcg.lowering_state["kernel"] = typed  # module-wide decisions (constant memory) see it
    FunctionCodegen(mcg, typed, symbol, noalias=noalias, aligned=aligned).emit()
    return mcg.render()
