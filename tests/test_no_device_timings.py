"""Performance figures live in BENCHMARKS.md only: no line under cupric/ quotes a
duration below a millisecond, a rate, a speed-up or a measurement on a named GPU (they go
stale with every driver, library and device; the benchmarks measure them again)."""

from __future__ import annotations

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]

_FIGURE = re.compile(r"""
      \d\s*(?:-\s*[\d.]+\s*)?(?:ns|us|µs)\b                     # 0.2 us, 2-6 us
    | \d\s*(?:[KMGT]i?B/s|[GT]FLOP/?s|[GT]FLOPS)\b             # 3.2 TB/s, 700 TFLOP/s
    | \d\s*%\s*(?:faster|slower|of\s+(?:peak|a|the))\b         # 6-9 % faster, 85% of a
    | \b\d+(?:\.\d+)?x\s+(?:the|a|faster|slower)\b             # 1.02x the same kernel
    | \b(?:measured|ran|runs|timed)\s+on\s+(?:an?|the|two)\s+H[12]00
    | \bon\s+(?:an?|the)\s+H[12]00\b[^.]*\d\s*(?:%|ms|us)      # on an H200, 6-9 %
    | \d\s*ms\b[^.]*\bH[12]00\b                                # 10 ms on the H200 machine
""", re.X)

# Files another engineer is rewriting now (drop an entry once its figure is gone; nothing
# may be added).
_NOT_YET: set = set()


def _hits():
    found = []
    for path in sorted((ROOT / "cupric").rglob("*.py")):
        rel = path.relative_to(ROOT / "cupric").as_posix()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if _FIGURE.search(line):
                found.append((rel, number, line.strip()))
    return found


def test_no_performance_figures_under_cupric():
    found = [hit for hit in _hits() if hit[0] not in _NOT_YET]
    assert not found, "performance figures belong in BENCHMARKS.md:\n" + "\n".join(
        f"cupric/{rel}:{number}: {line}" for rel, number, line in found)


def test_the_pattern_catches_what_it_is_for():
    for text in ("costs about 0.2 us", "2-6 us per thread", "on an H200, 6-9 % faster",
                 "85% of a copy", "1.02x the same kernel", "measured on an H200",
                 "4 and 10 ms on the H200 machine", "streams at 3.1 TB/s"):
        assert _FIGURE.search(text), text
    for text in ("doubling up to 50 ms", "sm_90 device's (H100, H200)", "2^16 streams",
                 "'NVIDIA H200'", "status 1"):
        assert not _FIGURE.search(text), text
