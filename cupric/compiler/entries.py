"""Custom entry points: device functions that something other than a kernel launch starts.

A CUDA kernel takes its arguments as PTX parameters. Some hosts start code otherwise:
OptiX finds parameterless `.entry` functions by name (``__raygen__render``) and fills one
`.const` variable with the launch parameters (``pipelineLaunchParamsVariableName``).
`emit_module` is the compiler's one hook for such wrappers: it types each Python function
as a device function, and wraps it in an entry of the requested name that loads the
function's parameters from that variable, laid out as the kernel ABI of
docs/internals.md (arrays as pointer, shapes, strides in elements) in C struct order.
`params_dtype` gives the host side of the same layout. Users of the hook (`cupric.optix`)
bring their own names, lowering state and messages; the compiler knows nothing of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from cupric.compiler.ir.module import GlobalVariable, symbol
from cupric.compiler.typing.ktypes import StructType

__all__ = ["Entry", "emit_module", "params_dtype", "StructType"]


@dataclass(frozen=True)
class Entry:
    """One entry point of a custom module.

    Attributes
    ----------
    name : str
        The PTX entry name (``"__raygen__render"``).
    py_func : function
        The Python function the entry runs.
    takes_params : bool
        Whether it receives the module's parameters (else it takes none).
    state : Mapping
        Lowering-state items set while its body is emitted (read by the lowering rules
        of the intrinsics it may call, e.g. which kind of program this is).
    """

    name: str
    py_func: object
    takes_params: bool
    state: Mapping = field(default_factory=dict)


def _struct_members(param_types):
    from cupric.compiler.codegen.values import abi_lltypes
    return [p for t in param_types for p in abi_lltypes(t)]


def emit_module(entries, param_types, *, params_name: str, module_name: str = "cupric_entries",
                state: Mapping | None = None, what: str = "entry point",
                return_hint: str | None = None, debug: bool = False, lineinfo: bool = False,
                fast_math: bool = False, c_division: bool = False,
                bounds_check: bool = False) -> str:
    """NVVM IR text of one module holding the entry points `entries`.

    Parameters
    ----------
    entries : sequence of Entry
    param_types : tuple of cupric types
        The parameters shared by the entries that take them, read from the constant
        variable `params_name` (externally visible and externally initialized: the host
        fills it, so loads of it are never folded).
    params_name : str
        The constant variable's name.
    module_name : str
        The NVVM module's name.
    state : Mapping, optional
        Lowering-state items for the whole module.
    what : str
        What an entry is, for messages ("OptiX program").
    return_hint : str, optional
        The hint of the error raised when an entry's function returns a value.
    debug, lineinfo, fast_math, c_division, bounds_check : bool
        As for kernels.

    Raises
    ------
    CompileError
        An entry's function does not type or lower, or returns a value (located at its
        source line).
    """
    from cupric.compiler.codegen.module import ModuleCodegen
    from cupric.compiler.codegen.values import abi_lltypes, flat_lltypes
    from cupric.compiler.frontend.source import get_source
    from cupric.compiler.ir import types as ll
    from cupric.compiler.ir.builder import Builder
    from cupric.compiler.ir.values import Value, const_int
    from cupric.compiler.specialize import CONTEXT
    from cupric.compiler.typing.infer import Typer
    from cupric.compiler.typing.ktypes import NONE

    mcg = ModuleCodegen(module_name, debug=debug, lineinfo=lineinfo, fast_math=fast_math,
                        c_division=c_division, bounds_check=bounds_check)
    mcg.lowering_state.update(state or {})
    members = _struct_members(param_types)
    params_type = ll.StructType(members) if members else None
    if params_type is not None:
        mcg.module.add_global(_ParamsGlobal(params_name, params_type, ll.CONSTANT, align=16))
    for entry in entries:
        src = get_source(entry.py_func)
        types = list(param_types) if entry.takes_params else []
        with CONTEXT.lock:
            typed = Typer(CONTEXT, src, types, is_kernel=False).run()
        if typed.return_type != NONE:
            raise src.error(src.tree, f"{what} {src.name}() must not return a value",
                            hint=return_hint)
        mcg.lowering_state["kernel"] = typed
        mcg.lowering_state.update(entry.state)
        body, body_type = mcg.device_function(typed)
        fn = mcg.module.add_function(entry.name, ll.FunctionType(ll.void, []), [])
        mcg.module.mark_kernel(fn)
        b = Builder(fn, fn.append_block("entry"))
        call_args: list[Value] = []
        if entry.takes_params:
            index = 0
            base = Value(ll.PointerType(params_type, ll.CONSTANT), symbol(params_name))
            for t in param_types:
                for abi_type, flat_type in zip(abi_lltypes(t), flat_lltypes(t)):
                    slot = b.gep(base, [const_int(ll.i32, 0), const_int(ll.i32, index)],
                                 inbounds=True,
                                 result_type=ll.PointerType(abi_type, ll.CONSTANT))
                    value = b.load(slot)
                    if abi_type != flat_type:  # bool: i8 in memory, i1 in registers
                        value = b.icmp("ne", value, const_int(abi_type, 0))
                    call_args.append(value)
                    index += 1
        b.call(body, body_type, call_args)
        b.ret()
    return mcg.render()


class _ParamsGlobal(GlobalVariable):
    """The `.const` parameter variable: externally visible (the host finds it by name) and
    `externally_initialized` (the host fills it, so the optimizer must not fold loads of
    it to the zero initializer)."""

    def render(self) -> str:
        return (f"{symbol(self.name)} = addrspace({self.addrspace}) externally_initialized "
                f"global {self.type} zeroinitializer, align {self.align}")


_SCALAR_LL = {"i1": "i1", "i8": "i1", "i16": "i2", "i32": "i4", "i64": "i8", "half": "f2",
              "float": "f4", "double": "f8"}


def params_dtype(param_types) -> np.dtype:
    """The host-side layout of the parameter variable: a NumPy structured dtype with one
    field per ABI value (``p<k>``), at the offsets the entries read them from.

    Arrays take a data pointer (``u8``), ``ndim`` shapes and ``ndim`` strides in elements
    (``i8``); bools one byte; structs their aligned dtype's bytes.

    Raises
    ------
    TypeError
        A parameter type the layout cannot hold.
    """
    from cupric.compiler.codegen.values import abi_lltypes
    from cupric.compiler.ir import types as ll
    names, formats, offsets = [], [], []
    offset = 0
    align_max = 1
    index = 0
    for t in param_types:
        for lltype in abi_lltypes(t):
            if isinstance(lltype, ll.PointerType):
                fmt = np.dtype(np.uint64)
            elif isinstance(lltype, ll.StructType):
                if not isinstance(t, StructType):
                    raise TypeError(f"launch parameter of type {t!r} is not supported")
                fmt = t.dtype
            else:
                fmt = np.dtype(_SCALAR_LL[str(lltype)])
            align = fmt.alignment
            offset = (offset + align - 1) // align * align
            names.append(f"p{index}")
            formats.append(fmt)
            offsets.append(offset)
            offset += fmt.itemsize
            align_max = max(align_max, align)
            index += 1
    size = (offset + align_max - 1) // align_max * align_max
    return np.dtype({"names": names, "formats": formats, "offsets": offsets,
                     "itemsize": max(size, 1) if names else 0})
