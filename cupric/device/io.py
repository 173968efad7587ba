"""Talking to the host and reading clocks from a kernel: `trap`, the SM cycle counters
(%clock, %clock64) and the global nanosecond timer (%globaltimer).

`print(...)` and `assert cond, message` in kernel code are ordinary Python statements:
the compiler lowers them to vprintf and __assertfail; a failed assert reaches the host as
`KernelAssertionError` naming the Python file and line.
"""

from ._intrinsic import Intrinsic

__all__ = ["trap", "clock", "clock64", "globaltimer"]

trap = Intrinsic(
    "trap",
    "trap(): abort the kernel at once (PTX trap); the launch fails with KernelTrapError.")
clock = Intrinsic(
    "clock",
    "clock() -> u32: the SM's cycle counter, low 32 bits (%clock); wraps around.")
clock64 = Intrinsic(
    "clock64",
    "clock64() -> i64: the SM's 64-bit cycle counter (%clock64); monotonic per SM.")
globaltimer = Intrinsic(
    "globaltimer",
    "globaltimer() -> u64: a device-wide timer in nanoseconds (%globaltimer).")
