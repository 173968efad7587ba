"""Fill plans: the per-call work of a `Generator` fill into a device array, found once.

A device fill is one kernel launch over the Generator's S streams, one CUDA thread per
stream: ``(states, out, scalars...)``. The general path (`Generator._fill`) reads `out`
through the runtime's intake layer, wraps it in a DeviceBuffer view and launches through
the kernel's general launch (the 2-D states array keeps it off the kernels' generated
launchers). Once such a fill ran on the GPU, a `FillPlan` keeps what does not depend on
`out`, for one (distribution, array class, array dtype) of one Generator on the stream
its states are used on (the default one, or a cupric `Stream` of a `CudaBackend`): the
launch handle of the kernel variant the general path chose (16-byte aligned arrays that
do not overlap), the grid, and the ABI values of the states. A later fill into an array
of that class and dtype makes the checks of its array kind in a few attribute reads and
goes to the compiled launch in one call. Whatever a plan does not take (a closed,
read-only, non-contiguous, empty or unaligned array, one that overlaps the states, closed
states or stream) takes the general path, which makes every check again and raises its
errors: the values, the stream ordering and the errors are the general path's.
"""

from __future__ import annotations

import numpy as np

from . import distributions as _dist
from .backends import BLOCK, CudaBackend, _blocks

__all__ = ["FillPlan", "FAMILIES", "RETRY", "make_plan", "launch_handle"]

#: Kernel kind -> the plan family that launches it. The float fills' kernels take
#: ``(states, out, shift, scale)``, the integer fills' ``(states, out, low, span,
#: threshold)`` (span up to 2^32: "integers32", beyond: "integers64"), the bits fills'
#: ``(states, out)``.
FAMILIES = {**{f"{family}_f{bits}": family for family in ("uniform", "normal", "exponential")
               for bits in (32, 64)},
            "bits32": "bits", "bits64": "bits", "integers32": "integers32",
            "integers32_to64": "integers32", "integers64": "integers64"}

#: `make_plan`'s answer when this call's arrays were not the plan's case (unaligned, or
#: overlapping the states): no plan now, ask again at the next general fill.
RETRY = object()

_FLOATS = frozenset({np.dtype(np.float32), np.dtype(np.float64)})
_WORDS = frozenset({np.dtype(np.uint32), np.dtype(np.uint64)})


class FillPlan:
    """One planned fill: ``fill(out, args)`` launches with the kernel's scalar arguments
    `args` and returns True, or returns False having done nothing (the caller takes the
    general path).

    Attributes
    ----------
    fill : callable
        ``(out, args) -> bool``.
    stream : cupric.runtime.Stream or None
        The stream of the backend whose fills it takes (None: the default one).
    scalar : type
        The element type's NumPy scalar type, which turns float distribution parameters
        into kernel arguments as the general path does.
    standard : tuple
        The arguments of the standard distribution (``(scalar(0.0), scalar(1.0))`` for
        the float fills: shift and scale; ``()`` for bits).
    bounds : tuple of int
        The element type's smallest and largest values (integer fills).

    Thread safety
    -------------
    `arguments` and `integer_arguments` remember their last answer in one tuple, replaced
    whole: threads sharing a plan read either answer, each consistent.
    """

    __slots__ = ("fill", "stream", "scalar", "standard", "bounds", "_last")

    def __init__(self, fill, dtype: np.dtype, stream=None) -> None:
        self.fill = fill
        self.stream = stream
        self.scalar = dtype.type
        if dtype.kind == "f":
            self.standard = (dtype.type(0.0), dtype.type(1.0))
            self.bounds = None
        else:
            self.standard = ()
            info = np.iinfo(dtype)
            self.bounds = (int(info.min), int(info.max))
        self._last = (None, None, None)

    def arguments(self, a, b, affine: bool) -> tuple:
        """``(shift, scale)`` of the element type from distribution parameters `a`, `b`,
        converted as the general path converts them: ``(a, b - a)`` with both converted
        first when `affine` (uniform's low and high), else ``(a, b)``.

        The last answer is kept for the same two parameter objects (identity, not
        equality: ``-0.0 == 0.0``, and a float object never changes its value), as a
        loop passing its constants gives them.
        """
        last = self._last
        if a is last[0] and b is last[1]:
            return last[2]
        t = self.scalar
        if affine:
            shift = t(a)
            args = (shift, t(b) - shift)
        else:
            args = (t(a), t(b))
        self._last = (a, b, args)
        return args

    def integer_arguments(self, low: int, high: int):
        """``(low, span, threshold)`` as the general path's `Generator.integers` makes
        them (NumPy uint64: low and span modulo 2^64, Lemire's threshold for 32- or
        64-bit draws) for the range [low, high) of ints; None where that path raises
        (an empty range, or one the element type does not hold). The last answer is
        kept for equal ints."""
        last = self._last
        if low == last[0] and high == last[1]:
            return last[2]
        smallest, largest = self.bounds
        if not (low < high and smallest <= low and high - 1 <= largest):
            return None
        span = high - low
        threshold = _dist.lemire_threshold(span, 64 if span > 1 << 32 else 32)
        args = (np.uint64(low % 2**64), np.uint64(span % 2**64), np.uint64(threshold))
        self._last = (low, high, args)
        return args


def launch_handle(kern, args: tuple):
    """The runtime launch handle (`PreparedLaunch`) of the variant of `kern` that its
    general launch uses for `args` when their arrays are 16-byte aligned and do not
    overlap: the same compiled code, already loaded by the fill that just ran it.

    `Kernel.variant_for` reads the kernel's variant table, the one lookup the general
    launch makes itself; `Kernel.specialize` would type the kernel first, which a fill
    whose code came from the disk cache never needed.
    """
    spec = kern.variant_for(args, noalias=True, aligned=True)
    return spec.prepared()


def _gpu_launches() -> bool:
    """Whether kernel launches run on the one GPU of this machine (not the simulator, no
    device checks to make): the case plans are made for."""
    from cupric._config import simulator_requested
    from cupric.runtime import device_count, driver_available

    return not simulator_requested() and driver_available() and device_count() == 1


def make_plan(kind: str, algorithm, n_streams: int, target, args: tuple, out,
              dtype: np.dtype):
    """The `FillPlan` for fills like the one that just ran: `kind` launched by `target`
    with `args` ``(states, flat view of out, scalars...)``, `out` as the caller gave it,
    `dtype` its element type as the general path read it.

    Returns None where fills of this key are never planned (another backend, a stream
    other than None or a cupric `Stream`, the simulator, several GPUs, an array kind or
    dtype plans do not read) and `RETRY` where only this call's arrays were not the
    plan's case.
    """
    from cupric.runtime.stream import Stream

    stream = getattr(target, "stream", None)
    if kind not in FAMILIES or target.__class__ is not CudaBackend or \
            not (stream is None or stream.__class__ is Stream) or not _gpu_launches():
        return None
    states, flat = args[0], args[1]
    raw_bits = FAMILIES[kind] in ("bits", "integers32", "integers64")  # a uint view
    if flat.dtype not in (_WORDS if raw_bits else _FLOATS) or not states.is_c_contiguous:
        return None
    from cupric.runtime.array_adapters import ADAPTERS, adapter_for
    from cupric.runtime.intake import OWN_BUFFERS

    cls = out.__class__
    adapter = None
    if cls not in OWN_BUFFERS:
        adapter = ADAPTERS.get(cls) or adapter_for(cls)
        if adapter is None or adapter.kind not in ("torch", "cupy") or \
                (adapter.kind == "cupy" and not hasattr(out, "_c_contiguous")):
            return None
    low = states.ptr
    high = low + states.nbytes
    p = flat.ptr
    if (p | low) & 15 or not flat.size or (p < high and low < p + flat.nbytes):
        return RETRY  # not the variant a plan launches; a later fill may be
    from .device import compiled_kernel

    launch = launch_handle(compiled_kernel(kind, algorithm), args)
    steps = tuple(s // states.itemsize for s in states.strides)
    head = (low, *states.shape, *steps)
    if adapter is None:
        array_kind, extra = _BUFFER, None
    elif adapter.kind == "torch":
        array_kind, extra = _TORCH, adapter.strided
    else:
        array_kind, extra = _CUPY, adapter.current_stream
    fill = _fill_function(array_kind, launch, _blocks(n_streams), stream, head, low, high,
                          states.allocation, flat.itemsize, extra, len(args) - 2)
    return FillPlan(fill, dtype, stream)


_BUFFER, _TORCH, _CUPY = "buffer", "torch", "cupy"


def _fill_function(kind, launch, grid, stream, head, low, high, states_alloc, itemsize,
                   extra, arity):
    """A plan's ``fill(out, args)`` for arrays of `kind`, launching on `stream`
    (None or an open cupric `Stream`; a closed one goes the general way to its error).

    It makes, in this order, the checks the general path makes for that kind (open,
    writable, on the GPU, C-contiguous, not empty), then those of the planned variant
    (16-byte aligned, no overlap with the states), orders `stream` after the array's
    producer where the intake layer would (`cupric.runtime.intake.as_buffer`), and
    launches with the flattened ABI values of the states (pointer, shape, steps) and of
    `out` as one vector (pointer, length, step 1), then the kernel's `arity` scalars
    `args`.

    - DeviceBuffers (of the plan's class): on a stream, after the stream the buffer was
      made on, if another; on the default stream nothing is ordered.
    - PyTorch tensors: CUDA, strided (`extra` is ``torch.strided``), no autograd; others
      go the general way and meet its errors. PyTorch's interface names no stream.
    - CuPy arrays: after CuPy's current stream (`extra` reads its handle; None: the
      interface names none), nothing where both are default streams.
    """
    from cupric.runtime.intake import order_after, stream_handle
    sp, words, n_streams, s0, s1 = head

    def fill(out, args):
        if states_alloc.closed or stream is not None and stream.closed:
            return False
        if kind is _BUFFER:
            if out.allocation.closed or out.readonly or \
                    not (out.ndim == 1 and out.strides[0] == itemsize or out.is_c_contiguous):
                return False
            n = out.size
            p = out.ptr
        elif kind is _TORCH:
            if not out.is_cuda or out.requires_grad or out.layout is not extra or \
                    not out.is_contiguous():
                return False
            n = out.numel()
            p = out.data_ptr()
        else:
            if not out._c_contiguous:
                return False
            n = out.size
            p = out.data.ptr
        if not n or p & 15 or (p < high and low < p + n * itemsize):
            return False
        if stream is not None and kind is _BUFFER:
            made_on = out.ordering_stream
            if made_on is not None and made_on is not stream:
                order_after(stream, (stream_handle(made_on) or 1,))
        elif kind is _CUPY and extra is not None:
            producer = extra() or 1
            if producer != 1 or stream is not None:
                order_after(stream, (producer,))
        # Spelled out per count of scalars: a call with *args would build a tuple of all
        # fourteen values first.
        if arity == 2:
            launch(grid, BLOCK, stream, 0, sp, words, n_streams, s0, s1, p, n, 1, args[0],
                   args[1])
        elif arity == 3:
            launch(grid, BLOCK, stream, 0, sp, words, n_streams, s0, s1, p, n, 1, args[0],
                   args[1], args[2])
        else:
            launch(grid, BLOCK, stream, 0, sp, words, n_streams, s0, s1, p, n, 1, *args)
        return True

    return fill
