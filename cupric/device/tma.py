"""The tensor memory accelerator (TMA, sm_90): bulk copies of whole tiles between global
and shared memory (`cp.async.bulk.tensor`), described by a tensor map made on the host
(`cupric.runtime.tensor_map`) and completed on an mbarrier.

One thread issues a copy of a box (the tensor map's box shape) at element coordinates
(x, y) of a 2-D tensor (x the contiguous axis); elements outside the tensor read as zero,
so tiles past a matrix's edge need no special case. The bytes land in shared memory
swizzled as the tensor map says (the layout `wgmma` descriptors read) and are counted on
the barrier given, whose phase completes when they are all there. The tensor map travels
as a kernel argument: the 16 x u64 device array of a `TensorMap` (its `.array`); a thread
calls `tma.acquire(map)` before its first copy with it (the host wrote it through another
proxy).

What the copy engine accepts (found by probing sm_90 hardware; a copy outside it fails
the launch with CUDA_ERROR_ILLEGAL_INSTRUCTION or CUDA_ERROR_MISALIGNED_ADDRESS, which
names no copy):

- x times the element size is a multiple of 16 bytes (each box row starts on a 16-byte
  boundary of global memory), whatever the swizzle; y is free.
- Loads may start past any edge, negative coordinates included (those elements read as
  zero). Stores are clipped at the far edges (columns past the width, rows past the
  height are not written) but fault at any negative coordinate, even with the whole box
  outside the tensor.
- The box's shared-memory address is a multiple of 128 bytes. The swizzle is a function
  of the address (bits 4-6 XOR bits 7-9), so the layout `wgmma` descriptors read needs
  the box on a multiple of the swizzle's period: 256, 512 or 1024 bytes for 32, 64, 128.

The simulator refuses other copies with `CopyError`, and a kernel compiled with
`bounds_check=True` (or `debug=True`) stops with a DeviceAssertionError naming the line
(it takes the element size from the shared array's type).
"""

from __future__ import annotations

from ._intrinsic import Intrinsic, Namespace
from .errors import KernelError

__all__ = ["tma", "check_box", "check_copy", "CopyError", "SWIZZLES", "COORDINATE_BYTES",
           "SHARED_ALIGNMENT"]

#: Swizzle width in bytes -> the name of the driver's CUtensorMapSwizzle value.
SWIZZLES = {0: "CU_TENSOR_MAP_SWIZZLE_NONE", 32: "CU_TENSOR_MAP_SWIZZLE_32B",
            64: "CU_TENSOR_MAP_SWIZZLE_64B", 128: "CU_TENSOR_MAP_SWIZZLE_128B"}


def check_box(dims: tuple, row_bytes: int, itemsize: int, box, swizzle: int) -> tuple:
    """`box` as a tuple of two ints when the copy engine accepts it for a 2-D tensor of
    `dims` = (x, y) elements whose rows are `row_bytes` apart; ValueError otherwise.

    The rules (cuTensorMapEncodeTiled): 1 to 256 elements per box axis; the box's rows a
    multiple of 16 bytes and, with a swizzle, no wider than it; rows of the tensor a
    multiple of 16 bytes apart."""
    if swizzle not in SWIZZLES:
        raise ValueError(f"tensor map: swizzle must be one of {sorted(SWIZZLES)} (bytes), "
                         f"got {swizzle!r}")
    try:
        box = tuple(int(b) for b in box)
    except TypeError:
        raise ValueError(f"tensor map: box must be two ints (x, y), got {box!r}") from None
    if len(box) != 2 or not all(1 <= b <= 256 for b in box):
        raise ValueError(f"tensor map: box must be two ints (x, y) in 1..256, got {box!r}")
    inner = box[0] * itemsize
    if inner % 16:
        raise ValueError(f"tensor map: a box row of {box[0]} elements is {inner} bytes, not "
                         f"a multiple of 16")
    if swizzle and inner > swizzle:
        raise ValueError(f"tensor map: a box row of {inner} bytes is wider than the "
                         f"{swizzle}-byte swizzle")
    if not all(1 <= d < 2 ** 32 for d in dims):
        raise ValueError(f"tensor map: dimensions {dims} must lie in 1..2^32-1")
    if dims[1] > 1 and (row_bytes % 16 or row_bytes >= 2 ** 40):
        raise ValueError(f"tensor map: rows {row_bytes} bytes apart; TMA needs a multiple of "
                         f"16 bytes (pad the rows, e.g. k a multiple of 8 for 2-byte items)")
    return box


#: A copy's x coordinate times the element size is a multiple of this many bytes.
COORDINATE_BYTES = 16
#: A box's shared-memory address is a multiple of this many bytes.
SHARED_ALIGNMENT = 128


class CopyError(KernelError, ValueError):
    """A TMA copy the copy engine refuses (an x whose byte offset is not a multiple of 16,
    a store at a negative coordinate, a box in shared memory off a 128-byte boundary): on
    a GPU it fails the launch without saying which copy."""


def check_copy(x: int, y: int, itemsize: int, shared_address: int | None = None, *,
               store: bool = False, what: str = "tma copy", filename: str | None = None,
               line: int | None = None) -> tuple:
    """(x, y) as ints when the copy engine accepts a copy of elements of `itemsize` bytes
    at (x, y) (a store with `store`) whose box lies at byte `shared_address` of shared
    memory; `CopyError` (at `filename`:`line`) otherwise. The rules: the module's."""
    x, y = int(x), int(y)
    step = max(1, COORDINATE_BYTES // itemsize)
    if (x * itemsize) % COORDINATE_BYTES:
        problem = (f"x = {x} is {x * itemsize} bytes from the start of a row of {itemsize}-"
                   f"byte elements; TMA copies start at multiples of {COORDINATE_BYTES} bytes "
                   f"(x a multiple of {step}). Start the box at x rounded down to a multiple "
                   f"of {step} and offset within it")
    elif store and (x < 0 or y < 0):
        problem = (f"a store at ({x}, {y}): TMA stores clip at the far edges only and fault "
                   f"at a negative coordinate. Store the box at a non-negative corner (or "
                   f"the part inside the tensor with ordinary stores)")
    elif shared_address is not None and int(shared_address) % SHARED_ALIGNMENT:
        problem = (f"the box's shared-memory address {int(shared_address):#x} is not a "
                   f"multiple of {SHARED_ALIGNMENT} bytes")
    else:
        return x, y
    raise CopyError(f"{what}: {problem}; on a GPU the copy faults (an illegal instruction "
                    f"or a misaligned address)", filename=filename, line=line)


tma = Namespace(
    "tma",
    load_2d=Intrinsic(
        "tma.load_2d",
        "tma.load_2d(dst, dst_index, tensor_map, x, y, bar, bar_index): copies the box at "
        "element coordinates (x, y) (x the contiguous axis, x * element size a multiple of "
        "16 bytes; may lie past any edge, which reads as zero) of the tensor `tensor_map` "
        "describes into shared dst[dst_index] (128-byte aligned; for the layout wgmma "
        "reads, a multiple of 256, 512, 1024 bytes with a 32, 64, 128-byte swizzle) and "
        "counts its bytes on the mbarrier bar[bar_index] (cp.async.bulk.tensor.2d."
        "shared::cluster.global.tile.mbarrier::complete_tx::bytes; sm_90). One thread issues it."),
    store_2d=Intrinsic(
        "tma.store_2d",
        "tma.store_2d(tensor_map, x, y, src, src_index): copies the box at shared "
        "src[src_index] (128-byte aligned) to element coordinates (x, y) of the tensor (x * "
        "element size a multiple of 16 bytes; x and y >= 0: a negative coordinate faults); "
        "the parts past the far edges are not written (cp.async.bulk.tensor.2d.global."
        "shared::cta.bulk_group; "
        "sm_90). Follow with tma.commit() and tma.wait(0) before reusing src; call "
        "tma.fence_proxy_async() after writing src with ordinary stores."),
    commit=Intrinsic(
        "tma.commit",
        "tma.commit(): closes the group of this thread's tma.store_2d copies "
        "(cp.async.bulk.commit_group)."),
    wait=Intrinsic(
        "tma.wait",
        "tma.wait(n): waits until at most n (a constant) of this thread's store groups "
        "still read their shared-memory source (cp.async.bulk.wait_group.read n)."),
    fence_proxy_async=Intrinsic(
        "tma.fence_proxy_async",
        "tma.fence_proxy_async(): orders this thread's ordinary shared-memory accesses "
        "before later accesses of the asynchronous proxy (TMA copies, wgmma) "
        "(fence.proxy.async.shared::cta)."),
    acquire=Intrinsic(
        "tma.acquire",
        "tma.acquire(tensor_map): makes the tensor map, written to global memory by the "
        "host, visible to this thread's copies (fence.proxy.tensormap::generic.acquire.sys "
        "[map], 128). Each block calls it in the threads that issue copies, before the "
        "first copy with the map."),
    prefetch=Intrinsic(
        "tma.prefetch",
        "tma.prefetch(tensor_map): brings the tensor map into the copy engine's cache "
        "(prefetch.tensormap)."),
    shared_address=Intrinsic(
        "tma.shared_address",
        "tma.shared_address(smem, index) -> u32: the byte address of shared smem[index] "
        "in the block's shared window (what descriptors and copies take; use it to align "
        "tiles of dynamic shared memory to 1024 bytes)."),
)
