"""Debug-time bounds checking of array accesses (`@cupric.kernel(bounds_check=True)`, on
by default with `debug=True`): before each element access, every index is compared
(unsigned, so negative indices fail too) with its dimension. A failing thread prints the
array, the index, the shape and the Python line through vprintf and stops the kernel
with `__assertfail`, so the launch fails (CUDA_ERROR_ASSERT) instead of corrupting
memory. Before that it writes the same facts into the device-side error record
(`cupric.compiler.device_errors`), which the raised exception carries.
"""

from __future__ import annotations

from cupric.compiler.lowering.io import assert_fail, printf

__all__ = ["check_bounds"]


def check_bounds(cg, array, idx, node, name) -> None:
    """Branch to a failure block when any of the i64 indices `idx` is out of range."""
    b = cg.b
    at = array.type
    bad = None
    for k, i in enumerate(idx):
        out = b.icmp("uge", i, array.shape(k))
        bad = out if bad is None else b.binop("or", bad, out)
    if bad is None:
        return
    fail = cg.fn.append_block("bounds.fail")
    ok = cg.fn.append_block("bounds.ok")
    b.cbranch(bad, fail, ok)
    b.position_at_end(fail)
    label = name or "array"
    # First the record the host reads after the fault (kernel, line, index, extent)...
    from cupric.compiler.device_errors import KIND_BOUNDS, emit_record
    emit_record(cg, KIND_BOUNDS, node, label, idx, [array.shape(k) for k in range(at.ndim)])
    # ... then the printf, a fallback where no record is installed.
    line = getattr(node, "lineno", cg.src.tree.lineno)
    where = f"{cg.src.filename}:{line}"
    index = ", ".join(["%lld"] * len(idx))
    shape = ", ".join(["%lld"] * at.ndim)
    if at.ndim == 1:
        shape += ","
        index_text = index
    else:
        index_text = f"({index})"
    printf(cg, f"{where}: index {index_text} out of bounds for array '{label}' of shape "
           f"({shape}) (block (%u, %u, %u), thread (%u, %u, %u))\n",
           list(idx) + [array.shape(k) for k in range(at.ndim)] + _coordinates(cg))
    assert_fail(cg, f"index out of bounds for array '{label}'", node)
    b.unreachable()
    b.position_at_end(ok)


def _coordinates(cg):
    from cupric.compiler.lowering.indices import read_sreg
    return [read_sreg(cg, f"{reg}.{axis}") for reg in ("ctaid", "tid") for axis in "xyz"]


