"""What the benchmark scripts share: the command line around a module's `run()`, and
device-only timing of contenders with CUDA events (`EventTimer`, `paired_ratio`)."""

from __future__ import annotations

import argparse


def script_main(run, description: str, table: str):
    """A `main(argv)` for a benchmark module: `--json PATH`, then `run(json_path)`; exits 1
    when any top-level key or any row of `results[table]` reports an error."""

    def main(argv=None) -> int:
        parser = argparse.ArgumentParser(description=description)
        parser.add_argument("--json", help="write the results to this file")
        args = parser.parse_args(argv)
        results = run(args.json)
        failed = any(k.endswith("error") for k in results) or any(
            "error" in row for row in results.get(table, {}).values())
        return 1 if failed else 0

    return main


class EventTimer:
    """Device seconds per call of callables on one CuPy stream, from CUDA events.

    `device` is the fair measure: one lead-in call keeps the GPU busy while the host
    queues the start event and a batch of calls, so no contender's host cost (Python,
    argument checks, reading `__cuda_array_interface__`) is timed as idle GPU time.
    `idle` is one call from an idle stream right after the start event, which counts the
    host's launch cost as kernel time (kept to show the difference). `rounds` samples
    several contenders in interleaved rounds, the order rotated every round so that none
    always runs first (or right after the same neighbour)."""

    def __init__(self, cp, stream, batch: int = 4) -> None:
        self.cp = cp
        self.stream = stream
        self.batch = batch

    def device(self, fn, batch: int | None = None) -> float:
        """One lead-in call, then `batch` calls between two events; seconds per call."""
        cp = self.cp
        batch = self.batch if batch is None else batch
        start, end = cp.cuda.Event(), cp.cuda.Event()
        fn()
        start.record(self.stream)
        for _ in range(batch):
            fn()
        end.record(self.stream)
        end.synchronize()
        return cp.cuda.get_elapsed_time(start, end) / 1e3 / batch

    def idle(self, fn) -> float:
        """One call from an idle stream between two events (host launch cost included)."""
        cp = self.cp
        start, end = cp.cuda.Event(), cp.cuda.Event()
        self.stream.synchronize()
        start.record(self.stream)
        fn()
        end.record(self.stream)
        end.synchronize()
        return cp.cuda.get_elapsed_time(start, end) / 1e3

    def rounds(self, fns: dict, repeats: int, batch: int | None = None,
               warmup: int = 2) -> dict:
        """`repeats` device-time samples per contender (name -> list of seconds, sample r
        of every contender from round r), after `warmup` calls of each."""
        for fn in fns.values():
            for _ in range(warmup):
                fn()
        self.stream.synchronize()
        names = list(fns)
        samples: dict = {name: [] for name in names}
        for r in range(repeats):
            k = r % len(names)
            for name in names[k:] + names[:k]:
                samples[name].append(self.device(fns[name], batch))
        return samples


def device_samples(torch, fns: dict, samples: int, per_sample: int, stream) -> dict:
    """Device seconds per call of each callable of `fns`, `samples` times each: name ->
    list. The order rotates sample by sample, so that none always runs right after
    another (clocks vary under sustained power). Each sample is a lead-in call, which
    keeps the GPU busy while the host prepares the timed ones (their host work is the
    host-cost tables' business, not GPU time), then `per_sample` calls between two events
    on `stream`: each call's host work overlaps the GPU's work on the one before, as in a
    training step, for every contender alike. Warm-up is the caller's."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    names = list(fns)
    times: dict = {name: [] for name in names}
    for i in range(samples):
        k = i % len(names)
        for name in names[k:] + names[:k]:
            fn = fns[name]
            fn()
            start.record(stream)
            for _ in range(per_sample):
                fn()
            end.record(stream)
            end.synchronize()
            times[name].append(start.elapsed_time(end) / 1e3 / per_sample)
    return times


def paired_ratio(ours: list, theirs: list) -> dict:
    """Per-round ratios theirs/ours of two contenders' times (above 1: ours faster):
    the median and the spread (min, quartiles, max). Both samples of a round saw the
    same machine state, so the spread says whether a gap is noise."""
    import statistics
    ratios = sorted(b / a for a, b in zip(ours, theirs))
    if len(ratios) >= 2:
        q1, _, q3 = statistics.quantiles(ratios, n=4)
    else:
        q1 = q3 = ratios[0]
    return {"median": statistics.median(ratios), "min": ratios[0], "q1": q1, "q3": q3,
            "max": ratios[-1]}


# -- correctness before timing ----------------------------------------------------------

def to_host(x):
    """A NumPy copy of a device or host array (PyTorch, CuPy, DeviceBuffer, NumPy);
    float16/bfloat16 PyTorch tensors come back as float32."""
    import numpy as np
    if hasattr(x, "detach"):  # PyTorch
        t = x.detach()
        if t.dtype.is_floating_point and t.element_size() < 4:
            t = t.float()
        return t.cpu().numpy()
    if hasattr(x, "get") and hasattr(x, "__cuda_array_interface__"):  # CuPy
        return x.get()
    if hasattr(x, "to_numpy"):  # cupric DeviceBuffer
        return x.to_numpy()
    return np.asarray(x)


def poison(*arrays) -> None:
    """Fill outputs with a value no correct result has: NaN for floating point, all ones
    (-1, or the largest unsigned value) for integers; queued on each library's current
    stream."""
    import numpy as np
    for x in arrays:
        if hasattr(x, "detach"):  # PyTorch
            x.fill_(float("nan") if x.dtype.is_floating_point else -1)
        elif hasattr(x, "get") and hasattr(x, "fill"):  # CuPy
            x.fill(np.nan if x.dtype.kind in "fc" else
                   np.iinfo(x.dtype).max if x.dtype.kind == "u" else -1)
        elif hasattr(x, "memset"):  # DeviceBuffer: 0xFF bytes, NaN or -1 in every type
            x.memset(0xFF, 8)
        else:
            raise TypeError(f"poison: cannot fill a {type(x).__name__}")


def _synchronize() -> None:
    """Wait for the whole device (every library's streams)."""
    from cupric import runtime as rt
    rt.synchronize()


class CheckError(AssertionError):
    """A contender gave a wrong result before timing; the benchmark must not time it."""


def assert_correct(label: str, run, got, expected, *, outputs=(), rtol: float = 0.0,
                   atol: float = 0.0, exact: bool = False, sample: int | None = None,
                   seed: int = 0) -> dict:
    """Poison `outputs`, call `run()` once, and compare `got` with `expected`.

    `got` and `expected` are arrays or callables returning one (called after `run`); any
    kind `to_host` reads. The comparison covers every element, or, with `sample`, that
    many positions drawn with `seed` plus the first and last 4096 (for outputs too large
    to copy to the host; the benchmark says so). Passes when every compared element
    satisfies ``|got - expected| <= atol + rtol * |expected|`` (``exact``: equality), no
    NaN is left where `expected` has none. Raises `CheckError` naming `label`; returns
    the largest absolute and relative differences (for the results file).
    """
    import numpy as np
    poison(*outputs)
    _synchronize()
    run()
    _synchronize()
    g = got() if callable(got) else got
    e = expected() if callable(expected) else expected
    if hasattr(g, "detach") and hasattr(e, "detach") and not exact:
        return _torch_close(label, g, e, rtol, atol)
    g, e = to_host(g), to_host(e)
    g, e = np.asarray(g).reshape(-1), np.asarray(e).reshape(-1)
    if g.shape != e.shape:
        raise CheckError(f"{label}: {g.size} elements, expected {e.size}")
    if sample is not None and g.size > sample + 8192:
        idx = np.random.default_rng(seed).integers(0, g.size, sample)
        idx = np.concatenate([np.arange(4096), idx, np.arange(g.size - 4096, g.size)])
        g, e = g[idx], e[idx]
    if exact:
        bad = int(np.count_nonzero(g != e) - np.count_nonzero(np.isnan(g) & np.isnan(e)))
        if bad:
            raise CheckError(f"{label}: {bad} of {g.size} elements differ")
        return {"compared": int(g.size), "max_abs_diff": 0.0}
    g64, e64 = g.astype(np.float64), e.astype(np.float64)
    diff = np.abs(g64 - e64)
    nan = np.isnan(g64) & ~np.isnan(e64)
    bad = nan | (diff > atol + rtol * np.abs(e64))
    if bad.any():
        i = int(np.argmax(bad))
        raise CheckError(f"{label}: {int(bad.sum())} of {g.size} elements out of tolerance "
                         f"(rtol {rtol}, atol {atol}); first at {i}: {g64[i]} vs {e64[i]}")
    scale = float(np.abs(e64).max()) if e64.size else 0.0
    worst = float(np.nanmax(diff)) if diff.size else 0.0
    return {"compared": int(g.size), "max_abs_diff": worst,
            "max_rel_diff": worst / scale if scale else worst}


def assert_on_device(label: str, run, ok, *, reset=None) -> None:
    """`assert_correct` for outputs too large to bring to the host, compared on the device
    by the benchmark's own expression: `reset()` (poison the output, restore inputs that
    the call updates in place), `run()` once, then `ok()` must be true (every element,
    e.g. ``cupy.array_equal(out, x + y)``). Raises `CheckError` naming `label`."""
    if reset is not None:
        reset()
    _synchronize()
    run()
    _synchronize()
    if not bool(ok()):
        raise CheckError(f"{label} gave a wrong result")


def _torch_close(label: str, got, expected, rtol: float, atol: float) -> dict:
    """`assert_correct`'s comparison on the device, for two PyTorch tensors (every
    element, in float64: no copy of a large output to the host)."""
    g = got.detach().double().reshape(-1)
    e = expected.detach().double().reshape(-1).to(g.device)
    if g.numel() != e.numel():
        raise CheckError(f"{label}: {g.numel()} elements, expected {e.numel()}")
    diff = (g - e).abs()
    bad = (g.isnan() & ~e.isnan()) | (diff > atol + rtol * e.abs())
    count = int(bad.sum())
    if count:
        i = int(bad.nonzero()[0, 0])
        raise CheckError(f"{label}: {count} of {g.numel()} elements out of tolerance "
                         f"(rtol {rtol}, atol {atol}); first at {i}: {float(g[i])} vs "
                         f"{float(e[i])}")
    scale = float(e.abs().max()) if e.numel() else 0.0
    worst = float(diff.nan_to_num(0.0).max()) if diff.numel() else 0.0
    return {"compared": int(g.numel()), "max_abs_diff": worst,
            "max_rel_diff": worst / scale if scale else worst}


# -- tables for BENCHMARKS.md (rendered by tools/benchmarks_md.py) ------------------------

def table(title: str, columns, rows, notes: str = "") -> dict:
    """A table of one benchmark's figures as the results file keeps it: `columns` are
    (heading, format) pairs (format as in `format(value, fmt)`, "" for text), `rows`
    lists of cells (a number, a string, or None for an empty cell)."""
    return {"title": title, "columns": [list(c) for c in columns],
            "rows": [list(r) for r in rows], "notes": notes}


def ratio(peer, ours):
    """peer / ours for two times (above 1: ours faster), None when either is missing."""
    if isinstance(peer, (int, float)) and isinstance(ours, (int, float)) and ours > 0:
        return peer / ours
    return None


def error_text(exc: BaseException) -> str:
    """An exception as one line for a results file."""
    return f"{type(exc).__name__}: {exc}"[:400]


def finish(results: dict, json_path: str | None, method: str, tables: list) -> dict:
    """Close a benchmark's results: its method (prose, whitespace collapsed) and tables
    for BENCHMARKS.md, written to `json_path` when given."""
    import json
    results["method"] = " ".join(method.split())
    results["tables"] = tables
    if json_path:
        with open(json_path, "w") as fh:
            json.dump(results, fh, indent=1)
    return results


def print_tables(results: dict) -> None:
    """The tables of a benchmark's results, as plain rows, for its command line."""
    for t in results.get("tables", ()):
        print(t["title"])
        for row in t["rows"]:
            print("  " + " | ".join(f"{c:.4g}" if isinstance(c, float) else str(c)
                                    for c in row))
