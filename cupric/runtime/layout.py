"""The layout of an N-d array in device memory: shape, dtype and byte strides.

A device array is a data pointer with a shape and byte strides (as NumPy's); indexing,
reshaping and reinterpreting give new layouts of the same memory, which is never touched
here: these are pure functions of NumPy dtypes and tuples, with no driver and no device.
"""

from __future__ import annotations

import operator

import numpy as np

__all__ = ["normalize_shape", "normalize_dtype", "c_strides", "is_c_contiguous",
           "is_f_contiguous", "extent", "index_layout", "reshape_layout", "view_layout",
           "cai_dict"]



def normalize_shape(shape) -> tuple[int, ...]:
    """A shape as a tuple of non-negative ints (an int gives a 1-d shape)."""
    if isinstance(shape, (int, np.integer)):
        shape = (int(shape),)
    else:
        try:
            shape = tuple(operator.index(n) for n in shape)
        except TypeError:
            raise TypeError(f"a shape is an int or a sequence of ints, got {shape!r}") from None
    for n in shape:
        if n < 0:
            raise ValueError(f"negative dimension in shape {shape}")
    return shape


def normalize_dtype(dtype) -> np.dtype:
    """A NumPy dtype that device memory can hold (fixed size, no Python objects)."""
    try:
        dt = np.dtype(dtype)
    except TypeError as exc:
        raise TypeError(f"not a dtype: {dtype!r} ({exc})") from None
    if dt.hasobject or dt.itemsize == 0:
        raise TypeError(f"dtype {dt} cannot live in device memory: it must have a fixed "
                        f"size and no Python objects")
    return dt


def c_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    """Byte strides of a C-contiguous (row-major) array."""
    strides = [0] * len(shape)
    step = itemsize
    for axis in range(len(shape) - 1, -1, -1):
        strides[axis] = step
        step *= max(shape[axis], 1)
    return tuple(strides)


def is_c_contiguous(shape, strides, itemsize) -> bool:
    """True when the layout is row-major with no gaps (axes of length 1 ignored)."""
    if 0 in shape:
        return True
    expected = itemsize
    for axis in range(len(shape) - 1, -1, -1):
        n = shape[axis]
        if n != 1 and strides[axis] != expected:
            return False
        expected *= n
    return True


def is_f_contiguous(shape, strides, itemsize) -> bool:
    """True when the layout is column-major with no gaps (axes of length 1 ignored)."""
    if 0 in shape:
        return True
    expected = itemsize
    for axis in range(len(shape)):
        n = shape[axis]
        if n != 1 and strides[axis] != expected:
            return False
        expected *= n
    return True


def extent(shape, strides, itemsize) -> tuple[int, int]:
    """The byte range [low, high) relative to the data pointer that a layout touches.

    An empty array touches nothing: (0, 0).
    """
    low = high = 0
    for n, s in zip(shape, strides):
        if n == 0:
            return 0, 0
        if s >= 0:
            high += (n - 1) * s
        else:
            low += (n - 1) * s
    return low, high + itemsize


def index_layout(shape, strides, key):
    """Apply a basic index to a layout.

    Supports ints (negative from the end), slices with any step, ``...`` and None (a new
    axis of length 1), as NumPy basic indexing.

    Returns
    -------
    (offset, shape, strides)
        The byte offset of the view's first element and its shape and byte strides.

    Raises
    ------
    IndexError
        For an out-of-range int, too many indices, or an advanced index (arrays, lists,
        booleans), which device buffers do not support.
    """
    if not isinstance(key, tuple):
        key = (key,)
    ndim = len(shape)
    ellipses = 0
    used = 0
    for k in key:
        if k is Ellipsis:
            ellipses += 1
        elif k is not None:
            used += 1
    if ellipses > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    if used > ndim:
        raise IndexError(f"too many indices: the array is {ndim}-dimensional, but {used} "
                         f"were indexed")
    offset = 0
    new_shape: list[int] = []
    new_strides: list[int] = []
    axis = 0
    for k in key:
        if k is None:
            new_shape.append(1)
            new_strides.append(0)
            continue
        if k is Ellipsis:
            for _ in range(ndim - used):
                new_shape.append(shape[axis])
                new_strides.append(strides[axis])
                axis += 1
            continue
        n = shape[axis]
        stride = strides[axis]
        if isinstance(k, slice):
            start, stop, step = k.indices(n)
            length = len(range(start, stop, step))
            if length > 0:
                offset += start * stride
            new_shape.append(length)
            new_strides.append(stride * step)
        else:
            if isinstance(k, (bool, np.bool_)):
                raise IndexError("boolean indices are advanced indexing, which device "
                                 "buffers do not support")
            try:
                i = operator.index(k)
            except TypeError:
                raise IndexError(
                    f"only integers, slices, '...' and None are valid indices of a device "
                    f"buffer (advanced indexing is not supported), got {type(k).__name__}"
                ) from None
            if i < 0:
                i += n
            if not 0 <= i < n:
                raise IndexError(f"index {operator.index(k)} is out of bounds for axis "
                                 f"{axis} with size {n}")
            offset += i * stride
        axis += 1
    while axis < ndim:  # trailing axes not named by the key
        new_shape.append(shape[axis])
        new_strides.append(strides[axis])
        axis += 1
    return offset, tuple(new_shape), tuple(new_strides)


def reshape_layout(shape, strides, itemsize, new_shape):
    """The shape and strides of a C-order reshape (one -1 allowed) of a contiguous layout.

    Raises
    ------
    ValueError
        If the sizes differ, or the layout is not C-contiguous.
    """
    if isinstance(new_shape, (int, np.integer)):
        new_shape = (int(new_shape),)
    new_shape = [operator.index(n) for n in new_shape]
    size = 1
    for n in shape:
        size *= n
    unknown = [i for i, n in enumerate(new_shape) if n == -1]
    if len(unknown) > 1:
        raise ValueError("can only specify one unknown dimension (-1)")
    known = 1
    for n in new_shape:
        if n != -1:
            if n < 0:
                raise ValueError(f"negative dimension in shape {tuple(new_shape)}")
            known *= n
    if unknown:
        if known == 0 or size % known:
            raise ValueError(f"cannot reshape an array of size {size} into shape "
                             f"{tuple(new_shape)}")
        new_shape[unknown[0]] = size // known
    new_shape = tuple(new_shape)
    new_size = 1
    for n in new_shape:
        new_size *= n
    if new_size != size:
        raise ValueError(f"cannot reshape an array of size {size} into shape {new_shape}")
    if not is_c_contiguous(shape, strides, itemsize):
        raise ValueError("reshape needs a C-contiguous buffer; this view is strided "
                         "(copy it first with .copy())")
    return new_shape, c_strides(new_shape, itemsize)


def view_layout(shape, strides, old_itemsize, new_itemsize):
    """Shape and strides after reinterpreting the items with another item size.

    As NumPy's ``ndarray.view(dtype)``: the last axis must be contiguous and its byte
    length divisible by the new item size.
    """
    if old_itemsize == new_itemsize:
        return tuple(shape), tuple(strides)
    if len(shape) == 0:
        raise ValueError(f"cannot view a 0-d buffer of {old_itemsize}-byte items with "
                         f"{new_itemsize}-byte items")
    if shape[-1] != 1 and strides[-1] != old_itemsize:
        raise ValueError("to change the item size, the last axis must be contiguous")
    nbytes = shape[-1] * old_itemsize
    if nbytes % new_itemsize:
        raise ValueError(f"the last axis is {nbytes} bytes long, which is not a multiple "
                         f"of the new item size {new_itemsize}")
    new_shape = tuple(shape[:-1]) + (nbytes // new_itemsize,)
    new_strides = tuple(strides[:-1]) + (new_itemsize,)
    return new_shape, new_strides


def cai_dict(ptr, shape, strides, dtype, readonly, stream) -> dict:
    """The `__cuda_array_interface__` (version 3) of a layout.

    `strides` is left out (None) for C-contiguous layouts, as the protocol recommends;
    `stream` is an int handle or None (no synchronization needed).
    """
    contiguous = is_c_contiguous(shape, strides, dtype.itemsize)
    interface = {
        "shape": tuple(shape),
        "typestr": dtype.str,
        "data": (ptr, bool(readonly)),
        "version": 3,
        "strides": None if contiguous else tuple(strides),
        "stream": stream,
    }
    if dtype.fields is not None:
        interface["descr"] = dtype.descr
    return interface
