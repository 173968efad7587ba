"""Host cost of a small device allocation and its free: cupric beside PyTorch and CuPy.

Every row allocates a 16 KiB float32 buffer and frees it, 500 times per batch, with a
synchronize between batches outside the timed region; the rows take turns batch by batch
and the median batch is reported (microseconds per allocate + free), beside one
continuous run of 20,000. Rows:

* cupric `empty(..., stream=s)` + `close()` (stream-ordered: a block of the allocation
  cache freed on that stream, else `cuMemAllocAsync`), the same buffer dropped instead of
  closed (back into the cache from its finalizer), the first row with the cache off,
  `empty` + `close` without a stream (`cuMemAlloc`/`cuMemFree`), and the stream-ordered
  row with the compiled path turned off (every driver call through cuda.bindings);
* the floors: the compiled entry points alone (`cuMemAllocAsync` + `cuMemFreeAsync` on the
  default pool; `cuMemAllocFromPoolAsync` + `cuMemFreeAsync` on a pool whose release
  threshold keeps every freed byte, the driver's own reuse; the cache's take + put), and
  `cuMemAllocAsync` + `cuMemFreeAsync` through cuda.bindings;
* PyTorch `torch.empty` (caching allocator) and CuPy `cupy.empty` (its default pool, and
  its stream-ordered `MemoryAsyncPool`);
* `cupric.cublas.matmul(a, b)` on 64x64 float32, allocating its result and with `out=`,
  beside PyTorch `A @ B` and CuPy `A @ B` (both allocating).

Before timing, the stream-ordered pool's used bytes are read; after (the allocation cache
released), they must be back where they started (``pool_used_delta`` in the results), and
the cupric products are checked against NumPy.

    python3 benchmarks/alloc.py [--json PATH]
"""

from __future__ import annotations

import json
import statistics
import time

import numpy as np

from _common import assert_correct, table

NBYTES = 16384
ITEMS = NBYTES // 4
SMALL = 64
BATCHES, PER_BATCH, CONTINUOUS = 15, 500, 20000


def _python_batch(fn):
    def batch(calls):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        return time.perf_counter() - t0
    return batch


def _toggled(fast, enabled: bool, fn):
    """A batch of `fn` with the allocation cache switched on or off around it."""
    def batch(calls):
        previous = bool(fast.cache(None, None)[0])
        fast.cache(enabled, None)
        try:
            return _python_batch(fn)(calls)
        finally:
            fast.cache(previous, None)
    return batch


def _rows(results: dict) -> list:
    from cupric import runtime as rt
    from cupric.runtime import allocation as al  # the compiled path (`_fast`) and its cache
    from cupric.runtime import memory as m
    from cupric.runtime import pool as pl

    f32 = np.float32
    stream = rt.Device(0).create_stream(non_blocking=True)
    results["_keep"].append(stream)
    m.empty(ITEMS, f32, stream=stream).close()  # the first allocation sets up the path
    fast = getattr(al, "_fast", None)
    cache = fast is not None and hasattr(fast, "cache")
    rows = [
        ("cupric empty(stream=s) + close()", lambda: m.empty(ITEMS, f32, stream=stream).close()),
        ("cupric empty(stream=s), dropped", lambda: m.empty(ITEMS, f32, stream=stream)),
    ]
    if cache:
        rows.append(("cupric empty(stream=s) + close(), cache off",
                     _toggled(fast, False, lambda: m.empty(ITEMS, f32, stream=stream).close())))
    rows.append(("cupric empty() + close(), cuMemAlloc", lambda: m.empty(ITEMS, f32).close()))
    h = stream.ptr
    if fast is not None and hasattr(fast, "alloc"):
        def without_compiled_path(calls):
            al._fast = None
            try:
                return _python_batch(lambda: m.empty(ITEMS, f32, stream=stream).close())(calls)
            finally:
                al._fast = fast

        def entry_only():
            _err, ptr, device = fast.alloc(NBYTES, h, 0)
            fast.free(ptr, h, device)
        rows += [("cupric empty(stream=s) + close(), via cuda.bindings", without_compiled_path),
                 ("floor: compiled cuMemAllocAsync + cuMemFreeAsync", entry_only)]
        # The driver's own reuse, in C: a pool that keeps every freed byte reserved.
        keeper = pl.create_pool(0, pl.PoolOptions(release_threshold=2**64 - 1))
        results["_keep"].append(keeper)
        pool_ptr = keeper._ptr

        def pool_only():
            _err, ptr, device = fast.alloc(NBYTES, h, pool_ptr)
            fast.free(ptr, h, device)
        rows.append(("floor: compiled cuMemAllocFromPoolAsync + cuMemFreeAsync, pool "
                     "keeping all", pool_only))
    else:
        results["compiled_path"] = "absent (this cupric has no compiled allocation path)"
    if cache:
        def cache_only():
            _err, ptr, device, ctx = fast.cached_alloc(NBYTES, h)
            fast.put(ptr, NBYTES, h, ctx, device)
        rows.append(("floor: compiled cache take + put", cache_only))
    from cuda.bindings import driver as d

    def bindings_only():
        _err, ptr = d.cuMemAllocAsync(NBYTES, h)
        d.cuMemFreeAsync(ptr, h)
    rows.append(("floor: cuMemAllocAsync + cuMemFreeAsync, cuda.bindings", bindings_only))

    try:
        import torch
        results["torch"] = torch.__version__
        rows.append(("torch.empty (caching allocator)",
                     lambda: torch.empty(ITEMS, dtype=torch.float32, device="cuda")))
    except Exception as exc:  # reported, never hidden
        results["torch_error"] = f"{type(exc).__name__}: {exc}"[:300]
    try:
        import cupy as cp
        results["cupy"] = cp.__version__
        rows.append(("cupy.empty (default pool)", lambda: cp.empty(ITEMS, cp.float32)))
        async_pool = cp.cuda.MemoryAsyncPool()

        def cupy_async(calls):
            previous = cp.cuda.get_allocator()
            cp.cuda.set_allocator(async_pool.malloc)
            try:
                return _python_batch(lambda: cp.empty(ITEMS, cp.float32))(calls)
            finally:
                cp.cuda.set_allocator(previous)
        rows.append(("cupy.empty (MemoryAsyncPool)", cupy_async))
        results["_keep"].append(async_pool)
    except Exception as exc:
        results["cupy_error"] = f"{type(exc).__name__}: {exc}"[:300]
    return rows


def _matmul_rows(results: dict) -> list:
    import cupric.cublas as cublas
    from cupric.runtime.memory import empty, to_device

    rng = np.random.default_rng(11)
    host_a = rng.standard_normal((SMALL, SMALL)).astype(np.float32)
    host_b = rng.standard_normal((SMALL, SMALL)).astype(np.float32)
    a, b = to_device(host_a), to_device(host_b)
    c = empty((SMALL, SMALL), np.float32)
    expect = host_a.astype(np.float64) @ host_b
    scale = np.abs(expect).max()
    assert_correct("cupric matmul(a, b)", lambda: None, lambda: cublas.matmul(a, b), expect,
                   rtol=1e-5, atol=1e-5 * scale)
    assert_correct("cupric matmul(a, b, out=c)", lambda: cublas.matmul(a, b, out=c), c,
                   expect, outputs=[c], rtol=1e-5, atol=1e-5 * scale)
    rows = [("cupric.cublas.matmul(a, b) 64x64, allocating", lambda: cublas.matmul(a, b)),
            ("cupric.cublas.matmul(a, b, out=c) 64x64", lambda: cublas.matmul(a, b, out=c))]
    results["_keep"] += [a, b, c]
    try:
        import torch
        ta, tb = torch.from_numpy(host_a).cuda(), torch.from_numpy(host_b).cuda()
        assert_correct("torch A @ B", lambda: None, lambda: ta @ tb, expect,
                       rtol=1e-5, atol=1e-5 * scale)
        rows.append(("torch A @ B 64x64, allocating", lambda: ta @ tb))
    except Exception as exc:
        results["torch_matmul_error"] = f"{type(exc).__name__}: {exc}"[:300]
    try:
        import cupy as cp
        ca, cb = cp.asarray(host_a), cp.asarray(host_b)
        assert_correct("cupy A @ B", lambda: None, lambda: ca @ cb, expect,
                       rtol=1e-5, atol=1e-5 * scale)
        rows.append(("cupy A @ B 64x64, allocating", lambda: ca @ cb))
    except Exception as exc:
        results["cupy_matmul_error"] = f"{type(exc).__name__}: {exc}"[:300]
    return rows


def _measure(rows: list, results: dict, key: str) -> None:
    from cupric import runtime as rt
    batches = [(name, fn if _takes_calls(fn) else _python_batch(fn)) for name, fn in rows]
    for _, batch in batches:
        batch(200)
    rt.synchronize()
    samples: dict = {name: [] for name, _ in batches}
    for _ in range(BATCHES):
        for name, batch in batches:
            seconds = batch(PER_BATCH)
            rt.synchronize()  # outside the timed region, the same for every row
            samples[name].append(seconds / PER_BATCH * 1e6)
    out = {}
    for name, batch in batches:
        seconds = batch(CONTINUOUS)
        rt.synchronize()
        out[name] = {"us": statistics.median(samples[name]), "min_us": min(samples[name]),
                     "continuous_us": seconds / CONTINUOUS * 1e6}
    results[key] = out


def _takes_calls(fn) -> bool:
    import inspect
    try:
        return list(inspect.signature(fn).parameters) == ["calls"]
    except (TypeError, ValueError):
        return False


def run(json_path: str | None = None) -> dict:
    """Measure, print the table, and return (and optionally write) the results."""
    import gc

    from cupric import runtime as rt
    from cupric.runtime import _lifetime
    from cupric.runtime import pool as pl

    results: dict = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                     "bytes": NBYTES, "_keep": []}
    rt.Device(0).make_current()
    results["device"] = rt.Device(0).name
    pool = pl.current_pool(0)
    from cupric.runtime import memory as m

    def settled() -> int:
        # Freed buffers' blocks wait in the allocation cache: hand them back first.
        gc.collect()
        _lifetime.drain()
        m.release_cached()
        rt.synchronize()
        return pool.used
    for part, key in ((_rows, "alloc_free_16KiB_us"), (_matmul_rows, "matmul_64_us")):
        try:
            rows = part(results)
            used = settled()
            _measure(rows, results, key)
            results.setdefault("pool_used_delta", {})[key] = settled() - used
        except Exception as exc:  # reported in the table and JSON, never hidden
            results[f"{key}_error"] = f"{type(exc).__name__}: {exc}"[:500]
    from cupric.runtime import allocation as al
    fast = getattr(al, "_fast", None)
    if "compiled_path" not in results:
        from cupric.runtime import _fastalloc
        results["compiled_path"] = (fast is not None and fast is not al._UNSET,
                                    _fastalloc.build_error())
    results["cache_stats"] = str(m.cache_stats())
    results.pop("_keep")
    leaked = {k: v for k, v in results.get("pool_used_delta", {}).items() if v}
    if leaked:
        results["pool_error"] = f"the pool's used bytes did not come back: {leaked}"
    results["title"] = "Device allocation: 16 KiB allocate + free"
    results["method"] = (
        f"Host cost of allocating a {NBYTES // 1024} KiB float32 buffer and freeing it, "
        f"{BATCHES} batches of {PER_BATCH} pairs per row, a synchronize between batches "
        "outside the timed region, rows interleaved, median batch, in one process; the "
        "stream-ordered pool's used bytes must be back where they started. The 64x64 "
        "matmuls (allocating their result) are checked against NumPy first.")
    tables = []
    for key, title in (("alloc_free_16KiB_us", "16 KiB allocate + free (us)"),
                       ("matmul_64_us", "64x64 float32 matmul, host cost (us)")):
        rows = [[name, row["us"], row["min_us"], row["continuous_us"]]
                for name, row in (results.get(key) or {}).items()]
        if key + "_error" in results:
            rows.append([f"error: {results[key + '_error']}", None, None, None])
        tables.append(table(title, [("call", ""), ("median batch", ".2f"),
                                    ("min batch", ".2f"), ("continuous", ".2f")], rows))
    results["tables"] = tables
    _print(results)
    if json_path:
        with open(json_path, "w") as f:
            json.dump(results, f, indent=1)
    return results


def _print(results: dict) -> None:
    print(f"device: {results.get('device')}  torch {results.get('torch')}  "
          f"cupy {results.get('cupy')}  compiled path: {results.get('compiled_path')}")
    for key, title in (("alloc_free_16KiB_us", "16 KiB allocate + free"),
                       ("matmul_64_us", "64x64 float32 matmul, host cost")):
        table = results.get(key, {})
        if not table:
            continue
        print(f"{title:56s} {'median us':>10s} {'min us':>8s} {'continuous us':>14s}")
        for name, row in table.items():
            print(f"{name:56s} {row['us']:10.2f} {row['min_us']:8.2f} "
                  f"{row['continuous_us']:14.2f}")
    print(f"pool used bytes after - before: {results.get('pool_used_delta')}")
    for key, value in results.items():
        if key.endswith("error"):
            print(f"{key}: {value}")


def main(argv=None) -> int:
    import argparse
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the results to this file")
    args = parser.parse_args(argv)
    results = run(args.json)
    failed = any(k.endswith("error") for k in results) or any(
        v != 0 for v in results.get("pool_used_delta", {}).values())
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
