"""The public surface of cupric.optix: OptiX ray tracing with programs written in Python.

A device context (`create_context`) compiles cupric OptiX programs (`raygen`, `miss`,
`closest_hit`, ...) into modules, groups them into program groups and a pipeline, builds
acceleration structures from device arrays, fills a shader binding table, launches, and
denoises. See docs/optix.md for a walk-through.
"""

from __future__ import annotations

from .accel import (CURVE_TYPES, GEOMETRY_FLAGS, IDENTITY_TRANSFORM, INSTANCE_DTYPE,
                    AccelStructure, CurveInput, CustomPrimitiveInput, InstanceInput,
                    SphereInput, TriangleInput, make_instances)
from .context import DEVICE_PROPERTIES, DeviceContext, create_context
from .denoiser import Denoiser, DenoiserUnavailableError
from .launch import launch
from .lib import OptixError
from .module import Module, OptixCompileError
from .options import (AccelBuildOptions, ContextOptions, DenoiserOptions, ModuleCompileOptions,
                      PipelineCompileOptions, PipelineLinkOptions)
from .pipeline import Pipeline, ProgramGroup
from .program import (CompiledPrograms, Program, any_hit, closest_hit, compile_ptx,
                      continuation_callable, direct_callable, exception, intersection, miss,
                      program, raygen)
from .sbt import (SBT_RECORD_ALIGNMENT, SBT_RECORD_HEADER_SIZE, ShaderBindingTable,
                  create_sbt, make_records, record_dtype)

from . import _API

# The names are listed once, in the package (which exports them lazily from here).
__all__ = list(_API)
