"""Acceleration structures: the BVHs OptiX traverses.

A geometry acceleration structure (GAS) is built from build inputs of one primitive kind
(`cupric.optix.build_input`); an instance acceleration structure (IAS) from instances,
each a transform plus the handle of another structure. Builds run on a stream into
device memory; a build may allow compaction (copy into a smaller buffer afterwards) and
update (refit to moved vertices or instances without a rebuild).
"""

from __future__ import annotations

import numpy as np

from .build_input import (CurveInput, CustomPrimitiveInput, InstanceInput, SphereInput,
                          TriangleInput, build_inputs_struct, make_instances)
from .options import AccelBuildOptions
from .structs import (ACCEL_BUFFER_BYTE_ALIGNMENT, BUILD_INPUT_TYPES, CURVE_TYPES,
                      GEOMETRY_FLAGS, IDENTITY_TRANSFORM, INDEX_FORMATS, INSTANCE_DTYPE,
                      VERTEX_FORMATS, accel_ffi, builtin_is_options_struct,
                      foreign_pointer)

# The build inputs and structs are re-exported: this was their module before the split.
__all__ = ["TriangleInput", "CustomPrimitiveInput", "SphereInput", "CurveInput",
           "InstanceInput", "AccelStructure", "INSTANCE_DTYPE", "make_instances",
           "build_inputs_struct", "GEOMETRY_FLAGS", "VERTEX_FORMATS", "INDEX_FORMATS",
           "CURVE_TYPES", "BUILD_INPUT_TYPES", "builtin_is_options_struct",
           "foreign_pointer", "accel_ffi", "IDENTITY_TRANSFORM"]

_PROPERTY_COMPACTED_SIZE = 0x2181  # OPTIX_PROPERTY_TYPE_COMPACTED_SIZE
_OPERATION_BUILD, _OPERATION_UPDATE = 0x2161, 0x2162  # OptixBuildOperation


def _accel_options_struct(options: AccelBuildOptions, operation: int):
    from . import lib
    struct = lib.ffi.new("OptixAccelBuildOptions *")
    struct.buildFlags = options.build_flags
    struct.operation = operation
    return struct


def _ordered(stream):
    """`stream`, or the legacy default stream (which OptiX uses for stream 0)."""
    from cupric.runtime.memory import LEGACY_STREAM
    return stream if stream is not None else LEGACY_STREAM


def _stream_value(stream):
    from cupric.runtime.memory import stream_handle
    from . import lib
    return stream_handle(stream), lib.ffi.cast("CUstream", stream_handle(stream))


class AccelStructure:
    """A built acceleration structure: device memory and its traversable handle.

    Made by `DeviceContext.build_accel(inputs, options, stream=...)`.

    Attributes
    ----------
    handle : int
        The OptixTraversableHandle to trace or instance.
    kind : str
        "gas" or "ias".
    buffer : DeviceBuffer
        The structure's memory.
    options : AccelBuildOptions
    inputs : list
        The build inputs (kept for `update`).

    Safety
    ------
    OptiX reads the build inputs' device arrays during the build (on `stream`) and the
    structure's memory during every launch: keep them until that work finished. A GAS
    referenced by an IAS must outlive the IAS's use. Instances hold raw handles: OptiX
    cannot check them.

    Thread safety
    -------------
    Builds, updates and compaction of one structure must not run concurrently.
    """

    __slots__ = ("context", "inputs", "options", "buffer", "_handle", "kind", "sizes",
                 "_compacted_size", "_closed")

    def __init__(self, *args, **kwargs) -> None:
        raise TypeError("build acceleration structures with DeviceContext.build_accel(...)")

    @classmethod
    def _build(cls, context, inputs, options, stream) -> "AccelStructure":
        from . import lib
        from cupric.runtime.memory import empty
        if not isinstance(inputs, (list, tuple)):
            inputs = [inputs]
        options = AccelBuildOptions() if options is None else options
        if not isinstance(options, AccelBuildOptions):
            raise TypeError("options must be an AccelBuildOptions")
        array, keep = build_inputs_struct(inputs)
        c_inputs = foreign_pointer(array, "OptixBuildInput *")
        c_options = _accel_options_struct(options, _OPERATION_BUILD)
        context.device.primary_context().make_current()
        sizes = lib.ffi.new("OptixAccelBufferSizes *")
        context._call(lib.optixAccelComputeMemoryUsage, context.handle, c_options, c_inputs,
                      len(inputs), sizes)
        _, c_stream = _stream_value(stream)
        # Scratch memory lives in stream order (legacy default stream without a stream), so
        # freeing it after the build needs no device-wide wait.
        ordered = _ordered(stream)
        temp = empty(max(int(sizes.tempSizeInBytes), 1), np.uint8, stream=ordered)
        output = empty(max(int(sizes.outputSizeInBytes), 1), np.uint8, stream=stream)
        if output.ptr % ACCEL_BUFFER_BYTE_ALIGNMENT or temp.ptr % ACCEL_BUFFER_BYTE_ALIGNMENT:
            raise RuntimeError("device allocation not 128-byte aligned")
        compacted = None
        emit = lib.ffi.NULL
        emit_count = 0
        if options.allow_compaction:
            compacted = empty(1, np.uint64, stream=stream)
            desc = accel_ffi().new("OptixAccelEmitDesc *")
            desc.result = compacted.ptr
            desc.type = _PROPERTY_COMPACTED_SIZE
            keep.append(desc)
            emit = foreign_pointer(desc, "OptixAccelEmitDesc *")
            emit_count = 1
        handle = lib.ffi.new("OptixTraversableHandle *")
        try:
            context._call(lib.optixAccelBuild, context.handle, c_stream, c_options, c_inputs,
                          len(inputs), temp.ptr, int(sizes.tempSizeInBytes), output.ptr,
                          int(sizes.outputSizeInBytes), handle, emit, emit_count)
        except BaseException:
            output.close(stream=stream)
            if compacted is not None:
                compacted.close(stream=stream)
            raise
        finally:
            temp.close(stream=ordered)  # freed in stream order, after the build
        del keep
        self = cls.__new__(cls)
        self.context = context
        self.inputs = list(inputs)
        self.options = options
        self.buffer = output
        self._handle = int(handle[0])
        self.kind = "ias" if inputs[0].kind == "instances" else "gas"
        self.sizes = (int(sizes.outputSizeInBytes), int(sizes.tempSizeInBytes),
                      int(sizes.tempUpdateSizeInBytes))
        self._compacted_size = compacted
        self._closed = False
        return self

    @property
    def handle(self) -> int:
        if self._closed:
            from cupric.runtime.errors import ClosedError
            raise ClosedError("this AccelStructure is closed")
        return self._handle

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def nbytes(self) -> int:
        return self.buffer.nbytes

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{self.buffer.nbytes} bytes"
        return f"<cupric.optix.AccelStructure {self.kind}, {state}>"

    def compacted_size(self, stream=None) -> int:
        """The size compaction would give (waits for the build on `stream`)."""
        if self._compacted_size is None:
            raise ValueError("build with AccelBuildOptions(allow_compaction=True) to compact")
        self.handle  # raises once closed
        if stream is not None:
            stream.synchronize()
        else:
            from cupric.runtime.context import synchronize
            synchronize()
        return int(self._compacted_size.to_numpy()[0])

    def compact(self, stream=None) -> "AccelStructure":
        """A compacted copy of this structure (optixAccelCompact), or self when
        compaction would not save memory. The original stays valid; close it when no
        launch uses it any more.

        Cost
        ----
        Waits for the build to finish to read the compacted size (one synchronization).
        """
        from . import lib
        from cupric.runtime.memory import empty
        size = self.compacted_size(stream)
        if size >= self.buffer.nbytes:
            return self
        output = empty(size, np.uint8, stream=stream)
        _, c_stream = _stream_value(stream)
        handle = lib.ffi.new("OptixTraversableHandle *")
        try:
            self.context._call(lib.optixAccelCompact, self.context.handle, c_stream,
                               self.handle, output.ptr, size, handle)
        except BaseException:
            output.close(stream=stream)
            raise
        other = type(self).__new__(type(self))
        other.context = self.context
        other.inputs = self.inputs
        other.options = self.options
        other.buffer = output
        other._handle = int(handle[0])
        other.kind = self.kind
        other.sizes = (size,) + self.sizes[1:]
        other._compacted_size = None
        other._closed = False
        return other

    def update(self, inputs=None, stream=None) -> None:
        """Refit the structure to moved geometry or instances (OPTIX_BUILD_OPERATION_UPDATE).

        Parameters
        ----------
        inputs : list, optional
            New build inputs with the same kinds and counts (new vertex positions, AABBs,
            transforms); default: the inputs of the build, whose device data changed.
        """
        from . import lib
        from cupric.runtime.memory import empty
        if not self.options.allow_update:
            raise ValueError("build with AccelBuildOptions(allow_update=True) to update")
        self.handle
        if inputs is None:
            inputs = self.inputs
        elif not isinstance(inputs, (list, tuple)):
            inputs = [inputs]
        inputs = list(inputs)
        if len(inputs) != len(self.inputs):
            raise ValueError(f"an update takes {len(self.inputs)} build inputs, as the build")
        for new, old in zip(inputs, self.inputs):
            if new.kind != old.kind or new.num_primitives != old.num_primitives:
                raise ValueError("an update must keep each input's kind and primitive count "
                                 f"({old.kind}, {old.num_primitives})")
        array, keep = build_inputs_struct(inputs)
        c_inputs = foreign_pointer(array, "OptixBuildInput *")
        c_options = _accel_options_struct(self.options, _OPERATION_UPDATE)
        _, c_stream = _stream_value(stream)
        temp_size = self.sizes[2]
        ordered = _ordered(stream)
        temp = empty(max(temp_size, 1), np.uint8, stream=ordered)
        handle = lib.ffi.new("OptixTraversableHandle *", self._handle)
        try:
            self.context._call(lib.optixAccelBuild, self.context.handle, c_stream, c_options,
                               c_inputs, len(inputs), temp.ptr, temp_size, self.buffer.ptr,
                               self.buffer.nbytes, handle, lib.ffi.NULL, 0)
        finally:
            temp.close(stream=ordered)
        del keep
        self.inputs = inputs
        self._handle = int(handle[0])

    def close(self, stream=None) -> None:
        """Free the structure's memory (in `stream` order when given)."""
        if self._closed:
            return
        self._closed = True
        self.buffer.close(stream=stream)
        if self._compacted_size is not None:
            self._compacted_size.close(stream=stream)

    def __enter__(self):
        self.handle
        return self

    def __exit__(self, *exc) -> None:
        self.close()
