"""GPU random numbers: the xoshiro/xoroshiro family with SplitMix64 seeding and jumps.

A host half in NumPy (`Generator`, `BitGenerator` and the rand_xoshiro-named classes) and
a device half of kernel-callable functions (`cupric.gpu_rand.device`) give the same bits
for the same seed. Importing this package loads no compiler and touches no GPU: names
resolve to their submodules on first use.
"""

from __future__ import annotations

from .._lazy import attach

_NAMES = ("Xoroshiro128Plus Xoroshiro128PlusPlus Xoroshiro128StarStar Xoroshiro64Star "
          "Xoroshiro64StarStar Xoshiro128Plus Xoshiro128PlusPlus Xoshiro128StarStar "
          "Xoshiro256Plus Xoshiro256PlusPlus Xoshiro256StarStar Xoshiro512Plus "
          "Xoshiro512PlusPlus Xoshiro512StarStar").split()

_LAZY = {
    "Generator": "generator", "default_rng": "generator",
    "BitGenerator": "host", "GENERATORS": "host",
    "SplitMix64": "splitmix",
    "Algorithm": "algorithms", "ALGORITHMS": "algorithms",
    "stream_states": "streams", "jump_polynomial": "streams", "jump_table": "streams",
    "charpoly": "streams",
    "uniform": "bulk", "normal": "bulk", "exponential": "bulk", "integers": "bulk",
    "random_bits": "bulk", "default_generator": "bulk",
    **{name: "host" for name in _NAMES},
}
_SUBMODULES = ("algorithms", "backends", "bulk", "device", "device_rng", "distributions",
               "generator", "gf2", "host", "splitmix", "streams")

__all__ = sorted(_LAZY)

__getattr__, __dir__ = attach(__name__, globals(), {
    **{name: (f"{__name__}.{module}", name) for name, module in _LAZY.items()},
    **{name: (f"{__name__}.{name}", None) for name in _SUBMODULES},
})
