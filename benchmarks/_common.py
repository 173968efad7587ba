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
