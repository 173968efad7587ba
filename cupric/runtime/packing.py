"""Kernel parameters: their types, their layout in the argument buffer `cuLaunchKernel`
reads (each value at its C ABI alignment), what a Python value passes as, and the C text
of packing them that the compiled launch paths share (`PACK_C`).
"""

from __future__ import annotations

import numpy as np

__all__ = ["KernelArgumentError", "PARAM_TYPES", "param_layout", "infer_param", "PACK_C"]


class KernelArgumentError(TypeError):
    """A kernel argument has the wrong type or count for the kernel's parameters.

    Raised before anything is launched. `index` is the 0-based position of the offending
    argument (None for a count mismatch).
    """

    def __init__(self, message: str, index: int | None = None) -> None:
        self.index = index
        super().__init__(message)


# Parameter type name -> (struct code, size, alignment). Little-endian standard sizes:
# padding is inserted explicitly by `param_layout`, following the C ABI of the kernel.
PARAM_TYPES = {
    "bool": ("?", 1, 1),
    "i8": ("b", 1, 1), "i16": ("h", 2, 2), "i32": ("i", 4, 4), "i64": ("q", 8, 8),
    "u8": ("B", 1, 1), "u16": ("H", 2, 2), "u32": ("I", 4, 4), "u64": ("Q", 8, 8),
    "f16": ("e", 2, 2), "f32": ("f", 4, 4), "f64": ("d", 8, 8),
    "ptr": ("Q", 8, 8),
}


def _normalize_type(t, index: int):
    if isinstance(t, str):
        if t not in PARAM_TYPES:
            raise KernelArgumentError(
                f"parameter {index}: unknown type {t!r}; one of {', '.join(PARAM_TYPES)} or "
                f"('bytes', size, align)", index)
        return t
    if isinstance(t, tuple) and len(t) == 3 and t[0] == "bytes":
        _, size, align = t
        if not (isinstance(size, int) and size > 0):
            raise KernelArgumentError(f"parameter {index}: struct size must be a positive "
                                      f"int, got {size!r}", index)
        if not (isinstance(align, int) and align > 0 and align & (align - 1) == 0):
            raise KernelArgumentError(f"parameter {index}: struct alignment must be a power "
                                      f"of two, got {align!r}", index)
        return ("bytes", size, align)
    raise KernelArgumentError(f"parameter {index}: a type is a name such as 'f32' or "
                              f"('bytes', size, align), got {t!r}", index)


def param_layout(param_types) -> tuple[tuple, str, list[int], int]:
    """Where each parameter goes in the argument buffer.

    Returns
    -------
    (types, format, offsets, size)
        The normalized types, a `struct` format that packs all values at their aligned
        offsets, each parameter's offset, and the buffer size (at least 8 bytes).
    """
    types = tuple(_normalize_type(t, i) for i, t in enumerate(param_types))
    fmt = ["<"]
    offsets = []
    offset = 0
    for t in types:
        if isinstance(t, tuple):
            code, size, align = f"{t[1]}s", t[1], t[2]
        else:
            code, size, align = PARAM_TYPES[t]
        pad = -offset % align
        if pad:
            fmt.append(f"{pad}x")
            offset += pad
        offsets.append(offset)
        fmt.append(code)
        offset += size
    return types, "".join(fmt), offsets, max(offset, 8)


def _describe_bad_value(kernel: str, index: int, t: str, value, exc) -> str:
    where = f"argument {index} of kernel {kernel!r}"
    if isinstance(value, np.ndarray):
        if t == "ptr":
            return (f"{where} is a host NumPy array, but the kernel needs a device pointer; "
                    f"copy it to the device first (cupric.runtime.to_device(array)) and "
                    f"pass that")
        return f"{where} is a NumPy array, but the parameter is a scalar {t}"
    if t == "ptr":
        return (f"{where} must be a device address (an int) for a 'ptr' parameter, got "
                f"{type(value).__name__}")
    return f"{where} must fit a {t} parameter, got {value!r} ({exc})"


# -- argument inference for Function.launch ------------------------------------------------

_DTYPE_TO_TYPE = {
    np.dtype(np.bool_): "bool",
    np.dtype(np.int8): "i8", np.dtype(np.int16): "i16", np.dtype(np.int32): "i32",
    np.dtype(np.int64): "i64", np.dtype(np.uint8): "u8", np.dtype(np.uint16): "u16",
    np.dtype(np.uint32): "u32", np.dtype(np.uint64): "u64", np.dtype(np.float16): "f16",
    np.dtype(np.float32): "f32", np.dtype(np.float64): "f64",
}


# Exact scalar classes -> parameter type: one dict lookup for the common arguments.
_TYPE_BY_CLASS = {int: "i64", float: "f64", bool: "bool",
                  **{dt.type: t for dt, t in _DTYPE_TO_TYPE.items()}}


def _device_pointer(value, index: int):
    """The device address of an array-like kernel argument, or None if it is not one."""
    ptr = getattr(value, "ptr", None)
    if isinstance(ptr, int) and not isinstance(ptr, bool):
        # A view of a freed allocation keeps its old address: refuse it here, before the
        # kernel reads freed memory.
        if getattr(value, "closed", False):
            raise KernelArgumentError(f"argument {index} is a closed buffer (its memory "
                                      f"was freed)", index)
        return ptr
    cai = getattr(value, "__cuda_array_interface__", None)
    if cai is not None:
        return int(cai["data"][0])
    if hasattr(value, "__dlpack__") and not isinstance(value, np.ndarray):
        try:
            from .interop import as_device_array
        except ImportError as exc:
            raise KernelArgumentError(f"argument {index}: DLPack objects need "
                                      f"cupric.runtime.interop ({exc})", index) from exc
        return int(as_device_array(value).ptr)
    return None


def infer_param(value, index: int):
    """(param type, packed value) for one `Function.launch` argument.

    NumPy scalars keep their dtype; Python bool/int/float map to bool/i64/f64 (as
    `cupric.types.typeof`); device arrays and buffers pass their address as ``"ptr"``;
    NumPy structured scalars pass by value.

    Raises
    ------
    KernelArgumentError
        For host arrays and values of no kernel type.
    """
    cls = value.__class__
    t = _TYPE_BY_CLASS.get(cls)
    if t is not None:
        # Python and NumPy scalars: every backend packs NumPy scalars as they are.
        return t, value
    if isinstance(value, np.generic):
        dt = value.dtype
        t = _DTYPE_TO_TYPE.get(dt)
        if t is not None:
            return t, value.item()
        if dt.kind == "V":
            return ("bytes", dt.itemsize, dt.alignment), value.tobytes()
        raise KernelArgumentError(f"argument {index}: NumPy {dt} has no kernel parameter type",
                                  index)
    if isinstance(value, np.ndarray):
        raise KernelArgumentError(
            f"argument {index} is a host NumPy array (shape {value.shape}, {value.dtype}); "
            f"kernels need device memory: copy it to the device first "
            f"(cupric.runtime.to_device(array)) and pass that", index)
    ptr = _device_pointer(value, index)
    if ptr is not None:
        return "ptr", ptr
    if cls.__module__.startswith("cuda.bindings") and cls.__name__ == "CUdeviceptr":
        return "ptr", int(value)
    raise KernelArgumentError(
        f"argument {index}: cannot pass a {cls.__name__} to a kernel; use a NumPy scalar "
        f"(np.float32(x)...), a device array/buffer, or a NumPy structured scalar", index)


#: C text of packing, shared by the compiled launch paths (`cupric.runtime._fastlaunch`
#: and the compiled kernel launchers of `cupric.compiler._fastcall`): the grid and block
#: of a launch, and one value at its parameter's place in the argument buffer, with the
#: conversions and range checks of `struct` for the same format codes (`PARAM_TYPES`;
#: ``'s'`` is a struct passed by value as exact-size bytes). Each returns 0, with no
#: Python error left set, for anything it refuses: the caller then takes the Python path,
#: which raises the typed error. Needs <Python.h>, <limits.h>, <math.h>, <stdint.h>,
#: <string.h>.
PACK_C = r"""
/* 1 and (x, y, z) on success; 0 (no Python error set) to take the slow path. */
static int get_dim3(PyObject *o, unsigned int *d) {
    d[0] = d[1] = d[2] = 1;
    if (PyLong_CheckExact(o)) {
        long long v = PyLong_AsLongLong(o);
        if (v < 1 || v > UINT_MAX) { PyErr_Clear(); return 0; }
        d[0] = (unsigned int)v;
        return 1;
    }
    if (PyTuple_CheckExact(o)) {
        Py_ssize_t n = PyTuple_GET_SIZE(o);
        if (n < 1 || n > 3) return 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *item = PyTuple_GET_ITEM(o, i);
            if (!PyLong_CheckExact(item)) return 0;
            long long v = PyLong_AsLongLong(item);
            if (v < 1 || v > UINT_MAX) { PyErr_Clear(); return 0; }
            d[i] = (unsigned int)v;
        }
        return 1;
    }
    return 0;
}

static int get_signed(PyObject *v, long long *out) {
    if (PyFloat_Check(v)) return 0;   /* struct refuses floats for integer formats */
    if (PyLong_Check(v)) {
        *out = PyLong_AsLongLong(v);
    } else {
        PyObject *index = PyNumber_Index(v);
        if (index == NULL) { PyErr_Clear(); return 0; }
        *out = PyLong_AsLongLong(index);
        Py_DECREF(index);
    }
    if (*out == -1 && PyErr_Occurred()) { PyErr_Clear(); return 0; }
    return 1;
}

static int get_unsigned(PyObject *v, unsigned long long *out) {
    if (PyFloat_Check(v)) return 0;
    PyObject *index = PyLong_Check(v) ? (Py_INCREF(v), v) : PyNumber_Index(v);
    if (index == NULL) { PyErr_Clear(); return 0; }
    *out = PyLong_AsUnsignedLongLong(index);
    Py_DECREF(index);
    if (*out == (unsigned long long)-1 && PyErr_Occurred()) { PyErr_Clear(); return 0; }
    return 1;
}

static int get_double(PyObject *v, double *out) {
    if (PyFloat_CheckExact(v)) { *out = PyFloat_AS_DOUBLE(v); return 1; }
    *out = PyFloat_AsDouble(v);
    if (*out == -1.0 && PyErr_Occurred()) { PyErr_Clear(); return 0; }
    return 1;
}

/* Pack `v` as format `code` (`size` bytes for 's') at `p`; 0 to take the slow path. */
static int pack_value(char code, Py_ssize_t size, PyObject *v, char *p) {
    long long x;
    unsigned long long u;
    double d;
    switch (code) {
    case 'b': { if (!get_signed(v, &x) || x < SCHAR_MIN || x > SCHAR_MAX) return 0;
                signed char t = (signed char)x; memcpy(p, &t, 1); return 1; }
    case 'h': { if (!get_signed(v, &x) || x < SHRT_MIN || x > SHRT_MAX) return 0;
                short t = (short)x; memcpy(p, &t, 2); return 1; }
    case 'i': { if (!get_signed(v, &x) || x < INT_MIN || x > INT_MAX) return 0;
                int t = (int)x; memcpy(p, &t, 4); return 1; }
    case 'q': { if (!get_signed(v, &x)) return 0; memcpy(p, &x, 8); return 1; }
    case 'B': { if (!get_unsigned(v, &u) || u > UCHAR_MAX) return 0;
                unsigned char t = (unsigned char)u; memcpy(p, &t, 1); return 1; }
    case 'H': { if (!get_unsigned(v, &u) || u > USHRT_MAX) return 0;
                unsigned short t = (unsigned short)u; memcpy(p, &t, 2); return 1; }
    case 'I': { if (!get_unsigned(v, &u) || u > UINT_MAX) return 0;
                unsigned int t = (unsigned int)u; memcpy(p, &t, 4); return 1; }
    case 'Q': { if (!get_unsigned(v, &u)) return 0; memcpy(p, &u, 8); return 1; }
    case 'f': { if (!get_double(v, &d)) return 0;
                float t = (float)d;
                if (isfinite(d) && !isfinite(t)) return 0;   /* struct: overflow */
                memcpy(p, &t, 4); return 1; }
    case 'd': { if (!get_double(v, &d)) return 0; memcpy(p, &d, 8); return 1; }
    case 'e': { if (!get_double(v, &d)) return 0;
                if (PyFloat_Pack2(d, p, 1) < 0) { PyErr_Clear(); return 0; }
                return 1; }
    case '?': { int t = PyObject_IsTrue(v);
                if (t < 0) { PyErr_Clear(); return 0; }
                *p = (char)t; return 1; }
    case 's': { if (!PyBytes_CheckExact(v) || PyBytes_GET_SIZE(v) != size) return 0;
                memcpy(p, PyBytes_AS_STRING(v), (size_t)size); return 1; }
    default: return 0;
    }
}
"""
