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
    from cupric.simulator._launch import run
    from cupric.simulator._twin import twin_of

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
