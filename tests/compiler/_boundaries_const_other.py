"""Module-level data and a device function of another module, for the placement tests of
test_boundaries_const.py (packing by module)."""

import numpy as np

import cupric

OTHER30 = np.zeros(30_000, np.uint8)


@cupric.device_function
def read_other(i):
    return OTHER30[i]
