"""OptiX modules: PTX compiled by OptiX for one pipeline's compile options.

A module holds the programs of one PTX input (here: cupric OptiX programs compiled by
`cupric.optix.program.compile_ptx`, or PTX text from anywhere). OptiX compiles it for
the GPU when the module is created, under module options (registers, optimization,
debug) and the pipeline options that all modules of one pipeline share. Built-in
intersection modules (spheres, curves) come from OptiX itself.
"""

from __future__ import annotations

from cupric.runtime.resource import Resource

from .lib import OptixError
from .options import AccelBuildOptions, ModuleCompileOptions, PipelineCompileOptions
from .program import CompiledPrograms, Program, compile_ptx, fit_ptx_version

__all__ = ["Module", "OptixCompileError", "module_compile_options_struct",
           "pipeline_compile_options_struct", "BUILTIN_PRIMITIVES"]

# OptixPrimitiveType of the built-in intersection modules.
BUILTIN_PRIMITIVES = {
    "round_quadratic_bspline": 0x2501,
    "round_cubic_bspline": 0x2502,
    "round_linear": 0x2503,
    "round_catmullrom": 0x2504,
    "flat_quadratic_bspline": 0x2505,
    "sphere": 0x2506,
    "round_cubic_bezier": 0x2507,
}

_LOG_BYTES = 8192


class OptixCompileError(OptixError):
    """OptiX refused a module, program group or pipeline; `.log` holds OptiX's log."""

    def __init__(self, code: int, name: str, description: str, log: str = "") -> None:
        self.log = log
        text = description if not log else f"{description}\n--- OptiX log ---\n{log}"
        super().__init__(code, name, text)

    def __reduce__(self):
        return (type(self), (self.code, self.name, self.description, self.log))


def _options(value, cls, what: str):
    if value is None:
        return cls()
    if not isinstance(value, cls):
        raise TypeError(f"{what} must be a {cls.__name__}, got {type(value).__name__}")
    return value


def module_compile_options_struct(options: ModuleCompileOptions):
    """A filled ``OptixModuleCompileOptions`` cdata (needs no driver)."""
    from . import lib
    struct = lib.ffi.new("OptixModuleCompileOptions *")
    options.fill(struct)
    return struct


def pipeline_compile_options_struct(options: PipelineCompileOptions):
    """A filled ``OptixPipelineCompileOptions`` cdata and the objects it points to (keep
    both alive while OptiX may read the struct). Needs no driver."""
    from . import lib
    keep: list = []
    struct = lib.ffi.new("OptixPipelineCompileOptions *")
    options.fill(struct, keep)
    return struct, keep


def call_with_log(context, function, *args):
    """Call an OptiX function whose last-but-one arguments are a log buffer and its size
    (module, program group and pipeline creation); raise `OptixCompileError` with the log
    on failure and return the log text.

    Raises
    ------
    OptixCompileError
        The call failed; the message carries OptiX's log.
    """
    from . import lib
    ffi = lib.ffi
    log = ffi.new("char[]", _LOG_BYTES)
    size = ffi.new("size_t *", _LOG_BYTES)
    result = function(*args[:-1], log, size, args[-1])
    text = ffi.string(log).decode(errors="replace")
    if result != 0:
        context._log.raise_pending()
        try:
            lib.check(result)
        except OptixError as exc:
            raise OptixCompileError(exc.code, exc.name, exc.description, text) from None
    # On success a log-callback error stays pending: the caller owns the new handle first
    # (`DeviceContext._adopt`), so that raising it leaks nothing.
    return text


def _destroy_module(handle, context) -> None:
    from . import lib
    from .context import destroy_child
    destroy_child(lib.optixModuleDestroy, handle, context)


class Module(Resource):
    """An OptiX module (OptixModule).

    Made by `DeviceContext.compile_module(programs, module_options, pipeline_options)`
    or `DeviceContext.builtin_intersection_module(...)`.

    Parameters (of `DeviceContext.compile_module`)
    ----------------------------------------------
    programs : sequence of Program, CompiledPrograms, or str
        cupric OptiX programs (compiled together into one PTX module), their compiled
        form, or PTX text.
    module_options : ModuleCompileOptions, optional
    pipeline_options : PipelineCompileOptions, optional
        Must be the same for every module of a pipeline, and for the pipeline.
    params : str or sequence of cupric types, optional
        The launch parameters, when the programs' annotations do not give them.
    arch : str, optional
        PTX target (default: the context's device).
    lineinfo : bool
        Line tables in the PTX (with debug_level "minimal": profilers show Python lines).

    Attributes
    ----------
    context : DeviceContext
    compiled : CompiledPrograms or None
        None for PTX text and built-in modules.
    ptx : str or None
        What OptiX compiled (`.version` possibly lowered, see `fit_ptx_version`).
    pipeline_options, module_options
    compile_log : str
        OptiX's compile messages.

    Raises
    ------
    OptixCompileError
        OptiX refused the PTX; the message carries OptiX's log.
    CompileError
        A cupric program does not compile.

    Cost
    ----
    libNVVM (tens of ms) plus OptiX's compile (tens to hundreds of ms; OptiX's disk cache
    makes a repeat cheap).
    """

    __slots__ = ("context", "compiled", "ptx", "pipeline_options", "module_options",
                 "compile_log", "builtin")

    def __init__(self, *args, **kwargs) -> None:
        raise TypeError("make OptiX modules with DeviceContext.compile_module(...)")

    @classmethod
    def _new(cls, context, handle, compiled, ptx, module_options, pipeline_options, log,
             builtin=None) -> "Module":
        self = cls.__new__(cls)
        self.context = context
        self.compiled = compiled
        self.ptx = ptx
        self.module_options = module_options
        self.pipeline_options = pipeline_options
        self.compile_log = log
        self.builtin = builtin
        self._init_resource(handle, _destroy_module, context)
        context._adopt(self)
        return self

    @classmethod
    def _compile(cls, context, programs, module_options, pipeline_options, *, params=None,
                 arch=None, lineinfo=False) -> "Module":
        from . import lib
        module_options = _options(module_options, ModuleCompileOptions, "module_options")
        pipeline_options = _options(pipeline_options, PipelineCompileOptions,
                                    "pipeline_options")
        compiled = None
        if isinstance(programs, (str, bytes)):
            if params is not None:
                raise TypeError("params= applies to cupric programs, not to PTX text")
            ptx = programs.decode() if isinstance(programs, bytes) else programs
        else:
            if isinstance(programs, CompiledPrograms):
                compiled = programs
            else:
                if isinstance(programs, Program):
                    programs = [programs]
                # arch None: compile_ptx targets the current device, the context's.
                context.device.primary_context().make_current()
                compiled = compile_ptx(programs, params=params, arch=arch,
                                       params_name=pipeline_options.launch_params_name,
                                       lineinfo=lineinfo)
            if compiled.params_name != pipeline_options.launch_params_name:
                raise ValueError(
                    f"the programs read launch parameters from {compiled.params_name!r} "
                    f"but pipeline_options.launch_params_name is "
                    f"{pipeline_options.launch_params_name!r}")
            ptx = compiled.ptx
        from cupric.compiler.target import driver_max_ptx_isa
        ptx = fit_ptx_version(ptx, driver_max_ptx_isa())
        module_struct = module_compile_options_struct(module_options)
        pipeline_struct, keep = pipeline_compile_options_struct(pipeline_options)
        data = ptx.encode()
        out = lib.ffi.new("OptixModule *")
        context.device.primary_context().make_current()
        log = call_with_log(context, lib.optixModuleCreate, context.handle, module_struct,
                            pipeline_struct, data, len(data), out)
        del keep
        return cls._new(context, out[0], compiled, ptx, module_options, pipeline_options, log)

    @classmethod
    def _builtin(cls, context, primitive: str, module_options, pipeline_options,
                 build_options) -> "Module":
        from . import lib
        from .structs import builtin_is_options_struct, foreign_pointer
        module_options = _options(module_options, ModuleCompileOptions, "module_options")
        pipeline_options = _options(pipeline_options, PipelineCompileOptions,
                                    "pipeline_options")
        build_options = _options(build_options, AccelBuildOptions, "build_options")
        if primitive not in BUILTIN_PRIMITIVES:
            raise ValueError(f"built-in intersection modules exist for "
                             f"{', '.join(BUILTIN_PRIMITIVES)}; got {primitive!r}")
        if primitive not in pipeline_options.primitive_types:
            raise ValueError(f"pipeline_options.primitive_types must include {primitive!r} "
                             f"to use its built-in intersection module")
        module_struct = module_compile_options_struct(module_options)
        pipeline_struct, keep = pipeline_compile_options_struct(pipeline_options)
        builtin = builtin_is_options_struct(BUILTIN_PRIMITIVES[primitive],
                                            pipeline_options.uses_motion_blur,
                                            build_options.build_flags)
        out = lib.ffi.new("OptixModule *")
        context._create_call(lib.optixBuiltinISModuleGet, context.handle, module_struct,
                             pipeline_struct,
                             foreign_pointer(builtin, "OptixBuiltinISOptions *"), out)
        del keep
        return cls._new(context, out[0], None, None, module_options, pipeline_options, "",
                        builtin=primitive)

    def _label(self) -> str:
        return "OptiX Module"

    def __repr__(self) -> str:
        if self.builtin:
            what = f"built-in {self.builtin}"
        elif self.compiled is not None:
            what = ", ".join(self.compiled.entries)
        else:
            what = "PTX"
        return f"<cupric.optix.Module {what}{' closed' if self.closed else ''}>"

    def entry_name(self, program, kind: str | None = None) -> str:
        """The PTX entry name of `program` (a Program, or a name) in this module.

        Raises
        ------
        ValueError
            The module has no such program, or it is of another kind than `kind`.
        """
        from .program import PROGRAM_KINDS
        if isinstance(program, Program):
            name = program.entry_name
            if kind is not None and program.kind != kind:
                raise ValueError(f"{name} is a {program.kind} program, not a {kind} program")
        elif isinstance(program, str):
            name = program
            if kind is not None and not name.startswith(PROGRAM_KINDS[kind]):
                name = PROGRAM_KINDS[kind] + name
        else:
            raise TypeError(f"expected an OptiX Program or an entry name, got {program!r}")
        if self.compiled is not None and name not in self.compiled.entries:
            raise ValueError(f"module has no program {name}; it has "
                             f"{', '.join(self.compiled.entries)}")
        return name
