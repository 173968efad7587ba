"""DeviceBuffer: a typed N-d view (dtype, shape, byte strides) of one device allocation.

Slicing, reshaping and `view` give more views of the same allocation, never copies.
Copies between host and device go through `cuMemcpyHtoD`/`DtoH`/`DtoD` (or their `Async`
forms on a stream), and fills through `cuMemsetD8/16/32`; each runs with the memory's own
device current.
"""

from __future__ import annotations

import functools
import operator

import numpy as np

from ._driver import check
from .allocation import (BORROWED, LEGACY_STREAM, _device_of_context, _ready, pointer_device,
                         stream_handle)
from .errors import ClosedError
from .layout import (cai_dict, extent, index_layout, is_c_contiguous, is_f_contiguous,
                     normalize_dtype, reshape_layout, view_layout)

__all__ = ["DeviceBuffer", "DeviceBox"]

_NO_CONSTRUCTOR = ("DeviceBuffer has no public constructor: use cupric.runtime.empty(), "
                   "zeros(), to_device(), empty_like() or MemoryPool.empty()")


def _in_own_context(method):
    """Run a copy or fill with the buffer's own device current.

    Memory from another device's stream-ordered pool is reachable only from that device
    (peer access covers `cuMemAlloc` memory, not pools), so a copy issued from whichever
    context happens to be current can fail with CUDA_ERROR_INVALID_VALUE.
    """
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        device = self.device
        if device < 0 or device == _device_of_context():
            return method(self, *args, **kwargs)
        from .device import Device
        with Device(device).primary_context():
            return method(self, *args, **kwargs)
    return wrapper


# --------------------------------------------------------------------------------------
# Host arrays


def _host_array(obj, what: str) -> np.ndarray:
    if isinstance(obj, np.ndarray):
        return obj
    inner = getattr(obj, "array", None)  # PinnedBuffer and friends
    if isinstance(inner, np.ndarray):
        return inner
    if hasattr(obj, "__array_interface__") or hasattr(obj, "__array__"):
        return np.asarray(obj)
    raise TypeError(f"{what} must be a NumPy array (or a device array), got "
                    f"{type(obj).__name__}")


def _host_ptr(array: np.ndarray) -> int:
    return array.__array_interface__["data"][0]


def _device_array_or_none(obj):
    """`obj` as a DeviceBuffer when it is device memory (ours or a protocol's), else None."""
    if isinstance(obj, DeviceBuffer):
        return obj
    if hasattr(obj, "__cuda_array_interface__") or (
            hasattr(obj, "__dlpack__") and not isinstance(obj, np.ndarray)
            and _dlpack_on_device(obj)):
        from .interop import as_device_array
        return as_device_array(obj)
    return None


def _dlpack_on_device(obj) -> bool:
    device = getattr(obj, "__dlpack_device__", None)
    if device is None:
        return False
    from .dlpack import DEVICE_CUDA, DEVICE_CUDA_MANAGED
    return device()[0] in (DEVICE_CUDA, DEVICE_CUDA_MANAGED)


# --------------------------------------------------------------------------------------
# DeviceBuffer


class DeviceBuffer:
    """A typed N-d view of device memory.

    Made by `empty`, `zeros`, `to_device`, `empty_like`, `MemoryPool.empty`, slicing and
    `view`, or by borrowing another library's array (`as_device_array`, `from_dlpack`).

    Attributes
    ----------
    ptr : int
        Device address of the first element (plain attribute: launches read it directly).
    shape : tuple of int
    strides : tuple of int
        In bytes, as NumPy.
    dtype : numpy.dtype
    itemsize, size, nbytes, ndim : int
        ``nbytes = size * itemsize``, the bytes the view's elements occupy.
    readonly : bool
        True for borrows the producer marked read-only; writes through cupric refuse.
    allocation
        The runtime's record of the allocation the view belongs to, shared by every view;
        ``allocation.closed`` is its closed flag (what `closed` reads) and
        ``allocation.device`` its device ordinal (-1 while unknown).
    ordering_stream, view_base
        `stream` (written with no check: for wrappers that validated the stream) and
        `base`, as plain slots for other packages' per-call paths.

    Safety
    ------
    Views share their allocation. After ``close()`` every view refuses use with
    `ClosedError`, but a raw ``ptr`` already handed to a kernel or another library dangles:
    close only once all queued work that uses the memory is ordered before the free (pass
    that work's stream to ``close``).

    Thread safety
    -------------
    A buffer may be used from several threads; ordering the device work on it is the
    caller's job (streams, events), as in CUDA.
    """

    __slots__ = ("ptr", "shape", "strides", "dtype", "itemsize", "size", "nbytes", "ndim",
                 "readonly", "_alloc", "_stream", "_base", "__weakref__")

    def __init__(self, *args, **kwargs):
        raise TypeError(_NO_CONSTRUCTOR)

    @classmethod
    def view_of(klass, alloc, ptr, shape, strides, dtype, readonly, stream, base=None,
                cls=None):
        """A buffer over `alloc` with this layout, made with no checks at all.

        Parameters
        ----------
        alloc
            The allocation record (another buffer's `allocation`).
        ptr, shape, strides, dtype, readonly, stream
            The new buffer's attributes; the caller guarantees the layout stays inside.
        base : DeviceBuffer, optional
            The buffer viewed (`base`), None for the owner of the allocation.
        cls : type, optional
            A subclass to make instead (e.g. `DeviceBox`).

        Cost
        ----
        Plain slot writes: the runtime's factories and views are made by it too.
        """
        self = object.__new__(cls if cls is not None else klass)
        self._alloc = alloc
        self.ptr = ptr
        self.shape = shape
        self.strides = strides
        self.dtype = dtype
        self.itemsize = dtype.itemsize
        size = 1
        for n in shape:
            size *= n
        self.size = size
        self.nbytes = size * dtype.itemsize
        self.ndim = len(shape)
        self.readonly = readonly
        self._stream = stream
        self._base = base
        return self

    _make = view_of  # the runtime's own name

    @classmethod
    def from_numpy(cls, array, stream=None) -> "DeviceBuffer":
        """A new device buffer holding a copy of a host array (same as `to_device`)."""
        from .memory import to_device  # the factories build on this class
        return to_device(array, stream)

    def _derive(self, ptr, shape, strides, dtype) -> "DeviceBuffer":
        """A view of the same allocation (a plain DeviceBuffer whatever this one is)."""
        base = self._base if self._base is not None else self
        return DeviceBuffer.view_of(self._alloc, ptr, shape, strides, dtype, self.readonly,
                                  self._stream, base=base)

    # -- state ---------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """True once the buffer (or the buffer it views) was closed."""
        return self._alloc._closed

    @property
    def base(self):
        """The buffer this one views, or None for a buffer that owns its allocation."""
        return self._base

    @property
    def owns_memory(self) -> bool:
        """False for borrows of another library's memory, which cupric never frees."""
        return self._alloc.kind not in (BORROWED,)

    @property
    def device(self) -> int:
        """Ordinal of the device the memory lives on (asked of the driver, once, for
        borrowed memory)."""
        alloc = self._alloc
        if alloc.device < 0 and self.ptr:
            self._check_open()
            alloc.device = pointer_device(self.ptr)
        return alloc.device

    @property
    def stream(self):
        """The stream that work producing this buffer's contents was last queued on.

        Advertised to consumers through ``__cuda_array_interface__['stream']`` and
        honoured by ``__dlpack__``, so that they order their reads after it. cupric's own
        stream-ordered copies and fills set it; set it yourself after launching a kernel
        that writes the buffer on a stream other libraries do not know about.
        """
        return self._stream

    @stream.setter
    def stream(self, value) -> None:
        if value is not None:
            stream_handle(value)  # validates
        self._stream = value

    def check_open(self) -> None:
        """Raise `ClosedError` if the buffer (or the buffer it views) was closed.

        Cost
        ----
        Two slot reads when open.
        """
        if self._alloc._closed:
            raise ClosedError("this DeviceBuffer is closed (or views a closed buffer); "
                              "its memory was freed")

    _check_open = check_open  # the runtime's own name

    def _check_writable(self) -> None:
        self._check_open()
        if self.readonly:
            raise ValueError("this DeviceBuffer is read-only (its producer exported it "
                             "read-only)")

    @property
    def is_c_contiguous(self) -> bool:
        return is_c_contiguous(self.shape, self.strides, self.itemsize)

    @property
    def is_f_contiguous(self) -> bool:
        return is_f_contiguous(self.shape, self.strides, self.itemsize)

    def close(self, stream=None) -> None:
        """Free the memory now, ordered on `stream` where the allocation allows it.

        Stream-ordered allocations (``stream=`` at allocation, pools) are freed with
        `cuMemFreeAsync` on `stream`, or on their allocation stream when `stream` is None.
        Synchronous allocations are freed with `cuMemFree`, which first waits for the
        device. Closing a borrow frees nothing; it drops the reference to the producer
        (and hands a DLPack tensor back through its deleter). Closing a view closes the
        whole allocation. A second call does nothing.

        Raises
        ------
        CudaError
            If the driver refuses the free (the buffer is closed anyway).
        """
        alloc = self._alloc
        if alloc._closed:
            return
        alloc.close(stream)
        self.ptr = 0

    def __enter__(self):
        self._check_open()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._alloc._closed else f"ptr=0x{self.ptr:x}"
        return (f"<DeviceBuffer shape={self.shape} dtype={self.dtype} {state}"
                f"{' readonly' if self.readonly else ''}>")

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d DeviceBuffer")
        return self.shape[0]

    def __bool__(self):
        raise TypeError("the truth value of a DeviceBuffer is ambiguous; copy it to the "
                        "host with to_numpy() first")

    def __array__(self, dtype=None, copy=None):
        raise TypeError("a DeviceBuffer lives in device memory and is not converted "
                        "implicitly; copy it to the host with .to_numpy()")

    # -- views ---------------------------------------------------------------------

    def __getitem__(self, key) -> "DeviceBuffer":
        self._check_open()
        offset, shape, strides = index_layout(self.shape, self.strides, key)
        return self._derive(self.ptr + offset, shape, strides, self.dtype)

    def __setitem__(self, key, value) -> None:
        target = self[key]
        if isinstance(value, (int, float, complex, bool, np.generic)):
            target.fill(value)
        else:
            target.copy_from(value)

    def view(self, dtype=None) -> "DeviceBuffer":
        """Reinterpret the same bytes as another dtype (no copy), like ``ndarray.view``.

        Raises
        ------
        ValueError
            If the item size changes and the last axis is not contiguous or its byte
            length is not a multiple of the new item size.
        """
        self._check_open()
        dt = self.dtype if dtype is None else normalize_dtype(dtype)
        shape, strides = view_layout(self.shape, self.strides, self.itemsize, dt.itemsize)
        return self._derive(self.ptr, shape, strides, dt)

    def reshape(self, *shape) -> "DeviceBuffer":
        """A view with another shape (C order; one -1 allowed). Needs a contiguous buffer."""
        self._check_open()
        if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
            shape = shape[0]
        new_shape, new_strides = reshape_layout(self.shape, self.strides, self.itemsize,
                                                shape)
        return self._derive(self.ptr, new_shape, new_strides, self.dtype)

    def ravel(self) -> "DeviceBuffer":
        """A 1-d view of a C-contiguous buffer."""
        return self.reshape(-1)

    def transpose(self, *axes) -> "DeviceBuffer":
        """A view with the axes permuted (reversed by default). No copy."""
        self._check_open()
        if not axes:
            axes = tuple(range(self.ndim - 1, -1, -1))
        elif len(axes) == 1 and not isinstance(axes[0], (int, np.integer)):
            axes = tuple(axes[0])
        axes = tuple(operator.index(a) + (self.ndim if operator.index(a) < 0 else 0)
                     for a in axes)
        if sorted(axes) != list(range(self.ndim)):
            raise ValueError(f"axes {axes} are not a permutation of {self.ndim} axes")
        return self._derive(self.ptr, tuple(self.shape[a] for a in axes),
                            tuple(self.strides[a] for a in axes), self.dtype)

    @property
    def T(self) -> "DeviceBuffer":
        return self.transpose()

    # -- copies --------------------------------------------------------------------

    def _check_match(self, other_dtype, other_shape, what: str) -> None:
        if other_dtype != self.dtype:
            raise TypeError(f"dtype mismatch: this buffer holds {self.dtype}, {what} holds "
                            f"{other_dtype}; convert one of them first (astype)")
        if tuple(other_shape) != self.shape:
            raise ValueError(f"shape mismatch: this buffer is {self.shape}, {what} is "
                             f"{tuple(other_shape)}")

    def _contiguous_or_raise(self, what: str) -> None:
        if not is_c_contiguous(self.shape, self.strides, self.itemsize):
            raise ValueError(f"{what} needs a C-contiguous buffer; this view has strides "
                             f"{self.strides} for shape {self.shape}")

    @_in_own_context
    def copy_from(self, src, stream=None) -> None:
        """Copy `src` (a host array or device array) into this buffer.

        Parameters
        ----------
        src : numpy.ndarray, PinnedBuffer, DeviceBuffer, or any CAI/DLPack device array
            Same dtype and shape as this buffer, C-contiguous (as this buffer).
        stream : Stream, optional
            Queue the copy on this stream (`cuMemcpy*Async`) and return at once; without
            one, the copy is synchronous with respect to the host for host sources.

        Raises
        ------
        TypeError
            Different dtypes, or `src` is not an array.
        ValueError
            Different shapes, a non-contiguous side, or a read-only destination.
        ClosedError
            If this buffer was closed.

        Safety
        ------
        With a stream, a pinned host source must stay alive and unchanged until the copy
        completes (pageable memory is staged by the driver before the call returns).

        Cost
        ----
        One driver call; no host-side staging by cupric.
        """
        self._check_writable()
        dev = _device_array_or_none(src)
        if dev is not None:
            dev._check_open()
            self._check_match(dev.dtype, dev.shape, "the source")
            self._contiguous_or_raise("copy_from")
            if not is_c_contiguous(dev.shape, dev.strides, dev.itemsize):
                raise ValueError("copy_from needs a C-contiguous source; the source view is "
                                 "strided")
            if self.nbytes == 0:
                return
            d = _ready()
            if stream is None:
                check(d.cuMemcpyDtoD(self.ptr, dev.ptr, self.nbytes))
                self._stream = LEGACY_STREAM
            else:
                check(d.cuMemcpyDtoDAsync(self.ptr, dev.ptr, self.nbytes,
                                          stream_handle(stream)))
                self._stream = stream
            return
        host = _host_array(src, "the source")
        self._check_match(host.dtype, host.shape, "the source array")
        self._contiguous_or_raise("copy_from")
        if not host.flags.c_contiguous:
            raise ValueError("copy_from needs a C-contiguous host array; make one with "
                             "numpy.ascontiguousarray(src)")
        if self.nbytes == 0:
            return
        d = _ready()
        if stream is None:
            # Returns once the source is staged; the DMA may still run on the legacy stream.
            check(d.cuMemcpyHtoD(self.ptr, _host_ptr(host), self.nbytes))
            self._stream = LEGACY_STREAM
        else:
            check(d.cuMemcpyHtoDAsync(self.ptr, _host_ptr(host), self.nbytes,
                                      stream_handle(stream)))
            self._stream = stream

    @_in_own_context
    def copy_to(self, dst, stream=None) -> None:
        """Copy this buffer into `dst` (a host array or device array).

        Parameters and errors as `copy_from`, with the roles swapped; a host destination
        must be writable. With a stream the copy is queued and the call returns at once:
        synchronize the stream before reading a pinned destination.
        """
        self._check_open()
        self._contiguous_or_raise("copy_to")
        dev = _device_array_or_none(dst)
        if dev is not None:
            dev._check_writable()
            self._check_match(dev.dtype, dev.shape, "the destination")
            if not is_c_contiguous(dev.shape, dev.strides, dev.itemsize):
                raise ValueError("copy_to needs a C-contiguous destination; the destination "
                                 "view is strided")
            if self.nbytes == 0:
                return
            d = _ready()
            if stream is None:
                check(d.cuMemcpyDtoD(dev.ptr, self.ptr, self.nbytes))
                dev._stream = LEGACY_STREAM
            else:
                check(d.cuMemcpyDtoDAsync(dev.ptr, self.ptr, self.nbytes,
                                          stream_handle(stream)))
                dev._stream = stream
            return
        host = _host_array(dst, "the destination")
        self._check_match(host.dtype, host.shape, "the destination array")
        if not host.flags.c_contiguous:
            raise ValueError("copy_to needs a C-contiguous host array")
        if not host.flags.writeable:
            raise ValueError("copy_to: the destination array is read-only")
        if self.nbytes == 0:
            return
        d = _ready()
        if stream is None:
            check(d.cuMemcpyDtoH(_host_ptr(host), self.ptr, self.nbytes))
        else:
            check(d.cuMemcpyDtoHAsync(_host_ptr(host), self.ptr, self.nbytes,
                                      stream_handle(stream)))

    @_in_own_context
    def to_numpy(self, stream=None) -> np.ndarray:
        """A new host array with this buffer's contents (waits for the copy).

        Strided views are supported: the bytes the view spans are copied and the elements
        gathered on the host.

        Parameters
        ----------
        stream : Stream, optional
            Order the copy after the work on this stream (then wait for it).

        Cost
        ----
        One device-to-host copy of ``nbytes`` into pageable memory (of the view's whole
        span for a strided view), plus a stream synchronization when a stream is given.
        """
        self._check_open()
        if is_c_contiguous(self.shape, self.strides, self.itemsize):
            out = np.empty(self.shape, self.dtype)
            self._download(out, self.ptr, self.nbytes, stream)
            return out
        if is_f_contiguous(self.shape, self.strides, self.itemsize):
            out = np.empty(self.shape, self.dtype, order="F")
            self._download(out, self.ptr, self.nbytes, stream)
            return out
        low, high = extent(self.shape, self.strides, self.itemsize)
        raw = np.empty(high - low, np.uint8)
        self._download(raw, self.ptr + low, high - low, stream)
        # The first element sits at byte -low of `raw`; gather bytewise, then retype.
        gathered = np.lib.stride_tricks.as_strided(
            raw[-low:], shape=self.shape + (self.itemsize,), strides=self.strides + (1,))
        return np.ascontiguousarray(gathered).view(self.dtype).reshape(self.shape)

    def _download(self, out: np.ndarray, ptr: int, nbytes: int, stream) -> None:
        if nbytes == 0:
            return
        d = _ready()
        if stream is None:
            check(d.cuMemcpyDtoH(_host_ptr(out), ptr, nbytes))
        else:
            h = stream_handle(stream)
            check(d.cuMemcpyDtoHAsync(_host_ptr(out), ptr, nbytes, h))
            check(d.cuStreamSynchronize(h))

    def copy(self, stream=None) -> "DeviceBuffer":
        """A new C-contiguous buffer with the same contents (device-to-device)."""
        self._check_open()
        self._contiguous_or_raise("copy")
        from .memory import empty
        out = empty(self.shape, self.dtype, stream=stream)
        out.copy_from(self, stream=stream)
        return out

    # -- fills ---------------------------------------------------------------------

    @_in_own_context
    def memset(self, value: int, width: int = 8, stream=None) -> None:
        """Set every `width`-bit word of the buffer's bytes to `value`.

        Parameters
        ----------
        value : int
            The word, as an unsigned integer of `width` bits.
        width : {8, 16, 32}
            `cuMemsetD8`, `cuMemsetD16` or `cuMemsetD32`. The buffer's byte length must be
            a multiple of the word size (and its address aligned to it).
        stream : Stream, optional
            Queue the fill on this stream.

        Raises
        ------
        ValueError
            For another width, a value that does not fit, a length or address that is not
            a multiple of the word size, a strided view, or a read-only buffer.
        """
        self._check_writable()
        self._contiguous_or_raise("memset")
        if width not in (8, 16, 32):
            raise ValueError(f"memset width must be 8, 16 or 32 bits, got {width}")
        value = operator.index(value)
        if not 0 <= value < (1 << width):
            raise ValueError(f"memset value {value} does not fit in {width} bits unsigned")
        word = width // 8
        if self.nbytes % word or self.ptr % word:
            raise ValueError(f"memset with {width}-bit words needs a length and address "
                             f"that are multiples of {word} bytes (length {self.nbytes}, "
                             f"address 0x{self.ptr:x})")
        count = self.nbytes // word
        if count == 0:
            return
        d = _ready()
        if stream is None:
            fn = (d.cuMemsetD8, d.cuMemsetD16, d.cuMemsetD32)[word // 2]
            check(fn(self.ptr, value, count))
            self._stream = LEGACY_STREAM
        else:
            fn = (d.cuMemsetD8Async, d.cuMemsetD16Async, d.cuMemsetD32Async)[word // 2]
            check(fn(self.ptr, value, count, stream_handle(stream)))
            self._stream = stream

    def zero(self, stream=None) -> None:
        """Set every byte to zero (`cuMemsetD8`)."""
        self.memset(0, 8, stream)

    @_in_own_context
    def fill(self, value, stream=None) -> None:
        """Set every element to `value` (converted to the buffer's dtype), on the device.

        Items of 1, 2 or 4 bytes use one `cuMemsetD8/16/32`; 8-byte items use two strided
        32-bit fills (`cuMemsetD2D32`), one per half; other sizes are refused.

        Raises
        ------
        ValueError
            For a strided view, a read-only buffer, or an item size with no fill.
        """
        self._check_writable()
        self._contiguous_or_raise("fill")
        raw = np.asarray(value, dtype=self.dtype).tobytes()
        size = self.itemsize
        if size in (1, 2, 4):
            word = int.from_bytes(raw, "little")
            self.memset(word, size * 8, stream)
            return
        if size != 8:
            raise ValueError(f"fill supports items of 1, 2, 4 or 8 bytes, not {size}")
        low = int.from_bytes(raw[:4], "little")
        high = int.from_bytes(raw[4:], "little")
        if low == high:
            self.memset(low, 32, stream)
            return
        if self.size == 0:
            return
        d = _ready()
        if stream is None:
            check(d.cuMemsetD2D32(self.ptr, 8, low, 1, self.size))
            check(d.cuMemsetD2D32(self.ptr + 4, 8, high, 1, self.size))
            self._stream = LEGACY_STREAM
        else:
            h = stream_handle(stream)
            check(d.cuMemsetD2D32Async(self.ptr, 8, low, 1, self.size, h))
            check(d.cuMemsetD2D32Async(self.ptr + 4, 8, high, 1, self.size, h))
            self._stream = stream

    # -- conversions -----------------------------------------------------------------

    def astype(self, dtype, stream=None) -> "DeviceBuffer":
        """A new buffer with the elements cast to `dtype` (NumPy's casting rules).

        The cast runs on the host: the buffer is copied down, cast by NumPy and copied up,
        which gives NumPy's exact semantics for every pair of dtypes.

        Cost
        ----
        Two transfers over PCIe/NVLink and a host cast: slow for large buffers. A device
        kernel (`cupric.kernels`) is the fast way for large arrays.
        """
        self._check_open()
        dt = normalize_dtype(dtype)
        host = self.to_numpy(stream)
        from .memory import to_device
        return to_device(np.ascontiguousarray(host.astype(dt)), stream=stream)

    # -- interchange ---------------------------------------------------------------

    @property
    def __cuda_array_interface__(self) -> dict:
        """CUDA Array Interface v3: pointer, shape, typestr, strides and the stream
        consumers must order after (see `stream`)."""
        self._check_open()
        s = self._stream
        return cai_dict(self.ptr, self.shape, self.strides, self.dtype, self.readonly,
                        None if s is None else (stream_handle(s) or LEGACY_STREAM))

    def __dlpack__(self, stream=None, *, max_version=None, dl_device=None, copy=None):
        """Export as a DLPack capsule (see `cupric.runtime.dlpack.to_dlpack`)."""
        from .dlpack import to_dlpack
        return to_dlpack(self, stream=stream, max_version=max_version, dl_device=dl_device,
                         copy=copy)

    def __dlpack_device__(self) -> tuple[int, int]:
        from .dlpack import dlpack_device
        return dlpack_device(self)


# Public names of three slots (class docstring): the member descriptors themselves.
DeviceBuffer.allocation = DeviceBuffer.__dict__["_alloc"]
DeviceBuffer.ordering_stream = DeviceBuffer.__dict__["_stream"]
DeviceBuffer.view_base = DeviceBuffer.__dict__["_base"]


class DeviceBox(DeviceBuffer):
    """One value in device memory (a 0-d buffer), read with `get` and written with `set`.

    Made by `device_box(value, dtype)`. Kernels receive it as a 0-d array.
    """

    __slots__ = ()

    def get(self, stream=None):
        """The value, copied to the host (waits for the copy)."""
        return self.to_numpy(stream)[()]

    def set(self, value, stream=None) -> None:
        """Write `value` (converted to the box's dtype)."""
        self.copy_from(np.asarray(value, dtype=self.dtype), stream=stream)

    def __repr__(self) -> str:
        return f"<DeviceBox dtype={self.dtype} {'closed' if self.closed else hex(self.ptr)}>"
