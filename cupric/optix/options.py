"""Options of the OptiX host API as frozen dataclasses, validated once when made.

OptiX reads its options from C structs (OptixDeviceContextOptions, OptixModuleCompileOptions,
OptixPipelineCompileOptions, OptixPipelineLinkOptions, OptixAccelBuildOptions,
OptixDenoiserOptions). Here each is a dataclass of Python values; a bad value raises
`ValueError` when the dataclass is made, long before any OptiX call, and tables turn the
names into the enum values and flag bits of the API reference.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable

from cupric.device.optix import LAUNCH_PARAMS_NAME

__all__ = ["ContextOptions", "ModuleCompileOptions", "PipelineCompileOptions",
           "PipelineLinkOptions", "AccelBuildOptions", "DenoiserOptions",
           "OPT_LEVELS", "DEBUG_LEVELS", "EXCEPTION_FLAGS", "TRAVERSABLE_GRAPHS",
           "PRIMITIVE_TYPE_FLAGS", "BUILD_FLAGS", "DENOISER_MODELS", "LOG_LEVELS"]

# OptixCompileOptimizationLevel
OPT_LEVELS = {"default": 0, 0: 0x2340, 1: 0x2341, 2: 0x2342, 3: 0x2343}
# OptixCompileDebugLevel
DEBUG_LEVELS = {"default": 0, "none": 0x2350, "minimal": 0x2351, "moderate": 0x2353,
                "full": 0x2352}
# OptixExceptionFlags
EXCEPTION_FLAGS = {"stack_overflow": 1 << 0, "trace_depth": 1 << 1, "user": 1 << 2}
# OptixTraversableGraphFlags
TRAVERSABLE_GRAPHS = {"any": 0, "single_gas": 1 << 0, "single_level_instancing": 1 << 1}
# OptixPrimitiveTypeFlags
PRIMITIVE_TYPE_FLAGS = {
    "custom": 1 << 0,
    "round_quadratic_bspline": 1 << 1,
    "round_cubic_bspline": 1 << 2,
    "round_linear": 1 << 3,
    "round_catmullrom": 1 << 4,
    "flat_quadratic_bspline": 1 << 5,
    "sphere": 1 << 6,
    "round_cubic_bezier": 1 << 7,
    "triangle": 1 << 31,
}
# OptixBuildFlags
BUILD_FLAGS = {
    "allow_update": 1 << 0,
    "allow_compaction": 1 << 1,
    "prefer_fast_trace": 1 << 2,
    "prefer_fast_build": 1 << 3,
    "allow_random_vertex_access": 1 << 4,
    "allow_random_instance_access": 1 << 5,
}
# OptixDenoiserModelKind. LDR and HDR are the classic models (LDR: inputs in [0, 1]);
# AOV also denoises extra layers and accepts HDR beauty input.
DENOISER_MODELS = {"ldr": 0x2322, "hdr": 0x2323, "aov": 0x2324}
# The log levels of optixDeviceContextCreate's callback.
LOG_LEVELS = {"disable": 0, "fatal": 1, "error": 2, "warning": 3, "print": 4}

_VALIDATION_ALL = 0xFFFFFFFF


def _bool(name: str, value) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False, got {value!r}")


def _int_range(name: str, value, lo: int, hi: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ValueError(f"{name} must be an int in {lo}..{hi}, got {value!r}")


def _choice(name: str, value, table) -> None:
    if value not in table:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, table))}, got "
                         f"{value!r}")


def _flags(name: str, values, table) -> tuple:
    if isinstance(values, str):
        values = (values,)
    values = tuple(values)
    for value in values:
        _choice(name, value, table)
    if len(set(values)) != len(values):
        raise ValueError(f"{name} lists a flag twice: {values!r}")
    return values


def _mask(values, table) -> int:
    mask = 0
    for value in values:
        mask |= table[value]
    return mask


@dataclass(frozen=True)
class ContextOptions:
    """How to create an OptiX device context.

    Parameters
    ----------
    validation : bool
        OptiX validation mode (OPTIX_DEVICE_CONTEXT_VALIDATION_MODE_ALL): extra checks of
        every call and launch, with errors through the log. Slow; for development.
    log_level : str
        The most verbose log level delivered: "disable", "fatal", "error", "warning"
        (default) or "print".
    log_callback : callable, optional
        ``callback(level: int, tag: str, message: str)``; default: messages are kept in
        `DeviceContext.log` (a bounded list) and fatal/error ones also go to the
        `logging` logger ``cupric.optix``.
    cache_enabled : bool, optional
        Turn OptiX's on-disk compilation cache on or off (None: OptiX's default, usually
        on unless ``OPTIX_CACHE_MAXSIZE=0``).
    cache_location : str, optional
        Directory of the disk cache.
    cache_sizes : (int, int), optional
        Low and high water marks of the disk cache, in bytes (high 0: no limit).
    """

    validation: bool = False
    log_level: str = "warning"
    log_callback: Callable | None = None
    cache_enabled: bool | None = None
    cache_location: str | None = None
    cache_sizes: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        _bool("validation", self.validation)
        _choice("log_level", self.log_level, LOG_LEVELS)
        if self.log_callback is not None and not callable(self.log_callback):
            raise ValueError("log_callback must be callable(level, tag, message)")
        if self.cache_enabled is not None:
            _bool("cache_enabled", self.cache_enabled)
        if self.cache_location is not None and (
                not isinstance(self.cache_location, str) or not self.cache_location):
            raise ValueError("cache_location must be a non-empty directory path")
        if self.cache_sizes is not None:
            sizes = tuple(self.cache_sizes)
            if len(sizes) != 2:
                raise ValueError("cache_sizes must be (low_water_mark, high_water_mark)")
            for size in sizes:
                _int_range("cache_sizes", size, 0, 2**63 - 1)
            low, high = sizes
            if high and low > high:
                raise ValueError(f"cache_sizes: low water mark {low} exceeds high {high}")
            object.__setattr__(self, "cache_sizes", sizes)

    @property
    def validation_mode(self) -> int:
        return _VALIDATION_ALL if self.validation else 0

    @property
    def log_level_value(self) -> int:
        return LOG_LEVELS[self.log_level]


@dataclass(frozen=True)
class ModuleCompileOptions:
    """Per-module options of OptiX's compiler (OptixModuleCompileOptions).

    Parameters
    ----------
    max_registers : int
        Register cap per thread; 0 lets OptiX choose.
    opt_level : "default" or int 0..3
    debug_level : str
        "default", "none", "minimal" (line info), "moderate", "full".
    """

    max_registers: int = 0
    opt_level: object = "default"
    debug_level: str = "default"

    def __post_init__(self) -> None:
        _int_range("max_registers", self.max_registers, 0, 255)
        if self.opt_level != "default" and (type(self.opt_level) is not int
                                            or self.opt_level not in OPT_LEVELS):
            raise ValueError(f"opt_level must be 'default' or 0..3, got {self.opt_level!r}")
        _choice("debug_level", self.debug_level, DEBUG_LEVELS)

    def fill(self, struct) -> None:
        """Fill an ``OptixModuleCompileOptions`` cdata (zeroed by the caller)."""
        struct.maxRegisterCount = self.max_registers
        struct.optLevel = OPT_LEVELS[self.opt_level]
        struct.debugLevel = DEBUG_LEVELS[self.debug_level]
        struct.numBoundValues = 0
        struct.numPayloadTypes = 0


@dataclass(frozen=True)
class PipelineCompileOptions:
    """Options every module of one pipeline must share (OptixPipelineCompileOptions).

    Parameters
    ----------
    num_payload_values : int
        Payload registers of traced rays, 0..32 (at least what trace calls carry).
    num_attribute_values : int
        Attribute registers, 0..8; triangles need 2 (their barycentrics).
    uses_motion_blur : bool
    traversable_graph : str
        "any" (default), "single_gas" (a lone GAS is traced) or "single_level_instancing".
    exception_flags : tuple of str
        Any of "stack_overflow", "trace_depth", "user".
    primitive_types : tuple of str
        Primitive kinds the pipeline traces: "triangle", "custom", "sphere", and the
        curve kinds ("round_cubic_bspline", "round_linear", ...).
    launch_params_name : str
        The `.const` variable optixLaunch fills; cupric's programs use
        `cupric.device.optix.LAUNCH_PARAMS_NAME`.
    allow_opacity_micromaps, allow_clustered_geometry : bool
    """

    num_payload_values: int = 2
    num_attribute_values: int = 2
    uses_motion_blur: bool = False
    traversable_graph: str = "any"
    exception_flags: tuple = ()
    primitive_types: tuple = ("triangle", "custom")
    launch_params_name: str = LAUNCH_PARAMS_NAME
    allow_opacity_micromaps: bool = False
    allow_clustered_geometry: bool = False

    def __post_init__(self) -> None:
        _int_range("num_payload_values", self.num_payload_values, 0, 32)
        _int_range("num_attribute_values", self.num_attribute_values, 0, 8)
        _bool("uses_motion_blur", self.uses_motion_blur)
        _choice("traversable_graph", self.traversable_graph, TRAVERSABLE_GRAPHS)
        object.__setattr__(self, "exception_flags",
                           _flags("exception_flags", self.exception_flags, EXCEPTION_FLAGS))
        types = _flags("primitive_types", self.primitive_types, PRIMITIVE_TYPE_FLAGS)
        if not types:
            raise ValueError("primitive_types must name at least one primitive kind")
        object.__setattr__(self, "primitive_types", types)
        if "triangle" in types and self.num_attribute_values < 2:
            raise ValueError("triangle primitives report 2 attributes (barycentrics): "
                             "num_attribute_values must be at least 2")
        name = self.launch_params_name
        if not isinstance(name, str) or not name.isidentifier() or not name.isascii():
            raise ValueError(f"launch_params_name must be a C identifier, got {name!r}")
        _bool("allow_opacity_micromaps", self.allow_opacity_micromaps)
        _bool("allow_clustered_geometry", self.allow_clustered_geometry)

    @property
    def exception_mask(self) -> int:
        return _mask(self.exception_flags, EXCEPTION_FLAGS)

    @property
    def primitive_type_mask(self) -> int:
        return _mask(self.primitive_types, PRIMITIVE_TYPE_FLAGS)

    def fill(self, struct, keep: list) -> None:
        """Fill an ``OptixPipelineCompileOptions`` cdata; C strings it points to are
        appended to `keep`, which must outlive every use of the struct."""
        from cupric.optix import lib
        name = lib.ffi.new("char[]", self.launch_params_name.encode())
        keep.append(name)
        struct.usesMotionBlur = int(self.uses_motion_blur)
        struct.traversableGraphFlags = TRAVERSABLE_GRAPHS[self.traversable_graph]
        struct.numPayloadValues = self.num_payload_values
        struct.numAttributeValues = self.num_attribute_values
        struct.exceptionFlags = self.exception_mask
        struct.pipelineLaunchParamsVariableName = name
        struct.usesPrimitiveTypeFlags = self.primitive_type_mask
        struct.allowOpacityMicromaps = int(self.allow_opacity_micromaps)
        struct.allowClusteredGeometry = int(self.allow_clustered_geometry)


@dataclass(frozen=True)
class PipelineLinkOptions:
    """Options of optixPipelineCreate's link step.

    Parameters
    ----------
    max_trace_depth : int
        Deepest recursion of trace calls, 0..31 (1: raygen traces, hit programs do not).
    max_traversable_depth : int
        Deepest traversable graph (1 single GAS, 2 one instance level), for stack sizes.
    max_cc_depth, max_dc_depth : int
        Deepest continuation- and direct-callable call chains, for stack sizes.
    """

    max_trace_depth: int = 1
    max_traversable_depth: int = 2
    max_cc_depth: int = 0
    max_dc_depth: int = 0

    def __post_init__(self) -> None:
        _int_range("max_trace_depth", self.max_trace_depth, 0, 31)
        _int_range("max_traversable_depth", self.max_traversable_depth, 1, 2**31 - 1)
        _int_range("max_cc_depth", self.max_cc_depth, 0, 2**16)
        _int_range("max_dc_depth", self.max_dc_depth, 0, 2**16)

    def fill(self, struct) -> None:
        struct.maxTraceDepth = self.max_trace_depth


@dataclass(frozen=True)
class AccelBuildOptions:
    """How to build an acceleration structure (OptixAccelBuildOptions).

    Parameters
    ----------
    allow_update : bool
        Keep what `AccelStructure.update` (refit) needs.
    allow_compaction : bool
        Let `AccelStructure.compact` shrink the structure after the build.
    prefer : str, optional
        "fast_trace" or "fast_build".
    allow_random_vertex_access, allow_random_instance_access : bool
        Let programs read vertices back (spheres, curves, triangles) / instances.
    """

    allow_update: bool = False
    allow_compaction: bool = False
    prefer: str | None = "fast_trace"
    allow_random_vertex_access: bool = False
    allow_random_instance_access: bool = False

    def __post_init__(self) -> None:
        _bool("allow_update", self.allow_update)
        _bool("allow_compaction", self.allow_compaction)
        if self.prefer is not None:
            _choice("prefer", self.prefer, ("fast_trace", "fast_build"))
        _bool("allow_random_vertex_access", self.allow_random_vertex_access)
        _bool("allow_random_instance_access", self.allow_random_instance_access)

    @property
    def build_flags(self) -> int:
        names = [name for name in ("allow_update", "allow_compaction",
                                   "allow_random_vertex_access",
                                   "allow_random_instance_access") if getattr(self, name)]
        if self.prefer is not None:
            names.append(f"prefer_{self.prefer}")
        return _mask(names, BUILD_FLAGS)

    def replace(self, **changes) -> "AccelBuildOptions":
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class DenoiserOptions:
    """Which AI denoiser to create (OptixDenoiserModelKind + OptixDenoiserOptions).

    Parameters
    ----------
    model : str
        "hdr" (linear HDR radiance), "ldr" (tone-mapped values in [0, 1]) or "aov".
    guide_albedo, guide_normal : bool
        Whether `Denoiser.invoke` receives an albedo and a normal guide image; the
        normal guide requires the albedo guide.
    denoise_alpha : bool
        Denoise the alpha channel too (otherwise it is copied).
    """

    model: str = "hdr"
    guide_albedo: bool = False
    guide_normal: bool = False
    denoise_alpha: bool = False

    def __post_init__(self) -> None:
        _choice("model", self.model, DENOISER_MODELS)
        _bool("guide_albedo", self.guide_albedo)
        _bool("guide_normal", self.guide_normal)
        _bool("denoise_alpha", self.denoise_alpha)
        if self.guide_normal and not self.guide_albedo:
            raise ValueError("the normal guide needs the albedo guide too "
                             "(guide_albedo=True)")

    @property
    def model_kind(self) -> int:
        return DENOISER_MODELS[self.model]
