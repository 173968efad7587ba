"""Program groups and pipelines.

A program group names the entry functions OptiX runs for one role: ray generation,
miss, exception, a hit group (closest-hit, any-hit and intersection programs of one
geometry kind) or callables. Shader binding table records start with a group's packed
header. A pipeline links groups into what `optixLaunch` runs, with a maximum trace depth
and the stack sizes computed from every group's needs.
"""

from __future__ import annotations

from cupric.runtime.resource import Resource

from .module import Module, call_with_log, pipeline_compile_options_struct
from .options import PipelineCompileOptions, PipelineLinkOptions

__all__ = ["ProgramGroup", "Pipeline", "GROUP_KINDS", "program_group_desc",
           "StackSizes", "accumulate_stack_sizes", "compute_stack_sizes",
           "SBT_RECORD_HEADER_SIZE"]

#: Bytes of the opaque header that starts every SBT record (OPTIX_SBT_RECORD_HEADER_SIZE).
SBT_RECORD_HEADER_SIZE = 32

# OptixProgramGroupKind
GROUP_KINDS = {"raygen": 0x2421, "miss": 0x2422, "exception": 0x2423, "hitgroup": 0x2424,
               "callables": 0x2425}

# The parts each kind takes: part -> (union member, module field, entry field, program kind)
_PARTS = {
    "raygen": {"raygen": ("raygen", "module", "entryFunctionName", "raygen")},
    "miss": {"miss": ("miss", "module", "entryFunctionName", "miss")},
    "exception": {"exception": ("exception", "module", "entryFunctionName", "exception")},
    "hitgroup": {
        "closest_hit": ("hitgroup", "moduleCH", "entryFunctionNameCH", "closest_hit"),
        "any_hit": ("hitgroup", "moduleAH", "entryFunctionNameAH", "any_hit"),
        "intersection": ("hitgroup", "moduleIS", "entryFunctionNameIS", "intersection"),
    },
    "callables": {
        "direct": ("callables", "moduleDC", "entryFunctionNameDC", "direct_callable"),
        "continuation": ("callables", "moduleCC", "entryFunctionNameCC",
                         "continuation_callable"),
    },
}


def program_group_desc(kind: str, parts: dict):
    """A filled ``OptixProgramGroupDesc`` cdata for one group, and the objects it points
    to (keep them alive while OptiX may read it). Needs no driver.

    Parameters
    ----------
    kind : str
        A `GROUP_KINDS` name.
    parts : dict
        Part name -> (module, program or entry name) or None; see `_PARTS`. A module
        may be any object with ``handle`` and ``entry_name(program, kind)`` (a `Module`).

    Raises
    ------
    ValueError
        Unknown parts, missing required programs, a program of the wrong kind.
    """
    from . import lib
    ffi = lib.ffi
    if kind not in GROUP_KINDS:
        raise ValueError(f"program group kind must be one of {', '.join(GROUP_KINDS)}, "
                         f"got {kind!r}")
    allowed = _PARTS[kind]
    unknown = set(parts) - set(allowed)
    if unknown:
        raise ValueError(f"a {kind} group takes {', '.join(allowed)}; got "
                         f"{', '.join(sorted(unknown))}")
    desc = ffi.new("OptixProgramGroupDesc *")
    desc.kind = GROUP_KINDS[kind]
    desc.flags = 0
    keep: list = []
    present = 0
    for part, (member, module_field, entry_field, program_kind) in allowed.items():
        module, program = parts.get(part) or (None, None)
        builtin = getattr(module, "builtin", None)
        if program is None and not builtin:
            continue
        if module is None:
            raise ValueError(f"{kind} group: the {part} program needs a module")
        if builtin:
            if part != "intersection":
                raise ValueError(f"a built-in {builtin} module only provides intersection")
            name = None  # built-in intersection: OptiX takes a NULL entry name
        elif hasattr(module, "entry_name"):
            name = module.entry_name(program, program_kind)
        else:
            name = program
        c_name = ffi.NULL if name is None else ffi.new("char[]", name.encode())
        keep.append(c_name)
        union = getattr(desc, member)
        setattr(union, module_field, module.handle)
        setattr(union, entry_field, c_name)
        present += 1
    if kind in ("raygen", "exception") and not present:
        raise ValueError(f"a {kind} group needs its program")
    if kind == "hitgroup" and not present:
        raise ValueError("a hit group needs at least one of closest_hit, any_hit, "
                         "intersection")
    if kind == "callables" and not present:
        raise ValueError("a callables group needs a direct or a continuation callable")
    return desc, keep


def _destroy_group(handle, context, _modules) -> None:
    # `_modules` keeps the group's modules alive until the group is destroyed.
    from . import lib
    from .context import destroy_child
    destroy_child(lib.optixProgramGroupDestroy, handle, context)


class StackSizes(dict):
    """Per-program stack needs (bytes): css_rg, css_ms, css_ch, css_ah, css_is, css_cc,
    dss_dc (OptixStackSizes)."""

    FIELDS = (("css_rg", "cssRG"), ("css_ms", "cssMS"), ("css_ch", "cssCH"),
              ("css_ah", "cssAH"), ("css_is", "cssIS"), ("css_cc", "cssCC"),
              ("dss_dc", "dssDC"))

    @classmethod
    def from_struct(cls, struct) -> "StackSizes":
        return cls({name: int(getattr(struct, c_name)) for name, c_name in cls.FIELDS})


def accumulate_stack_sizes(sizes) -> StackSizes:
    """The maximum of each stack need over the groups of a pipeline."""
    total = StackSizes({name: 0 for name, _ in StackSizes.FIELDS})
    for entry in sizes:
        for name in total:
            total[name] = max(total[name], entry[name])
    return total


def compute_stack_sizes(sizes: StackSizes, link: PipelineLinkOptions) -> tuple:
    """(direct-callable stack size from traversal, from state, continuation stack size)
    for `optixPipelineSetStackSize`.

    The continuation stack holds the raygen frame, then per level of trace recursion
    the larger of a closest-hit or miss frame (plus its continuation callables), and for
    the deepest level the larger of that and an intersection plus any-hit frame.
    """
    dc = link.max_dc_depth * sizes["dss_dc"]
    cc_tree = link.max_cc_depth * sizes["css_cc"]
    ch_or_ms = max(sizes["css_ch"], sizes["css_ms"]) + cc_tree
    depth = link.max_trace_depth
    css = (sizes["css_rg"] + cc_tree + (max(1, depth) - 1) * ch_or_ms
           + min(depth, 1) * max(ch_or_ms, sizes["css_is"] + sizes["css_ah"]))
    return dc, dc, css


class ProgramGroup(Resource):
    """An OptiX program group (OptixProgramGroup).

    Made by `DeviceContext.raygen_group`, `miss_group`, `exception_group`, `hit_group`,
    `callables_group`.

    Attributes
    ----------
    kind : str
    context : DeviceContext
    modules : tuple of Module
    pipeline_options : PipelineCompileOptions
    """

    __slots__ = ("kind", "context", "modules", "pipeline_options", "compile_log")

    def __init__(self, *args, **kwargs) -> None:
        raise TypeError("make program groups with DeviceContext.raygen_group(...), "
                        "miss_group, hit_group, exception_group or callables_group")

    @classmethod
    def _create(cls, context, kind: str, **parts) -> "ProgramGroup":
        from . import lib
        modules = []
        for part in parts.values():
            module = part[0] if part else None
            if module is None or (part[1] is None and not getattr(module, "builtin", None)):
                continue
            if not isinstance(module, Module):
                raise TypeError(f"expected a cupric.optix Module, got {module!r}")
            if module.context is not context:
                raise ValueError("the module belongs to another OptiX device context")
            modules.append(module)
        options = {m.pipeline_options for m in modules}
        if len(options) > 1:
            raise ValueError("the modules of one program group were compiled with "
                             "different pipeline options")
        desc, keep = program_group_desc(kind, parts)
        group_options = lib.ffi.new("OptixProgramGroupOptions *")
        out = lib.ffi.new("OptixProgramGroup *")
        log = call_with_log(context, lib.optixProgramGroupCreate, context.handle, desc, 1,
                            group_options, out)
        del keep
        self = cls.__new__(cls)
        self.kind = kind
        self.context = context
        self.modules = tuple(modules)
        self.pipeline_options = options.pop() if options else None
        self.compile_log = log
        self._init_resource(out[0], _destroy_group, context, self.modules)
        context._adopt(self)
        return self

    def _label(self) -> str:
        return f"OptiX {self.kind} ProgramGroup"

    def __repr__(self) -> str:
        return f"<cupric.optix.ProgramGroup {self.kind}{' closed' if self.closed else ''}>"

    def pack_header(self) -> bytes:
        """The 32-byte SBT record header for this group (optixSbtRecordPackHeader)."""
        from . import lib
        header = lib.ffi.new("char[]", SBT_RECORD_HEADER_SIZE)
        self.context._call(lib.optixSbtRecordPackHeader, self.handle, header)
        return bytes(lib.ffi.buffer(header, SBT_RECORD_HEADER_SIZE))

    def stack_sizes(self, pipeline=None) -> StackSizes:
        """This group's stack needs (optixProgramGroupGetStackSize); with `pipeline`,
        the needs of the programs as linked into it."""
        from . import lib
        struct = lib.ffi.new("OptixStackSizes *")
        self.context._call(lib.optixProgramGroupGetStackSize, self.handle, struct,
                           lib.ffi.NULL if pipeline is None else pipeline.handle)
        return StackSizes.from_struct(struct)


def _destroy_pipeline(handle, context, _groups) -> None:
    # `_groups` keeps the pipeline's program groups (and their modules) alive until the
    # pipeline is destroyed.
    from . import lib
    from .context import destroy_child
    destroy_child(lib.optixPipelineDestroy, handle, context)


class Pipeline(Resource):
    """A linked OptiX pipeline (OptixPipeline), ready for `launch`.

    Made by `DeviceContext.create_pipeline(groups, pipeline_options, link_options)`;
    its stack sizes are set from the groups' needs and `link_options`.

    Attributes
    ----------
    groups : tuple of ProgramGroup
    pipeline_options : PipelineCompileOptions
    link_options : PipelineLinkOptions
    stack_sizes : tuple
        (dc from traversal, dc from state, continuation) as set.
    param_types : tuple
        The launch parameters of the pipeline's cupric programs.
    params_dtype : numpy.dtype
        Their packed layout.
    """

    __slots__ = ("context", "groups", "pipeline_options", "link_options", "stack_sizes",
                 "param_types", "params_dtype", "compile_log")

    def __init__(self, *args, **kwargs) -> None:
        raise TypeError("make pipelines with DeviceContext.create_pipeline(groups, ...)")

    @classmethod
    def _create(cls, context, groups, pipeline_options, link_options) -> "Pipeline":
        from . import lib
        from .program import launch_params_dtype
        groups = tuple(groups)
        if not groups:
            raise ValueError("a pipeline needs at least one program group")
        for group in groups:
            if not isinstance(group, ProgramGroup):
                raise TypeError(f"expected ProgramGroups, got {group!r}")
            if group.context is not context:
                raise ValueError("a program group belongs to another OptiX device context")
        if sum(g.kind == "raygen" for g in groups) < 1:
            raise ValueError("a pipeline needs a raygen program group")
        known = {g.pipeline_options for g in groups if g.pipeline_options is not None}
        if pipeline_options is None:
            if len(known) != 1:
                raise ValueError("pass pipeline_options: the groups' modules do not name "
                                 "one set")
            pipeline_options = next(iter(known))
        elif not isinstance(pipeline_options, PipelineCompileOptions):
            raise TypeError("pipeline_options must be a PipelineCompileOptions")
        elif known - {pipeline_options}:
            raise ValueError("the modules were compiled with other pipeline options than "
                             "the pipeline's; every module of a pipeline must share them")
        if link_options is None:
            link_options = PipelineLinkOptions()
        elif not isinstance(link_options, PipelineLinkOptions):
            raise TypeError("link_options must be a PipelineLinkOptions")
        param_types = None
        for group in groups:
            for module in group.modules:
                compiled = module.compiled
                if compiled is None or not compiled.param_types:
                    continue
                if param_types is not None and compiled.param_types != param_types:
                    raise ValueError("the pipeline's modules disagree on the launch "
                                     f"parameters: {param_types!r} vs "
                                     f"{compiled.param_types!r}")
                param_types = compiled.param_types
        param_types = param_types or ()
        pco, keep = pipeline_compile_options_struct(pipeline_options)
        plo = lib.ffi.new("OptixPipelineLinkOptions *")
        link_options.fill(plo)
        handles = lib.ffi.new("OptixProgramGroup[]", [g.handle for g in groups])
        out = lib.ffi.new("OptixPipeline *")
        log = call_with_log(context, lib.optixPipelineCreate, context.handle, pco, plo,
                            handles, len(groups), out)
        del keep
        self = cls.__new__(cls)
        self.context = context
        self.groups = groups
        self.pipeline_options = pipeline_options
        self.link_options = link_options
        self.param_types = param_types
        self.params_dtype = launch_params_dtype(param_types)
        self.compile_log = log
        self.stack_sizes = None
        self._init_resource(out[0], _destroy_pipeline, context, groups)
        context._adopt(self)
        try:
            self.set_stack_sizes()
        except BaseException:
            self.close()
            raise
        return self

    def _label(self) -> str:
        return "OptiX Pipeline"

    def __repr__(self) -> str:
        return f"<cupric.optix.Pipeline of {len(self.groups)} groups" \
               f"{' closed' if self.closed else ''}>"

    def set_stack_sizes(self, sizes: tuple | None = None) -> tuple:
        """Set the stack sizes: `sizes` (dc from traversal, dc from state, continuation)
        or, by default, those computed from the groups and the link options."""
        from . import lib
        if sizes is None:
            needs = accumulate_stack_sizes(g.stack_sizes(self) for g in self.groups)
            sizes = compute_stack_sizes(needs, self.link_options)
        sizes = tuple(int(s) for s in sizes)
        if len(sizes) != 3 or any(s < 0 for s in sizes):
            raise ValueError("stack sizes are three non-negative byte counts")
        self.context._call(lib.optixPipelineSetStackSize, self.handle, *sizes,
                           self.link_options.max_traversable_depth)
        self.stack_sizes = sizes
        return sizes

    def launch(self, sbt, dims, *params, stream=None) -> None:
        """Run the pipeline over a 1-, 2- or 3-D grid of `dims` (see
        `cupric.optix.launch.launch`)."""
        from .launch import launch
        launch(self, sbt, dims, *params, stream=stream)
