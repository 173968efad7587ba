"""Kernel templates: an elementwise kernel from a scalar function and a one-pass reduction
from a combine function, in the spirit of CuPy's ElementwiseKernel and ReductionKernel but
written in Python. A CUDA elementwise kernel is a grid-stride loop
in which each thread moves a few neighbouring elements per array per trip (one 128-bit
access for 32-bit items), plus a tail for the elements past the last whole group; the
template writes that loop once, around any `@cupric.device_function` of the elements.

The loop is generated as kernel-language source (registered with `linecache`, so the
compiler, the simulator and error messages read it like any kernel) that uses
`cupric.device.unroll` and `vload`; the function is inlined, so the result compiles to
the same code as the same loop written by hand. A reduction reduces each thread's share
in registers, each block with warp shuffles, and the per-block results in the block that
finishes last (a ticket taken with an atomic after a fence), so one launch gives the value.
"""

from __future__ import annotations

import hashlib
import linecache

import cupric
from cupric.device import (FULL_MASK, atomic, blockDim, blockIdx, grid, gridDim, gridsize,
                           shared, syncthreads, threadfence, threadIdx, unroll, vload, warp)
from cupric.device.wide import WIDTHS
from cupric.types import i32

__all__ = ["elementwise", "elementwise_source", "reduction", "reduction_source",
           "per_thread"]

def _names(spec, what: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in spec.split(",") if n.strip()) if isinstance(
        spec, str) else tuple(spec)
    for n in names:
        if not n.isidentifier() or n.startswith("_"):
            raise ValueError(f"elementwise: {what} name {n!r} is not a plain identifier "
                             "(and may not start with '_')")
    if len(set(names)) != len(names):
        raise ValueError(f"elementwise: {what} names repeat: {names}")
    return names


def elementwise_source(name: str, params, arrays, out: str, width: int,
                       groups: int) -> str:
    """The kernel-language source of `elementwise`'s kernel (see there); the function is
    `_fn`, the width `_W` and its log2 `_SHIFT`."""
    # `out` is an argument of the function only when it is also read (an update).
    call = ", ".join(f"_{p}[_k]" if p in arrays else p for p in params
                     if p != out or p in arrays)
    one = ", ".join(f"{p}[_t]" if p in arrays else p for p in params
                    if p != out or p in arrays)
    lines = [f"def {name}({', '.join(params)}):",
             f"    _n = len({out})",
             "    _groups = _n >> _SHIFT",
             "    _i0 = grid(1)",
             "    _i = _i0",
             "    _step = gridsize(1)"]

    def group(index: str, indent: str, suffix: str) -> tuple[list, list]:
        loads = [f"{indent}_{a}{suffix} = vload({a}, {index}, _W)" for a in arrays]
        calls = call.replace("[_k]", f"{suffix}[_k]")
        stores = [f"{indent}for _k in unroll(_W):",
                  f"{indent}    {out}[{index} + _k] = _fn({calls})"]
        return loads, stores

    if groups == 2:
        # Two groups a grid apart per trip: every load of both is issued before the
        # first store (the compiler does not unroll grid-stride loops by itself).
        lj, sj = group("_j", "        ", "_j")
        lh, sh = group("_h", "        ", "_h")
        loads = [x for a, b in zip(lj, lh) for x in (a, b)]
        lines += ["    while _i + _step < _groups:",
                  "        _j = _i * _W",
                  "        _h = (_i + _step) * _W",
                  *loads, *sj, *sh,
                  "        _i += 2 * _step"]
        lj, sj = group("_j", "        ", "_j")
        lines += ["    if _i < _groups:", "        _j = _i * _W", *lj, *sj]
    else:
        lj, sj = group("_j", "        ", "_j")
        lines += ["    while _i < _groups:", "        _j = _i * _W", *lj, *sj,
                  "        _i += _step"]
    if width > 1:
        # The n % width elements past the last group: one per thread, in a loop so that
        # a grid of fewer threads than that still covers them.
        lines += ["    _t = _groups * _W + _i0",
                  "    while _t < _n:",
                  f"        {out}[_t] = _fn({one})",
                  "        _t += _step"]
    return "\n".join(lines) + "\n"


def elementwise(fn, params, *, arrays=None, out=None, width: int = 4, groups: int = 1,
                name: str | None = None, doc: str | None = None):
    """A `@cupric.kernel` computing ``out[i] = fn(...)`` over 1-D arrays.

    Parameters
    ----------
    fn : cupric.DeviceFunction
        Called once per element with the kernel's parameters other than `out` (unless
        `out` is also read, see `arrays`), in their order: an array of `arrays`
        contributes its element, any other parameter is passed as it is (a scalar).
        Inlined into the loop.
    params : str or sequence of str
        The kernel's parameters in order (`"a, x, y, out"`); names may not start with
        an underscore (the loop's own names do).
    arrays : str or sequence of str, optional
        The parameters read elementwise (default: every parameter but `out`). `out` may
        be one of them: it is then read, passed to `fn` in its place among the
        parameters, and overwritten (an in-place update such as ``y = a * x + y``, which
        needs no second array aliasing the output).
    out : str, optional
        The array written (default: the last parameter); its length is the loop's.
    width : {1, 2, 4, 8}
        Neighbouring elements per thread and group: one `vload` per array, and stores to
        consecutive addresses, which become one vector access each when the launch finds
        the arrays 16-byte aligned. Elements past the last whole group are the tail, one
        per thread.
    groups : {1, 2}
        Groups per trip of the grid-stride loop: 2 issues the loads of two groups a grid
        apart before the stores (more bytes in flight per thread; a last single group
        follows the loop).
    name, doc : str, optional
        The kernel's name (default `fn`'s name + "_kernel") and docstring.

    Returns
    -------
    cupric kernel
        Launch with any grid: the loop covers the array; a grid of
        ceil(n / (width * block)) blocks makes one trip per thread.

    Raises
    ------
    TypeError
        `fn` is not a device function.
    ValueError
        Bad names, width or groups.

    Cost
    ----
    Building one is cheap (the source is generated, compiled on first launch as every
    kernel); callers keep the kernel rather than build one per call.
    """
    if not isinstance(fn, cupric.compiler.DeviceFunction):
        raise TypeError("elementwise: fn must be a @cupric.device_function, got "
                        f"{type(fn).__name__}")
    params = _names(params, "parameter")
    out = params[-1] if out is None else out
    if out not in params:
        raise ValueError(f"elementwise: out={out!r} is not one of the parameters {params}")
    arrays = tuple(p for p in params if p != out) if arrays is None else \
        _names(arrays, "array")
    unknown = [a for a in arrays if a not in params]
    if unknown:
        raise ValueError(f"elementwise: arrays {unknown} are not parameters {params}")
    if width not in WIDTHS:
        raise ValueError(f"elementwise: width must be one of {WIDTHS}, got {width!r}")
    if groups not in (1, 2):
        raise ValueError(f"elementwise: groups must be 1 or 2, got {groups!r}")
    name = name or f"{getattr(fn, '__name__', 'elementwise').strip('_')}_kernel"
    if not name.isidentifier():
        raise ValueError(f"elementwise: name {name!r} is not an identifier")
    text = elementwise_source(name, params, arrays, out, width, groups)
    return _kernel(name, text, doc, _fn=fn, _W=width, _SHIFT=width.bit_length() - 1)


def per_thread(body, params, *, count: str, name: str = "kernel", doc: str | None = None):
    """A kernel running ``body(t, *params)`` once per item t < `count`, one thread each.

    CUDA's one-thread-per-item launch: thread `t = grid(1)` works on item t when it exists
    (the grid may overshoot). gpu_rand's fills (one thread per generator stream) use it.

    Parameters
    ----------
    body : cupric.DeviceFunction
        ``body(t, *params)``: the work of item t.
    params : str or sequence of str
        The kernel's parameters, passed on to `body`.
    count : str
        The number of items, an expression of the parameters (``"states.shape[1]"``).
    name, doc : str, optional

    Returns
    -------
    cupric kernel
    """
    if not isinstance(body, cupric.compiler.DeviceFunction):
        raise TypeError("per_thread: body must be a @cupric.device_function, got "
                        f"{type(body).__name__}")
    params = _names(params, "parameter")
    import ast
    try:
        tree = ast.parse(count, mode="eval")
    except SyntaxError:
        raise ValueError(f"per_thread: count={count!r} is not an expression") from None
    free = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} - set(params)
    if free:
        raise ValueError(f"per_thread: count={count!r} names {sorted(free)}, which are "
                         f"not parameters {params}")
    args = ", ".join(params)
    text = (f"def {name}({args}):\n"
            "    _t = grid(1)\n"
            f"    if _t < {count}:\n"
            f"        _body(_t, {args})\n")
    return _kernel(name, text, doc, _body=body)


def _kernel(name: str, text: str, doc, **values):
    """The `@cupric.kernel` defined by source `text` (a function `name`), its free names
    bound to the device library and `values`."""
    # Named by its text, so the same kernel gets the same name in every process (the
    # disk cache's key includes it) and two texts never share a linecache entry.
    digest = hashlib.sha1(text.encode()).hexdigest()[:16]
    filename = f"<cupric.kernels.templates:{name}:{digest}>"
    # The compiler reads kernel source through linecache; an entry without a modification
    # time is never invalidated by checkcache.
    linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
    namespace = dict(_LIBRARY, __name__=__name__, **values)
    exec(compile(text, filename, "exec"), namespace)
    py_func = namespace[name]
    py_func.__doc__ = doc
    py_func.__module__ = __name__
    return cupric.kernel(py_func)


#: What generated kernels may name besides their own values.
_LIBRARY = {"FULL_MASK": FULL_MASK, "atomic": atomic, "blockDim": blockDim,
            "blockIdx": blockIdx, "grid": grid, "gridDim": gridDim, "gridsize": gridsize,
            "shared": shared, "syncthreads": syncthreads, "threadfence": threadfence,
            "threadIdx": threadIdx, "unroll": unroll, "vload": vload, "warp": warp,
            "i32": i32}


# -- reductions -----------------------------------------------------------------------------

@cupric.device_function
def _first(x, y):
    return x


#: A warp's butterfly: every lane ends with the combination of all 32 lanes' `v`.
_BUTTERFLY = """{pad}d = 16
{pad}while d > 0:
{pad}    v = _combine(v, warp.shfl_xor(FULL_MASK, v, d))
{pad}    d >>= 1
"""


def _across_warps(pad: str) -> list:
    """Lane 0 of each warp parks the warp's `v` in `slots`; warp 0 then combines them
    (lanes past the warps start from `init`)."""
    return [f"{pad}if lane == 0:",
            f"{pad}    slots[w] = v",
            f"{pad}syncthreads()",
            f"{pad}if w == 0:",
            f"{pad}    v = slots[lane] if lane < _WARPS else init",
            _BUTTERFLY.format(pad=pad + "    ").rstrip("\n")]


def reduction_source(name: str, width: int, warps: int) -> str:
    """The kernel-language source of `reduction`'s kernel (see there)."""
    lanes = range(width)
    text = [f"def {name}(x, y, init, out, partials, counter):",
            "    slots = shared.array(_WARPS, _acc)",
            "    is_last = shared.array(1, i32)",
            "    t = threadIdx.x",
            "    lane = t & 31",
            "    w = t >> 5",
            "    n = len(x)",
            "    full = n >> _SHIFT",
            "    i = grid(1)",
            "    step = gridsize(1)",
            # One accumulator per lane of a group: independent chains of `combine`.
            *[f"    v{k} = init" for k in lanes]]
    if width > 1:
        # Two groups a grid apart per trip: two wide loads per array in flight.
        text += ["    while i + step < full:",
                 "        j = i * _W",
                 "        h = (i + step) * _W",
                 "        xj = vload(x, j, _W)",
                 "        yj = vload(y, j, _W)",
                 "        xh = vload(x, h, _W)",
                 "        yh = vload(y, h, _W)",
                 *[f"        v{k} = _combine(_combine(v{k}, _acc(_map(xj[{k}], yj[{k}]))), "
                   f"_acc(_map(xh[{k}], yh[{k}])))" for k in lanes],
                 "        i += 2 * step",
                 "    if i < full:",
                 "        j = i * _W",
                 "        xj = vload(x, j, _W)",
                 "        yj = vload(y, j, _W)",
                 *[f"        v{k} = _combine(v{k}, _acc(_map(xj[{k}], yj[{k}])))"
                   for k in lanes],
                 "    k = full * _W + grid(1)",
                 "    while k < n:",
                 "        v0 = _combine(v0, _acc(_map(x[k], y[k])))",
                 "        k += step"]
    else:
        text += ["    while i < n:",
                 "        v0 = _combine(v0, _acc(_map(x[i], y[i])))",
                 "        i += step"]
    # Pairwise combination of the accumulators (a balanced tree, as written by hand).
    names = [f"v{k}" for k in lanes]
    while len(names) > 1:
        names = [f"_combine({a}, {b})" for a, b in zip(names[::2], names[1::2])]
    text += [f"    v = {names[0]}",
             "    # Block: warps reduce by butterfly, then warp 0 reduces the warps' results.",
             "    d: i32 = 16  # 32-bit shuffle distances (an i64 local costs two ops)",
             _BUTTERFLY.format(pad="    ").rstrip("\n").replace("    d = 16\n", "", 1),
             *_across_warps("    "),
             "        if lane == 0:",
             "            partials[blockIdx.x] = v",
             "            # Publish the partial before taking a ticket: the last block reads it.",
             "            threadfence()",
             "            ticket = atomic.add(counter, 0, 1)",
             "            is_last[0] = 1 if ticket == gridDim.x - 1 else 0",
             "    syncthreads()",
             "    if is_last[0] != 0:",
             "        threadfence()",
             "        v = init",
             "        j = t",
             "        while j < gridDim.x:",
             "            v = _combine(v, partials[j])",
             "            j += blockDim.x",
             _BUTTERFLY.format(pad="        ").rstrip("\n"),
             "        syncthreads()",
             *_across_warps("        "),
             "            if lane == 0:",
             "                out[0] = v",
             "                # Leave the counter at zero: the next launch reuses the workspace.",
             "                counter[0] = 0"]
    return "\n".join(text) + "\n"


def reduction(combine, map=None, *, acc, width: int = 4, block: int = 256,
              name: str = "reduce_kernel", doc: str | None = None):
    """A one-pass reduction kernel ``out[0] = combine(init, map(x[0], y[0]), ...)``.

    Parameters
    ----------
    combine : cupric.DeviceFunction
        Associative and commutative on accumulator values, with the launch's `init` as
        its identity (the order of combination is the kernel's, fixed for a geometry:
        results are deterministic).
    map : cupric.DeviceFunction, optional
        ``map(x_element, y_element)`` -> the value reduced (converted to `acc`); default
        the x element (pass x as y then; y's loads are then dead and compiled away).
    acc : cupric scalar type
        The accumulator type (`cupric.types.f32`, `i64`, ...): partials, shuffles and
        `out` hold it.
    width : {1, 2, 4, 8}
        Neighbouring elements per thread and group (`vload`; one accumulator each); 1
        reads one element per trip.
    block : int
        The threads per block the kernel must be launched with (a multiple of 32, at
        most 1024): sizes the shared slots of the cross-warp step.
    name, doc : str, optional

    Returns
    -------
    cupric kernel
        ``kern[blocks, block](x, y, init, out, partials, counter)`` with 1-D arrays: `out`
        (1 element), `partials` (`blocks` elements of `acc`) and `counter` (1 uint32,
        zero before the first launch, left at zero after each).

    Raises
    ------
    TypeError
        `combine` or `map` is not a device function.
    ValueError
        Bad width or block.
    """
    for what, fn in (("combine", combine), ("map", map)):
        if fn is not None and not isinstance(fn, cupric.compiler.DeviceFunction):
            raise TypeError(f"reduction: {what} must be a @cupric.device_function, got "
                            f"{type(fn).__name__}")
    if width not in WIDTHS:
        raise ValueError(f"reduction: width must be one of {WIDTHS}, got {width!r}")
    if not (isinstance(block, int) and 32 <= block <= 1024 and block % 32 == 0):
        raise ValueError(f"reduction: block must be a multiple of 32 in 32..1024, got "
                         f"{block!r}")
    if not name.isidentifier():
        raise ValueError(f"reduction: name {name!r} is not an identifier")
    warps = block // 32
    return _kernel(name, reduction_source(name, width, warps), doc, _combine=combine,
                   _map=_first if map is None else map, _acc=acc, _W=width,
                   _SHIFT=width.bit_length() - 1, _WARPS=warps)
