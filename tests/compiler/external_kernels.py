"""Kernels calling external device functions (CUDA C++ compiled by NVRTC, and PTX), for
tests/compiler/test_external.py."""

import numpy as np

import cupric
from cupric.compiler.external import compile_cuda, declare_device
from cupric.device import grid
from cupric.types import Array, f32, i32

POLY_SOURCE = r'''
extern "C" __device__ float cupric_ext_poly(float x, float a, int n) {
    // a * x^n + x, by repeated multiplication (a loop the kernel language would
    // also allow; the point is that it is C++).
    float p = 1.0f;
    for (int i = 0; i < n; ++i) p *= x;
    return a * p + x;
}
'''


def poly_twin(x, a, n):
    return np.float32(np.float32(a) * np.float32(x) ** int(n) + np.float32(x))


poly = declare_device("cupric_ext_poly", f32, (f32, f32, i32), cuda=POLY_SOURCE,
                      twin=poly_twin)

SCALE_SOURCE = rb'''
extern "C" __device__ void cupric_ext_scale(float* p, int n, float s) {
    for (int i = 0; i < n; ++i) p[i] *= s;
}
'''

# The same kind of function handed over as PTX (made here by NVRTC; any PTX with a
# .visible .func of that name links).
scale_ptx = declare_device("cupric_ext_scale", None, (Array[f32, 1], i32, f32),
                           ptx=compile_cuda(SCALE_SOURCE, "sm_80", lto=False),
                           twin=lambda p, n, s: p.__setitem__(slice(0, n), p[:n] * s))


@cupric.kernel
def apply_poly(x: Array[f32, 1, 'C'], y: Array[f32, 1, 'C'], a: f32, n: i32):
    i = grid(1)
    if i < len(y):
        y[i] = poly(x[i], a, n)


@cupric.kernel
def scale_prefix(x: Array[f32, 1, 'C'], n: i32, s: f32):
    # One thread hands the array's data pointer to the C function.
    if grid(1) == 0:
        scale_ptx(x, n, s)
