"""CPU lane: every ready kernel compiles through libNVVM for sm_90, with the code shape
its performance depends on: no local memory, no register spills in the cubin, read-only
inputs through the non-coherent cache (ld.global.nc), 128-bit global accesses in the
bandwidth-bound kernels (for 16-byte aligned arrays), shuffles in reductions, vector
shared-memory loads in the GEMM inner loop. Kernels whose intrinsics have no lowering
yet are skipped."""

from __future__ import annotations

import numpy as np
import pytest

from kernels_helpers import require_lowering

A1 = "Array[{}, 1, 'C']"
A2 = "Array[{}, 2, 'C']"


def _ptx(kern, signature: str) -> str:
    from cupric.compiler.toolchain import ToolchainNotFoundError
    try:
        return kern.inspect_ptx(signature, arch="sm_90")
    except ToolchainNotFoundError as exc:
        pytest.skip(f"no libNVVM here: {exc}")


def _cases():
    from cupric.kernels import (elementwise, gemm, histogram, image, reduce, scan, sort,
                                transpose)
    f4, u4, i4 = A1.format("f32"), A1.format("u32"), A1.format("i32")
    return [
        # module, kernel, signature, loads that must go through ld.global.nc, extra checks
        ("elementwise", elementwise.vecadd_kernel, f"{f4}, {f4}, {f4}", 4,
         ("ld.global.nc.v4.f32", "st.global.v4.f32")),
        ("elementwise", elementwise.saxpy_kernel, f"f32, {f4}, {f4}, {f4}", 4,
         ("fma.rn", "ld.global.nc.v4.f32")),
        ("elementwise", elementwise.saxpy_update_kernel, f"f32, {f4}, {f4}", 2,
         ("fma.rn", "ld.global.v4.f32", "st.global.v4.f32")),
        ("elementwise", elementwise.copy_kernel, f"{A1.format('f64')}, {A1.format('f64')}",
         2, ("ld.global.nc.v2.f64",)),
        ("image", image.rgba2gray_kernel, f"{u4}, {A1.format('u8')}", 2,
         ("ld.global.nc.v4.u32",)),
        ("image", image.mandelbrot_kernel, f"{A2.format('u8')}, f64, f64, f64, f64, i32", 0,
         ()),
        ("reduce", reduce.reduce_kernel("sum", np.float32),
         f"{f4}, {f4}, f32, {f4}, {f4}, {u4}", 2,
         ("ld.global.nc.v4.f32", "shfl.sync.bfly", "atom.global.add")),
        ("reduce", reduce.arg_reduce_kernel("argmax", np.float64),
         f"{A1.format('f64')}, f64, {A1.format('i64')}, {A1.format('f64')}, "
         f"{A1.format('i64')}, {u4}", 1, ("shfl.sync.bfly",)),
        ("scan", scan.scan_kernel(np.float32),
         f"{f4}, {f4}, bool, i32, {u4}, {i4}, {f4}, {f4}", 15,
         ("shfl.sync.up", "ld.acquire.gpu", "st.release.gpu")),
        ("transpose", transpose.transpose_kernel(np.float32), f"{A2.format('f32')}, "
         f"{A2.format('f32')}, i64, i64", 4, ("ld.shared",)),
        ("transpose", transpose.transpose_kernel(np.float32, flat=True), f"{f4}, {f4}, i64, "
         "i64", 4, ("ld.shared",)),
        ("gemm", gemm.blocked_kernel(np.float32),
         f"{f4}, {f4}, {f4}, i32, i32, i32, i32, i32, i32, f32, f32", 8,
         ("ld.shared.v4.f32", "fma.rn.f32")),
        ("gemm", gemm.blocked_kernel(np.float64, flat=False),
         f"{A2.format('f64')}, {A2.format('f64')}, {A2.format('f64')}, i32, i32, i32, "
         "i32, i32, i32, f64, f64", 8, ("ld.shared.v2.f64", "fma.rn.f64")),
        ("gemm", gemm.tiled_kernel(np.float64),
         f"{A2.format('f64')}, {A2.format('f64')}, {A2.format('f64')}, f64, f64", 2, ()),
        ("sort", sort.bitonic_sort_shared_kernel, u4, 0, ("bar.sync",)),
        ("sort", sort.radix_scatter_kernel, f"{u4}, {u4}, {u4}, u32, i64", 2,
         ("match.any.sync", "popc")),
        *(("sort", sort.tile_sort_kernel(np.float32, items), f"{u4}, {u4}, u32", 1,
           ("match.any.sync", "popc", "bar.sync")) for items in sort.TILE_SORT_ITEMS),
        ("sort", sort.radix_histogram_kernel, f"{u4}, {u4}, u32, i64", 8,
         ("atom.shared.add|red.shared.add",)),
        ("histogram", histogram.histogram_kernel(np.float32),
         f"{f4}, {f4}, f32, f32, f32, {A1.format('i64')}", 1,
         ("atom.shared.add|red.shared.add",)),
    ]


@pytest.mark.parametrize("index", range(21))
def test_kernel_ptx(index):
    module, kern, signature, nc_loads, needles = _cases()[index]
    require_lowering(module)
    ptx = _ptx(kern, signature)
    assert ".local" not in ptx, f"{kern.__name__} spills to local memory"
    assert ptx.count("ld.global.nc") >= nc_loads, \
        f"{kern.__name__}: read-only inputs should load through ld.global.nc"
    for needle in needles:  # "a|b": either instruction
        assert any(n in ptx for n in needle.split("|")), \
            f"{kern.__name__}: expected {needle!r} in the PTX"
    # The assembler's report: no register spills (they would cost local-memory traffic).
    usage = kern.compile(signature, arch="sm_90").resource_usage
    for name, resources in usage.items():
        assert resources.spill_stores == 0 and resources.spill_loads == 0, \
            f"{name} spills registers: {resources}"
