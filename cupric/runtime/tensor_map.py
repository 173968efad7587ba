"""Tensor maps for the tensor memory accelerator (TMA, sm_90): the 128-byte descriptor
`cuTensorMapEncodeTiled` makes of a 2-D array in device memory, which `cupric.device.tma`
copies read to move whole boxes (tiles) between global and shared memory.

`tensor_map(array, box)` encodes one and uploads it into a 16 x u64 device array (its
`.array`), which a kernel takes as an ordinary array argument: the copies address the
descriptor in global memory. The map refers to the array's memory without owning it; it
keeps the array object alive while the map is open.
"""

from __future__ import annotations

import numpy as np

from cupric.device.tma import SWIZZLES, check_box

__all__ = ["TensorMap", "tensor_map", "check_box", "SWIZZLES", "DATA_TYPES"]

#: Element kind -> the name of the driver's CUtensorMapDataType value. NumPy dtypes map to
#: their own kind; "bf16" names bfloat16 held as uint16 bit patterns.
DATA_TYPES = {"u8": "UINT8", "u16": "UINT16", "u32": "UINT32", "i32": "INT32",
              "u64": "UINT64", "i64": "INT64", "f16": "FLOAT16", "f32": "FLOAT32",
              "f64": "FLOAT64", "bf16": "BFLOAT16"}

_KIND_OF = {np.dtype(np.uint8): "u8", np.dtype(np.int8): "u8", np.dtype(np.uint16): "u16",
            np.dtype(np.int16): "u16", np.dtype(np.uint32): "u32", np.dtype(np.int32): "i32",
            np.dtype(np.uint64): "u64", np.dtype(np.int64): "i64",
            np.dtype(np.float16): "f16", np.dtype(np.float32): "f32",
            np.dtype(np.float64): "f64"}


class TensorMap:
    """An encoded tensor map in device memory (make one with `tensor_map`).

    Attributes
    ----------
    array : DeviceBuffer
        16 x u64, the descriptor: pass it to the kernel whose `tma` copies use the map.
    box : tuple of int
        (x, y) elements per copy.
    swizzle : int
        Bytes of the shared-memory swizzle the copies write (0, 32, 64, 128).
    dims : tuple of int
        (x, y) elements of the tensor.

    Thread safety
    -------------
    Immutable after creation; `close()` must not race launches that use it.
    """

    __slots__ = ("array", "box", "swizzle", "dims", "source", "words")

    def __init__(self, *args, **kwargs) -> None:
        raise TypeError("TensorMap has no public constructor; use "
                        "cupric.runtime.tensor_map.tensor_map(array, box)")

    @classmethod
    def _make(cls, array, box, swizzle, dims, source, words) -> "TensorMap":
        self = object.__new__(cls)
        self.array, self.box, self.swizzle = array, box, swizzle
        self.dims, self.source, self.words = dims, source, words
        return self

    def close(self, stream=None) -> None:
        """Free the device copy of the descriptor (in `stream` order when given)."""
        if self.array is not None:
            self.array.close(stream=stream) if stream is not None else self.array.close()
            self.array = None
            self.source = None

    def __enter__(self) -> "TensorMap":
        if self.array is None:
            raise ValueError("the tensor map is closed")
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.array is None else f"box={self.box}"
        return f"<TensorMap {self.dims[0]}x{self.dims[1]} {state} swizzle={self.swizzle}>"


def encode_tiled(ptr: int, dims: tuple, row_bytes: int, kind: str, box: tuple,
                 swizzle: int, l2_promotion: int = 256) -> np.ndarray:
    """The 16 u64 words of `cuTensorMapEncodeTiled` for a 2-D tensor at device address
    `ptr` (16-byte aligned) of `dims` = (x, y) elements of `kind` (a key of `DATA_TYPES`),
    rows `row_bytes` apart, with boxes of `box` elements. Elements outside the tensor
    read as zero."""
    from cupric.runtime.native import check, driver

    d = driver()
    promo = {0: "NONE", 64: "L2_64B", 128: "L2_128B", 256: "L2_256B"}[l2_promotion]
    u32, u64 = d.cuuint32_t, d.cuuint64_t
    encoded = check(d.cuTensorMapEncodeTiled(
        getattr(d.CUtensorMapDataType, f"CU_TENSOR_MAP_DATA_TYPE_{DATA_TYPES[kind]}"), 2,
        int(ptr), [u64(int(dims[0])), u64(int(dims[1]))], [u64(int(row_bytes))],
        [u32(int(box[0])), u32(int(box[1]))], [u32(1), u32(1)],
        d.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        getattr(d.CUtensorMapSwizzle, SWIZZLES[swizzle]),
        getattr(d.CUtensorMapL2promotion, f"CU_TENSOR_MAP_L2_PROMOTION_{promo}"),
        d.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE))
    return np.array([int(w) for w in encoded.opaque], dtype=np.uint64)


def tensor_map(array, box, *, swizzle: int = 128, kind: str | None = None,
               stream=None) -> TensorMap:
    """Encode a tensor map of the 2-D C-contiguous device `array` and upload it.

    Parameters
    ----------
    array : device array (DeviceBuffer, CuPy, PyTorch, any CAI/DLPack array)
        2-D, C-contiguous, starting on a 16-byte boundary, rows a multiple of 16 bytes.
    box : (int, int)
        Elements per copy along x (the contiguous axis) and y; 1..256 each.
    swizzle : {0, 32, 64, 128}
        The shared-memory swizzle the copies write (what `wgmma.descriptor` names).
    kind : str, optional
        Element kind (`DATA_TYPES`): default from the dtype; "bf16" for bfloat16 bits.
    stream : stream-like, optional
        The upload's stream.

    Returns
    -------
    TensorMap

    Raises
    ------
    TypeError
        Not a device array (a NumPy array: see `cupric.simulator.tma.tensor_map`), or a
        dtype with no TMA element type.
    ValueError
        Not 2-D, not C-contiguous, misaligned, or a box the copy engine refuses.
    CudaError
        The driver refused the encoding.

    Cost
    ----
    One driver call and a 128-byte host-to-device copy.
    """
    from cupric.runtime import intake, memory

    if isinstance(array, np.ndarray):
        raise TypeError("tensor_map takes a device array; for the simulator use "
                        "cupric.simulator.tma.tensor_map")
    info = intake.read(array, stream)
    if len(info.shape) != 2:
        raise ValueError(f"tensor_map: the array must be 2-D, got shape {tuple(info.shape)}")
    itemsize = info.dtype.itemsize
    rows, cols = int(info.shape[0]), int(info.shape[1])
    if cols > 1 and int(info.strides[1]) != itemsize:
        raise ValueError("tensor_map: the array's rows must be contiguous")
    row_bytes = int(info.strides[0]) if rows > 1 else cols * itemsize
    if info.ptr % 16:
        raise ValueError(f"tensor_map: the array starts at {info.ptr:#x}, not on a 16-byte "
                         f"boundary")
    if kind is None:
        kind = _KIND_OF.get(info.dtype)
        if kind is None:
            raise TypeError(f"tensor_map: no TMA element type for dtype {info.dtype}")
    elif kind not in DATA_TYPES:
        raise ValueError(f"tensor_map: kind must be one of {sorted(DATA_TYPES)}, got {kind!r}")
    box = check_box((cols, rows), row_bytes, itemsize, box, swizzle)
    words = encode_tiled(info.ptr, (cols, rows), row_bytes, kind, box, swizzle)
    device_words = memory.to_device(words, stream)
    return TensorMap._make(device_words, box, swizzle, (cols, rows), array, words)
