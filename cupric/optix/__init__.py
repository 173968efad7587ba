"""cupric.optix: NVIDIA OptiX ray tracing, with device programs written in Python.

Device contexts on the runtime's primary context, modules compiled from cupric programs
(`@raygen`, `@miss`, `@closest_hit`, ...), program groups, pipelines, shader binding
tables, acceleration structures, launches and the AI denoiser, all through the driver's
OptiX runtime (``optixQueryFunctionTable``). `cupric.optix.lib` holds the low-level
bindings, declared from the OptiX SDK headers when ``OPTIX_ROOT`` is set and from
cupric's own declarations otherwise. Importing this package loads nothing.
"""

from __future__ import annotations

import importlib

from .._lazy import attach

# The public surface, defined in `cupric.optix.api` (which reads this list as its
# __all__), grouped: context and options; programs and modules; shader binding table;
# acceleration structures; denoiser and errors.
_API = (
    "create_context", "DeviceContext", "ContextOptions", "DEVICE_PROPERTIES",
    "ModuleCompileOptions", "PipelineCompileOptions", "PipelineLinkOptions",
    "AccelBuildOptions", "DenoiserOptions",
    "program", "raygen", "miss", "closest_hit", "any_hit", "intersection", "exception",
    "direct_callable", "continuation_callable", "Program", "CompiledPrograms", "compile_ptx",
    "Module", "ProgramGroup", "Pipeline", "launch",
    "record_dtype", "make_records", "create_sbt", "ShaderBindingTable",
    "SBT_RECORD_HEADER_SIZE", "SBT_RECORD_ALIGNMENT",
    "TriangleInput", "CustomPrimitiveInput", "SphereInput", "CurveInput", "InstanceInput",
    "AccelStructure", "INSTANCE_DTYPE", "IDENTITY_TRANSFORM", "make_instances",
    "GEOMETRY_FLAGS", "CURVE_TYPES",
    "Denoiser", "DenoiserUnavailableError", "OptixError", "OptixCompileError",
)

__all__ = ["lib", "is_available", *_API]

__getattr__, __dir__ = attach(__name__, globals(), {
    "lib": ("cupric.optix.lib", None),
    **{name: ("cupric.optix.api", name) for name in _API},
})


def is_available() -> bool:
    """Whether the driver's OptiX runtime loads (it ships with the NVIDIA driver)."""
    return importlib.import_module("cupric.optix.lib").is_available()
