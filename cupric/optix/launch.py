"""Launching a pipeline: optixLaunch over a 1-3-D grid with the programs' launch
parameters.

The launch parameters are the Python-level parameters of the pipeline's programs,
packed with the kernel ABI (arrays as pointer, shapes, strides in elements) into the
struct the programs read from constant memory; the packed bytes are uploaded on the
launch's stream, and freed in its order after the launch.
"""

from __future__ import annotations

import numpy as np

__all__ = ["launch", "pack_launch_params", "check_dims", "MAX_LAUNCH_SIZE"]

#: OptiX's limit on width * height * depth of one launch.
MAX_LAUNCH_SIZE = 2**30


def check_dims(dims) -> tuple[int, int, int]:
    """(width, height, depth) from an int or a 1-3 tuple; each >= 1, product <= 2**30."""
    if isinstance(dims, int) and not isinstance(dims, bool):
        dims = (dims,)
    dims = tuple(dims)
    if not 1 <= len(dims) <= 3:
        raise ValueError(f"launch dimensions are 1 to 3 ints, got {dims!r}")
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 1:
            raise ValueError(f"launch dimensions must be positive ints, got {dims!r}")
    width, height, depth = (tuple(int(d) for d in dims) + (1, 1))[:3]
    if width * height * depth > MAX_LAUNCH_SIZE:
        raise ValueError(f"launch of {width}x{height}x{depth} exceeds OptiX's "
                         f"{MAX_LAUNCH_SIZE} invocations")
    return width, height, depth


def _array_values(value, t, index: int) -> list:
    if isinstance(value, np.ndarray):
        raise TypeError(f"launch parameter {index} is a host NumPy array; copy it to the "
                        f"device first (cupric.runtime.to_device)")
    if all(hasattr(value, a) for a in ("ptr", "shape", "strides", "dtype")):
        ptr, shape, strides, dtype = value.ptr, value.shape, value.strides, value.dtype
    else:
        from cupric.runtime.interop import as_device_array
        try:
            view = as_device_array(value)
        except TypeError as exc:
            raise TypeError(f"launch parameter {index}: {exc}") from None
        ptr, shape, strides, dtype = view.ptr, view.shape, view.strides, view.dtype
    dtype = np.dtype(dtype)
    if dtype != t.dtype.dtype:
        raise TypeError(f"launch parameter {index}: array of {dtype}, the programs take "
                        f"{t!r}")
    if len(shape) != t.ndim:
        raise TypeError(f"launch parameter {index}: {len(shape)}-D array, the programs take "
                        f"{t!r}")
    itemsize = dtype.itemsize
    elements = []
    for s in strides:
        q, r = divmod(int(s), itemsize)
        if r:
            raise TypeError(f"launch parameter {index}: a stride of {s} bytes is not a "
                            f"multiple of the item size {itemsize}")
        elements.append(q)
    if t.layout == "C":
        expected = 1
        for n, s in zip(reversed(shape), reversed(elements)):
            if n > 1 and s != expected:
                raise TypeError(f"launch parameter {index}: the programs take a C-contiguous "
                                f"array ({t!r}); got strides {tuple(strides)}")
            expected *= n
    elif t.layout == "F":
        expected = 1
        for n, s in zip(shape, elements):
            if n > 1 and s != expected:
                raise TypeError(f"launch parameter {index}: the programs take an "
                                f"F-contiguous array ({t!r}); got strides {tuple(strides)}")
            expected *= n
    return [int(ptr)] + [int(n) for n in shape] + elements


def pack_launch_params(param_types, params_dtype: np.dtype, values) -> np.ndarray:
    """The launch-parameter struct for `values`, as one record of `params_dtype`.

    Raises
    ------
    TypeError
        Wrong count, host arrays, dtype/rank/layout mismatches, values that do not fit.
    """
    from cupric.compiler.entries import StructType
    from cupric.types import ArrayType, ScalarType
    values = tuple(values)
    if len(values) != len(param_types):
        raise TypeError(f"the pipeline's programs take {len(param_types)} launch parameters "
                        f"({', '.join(map(repr, param_types))}), got {len(values)}")
    record = np.zeros(1, dtype=params_dtype)
    fields = iter(params_dtype.names or ())
    for index, (t, value) in enumerate(zip(param_types, values)):
        if isinstance(t, ArrayType):
            for item in _array_values(value, t, index):
                record[next(fields)] = item
        elif isinstance(t, ScalarType):
            if isinstance(value, np.ndarray) or hasattr(value, "__len__"):
                raise TypeError(f"launch parameter {index} must be a {t!r} scalar, got "
                                f"{type(value).__name__}")
            field = next(fields)
            if t.kind == "b":
                record[field] = 1 if value else 0
                continue
            converted = np.asarray(value).astype(t.dtype)
            if t.kind in "iu" and converted != value:
                raise TypeError(f"launch parameter {index}: {value!r} does not fit {t!r}")
            record[field] = converted
        elif isinstance(t, StructType):
            field = next(fields)
            try:
                record[field] = value
            except (TypeError, ValueError) as exc:
                raise TypeError(f"launch parameter {index}: {exc}") from None
        else:
            raise TypeError(f"launch parameter {index}: type {t!r} is not supported")
    return record


def launch(pipeline, sbt, dims, *params, stream=None) -> None:
    """Launch `pipeline` over `dims` with the shader binding table `sbt`.

    Parameters
    ----------
    pipeline : Pipeline
    sbt : ShaderBindingTable
    dims : int or tuple of 1-3 ints
        Width, height, depth; each program invocation reads its place with
        `optix.launch_index()`.
    *params
        The launch parameters, as the pipeline's programs declare them.
    stream : Stream, optional

    Raises
    ------
    TypeError, ValueError
        Bad dimensions or parameters (before OptiX is called).
    OptixError
        OptiX refused the launch.

    Safety
    ------
    The launch runs asynchronously: arrays passed, the SBT and the acceleration
    structures traced must stay alive until it finished (synchronize `stream`).
    """
    from cupric.runtime.memory import LEGACY_STREAM, stream_handle, to_device
    from . import lib
    from .pipeline import Pipeline
    from .sbt import ShaderBindingTable
    if not isinstance(pipeline, Pipeline):
        raise TypeError(f"expected a Pipeline, got {pipeline!r}")
    if not isinstance(sbt, ShaderBindingTable):
        raise TypeError(f"expected a ShaderBindingTable (cupric.optix.create_sbt), got "
                        f"{sbt!r}")
    if sbt.closed:
        from cupric.runtime.errors import ClosedError
        raise ClosedError("the ShaderBindingTable is closed")
    width, height, depth = check_dims(dims)
    record = pack_launch_params(pipeline.param_types, pipeline.params_dtype, params)
    handle = pipeline.handle
    pipeline.context.device.primary_context().make_current()
    c_stream = lib.ffi.cast("CUstream", stream_handle(stream))
    # The parameters are allocated, copied and freed in stream order (the legacy default
    # stream when none is given): no device-wide wait, whatever the launch's stream.
    ordered = stream if stream is not None else LEGACY_STREAM
    if record.dtype.itemsize:
        buffer = to_device(record.view(np.uint8), stream=ordered)
        address, size = buffer.ptr, record.dtype.itemsize
    else:
        buffer, address, size = None, 0, 0
    try:
        pipeline.context._call(lib.optixLaunch, handle, c_stream, address, size, sbt.struct,
                               width, height, depth)
    finally:
        if buffer is not None:
            buffer.close(stream=ordered)  # freed in stream order, after the launch
