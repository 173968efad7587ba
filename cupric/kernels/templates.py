"""Kernel templates: an elementwise kernel from a scalar function, in the spirit of CuPy's
ElementwiseKernel but written in Python. A CUDA elementwise kernel is a grid-stride loop
in which each thread moves a few neighbouring elements per array per trip (one 128-bit
access for 32-bit items), plus a tail for the elements past the last whole group; the
template writes that loop once, around any `@cupric.device_function` of the elements.

The loop is generated as kernel-language source (registered with `linecache`, so the
compiler, the simulator and error messages read it like any kernel) that uses
`cupric.device.unroll` and `vload`; the function is inlined, so the result compiles to
the same code as the same loop written by hand.
"""

from __future__ import annotations

import hashlib
import linecache

import cupric
from cupric.device import grid, gridsize, unroll, vload
from cupric.device.wide import WIDTHS

__all__ = ["elementwise", "elementwise_source"]

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
    call = ", ".join(f"_{p}[_k]" if p in arrays else p for p in params if p != out)
    one = ", ".join(f"{p}[_t]" if p in arrays else p for p in params if p != out)
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
        Called once per element with the kernel's parameters other than `out`, in their
        order: an array of `arrays` contributes its element, any other parameter is
        passed as it is (a scalar). Inlined into the loop.
    params : str or sequence of str
        The kernel's parameters in order (`"a, x, y, out"`); names may not start with
        an underscore (the loop's own names do).
    arrays : str or sequence of str, optional
        The parameters read elementwise (default: every parameter but `out`).
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
    if not getattr(fn, "_cupric_device_function", False):
        raise TypeError("elementwise: fn must be a @cupric.device_function, got "
                        f"{type(fn).__name__}")
    params = _names(params, "parameter")
    out = params[-1] if out is None else out
    if out not in params:
        raise ValueError(f"elementwise: out={out!r} is not one of the parameters {params}")
    arrays = tuple(p for p in params if p != out) if arrays is None else \
        _names(arrays, "array")
    unknown = [a for a in arrays if a not in params or a == out]
    if unknown:
        raise ValueError(f"elementwise: arrays {unknown} are not input parameters "
                         f"{tuple(p for p in params if p != out)}")
    if width not in WIDTHS:
        raise ValueError(f"elementwise: width must be one of {WIDTHS}, got {width!r}")
    if groups not in (1, 2):
        raise ValueError(f"elementwise: groups must be 1 or 2, got {groups!r}")
    name = name or f"{getattr(fn, '__name__', 'elementwise').strip('_')}_kernel"
    if not name.isidentifier():
        raise ValueError(f"elementwise: name {name!r} is not an identifier")
    text = elementwise_source(name, params, arrays, out, width, groups)
    # Named by its text, so the same kernel gets the same name in every process (the
    # disk cache's key includes it) and two texts never share a linecache entry.
    digest = hashlib.sha1(text.encode()).hexdigest()[:16]
    filename = f"<cupric.kernels.templates:{name}:{digest}>"
    # The compiler reads kernel source through linecache; an entry without a modification
    # time is never invalidated by checkcache.
    linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
    namespace = {"_fn": fn, "_W": width, "_SHIFT": width.bit_length() - 1, "grid": grid,
                 "gridsize": gridsize, "unroll": unroll, "vload": vload,
                 "__name__": __name__}
    exec(compile(text, filename, "exec"), namespace)
    py_func = namespace[name]
    py_func.__doc__ = doc
    py_func.__module__ = __name__
    return cupric.kernel(py_func)
