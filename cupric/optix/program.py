"""OptiX programs written in Python, and their compilation to one PTX module.

An OptiX pipeline is made of programs (ray generation, miss, closest-hit, any-hit,
intersection, exception, callables) that OptiX finds in PTX by their entry names
(`__raygen__<name>`, ...). The decorators here mark Python functions as such programs;
`compile_ptx` compiles a set of them through cupric's compiler (NVVM IR -> libNVVM -> PTX)
into one module, each program wrapped in its entry by the compiler's hook for custom
entry points (`cupric.compiler.entries`). A program's parameters are the pipeline's
launch parameters, filled by `Pipeline.launch` and read from one `.const` variable;
programs that need none take no parameters.
"""

from __future__ import annotations

import functools
import re
import threading
from dataclasses import dataclass

import numpy as np

from cupric.device.optix import LAUNCH_PARAMS_NAME

__all__ = ["Program", "program", "raygen", "miss", "closest_hit", "any_hit",
           "intersection", "exception", "direct_callable", "continuation_callable",
           "CompiledPrograms", "compile_ptx", "launch_params_dtype", "fit_ptx_version",
           "PROGRAM_KINDS"]

#: Program kind -> the entry-name prefix OptiX looks for.
PROGRAM_KINDS = {
    "raygen": "__raygen__",
    "miss": "__miss__",
    "closest_hit": "__closesthit__",
    "any_hit": "__anyhit__",
    "intersection": "__intersection__",
    "exception": "__exception__",
    "direct_callable": "__direct_callable__",
    "continuation_callable": "__continuation_callable__",
}

_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class Program:
    """A Python function marked as an OptiX program of one kind.

    Made by `raygen`, `miss`, `closest_hit`, `any_hit`, `intersection`, `exception`,
    `direct_callable`, `continuation_callable` (or `program(kind)`).

    Attributes
    ----------
    kind : str
    name : str
        The part after the prefix; the function's name unless given.
    entry_name : str
        The PTX entry name (``"__raygen__" + name``).
    py_func : function

    Calling a program from Python raises: it runs only inside an OptiX launch.
    """

    def __init__(self, kind: str, py_func, name: str | None = None) -> None:
        if kind not in PROGRAM_KINDS:
            raise ValueError(f"OptiX program kind must be one of {', '.join(PROGRAM_KINDS)}, "
                             f"got {kind!r}")
        if not hasattr(py_func, "__code__"):
            raise TypeError(f"an OptiX {kind} program must be a plain Python function, got "
                            f"{py_func!r}")
        name = py_func.__name__ if name is None else name
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise ValueError(f"program name must be a C identifier, got {name!r}")
        self.kind = kind
        self.name = name
        self.py_func = py_func
        functools.update_wrapper(self, py_func)

    @property
    def entry_name(self) -> str:
        return PROGRAM_KINDS[self.kind] + self.name

    @property
    def takes_params(self) -> bool:
        """Whether the function has parameters (then they are the launch parameters)."""
        return self.py_func.__code__.co_argcount > 0

    def param_types(self):
        """The annotated parameter types, or None where a parameter is unannotated."""
        from cupric.compiler.signature import Generic, param_specs
        specs = param_specs(self.py_func)
        return tuple(None if isinstance(s, Generic) else s for s in specs)

    def __call__(self, *args, **kwargs):
        raise TypeError(f"{self.entry_name} is an OptiX program: it runs inside "
                        f"Pipeline.launch, not from Python")

    def __repr__(self) -> str:
        return f"<OptiX {self.kind} program {self.entry_name}>"


def program(kind: str, py_func=None, *, name: str | None = None):
    """Mark a function as an OptiX program of `kind` (see `PROGRAM_KINDS`).

    Usable as ``@program("miss")`` or ``program("miss", f, name="shadow")``.

    Examples
    --------
    >>> @cupric.optix.program("miss", name="background")
    ... def sky(image: Array[f32, 2], handle: u64):
    ...     optix.set_payload(0, 0)
    """
    if kind not in PROGRAM_KINDS:
        raise ValueError(f"OptiX program kind must be one of {', '.join(PROGRAM_KINDS)}, "
                         f"got {kind!r}")
    if py_func is None:
        return lambda f: Program(kind, f, name)
    return Program(kind, py_func, name)


def _kind_decorator(kind: str):
    def decorator(py_func=None, *, name: str | None = None):
        return program(kind, py_func, name=name)
    decorator.__name__ = kind
    decorator.__qualname__ = kind
    decorator.__doc__ = (f"Mark a function as an OptiX {kind.replace('_', ' ')} program "
                         f"(entry ``{PROGRAM_KINDS[kind]}<name>``); usable bare or as "
                         f"``@{kind}(name=...)``.")
    return decorator


raygen = _kind_decorator("raygen")
miss = _kind_decorator("miss")
closest_hit = _kind_decorator("closest_hit")
any_hit = _kind_decorator("any_hit")
intersection = _kind_decorator("intersection")
exception = _kind_decorator("exception")
direct_callable = _kind_decorator("direct_callable")
continuation_callable = _kind_decorator("continuation_callable")


# -- launch parameters ---------------------------------------------------------------------------

def launch_params_dtype(param_types) -> np.dtype:
    """The host-side layout of the launch-parameter struct: a NumPy structured dtype with
    one field per ABI value (``p<k>``), at the offsets the programs read them from.

    Arrays take a data pointer (``u8``), ``ndim`` shapes and ``ndim`` strides in elements
    (``i8``); bools one byte; structs their aligned dtype's bytes.
    """
    from cupric.compiler.entries import params_dtype
    return params_dtype(param_types)


def _emit(programs, param_types, params_name: str, **options) -> str:
    """NVVM IR of one module holding `programs`' entry points: each typed as a device
    function and wrapped by the compiler's custom-entry hook, with the lowering state the
    OptiX device functions' rules read (`cupric.compiler.lowering.optix`)."""
    from cupric.compiler.entries import Entry, emit_module
    entries = [Entry(p.entry_name, p.py_func, p.takes_params, {"optix_program_kind": p.kind})
               for p in programs]
    return emit_module(entries, param_types, params_name=params_name,
                       module_name="cupric_optix", state={"optix_programs": True},
                       what="OptiX program", return_hint="results leave a program through "
                       "payloads, attributes or arrays", **options)


# -- compiling -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class CompiledPrograms:
    """PTX of a set of programs and what the host needs to use it.

    Attributes
    ----------
    ptx : str
    entries : dict
        Entry name -> `Program`.
    param_types : tuple
        The launch parameters' cupric types.
    params_dtype : numpy.dtype
        Their packed layout (`launch_params_dtype`).
    params_name : str
        The `.const` variable's name.
    arch : str
    """

    ptx: str
    entries: dict
    param_types: tuple
    params_dtype: np.dtype
    params_name: str
    arch: str


def _resolve_params(programs, params) -> tuple:
    if params is not None:
        if isinstance(params, str):
            from cupric.compiler.signature import parse_signature
            params = parse_signature(params)
        params = tuple(params)
    for prog in programs:
        if not prog.takes_params:
            continue
        annotated = prog.param_types()
        if params is None:
            if any(t is None for t in annotated):
                raise TypeError(f"{prog.entry_name}: annotate every parameter (they are the "
                                f"launch parameters) or pass params= to compile")
            params = annotated
            continue
        if len(annotated) != len(params):
            raise TypeError(f"{prog.entry_name} takes {len(annotated)} launch parameters, "
                            f"the module's launch parameters are {len(params)}: {params!r}")
        for k, (have, want) in enumerate(zip(annotated, params)):
            if have is not None and have != want:
                raise TypeError(f"{prog.entry_name}: parameter {k + 1} is annotated "
                                f"{have!r}, the module's launch parameter is {want!r}")
    return params or ()


_CACHE: dict = {}
_CACHE_LOCK = threading.Lock()


def compile_ptx(programs, *, params=None, arch=None, params_name: str = LAUNCH_PARAMS_NAME,
                lineinfo: bool = False, debug: bool = False, fast_math: bool = False,
                opt_level: int = 3) -> CompiledPrograms:
    """Compile OptiX programs into one PTX module.

    Parameters
    ----------
    programs : sequence of Program
        Entry names must be distinct.
    params : str or sequence of cupric types, optional
        The launch parameters ("Array[f32, 2], u64"); default: the annotations of the
        programs that take parameters (which must then agree).
    arch : str, optional
        Target architecture (default: the current device's, else sm_90).
    params_name : str
        Name of the `.const` launch-parameter variable (PipelineCompileOptions must name
        the same).
    lineinfo, debug, fast_math, opt_level
        As for `cupric.kernel`.

    Returns
    -------
    CompiledPrograms

    Raises
    ------
    TypeError, ValueError
        Bad programs or parameters (before compiling anything).
    CompileError
        A program does not compile (located at its source line).

    Cost
    ----
    Typing, lowering and a libNVVM compile (tens of milliseconds for small programs); a
    second call with the same programs and options returns the remembered result.
    """
    programs = tuple(programs)
    if not programs:
        raise ValueError("compile at least one OptiX program")
    entries: dict = {}
    for prog in programs:
        if not isinstance(prog, Program):
            raise TypeError(f"expected OptiX programs (decorated with cupric.optix.raygen, "
                            f"miss, ...), got {prog!r}")
        if prog.entry_name in entries:
            raise ValueError(f"two programs named {prog.entry_name}")
        entries[prog.entry_name] = prog
    if not isinstance(params_name, str) or not _NAME_RE.match(params_name):
        raise ValueError(f"params_name must be a C identifier, got {params_name!r}")
    param_types = _resolve_params(programs, params)
    params_dtype = launch_params_dtype(param_types)
    from cupric.compiler.options import CompileOptions
    options = CompileOptions(arch=arch, opt_level=opt_level, debug=debug, lineinfo=lineinfo,
                             fast_math=fast_math).resolve(None)
    key = (tuple((p.entry_name, p.py_func) for p in programs), param_types, params_name,
           options)
    with _CACHE_LOCK:
        known = _CACHE.get(key)
    if known is not None:
        return known
    from cupric.compiler import nvvm
    from cupric.compiler.errors import CompileError
    try:
        ir = _emit(programs, param_types, params_name, debug=debug, lineinfo=lineinfo,
                   fast_math=fast_math)
    except CompileError as exc:
        raise exc.with_traceback(None) from None
    output = nvvm.compile_ir([ir], options)
    result = CompiledPrograms(output.ptx, entries, param_types, params_dtype, params_name,
                              options.arch)
    with _CACHE_LOCK:
        _CACHE[key] = result
    return result


_VERSION_RE = re.compile(r"^(\s*\.version\s+)(\d+)\.(\d+)", re.MULTILINE)


def fit_ptx_version(ptx: str, max_isa: tuple[int, int] | None) -> str:
    """`ptx` with its `.version` lowered to `max_isa` when newer.

    OptiX takes PTX only (no cubin), and compiles it with the driver's PTX compiler,
    which refuses a newer ISA version than its own even when no newer instruction is
    used (libNVVM 13.5 writes 9.5; a CUDA 13.0 driver reads up to 9.0). cupric's programs
    use instructions of the target's base ISA and the `_optix_` calls only, so stating
    the older version is sound; a module that really needs newer instructions still
    fails, in OptiX's log.
    """
    if max_isa is None:
        return ptx
    match = _VERSION_RE.search(ptx)
    if match is None:
        raise ValueError("PTX without a .version directive")
    isa = (int(match.group(2)), int(match.group(3)))
    if isa <= tuple(max_isa):
        return ptx
    return _VERSION_RE.sub(lambda m: f"{m.group(1)}{max_isa[0]}.{max_isa[1]}", ptx, count=1)
