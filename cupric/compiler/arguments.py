"""Launch arguments as the kernel's parameters receive them, one set of rules for the GPU
and for the simulator: a scalar argument becomes its parameter's type (an int that does
not fit is refused, as the GPU launch's packing refuses it), a NumPy record becomes a
struct, and the CPU simulator runs the kernel's typed twin after the compiler's front
end accepted it.

A kernel launched on the simulator (`kern.simulate[...]`, or any launch without a GPU)
goes through exactly what a GPU launch goes through before the GPU is involved: argument
binding (`Kernel.bind_types`), typing and code generation up to NVVM IR (so the same
CompileError at the same line), and the launch configuration against an sm_90 device's
limits (`cupric.runtime.launch.check_config`).
"""

from __future__ import annotations

import numpy as np

from cupric.compiler.errors import CompileError
from cupric.runtime import intake as _intake
from cupric.types import ScalarType

__all__ = ["scalar_value", "kernel_values", "simulate"]


def scalar_value(value, t: ScalarType):
    """`value` (a Python or NumPy scalar that `bind_types` accepted for a parameter of
    type `t`) as a NumPy scalar of `t`.

    Raises
    ------
    OverflowError
        An integer outside `t`'s range (the GPU launch's packing refuses it too).
    """
    if t.kind in "iu" and not isinstance(value, (bool, np.bool_)):
        n = int(value)
        lo, hi = int(t.min_value()), int(t.max_value())
        if not lo <= n <= hi:
            raise OverflowError(f"{n} does not fit in {t!r} ({lo}..{hi})")
        return t.dtype.type(n)
    if t.kind == "b":
        return np.bool_(value)
    return t.dtype.type(value)


def _value(value, t, where: str):
    if isinstance(t, ScalarType):
        return scalar_value(value, t)
    if not (hasattr(value, "to_numpy") and hasattr(value, "copy_from")) and (
            hasattr(value, "__cuda_array_interface__") or hasattr(value, "__dlpack_device__")
            and not isinstance(value, np.ndarray)):
        raise TypeError(f"the simulator cannot read the device memory of a "
                        f"{type(value).__name__}; pass a NumPy array (or a DeviceBuffer, "
                        f"which it copies)")
    if isinstance(value, np.void) and value.dtype.names:
        # A struct by value: a record, whose fields read as attributes (`p.x`).
        return np.array(value).view(np.recarray)[()]
    if isinstance(value, tuple):
        elements = getattr(t, "elements", None) or [None] * len(value)
        return tuple(_value(v, e, f"{where}[{k}]")
                     for k, (v, e) in enumerate(zip(value, elements)))
    return value


def kernel_values(kern, arg_types, args) -> list:
    """The launch arguments `args` as the simulated kernel's parameters: scalars in their
    parameter types, records as structs, arrays as they are.

    Raises
    ------
    KernelArgumentError
        A scalar out of its parameter's range (located at the parameter).
    """
    out = []
    for index, (value, t) in enumerate(zip(args, arg_types)):
        try:
            out.append(_value(value, t, str(index)))
        except (OverflowError, ValueError, TypeError) as exc:
            names = kern.py_func.__code__.co_varnames
            raise kern._argument_error(f"argument '{names[index]}' of {kern.__name__}(): "
                                       f"{exc}", index) from None
    return out


def simulate(kern, grid, block, shared_bytes, args) -> None:
    """Run `kern` on the CPU simulator as a GPU launch would run it: arguments bound and
    checked, the kernel compiled to NVVM IR (every compile-time check), the configuration
    checked against an sm_90 device's limits, then the typed twin executed.

    Raises
    ------
    KernelArgumentError
        Wrong argument count, type or range (also a TypeError and a CompileError).
    CompileError
        The kernel is outside the kernel language.
    cupric.runtime.launch.LaunchConfigError
        The grid, block or shared memory is beyond an sm_90 device's limits.
    KernelError
        A simulated thread failed (assert, index out of bounds, trap).
    """
    from cupric.runtime.launch import SM90_LIMITS, check_config
    from cupric.simulator.hooks import run, twin_of

    args = tuple(args)
    arg_types = kern.bind_types(args)
    spec = kern._variant(arg_types, False)
    try:
        spec.ir  # typing and code generation: every check compiled code gets
    except CompileError as exc:
        raise exc.with_traceback(None) from None
    grid, block, shared_bytes = check_config(kern.__name__, grid, block, shared_bytes,
                                             SM90_LIMITS)
    values = kernel_values(kern, arg_types, args)
    try:
        twin = twin_of(spec.typed, kern.c_division)
    except Exception as exc:  # a bug of the simulator: still located at the kernel
        from cupric.compiler.errors import internal_error
        src = spec.typed.source
        raise internal_error(src, src.tree, exc, "preparing the simulation of") from None
    run(kern.py_func, twin, grid, block, values, shared_bytes=shared_bytes)


# -- argument handling on the launch path -----------------------------------------------------

def _layout(shape, strides, itemsize) -> str:
    from cupric.types import _layout_of
    return _layout_of(strides, shape, itemsize)


def _array_values(ptr, shape, strides, itemsize, dtype, flat: list, extents: list,
                  index: int):
    """Append the ABI values of a device array given by its parts (pointer, shapes,
    strides in elements; strides given in bytes); return its cache-key part."""
    geometry = _GEOMETRY.get((shape, strides, itemsize))
    if geometry is None:
        geometry = _geometry(shape, strides, itemsize, index)
    steps, low, high, layout = geometry
    flat.append(ptr)
    flat.extend(shape)
    flat.extend(steps)
    if high:  # not empty: the bytes it spans, for the alias and alignment checks
        extents.append((ptr + low, ptr + high, index, ptr))
    return (dtype, len(shape), layout)


#: (shape, byte strides, itemsize) -> (strides in elements, first byte and end of the span
#: relative to the pointer (0, 0 when empty), layout).
_GEOMETRY: dict = {}


def _geometry(shape, strides, itemsize, index: int):
    steps = []
    low = high = 0
    empty = False
    for n, s in zip(shape, strides):
        q, r = divmod(s, itemsize)
        if r:
            _intake.check_strides(strides, itemsize, index=index)  # raises StrideError
        steps.append(q)
        if n == 0:
            empty = True
        elif s >= 0:
            high += (n - 1) * s
        else:
            low += (n - 1) * s
    span = (0, 0) if empty else (low, high + itemsize)
    geometry = (tuple(steps), *span, _layout(shape, strides, itemsize))
    if len(_GEOMETRY) > 4096:
        _GEOMETRY.clear()
    _GEOMETRY[(shape, strides, itemsize)] = geometry
    return geometry


def _note_producer(producer: int, pending, stream) -> None:
    if producer == 1 and (stream is None or stream.__class__ is int and stream < 2):
        return  # the legacy default stream on both sides: ordered already
    if pending is None:
        _intake.order_after(stream, (producer,))
    elif producer not in pending:
        pending.append(producer)


class _WrongDevice(Exception):
    """Internal: argument `index` lives on device `found` (turned into a
    `DeviceMismatchError` naming the kernel and the parameter by `Kernel._launch`)."""


def _arg_parts(value, flat: list, extents: list, index: int, device: int = -1,
               pending=None, stream=None):
    """Append the flattened ABI values of one argument; return its specialization key.

    Arrays are read through `cupric.runtime.intake` (closed buffers raise
    `ClosedError`). `device` >= 0 asks for the device check against that launch device
    (machines with several GPUs); producers' streams go to `pending` (the launch orders
    its stream after them once every argument passed), or with no `pending` list are
    ordered now on `stream`."""
    cls = value.__class__
    if cls is float or cls is int or cls is bool:
        flat.append(value)
        return cls
    if cls not in _ARRAY_CLASSES:
        if isinstance(value, np.generic):
            flat.append(value)
            return (np.void, value.dtype) if isinstance(value, np.void) else cls
        if isinstance(value, tuple):
            return (tuple,) + tuple(_arg_parts(v, flat, extents, index, device, pending,
                                               stream) for v in value)
        if isinstance(value, np.ndarray):
            raise TypeError(f"argument {index} is a host NumPy array; copy it to the "
                            "device first (cupric.runtime.to_device(a)) or run on the "
                            "simulator (kern.simulate[grid, block](...))")
    try:
        ptr, shape, strides, dtype, _readonly, producer, own, kind, owner = \
            _intake.array_parts(value, stream, device >= 0)
    except (TypeError, ValueError) as exc:
        if exc.__class__ in _INTAKE_ERRORS:
            raise exc.__class__(f"argument {index}: {exc}") from None
        if isinstance(exc, TypeError):
            raise TypeError(f"argument {index}: {exc}") from None
        raise
    if device >= 0:
        if kind is _intake.BUFFER or kind is _intake.DLPACK:
            found = _intake.buffer_device(owner, device)
        else:
            found = _intake.device_problem(ptr, own, device)
        if found is not None:
            raise _WrongDevice(index, found)
    if producer is not None:
        _note_producer(producer, pending, stream)
    return _array_values(ptr, shape, strides, dtype.itemsize, dtype, flat, extents, index)


#: The intake layer's typed errors: re-raised as themselves, with the argument named.
_INTAKE_ERRORS = frozenset({_intake.ClosedError, _intake.HostMemoryError,
                            _intake.NotAnArrayError, _intake.StrideError})
#: Buffer classes (DeviceBuffer, its subclasses and look-alikes), shared with the intake
#: layer; `_OWN_BUFFERS` are the DeviceBuffer ones (they carry the liveness record).
_ARRAY_CLASSES: set = _intake.BUFFER_CLASSES
_OWN_BUFFERS: set = _intake.OWN_BUFFERS
#: NumPy scalar classes that pack as themselves (structured np.void goes the slow way).
_NUMPY_SCALARS = frozenset({np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8,
                            np.uint16, np.uint32, np.uint64, np.float16, np.float32,
                            np.float64})


def _disjoint(extents, written: frozenset) -> bool:
    """True when no written array overlaps any other array argument."""
    for lo, hi, i, _ in extents:
        if i not in written:
            continue
        for lo2, hi2, j, _ in extents:
            if j == i and lo2 == lo and hi2 == hi:
                continue
            if lo < hi2 and lo2 < hi:
                return False
    return True
