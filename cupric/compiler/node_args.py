"""A cupric kernel's launch turned into the parts of a CUDA graph kernel node: the
compiled function (loaded on the current device) and its flattened ABI values, with the
same argument checks a launch makes (binding against the annotations, device arrays
only, the launch configuration against the kernel's limits). `cupric.runtime.graph`
asks for these through `Kernel`'s `_cupric_kernel` marker, so the runtime itself stays
free of the compiler.
"""

from __future__ import annotations

__all__ = ["launch_parts"]


def _flatten(value, t, flat: list, arrays: list, keep: list, where: str) -> None:
    """Append the ABI values of `value` (parameter type `t`; internals.md, Kernel ABI)."""
    from cupric.compiler.typing.ktypes import StructType, TupleType
    from cupric.types import ArrayType, ScalarType
    if isinstance(t, ScalarType):
        flat.append(bool(value) if t.kind == "b" else value)
    elif isinstance(t, ArrayType):
        from cupric.runtime.interop import as_device_array
        buf = as_device_array(value)
        keep.append(buf)
        itemsize = buf.dtype.itemsize
        flat.append(buf.ptr)
        flat.extend(int(n) for n in buf.shape)
        for s in buf.strides:
            if s % itemsize:
                raise TypeError(f"{where}: stride of {s} bytes is not a multiple of the "
                                f"item size {itemsize}")
            flat.append(s // itemsize)
        arrays.append((buf.ptr, buf.ptr + buf.nbytes))
    elif isinstance(t, TupleType):
        for k, (v, e) in enumerate(zip(value, t.elements)):
            _flatten(v, e, flat, arrays, keep, f"{where}[{k}]")
    elif isinstance(t, StructType):
        import numpy as np
        flat.append(np.asarray(value).tobytes())
    else:
        raise TypeError(f"{where}: {t!r} cannot be a kernel parameter")


def launch_parts(kern, grid, block, shared_bytes: int, args):
    """(PreparedLaunch, flattened values, objects to keep alive) for launching `kern`
    with `args` as a graph node.

    The variant is the one a launch with these arguments would pick: arrays known not
    to overlap get the noalias variant, 16-byte-aligned ones the aligned variant.

    Raises
    ------
    KernelArgumentError
        Arguments that do not fit the kernel's parameters (located at the parameter).
    TypeError
        A host array where a device array is expected.
    LaunchConfigError
        A configuration over the kernel's or the device's limits.
    """
    from cupric.runtime.launch import validate_launch
    arg_types = kern.bind_types(args)
    flat: list = []
    arrays: list = []
    keep: list = []
    names = kern.py_func.__code__.co_varnames
    for index, (value, t) in enumerate(zip(args, arg_types)):
        try:
            _flatten(value, t, flat, arrays, keep, f"argument {index} ({names[index]})")
        except TypeError as exc:
            raise TypeError(f"{kern.__name__}: {exc}") from None
    written = kern.writes(arg_types)
    overlap = any(a[0] < b[1] and b[0] < a[1]
                  for i, a in enumerate(arrays) for b in arrays[i + 1:])
    noalias = not (written and overlap)
    aligned = all(start % 16 == 0 for start, _ in arrays)
    spec = kern._variant(arg_types, noalias, aligned)
    prepared = spec.prepared()
    validate_launch(prepared.function, grid, block, shared_bytes)
    return prepared, flat, keep
