"""Argument checking shared by every cuDNN wrapper: element types, layouts, shapes.

cuDNN describes an N-d tensor by its element type, dimensions in a fixed logical order
(N, C, spatial...) and per-dimension strides; the memory layout (NCHW or NHWC) is only a
matter of strides. Everything here runs before any library call and needs neither the
GPU nor libcudnn, so the CPU test lane covers it.
"""

from __future__ import annotations

import dataclasses
import operator
import weakref

import numpy as np

from cupric.runtime.errors import ClosedError
from cupric.runtime.memory import DeviceBuffer

__all__ = [
    "DATA_TYPES", "ELEMENT_TYPES", "Tensor", "tensor", "element_type", "layout_of",
    "packed_strides", "conv_output_shape", "pool_output_shape", "conv_input_shape",
    "check_conv_operands", "expect", "as_tuple", "alignment_of", "INT32_MAX", "result",
    "check_overlap",
]

INT32_MAX = 2**31 - 1

# cudnnDataType_t values (fixed by the C API; a CPU test compares them with the headers,
# so that validation never needs the library loaded).
DATA_TYPES = {"f32": 0, "f64": 1, "f16": 2, "i8": 3, "i32": 4, "u8": 6, "bf16": 9, "i64": 10,
              "bool": 11}
ITEMSIZE = {"f32": 4, "f64": 8, "f16": 2, "bf16": 2, "i8": 1, "i32": 4, "u8": 1, "i64": 8,
            "bool": 1}
# The floating types the operations of this package take.
FLOAT_TYPES = ("f32", "f16", "bf16", "f64")
# NumPy dtype -> element type name; bfloat16 (NumPy has none) is recognized by name.
ELEMENT_TYPES = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64",
                 np.dtype(np.float16): "f16", np.dtype(np.int8): "i8",
                 np.dtype(np.int32): "i32", np.dtype(np.uint8): "u8",
                 np.dtype(np.int64): "i64", np.dtype(np.bool_): "bool"}
# What a buffer of each element type is allocated as when cupric makes an output.
_ALLOC_DTYPE = {name: dt for dt, name in ELEMENT_TYPES.items()}

# PyTorch exports bfloat16 tensors without a usable typestr: the tensor's dtype name says
# what the 2-byte elements are, and the bytes are borrowed through an int16 view.
_FOREIGN = {"torch.bfloat16": ("bf16", "int16")}


def element_type(dtype) -> str | None:
    """The element type name of a NumPy dtype ("f32", "bf16"...), or None."""
    dtype = np.dtype(dtype)
    name = ELEMENT_TYPES.get(dtype)
    if name is None and dtype.name == "bfloat16":  # ml_dtypes' bfloat16
        return "bf16"
    return name


def alloc_dtype(etype: str) -> np.dtype:
    """The NumPy dtype cupric allocates for an element type.

    bfloat16 is ml_dtypes' bfloat16 when that package is installed, otherwise uint16
    (the same bytes; PyTorch reads them with ``tensor.view(torch.bfloat16)``). Such a
    uint16 buffer made by cupric.cudnn is remembered as bfloat16 when passed back.
    """
    dtype = _ALLOC_DTYPE.get(etype)
    if dtype is not None:
        return dtype
    if etype == "bf16":
        try:
            import ml_dtypes
        except ImportError:
            return np.dtype(np.uint16)
        return np.dtype(ml_dtypes.bfloat16)
    raise TypeError(f"no NumPy dtype for element type {etype!r}")


# --------------------------------------------------------------------------------------
# Layouts


def packed_strides(shape, order) -> tuple[int, ...]:
    """Element strides of a dense tensor of `shape` whose axes are laid out in `order`,
    outermost first (``(0, 1, 2, 3)`` is NCHW, ``(0, 2, 3, 1)`` is NHWC)."""
    strides = [0] * len(shape)
    step = 1
    for axis in reversed(order):
        strides[axis] = step
        step *= max(shape[axis], 1)
    return tuple(strides)


def _orders(ndim: int) -> dict[str, tuple[int, ...]]:
    spatial = tuple(range(2, ndim))
    names = {4: ("NCHW", "NHWC"), 5: ("NCDHW", "NDHWC"), 3: ("NCW", "NWC")}.get(ndim)
    if names is None:
        return {}
    return {names[0]: (0, 1) + spatial, names[1]: (0,) + spatial + (1,)}


def _matches(shape, strides, wanted) -> bool:
    # A dimension of extent 1 is never stepped over, so its stride is free.
    return all(n == 1 or s == w for n, s, w in zip(shape, strides, wanted))


def layout_of(shape, strides) -> str | None:
    """"NCHW"/"NHWC" (or the 3-d/5-d names) of a dense tensor by its element strides, or
    None for any other layout. Channels-first wins when both fit (a tensor whose C or
    spatial extents are 1)."""
    for name, order in _orders(len(shape)).items():
        if _matches(shape, strides, packed_strides(shape, order)):
            return name
    return None


def channels_last(layout: str | None) -> bool:
    """Whether a layout name keeps the channels innermost (NHWC, NDHWC, NWC)."""
    return layout is not None and layout.endswith("C") and layout != "NC"


def alignment_of(ptr: int) -> int:
    """The largest power of two up to 16 that divides a device address (cuDNN's
    ``BYTE_ALIGNMENT``: vectorized kernels need 16)."""
    if ptr == 0:
        return 16
    return min(16, ptr & -ptr)


# --------------------------------------------------------------------------------------
# Tensors


@dataclasses.dataclass(frozen=True)
class Tensor:
    """A device array as cuDNN sees it (made by `tensor`).

    Attributes
    ----------
    buf : DeviceBuffer
        The memory (a borrow for other libraries' arrays); keeps it alive.
    etype : str
        Element type name ("f32", "f16", "bf16", "f64", ...).
    shape : tuple of int
        Logical dimensions, N and C first.
    strides : tuple of int
        In elements.
    layout : str or None
        "NCHW", "NHWC" (or 3-d/5-d names), None for other strides.
    """

    buf: DeviceBuffer
    etype: str
    shape: tuple
    strides: tuple
    layout: str | None

    @property
    def ptr(self) -> int:
        return self.buf.ptr

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return self.buf.size

    def signature(self) -> tuple:
        """What a cached plan depends on: type, dims, strides, alignment."""
        return (self.etype, self.shape, self.strides, alignment_of(self.buf.ptr))


# bfloat16 outputs cupric allocated as uint16 (no ml_dtypes): recognized when they come
# back as inputs, so that a chain of calls keeps the element type.
_BF16_BUFFERS: "weakref.WeakSet[DeviceBuffer]" = weakref.WeakSet()


def _foreign(obj):
    return _FOREIGN.get(str(getattr(obj, "dtype", "")))


def _borrow(obj, name: str, stream) -> tuple[DeviceBuffer, str | None]:
    if isinstance(obj, DeviceBuffer):
        if obj.allocation.closed:
            raise ClosedError(f"{name} is a closed DeviceBuffer (its memory was freed)")
        if obj.dtype == np.uint16 and obj in _BF16_BUFFERS:
            return obj, "bf16"
        return obj, None
    # PyTorch refuses to export a tensor that records autograd (DLPack raises BufferError,
    # the array interface RuntimeError), with a message that names neither the operation
    # nor the argument. cuDNN calls here are not recorded by autograd either, so the
    # caller's fix is the same memory without the graph: say so up front.
    if getattr(obj, "requires_grad", False) is True:
        raise TypeError(f"{name} is a PyTorch tensor that requires grad; cupric.cudnn "
                        f"does not record autograd: pass .detach() (the same memory, no "
                        f"copy) and compute gradients with the *_backward functions")
    from cupric.runtime.intake import StrideError, as_buffer
    try:
        buf = as_buffer(obj, stream)
    except StrideError as exc:
        # Both a TypeError and a ValueError: the class is kept, the argument named.
        raise StrideError(f"{name}: its strides are not whole multiples of the element "
                          f"size ({exc})") from None
    except BufferError as exc:
        # DLPack's way of saying no (a producer refusing to export, e.g. PyTorch's
        # conjugate bit, or a capsule cupric cannot read): name the operation and the
        # argument, which the exporter's message does not.
        raise TypeError(f"{name} could not be borrowed through DLPack: {exc}") from exc
    except TypeError as exc:
        foreign = _foreign(obj)
        if foreign is None or not hasattr(obj, "view"):
            raise TypeError(f"{name}: {exc}") from None
    else:
        if buf.dtype.kind == "V" and buf.dtype.name != "bfloat16":
            # Raw bytes: the producer's dtype name may say what they are.
            foreign = _foreign(obj)
            if foreign is not None and buf.itemsize == 2:
                return buf, foreign[0]
        return buf, None
    # The exporter refused the element type: borrow the same bytes as integers.
    import sys
    torch = sys.modules["torch"]
    try:
        buf = as_buffer(obj.view(getattr(torch, foreign[1])), stream)
    except TypeError as exc:
        raise TypeError(f"{name}: {exc}") from None
    return buf, foreign[0]


# (dtype, shape, byte strides, element type override) -> (element type, element strides,
# layout, problem): what `tensor` derives from a layout, computed once per layout seen.
_described: dict = {}
_DESCRIBED_LIMIT = 4096


def _describe(buf: DeviceBuffer, override: str | None):
    etype = override or element_type(buf.dtype)
    item = buf.itemsize
    strides = []
    for st in buf.strides:
        q, r = divmod(st, item)
        if r or st < 0:
            return etype, None, None, (f"has byte strides {buf.strides}, not whole "
                                       f"non-negative multiples of its {item}-byte elements")
        strides.append(q)
    strides = tuple(strides)
    if any(n == 0 for n in buf.shape):
        return etype, strides, None, (f"is empty (shape {buf.shape}); cuDNN takes no "
                                      f"zero-sized tensors")
    if any(n > INT32_MAX for n in buf.shape):
        return etype, strides, None, (f"has a dimension above 2**31 - 1 (shape "
                                      f"{buf.shape}), beyond cuDNN's int32 dimensions")
    layout = layout_of(buf.shape, strides) if buf.ndim in (3, 4, 5) else None
    return etype, strides, layout, None


def tensor(obj, name: str, op: str, *, stream=None, ndims=(4,), types=FLOAT_TYPES,
           writable: bool = False, layouts: bool = True) -> Tensor:
    """Check a device-array argument and describe it for cuDNN.

    Parameters
    ----------
    obj : DeviceBuffer or any CUDA Array Interface / DLPack device array
    name : str
        The argument's name, for messages.
    op : str
        The operation, for messages ("conv2d", "max_pool2d"...).
    stream : optional
        The stream the operation runs on (a producer on another stream is waited for).
    ndims : tuple of int
        Accepted numbers of dimensions.
    types : tuple of str
        Accepted element types.
    writable : bool
        The operation writes the array.
    layouts : bool
        Require a dense NCHW/NHWC-style layout (the convolution engines and the
        pooling/normalization kernels take only those).

    Raises
    ------
    TypeError
        For a host array, a non-array, a PyTorch tensor that requires grad (pass
        ``.detach()``), an array its producer refuses to export, or an element type the
        operation does not take.
    ValueError
        For a wrong number of dimensions, a read-only output, strides that are not whole
        elements, or a layout other than channels-first/channels-last dense.

    Cost
    ----
    The array protocol's own cost (a few microseconds for a PyTorch tensor) plus one
    dictionary lookup for a layout seen before.
    """
    if isinstance(obj, Tensor):
        # Already described (an internal call passing on a caller's array): keep its
        # element type, which the bytes alone may not tell (bfloat16).
        buf, override = obj.buf, obj.etype
        if buf.closed:
            raise ClosedError(f"{op}: {name} was closed (its memory was freed)")
    else:
        buf, override = _borrow(obj, f"{op}: {name}", stream)
    key = (buf.dtype, buf.shape, buf.strides, override)
    info = _described.get(key)
    if info is None:
        info = _describe(buf, override)
        if len(_described) < _DESCRIBED_LIMIT:
            _described[key] = info
    etype, strides, layout, problem = info
    if etype is None or etype not in types:
        shown = etype or str(buf.dtype)
        raise TypeError(f"{op}: {name} has element type {shown}; {op} takes "
                        f"{', '.join(types)}")
    if buf.ndim not in ndims:
        raise ValueError(f"{op}: {name} has {buf.ndim} dimensions (shape {buf.shape}); "
                         f"{op} takes {' or '.join(map(str, ndims))}-d tensors")
    if writable and buf.readonly:
        raise ValueError(f"{op}: {name} is read-only (its producer exported it read-only) "
                         f"but {op} writes it")
    if problem is not None:
        raise ValueError(f"{op}: {name} {problem}")
    if layouts and layout is None and buf.ndim in (3, 4, 5):
        names = " or ".join(_orders(buf.ndim))
        raise ValueError(f"{op}: {name} of shape {buf.shape} has element strides "
                         f"{strides}, which is neither dense {names}; make it "
                         f"contiguous (or channels-last) first")
    return Tensor(buf, etype, buf.shape, strides, layout)


def expect(t: Tensor, shape, etype: str, name: str, op: str) -> None:
    """Raise unless a tensor has the given shape and element type."""
    if tuple(t.shape) != tuple(shape):
        raise ValueError(f"{op}: {name} has shape {t.shape}, expected {tuple(shape)}")
    if t.etype != etype:
        raise TypeError(f"{op}: {name} has element type {t.etype}, expected {etype}")


def same_type(op: str, *named: tuple[str, Tensor]) -> str:
    """The common element type of (name, Tensor) pairs, or TypeError naming both sides."""
    first_name, first = named[0]
    for name, t in named[1:]:
        if t.etype != first.etype:
            raise TypeError(f"{op}: {name} has element type {t.etype} but {first_name} "
                            f"has {first.etype}; they must match")
    return first.etype


def new_output(shape, etype: str, layout: str | None, stream) -> DeviceBuffer:
    """A new buffer of logical `shape`, laid out channels-last when `layout` is, allocated
    in stream order on `stream` (or synchronously when None)."""
    from cupric.runtime.memory import empty
    dtype = alloc_dtype(etype)
    if channels_last(layout) and len(shape) >= 3:
        physical = (shape[0],) + tuple(shape[2:]) + (shape[1],)
        ndim = len(shape)
        buf = empty(physical, dtype, stream=stream).transpose(0, ndim - 1, *range(1, ndim - 1))
    else:
        buf = empty(tuple(shape), dtype, stream=stream)
    if etype == "bf16" and dtype == np.uint16:
        _BF16_BUFFERS.add(buf)
    return buf


def output(out, shape, etype: str, layout: str | None, name: str, op: str,
           stream, ndims=(4,)) -> Tensor:
    """Validate a caller's output array, or allocate one (same layout as the inputs)."""
    if out is None:
        buf = new_output(shape, etype, layout, stream)
        strides = tuple(st // buf.itemsize for st in buf.strides)
        return Tensor(buf, etype, tuple(buf.shape), strides,
                      layout_of(buf.shape, strides) if buf.ndim in (3, 4, 5) else None)
    t = tensor(out, name, op, stream=stream, ndims=ndims, types=(etype,), writable=True,
               layouts=layout is not None)
    if t.shape != tuple(shape):
        raise ValueError(f"{op}: {name} has shape {t.shape}, expected {tuple(shape)}")
    return t


def result(out, t: Tensor):
    """What an operation returns for output `t`: the caller's `out` array itself when
    given (an internal `Tensor` gives its buffer), else the buffer cupric allocated."""
    return t.buf if out is None or isinstance(out, Tensor) else out


def check_overlap(op: str, out: tuple, *inputs: tuple, inplace: tuple = ()) -> None:
    """Raise ValueError when output ``(name, Tensor)`` shares memory with an input
    ``(name, Tensor or None)``; an input named in `inplace` may be the very same array
    (same address, shape and strides: the operation runs in place)."""
    from cupric.runtime.memory import extent
    name, t = out
    buf = t.buf
    lo, hi = extent(buf.shape, buf.strides, buf.itemsize)
    for other_name, u in inputs:
        if u is None:
            continue
        ub = u.buf
        ulo, uhi = extent(ub.shape, ub.strides, ub.itemsize)
        if not (buf.ptr + lo < ub.ptr + uhi and ub.ptr + ulo < buf.ptr + hi):
            continue
        if other_name in inplace and ub.ptr == buf.ptr and (ulo, uhi) == (lo, hi) \
                and ub.strides == buf.strides:
            continue
        raise ValueError(f"{op}: {name} overlaps {other_name} in memory; pass an output "
                         f"that shares no bytes with the inputs"
                         + (f" (or {other_name} itself)" if other_name in inplace else ""))


# --------------------------------------------------------------------------------------
# Shape arithmetic


def as_tuple(value, n: int, name: str, op: str, *, minimum: int = 0) -> tuple[int, ...]:
    """An int or a sequence of `n` ints as a tuple, each at least `minimum`."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        values = (int(value),) * n
    else:
        try:
            values = tuple(operator.index(v) for v in value)
        except TypeError:
            raise TypeError(f"{op}: {name} must be an int or a sequence of {n} ints, got "
                            f"{value!r}") from None
        if len(values) != n:
            raise ValueError(f"{op}: {name} has {len(values)} values, expected {n} (one "
                             f"per spatial dimension)")
    for v in values:
        if v < minimum:
            raise ValueError(f"{op}: {name} = {values}: each value must be >= {minimum}")
    return values


def conv_output_shape(x_shape, w_shape, padding, stride, dilation, op: str = "conv"):
    """Output dimensions (N, K, spatial...) of a convolution (cross-correlation).

    Each spatial extent is ``(in + 2*pad - dilation*(k - 1) - 1) // stride + 1``.

    Raises
    ------
    ValueError
        If the filter (dilated) is larger than the padded input along an axis.
    """
    n = x_shape[0]
    k = w_shape[0]
    out = [n, k]
    for axis, (size, kernel, p, s, d) in enumerate(
            zip(x_shape[2:], w_shape[2:], padding, stride, dilation)):
        span = d * (kernel - 1) + 1
        if size + 2 * p < span:
            raise ValueError(f"{op}: along spatial axis {axis} the input extent {size} "
                             f"with padding {p} is smaller than the dilated filter extent "
                             f"{span}")
        out.append((size + 2 * p - span) // s + 1)
    return tuple(out)


def conv_input_shape(y_shape, w_shape, x_spatial, groups, op: str = "conv"):
    """The input shape (N, C, spatial...) implied by an output gradient and filter, with
    the spatial extents given (several inputs map onto one output shape)."""
    return (y_shape[0], w_shape[1] * groups) + tuple(x_spatial)


def check_conv_operands(x_shape, w_shape, groups: int, op: str) -> None:
    """Raise unless input (N, C, ...) and filter (K, C/groups, ...) fit a grouped
    convolution."""
    if len(w_shape) != len(x_shape):
        raise ValueError(f"{op}: the filter has {len(w_shape)} dimensions but the input "
                         f"has {len(x_shape)}")
    c = x_shape[1]
    k, cg = w_shape[0], w_shape[1]
    if c % groups:
        raise ValueError(f"{op}: input channels {c} are not divisible by groups={groups}")
    if k % groups:
        raise ValueError(f"{op}: output channels (filter dim 0) {k} are not divisible by "
                         f"groups={groups}")
    if cg * groups != c:
        raise ValueError(f"{op}: the filter has {cg} input channels per group (shape "
                         f"{tuple(w_shape)}) but the input has {c} channels and "
                         f"groups={groups}: expected filter dim 1 = {c // groups}")


def pool_output_shape(x_shape, window, padding, stride, op: str = "pool"):
    """Output dimensions of a pooling window (floor mode): ``(in + 2*pad - window) //
    stride + 1`` per spatial axis.

    Raises
    ------
    ValueError
        If a padding is at least the window (cuDNN refuses it) or the window does not
        fit the padded input.
    """
    out = list(x_shape[:2])
    for axis, (size, w, p, s) in enumerate(zip(x_shape[2:], window, padding, stride)):
        if p >= w:
            raise ValueError(f"{op}: padding {p} along spatial axis {axis} must be "
                             f"smaller than the window {w}")
        if size + 2 * p < w:
            raise ValueError(f"{op}: the window {w} is larger than the padded input "
                             f"extent {size + 2 * p} along spatial axis {axis}")
        out.append((size + 2 * p - w) // s + 1)
    return tuple(out)
