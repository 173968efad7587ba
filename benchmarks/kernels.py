"""cupric.kernels beside their peers, all in one process on one stream: the same
algorithm in CUDA C (CuPy RawKernel, NVRTC; written for this benchmark) with the same
launch geometry as cupric's (the grids come from cupric.kernels._common), in numba-cuda,
and the routine users would otherwise call (CuPy, cuBLAS through PyTorch). Bandwidth is
also given as a fraction of a device-to-device copy (cuMemcpyDtoDAsync) measured in the
same run. The elementwise rows also time the library kernels on the grid the library
used before it launched covering grids (<= 8 blocks per SM: "cupric_bounded_grid").

Every implementation reads the same CuPy-allocated inputs and writes the same output
array (cupric and numba take them through `__cuda_array_interface__`; routines that
allocate their result, such as cp.sum or cp.sort, excepted); each one's result is checked
before timing. Timing (benchmarks/_common.EventTimer): CUDA events around a batch of
calls that follows a lead-in call, so only device time is measured (no contender's host
cost is timed as idle GPU time); warm-up calls, then REPEATS rounds, the order of the
implementations rotated every round; medians, and per round the ratio of each peer's time
to cupric's (its median is the "vs peers" figure, its spread is in the JSON, "paired").

    python3 benchmarks/kernels.py [--json PATH] [--only NAME[,NAME...]]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import traceback

import numpy as np

from _common import EventTimer, assert_on_device, paired_ratio, table

WARMUP = 2
REPEATS = 10
BATCH = 8                   # calls between a pair of events (see EventTimer.device)
N = 1 << 27                 # elements of the bandwidth-bound benchmarks (512 MiB of f32)
IMAGE = (8192, 8192)        # rgba2gray
MATRIX = (8192, 16384)      # transpose, f32
SORT_N = 1 << 24
GEMM_F32 = 8192
GEMM_F64 = 4096

#: Goals (the issue's): bandwidth-bound kernels >= 85 % of the copy rate and >= 1.0x
#: CUDA C; reductions and scans >= 0.9x CuPy; SGEMM >= 60 % of cuBLAS FP32; bitonic
#: >= 1.0x CUDA C.
BANDWIDTH_GOAL = 0.85

CUDA_C = r'''
typedef long long i64;
typedef unsigned int u32;

// Grid-stride loops over groups of four neighbouring elements, one 128-bit access per
// array per trip, and the tail (n % 4 elements) by the first threads: the algorithm of
// cupric.kernels.elementwise, with the same launch geometry.
#define QUAD_LOOP_HEAD                                                                 \
  i64 quads = n >> 2;                                                                  \
  i64 g = (i64)blockIdx.x * blockDim.x + threadIdx.x;                                  \
  i64 step = (i64)blockDim.x * gridDim.x;                                              \
  i64 k = quads * 4 + g;

extern "C" __global__ void vecadd(const float* __restrict__ a, const float* __restrict__ b,
                                  float* __restrict__ out, i64 n) {
  QUAD_LOOP_HEAD
  const float4* a4 = reinterpret_cast<const float4*>(a);
  const float4* b4 = reinterpret_cast<const float4*>(b);
  float4* o4 = reinterpret_cast<float4*>(out);
  for (i64 i = g; i < quads; i += step) {
    float4 x = a4[i], y = b4[i];
    o4[i] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
  }
  if (k < n) out[k] = a[k] + b[k];
}

extern "C" __global__ void saxpy(float alpha, const float* __restrict__ x,
                                 const float* __restrict__ y, float* __restrict__ out, i64 n) {
  QUAD_LOOP_HEAD
  const float4* x4 = reinterpret_cast<const float4*>(x);
  const float4* y4 = reinterpret_cast<const float4*>(y);
  float4* o4 = reinterpret_cast<float4*>(out);
  for (i64 i = g; i < quads; i += step) {
    float4 u = x4[i], v = y4[i];
    o4[i] = make_float4(alpha * u.x + v.x, alpha * u.y + v.y, alpha * u.z + v.z,
                        alpha * u.w + v.w);
  }
  if (k < n) out[k] = alpha * x[k] + y[k];
}

extern "C" __global__ void copy(const float* __restrict__ src, float* __restrict__ out, i64 n) {
  QUAD_LOOP_HEAD
  const float4* s4 = reinterpret_cast<const float4*>(src);
  float4* o4 = reinterpret_cast<float4*>(out);
  for (i64 i = g; i < quads; i += step) o4[i] = s4[i];
  if (k < n) out[k] = src[k];
}

extern "C" __global__ void fill(float* __restrict__ out, float value, i64 n) {
  QUAD_LOOP_HEAD
  float4* o4 = reinterpret_cast<float4*>(out);
  for (i64 i = g; i < quads; i += step) o4[i] = make_float4(value, value, value, value);
  if (k < n) out[k] = value;
}

__device__ __forceinline__ unsigned char gray8(u32 p) {
  float r = (float)(p & 0xFF), g = (float)((p >> 8) & 0xFF), b = (float)((p >> 16) & 0xFF);
  return (unsigned char)(0.299f * r + 0.587f * g + 0.114f * b + 0.5f);
}

extern "C" __global__ void rgba2gray(const u32* __restrict__ pix, unsigned char* __restrict__ out,
                                     i64 n) {
  QUAD_LOOP_HEAD
  const uint4* p4 = reinterpret_cast<const uint4*>(pix);
  uchar4* o4 = reinterpret_cast<uchar4*>(out);
  for (i64 i = g; i < quads; i += step) {
    uint4 p = p4[i];
    o4[i] = make_uchar4(gray8(p.x), gray8(p.y), gray8(p.z), gray8(p.w));
  }
  if (k < n) out[k] = gray8(pix[k]);
}

extern "C" __global__ void transpose(const float* __restrict__ a, float* __restrict__ out,
                                     i64 rows, i64 cols) {
  __shared__ float tile[32][33];
  i64 col = (i64)blockIdx.x * 32 + threadIdx.x;
  i64 row = (i64)blockIdx.y * 32 + threadIdx.y;
  for (int k = 0; k < 32; k += 8)
    if (col < cols && row + k < rows)
      tile[threadIdx.y + k][threadIdx.x] = a[(row + k) * cols + col];
  __syncthreads();
  i64 out_col = (i64)blockIdx.y * 32 + threadIdx.x;
  i64 out_row = (i64)blockIdx.x * 32 + threadIdx.y;
  for (int k = 0; k < 32; k += 8)
    if (out_col < rows && out_row + k < cols)
      out[(out_row + k) * rows + out_col] = tile[threadIdx.x][threadIdx.y + k];
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int d = 16; d > 0; d >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, d);
  return v;
}

extern "C" __global__ void reduce_sum(const float* __restrict__ x, i64 n, float* out,
                                      float* partials, u32* counter) {
  __shared__ float slots[8];
  __shared__ int is_last;
  int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  QUAD_LOOP_HEAD
  const float4* x4 = reinterpret_cast<const float4*>(x);
  float v0 = 0.f, v1 = 0.f, v2 = 0.f, v3 = 0.f;
  for (i64 i = g; i < quads; i += step) {
    float4 a = x4[i];
    v0 += a.x; v1 += a.y; v2 += a.z; v3 += a.w;
  }
  if (k < n) v0 += x[k];
  float v = warp_sum((v0 + v1) + (v2 + v3));
  if (lane == 0) slots[w] = v;
  __syncthreads();
  if (w == 0) {
    v = warp_sum(lane < 8 ? slots[lane] : 0.f);
    if (lane == 0) {
      partials[blockIdx.x] = v;
      __threadfence();
      u32 ticket = atomicAdd(counter, 1u);
      is_last = ticket == gridDim.x - 1;
    }
  }
  __syncthreads();
  if (is_last) {
    __threadfence();
    v = 0.f;
    for (int j = threadIdx.x; j < gridDim.x; j += blockDim.x) v += partials[j];
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) slots[w] = v;
    __syncthreads();
    if (w == 0) {
      v = warp_sum(lane < 8 ? slots[lane] : 0.f);
      if (lane == 0) { *out = v; *counter = 0; }
    }
  }
}

#define CHUNK 2048
#define HALF 1024

extern "C" __global__ void to_keys(const u32* __restrict__ src, u32* __restrict__ keys,
                                   i64 n, i64 total, u32 flip) {
  i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x;
  i64 step = (i64)blockDim.x * gridDim.x;
  for (; i < total; i += step) keys[i] = i < n ? (src[i] ^ flip) : 0xFFFFFFFFu;
}

extern "C" __global__ void from_keys(const u32* __restrict__ keys, u32* __restrict__ out,
                                     i64 n, u32 flip) {
  i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x;
  i64 step = (i64)blockDim.x * gridDim.x;
  for (; i < n; i += step) out[i] = keys[i] ^ flip;
}

extern "C" __global__ void bitonic_sort_shared(u32* keys) {
  __shared__ u32 s[CHUNK];
  int t = threadIdx.x;
  i64 base = (i64)blockIdx.x * CHUNK;
  s[t] = keys[base + t];
  s[t + HALF] = keys[base + t + HALF];
  __syncthreads();
  for (int k = 2; k <= CHUNK; k <<= 1) {
    for (int j = k >> 1; j > 0; j >>= 1) {
      int lo = 2 * t - (t & (j - 1));
      u32 a = s[lo], b = s[lo + j];
      bool up = ((base + lo) & k) == 0;
      if ((a > b) == up) { s[lo] = b; s[lo + j] = a; }
      __syncthreads();
    }
  }
  keys[base + t] = s[t];
  keys[base + t + HALF] = s[t + HALF];
}

extern "C" __global__ void bitonic_merge_global(u32* keys, i64 n, i64 k, i64 j) {
  i64 t = (i64)blockIdx.x * blockDim.x + threadIdx.x;
  if (t < (n >> 1)) {
    i64 lo = 2 * t - (t & (j - 1));
    u32 a = keys[lo], b = keys[lo + j];
    bool up = (lo & k) == 0;
    if ((a > b) == up) { keys[lo] = b; keys[lo + j] = a; }
  }
}

extern "C" __global__ void bitonic_merge_shared(u32* keys, i64 k) {
  __shared__ u32 s[CHUNK];
  int t = threadIdx.x;
  i64 base = (i64)blockIdx.x * CHUNK;
  s[t] = keys[base + t];
  s[t + HALF] = keys[base + t + HALF];
  __syncthreads();
  bool up = (base & k) == 0;
  for (int j = HALF; j > 0; j >>= 1) {
    int lo = 2 * t - (t & (j - 1));
    u32 a = s[lo], b = s[lo + j];
    if ((a > b) == up) { s[lo] = b; s[lo + j] = a; }
    __syncthreads();
  }
  keys[base + t] = s[t];
  keys[base + t + HALF] = s[t + HALF];
}

// Single-pass scan with decoupled look-back: the algorithm of cupric.kernels.scan (tiles
// of 256 x 15 items taken in start order, warp 0 looks back 32 tiles at a time).
#define SCAN_ITEMS 15
#define SCAN_TILE (256 * SCAN_ITEMS)
#define DEFINE_SCAN(NAME, T)                                                               \
extern "C" __global__ void NAME(const T* __restrict__ x, T* __restrict__ out, i64 n,        \
                                u32* counter, int* flags, T* aggregates, T* prefixes) {     \
  __shared__ T tile[SCAN_TILE];                                                            \
  __shared__ T slots[8];                                                                   \
  __shared__ T carry;                                                                      \
  __shared__ int tile_slot;                                                                \
  int t = threadIdx.x, lane = t & 31, w = t >> 5;                                          \
  if (t == 0) tile_slot = (int)atomicAdd(counter, 1u);                                     \
  __syncthreads();                                                                         \
  int tile_id = tile_slot;                                                                 \
  i64 base = (i64)tile_id * SCAN_TILE;                                                     \
  for (int k = 0; k < SCAN_ITEMS; ++k) {                                                   \
    int j = k * 256 + t;                                                                   \
    tile[j] = base + j < n ? x[base + j] : (T)0;                                           \
  }                                                                                        \
  __syncthreads();                                                                         \
  int first = t * SCAN_ITEMS;                                                              \
  T s = 0;                                                                                 \
  for (int k = 0; k < SCAN_ITEMS; ++k) s += tile[first + k];                               \
  T v = s;                                                                                 \
  for (int d = 1; d < 32; d <<= 1) {                                                       \
    T u = __shfl_up_sync(0xFFFFFFFFu, v, d);                                               \
    if (lane >= d) v += u;                                                                 \
  }                                                                                        \
  if (lane == 31) slots[w] = v;                                                            \
  __syncthreads();                                                                         \
  if (w == 0) {                                                                            \
    T wv = lane < 8 ? slots[lane] : (T)0;                                                  \
    for (int d = 1; d < 32; d <<= 1) {                                                     \
      T u = __shfl_up_sync(0xFFFFFFFFu, wv, d);                                            \
      if (lane >= d) wv += u;                                                              \
    }                                                                                      \
    if (lane < 8) slots[lane] = wv;                                                        \
  }                                                                                        \
  __syncthreads();                                                                         \
  T block_total = slots[7];                                                                \
  T before = __shfl_up_sync(0xFFFFFFFFu, v, 1);                                            \
  if (lane == 0) before = 0;                                                               \
  if (w > 0) before += slots[w - 1];                                                       \
  if (w == 0) {                                                                            \
    T prefix = 0;                                                                          \
    if (tile_id == 0) {                                                                    \
      if (lane == 0) {                                                                     \
        prefixes[0] = block_total;                                                         \
        __threadfence();                                                                   \
        atomicExch(&flags[0], 2);                                                          \
      }                                                                                    \
    } else {                                                                               \
      if (lane == 0) {                                                                     \
        aggregates[tile_id] = block_total;                                                 \
        __threadfence();                                                                   \
        atomicExch(&flags[tile_id], 1);                                                    \
      }                                                                                    \
      int look = tile_id - 1 - lane;                                                       \
      bool searching = true;                                                               \
      while (searching) {                                                                  \
        int f = look >= 0 ? ((volatile int*)flags)[look] : 2;                              \
        while (__any_sync(0xFFFFFFFFu, f == 0))                                            \
          if (f == 0) f = ((volatile int*)flags)[look];                                    \
        __threadfence();                                                                   \
        u32 found = __ballot_sync(0xFFFFFFFFu, f == 2);                                    \
        u32 nearer = found & ((1u << lane) - 1u);                                          \
        T val = 0;                                                                         \
        if (look >= 0 && nearer == 0)                                                      \
          val = f == 2 ? ((volatile T*)prefixes)[look] : ((volatile T*)aggregates)[look];  \
        for (int d = 16; d > 0; d >>= 1) val += __shfl_xor_sync(0xFFFFFFFFu, val, d);      \
        prefix += val;                                                                     \
        if (found != 0) searching = false;                                                 \
        look -= 32;                                                                        \
      }                                                                                    \
      if (lane == 0) {                                                                     \
        prefixes[tile_id] = prefix + block_total;                                          \
        __threadfence();                                                                   \
        atomicExch(&flags[tile_id], 2);                                                    \
      }                                                                                    \
    }                                                                                      \
    if (lane == 0) carry = prefix;                                                         \
  }                                                                                        \
  __syncthreads();                                                                         \
  T run = carry + before;                                                                  \
  for (int k = 0; k < SCAN_ITEMS; ++k) {                                                   \
    run += tile[first + k];                                                                \
    tile[first + k] = run;                                                                 \
  }                                                                                        \
  __syncthreads();                                                                         \
  for (int k = 0; k < SCAN_ITEMS; ++k) {                                                   \
    int j = k * 256 + t;                                                                   \
    if (base + j < n) out[base + j] = tile[j];                                             \
  }                                                                                        \
}
DEFINE_SCAN(scan_f32, float)
DEFINE_SCAN(scan_i32, int)

// Register-blocked SGEMM: the algorithm of cupric.kernels.gemm (128x128 block tiles, 8-deep
// k slices double-buffered in shared memory, an 8x8 sub-tile per thread in two 4x4 halves).
extern "C" __global__ void __launch_bounds__(256) sgemm_blocked(
    const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ c,
    int m, int n, int kk) {
  __shared__ __align__(16) float a_s[2][8][128 + 4];
  __shared__ __align__(16) float b_s[2][8][128];
  float acc[8][8] = {};
  float a_frag[8], b_frag[8], a_next[4], b_next[4];
  int t = threadIdx.x, tx4 = (t & 15) * 4, ty4 = (t >> 4) * 4;
  int bm = blockIdx.y * 128, bn = blockIdx.x * 128;
  int tiles = (kk + 7) / 8;
  for (int q = 0; q < 4; ++q) {
    int ar = bm + q * 32 + (t >> 3), ac = t & 7;
    a_next[q] = ar < m && ac < kk ? a[(i64)ar * kk + ac] : 0.f;
    int br = q * 2 + (t >> 7), bc = bn + (t & 127);
    b_next[q] = br < kk && bc < n ? b[(i64)br * n + bc] : 0.f;
  }
  for (int q = 0; q < 4; ++q) {
    a_s[0][t & 7][q * 32 + (t >> 3)] = a_next[q];
    b_s[0][q * 2 + (t >> 7)][t & 127] = b_next[q];
  }
  __syncthreads();
  for (int kt = 0; kt < tiles; ++kt) {
    int cur = kt & 1;
    bool more = kt + 1 < tiles;
    if (more) {
      int k0 = (kt + 1) * 8;
      for (int q = 0; q < 4; ++q) {
        int ar = bm + q * 32 + (t >> 3), ac = k0 + (t & 7);
        a_next[q] = ar < m && ac < kk ? a[(i64)ar * kk + ac] : 0.f;
        int br = k0 + q * 2 + (t >> 7), bc = bn + (t & 127);
        b_next[q] = br < kk && bc < n ? b[(i64)br * n + bc] : 0.f;
      }
    }
    for (int k = 0; k < 8; ++k) {
      for (int i = 0; i < 4; ++i) {
        a_frag[i] = a_s[cur][k][ty4 + i];
        a_frag[i + 4] = a_s[cur][k][ty4 + i + 64];
        b_frag[i] = b_s[cur][k][tx4 + i];
        b_frag[i + 4] = b_s[cur][k][tx4 + i + 64];
      }
      for (int i = 0; i < 8; ++i)
        for (int j = 0; j < 8; ++j) acc[i][j] += a_frag[i] * b_frag[j];
    }
    if (more) {
      int nxt = 1 - cur;
      for (int q = 0; q < 4; ++q) {
        a_s[nxt][t & 7][q * 32 + (t >> 3)] = a_next[q];
        b_s[nxt][q * 2 + (t >> 7)][t & 127] = b_next[q];
      }
    }
    __syncthreads();
  }
  for (int i = 0; i < 8; ++i) {
    int row = bm + ty4 + i + (i >= 4 ? 60 : 0);
    for (int j = 0; j < 8; ++j) {
      int col = bn + tx4 + j + (j >= 4 ? 60 : 0);
      if (row < m && col < n) c[(i64)row * n + col] = acc[i][j];
    }
  }
}

// Mandelbrot: the algorithm of cupric.kernels.image.mandelbrot_kernel (one thread per
// pixel, float64, escape when |z|^2 > 4).
extern "C" __global__ void mandelbrot(unsigned char* out, i64 height, i64 width, double x0,
                                      double y0, double dx, double dy, int max_iter) {
  i64 col = (i64)blockIdx.x * blockDim.x + threadIdx.x;
  i64 row = (i64)blockIdx.y * blockDim.y + threadIdx.y;
  if (row >= height || col >= width) return;
  double cx = x0 + col * dx, cy = y0 + row * dy, zx = 0.0, zy = 0.0;
  int k = 0;
  while (k < max_iter) {
    double zx2 = zx * zx, zy2 = zy * zy;
    if (zx2 + zy2 > 4.0) break;
    zy = 2.0 * zx * zy + cy;
    zx = zx2 - zy2 + cx;
    ++k;
  }
  out[row * width + col] = k >= max_iter ? 0 : (unsigned char)(1 + (254 * k) / max_iter);
}

extern "C" __global__ void histogram_u8(const unsigned char* __restrict__ x, i64 n,
                                        const double* __restrict__ edges, double lo, double hi,
                                        double norm, long long* counts, i64 bins) {
  __shared__ u32 hist[4096];
  for (i64 j = threadIdx.x; j < bins; j += blockDim.x) hist[j] = 0;
  __syncthreads();
  i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x;
  i64 step = (i64)blockDim.x * gridDim.x;
  for (; i < n; i += step) {
    double v = (double)x[i];
    if (!(v >= lo && v <= hi)) continue;
    i64 b = (i64)((v - lo) * norm);
    if (b == bins) b -= 1;
    if (v < edges[b]) b -= 1;
    else if (b != bins - 1 && v >= edges[b + 1]) b += 1;
    atomicAdd(&hist[b], 1u);
  }
  __syncthreads();
  for (i64 j = threadIdx.x; j < bins; j += blockDim.x)
    if (hist[j]) atomicAdd((unsigned long long*)&counts[j], (unsigned long long)hist[j]);
}
'''


class Timings(dict):
    """Median seconds per call of each contender; `paired` holds, for each peer of
    "cupric", the per-round ratio peer time / cupric time (median and spread)."""

    paired: dict


class Timer(EventTimer):
    """CUDA-event timing of callables on one CuPy stream (device time only: see
    `EventTimer.device`), and host cost per call."""

    def compare(self, impls: dict, repeats: int = REPEATS, batch: int = BATCH) -> Timings:
        """Median seconds per call of each implementation, from interleaved rounds whose
        order rotates, and per-round ratios against "cupric"."""
        samples = self.rounds(impls, repeats, batch, warmup=WARMUP)
        times = Timings((name, statistics.median(t)) for name, t in samples.items())
        times.paired = {}
        if "cupric" in samples:
            for name, t in samples.items():
                if name != "cupric":
                    times.paired[name] = paired_ratio(samples["cupric"], t)
        return times


def _numba(cp, stream):
    """numba.cuda and an external stream over CuPy's, or (None, reason)."""
    try:
        if not hasattr(np, "row_stack"):
            np.row_stack = np.vstack  # numba-cuda 0.30 with NumPy 2.5
        from numba import cuda
        return cuda, cuda.external_stream(stream.ptr)
    except Exception as exc:  # reported in the results; other peers still run
        return None, f"{type(exc).__name__}: {exc}"


def _paired(entry: dict, times) -> dict:
    """Add the per-round ratios of `times` (a `Timings`) to the result entry."""
    paired = getattr(times, "paired", None)
    if paired:
        entry["paired"] = paired
    return entry


class Suite:
    """The benchmarks; each method returns its result entry."""

    def __init__(self) -> None:
        import cupy as cp
        self.cp = cp
        self.stream = cp.cuda.Stream(non_blocking=True)
        self.s = self.stream.ptr
        self.timer = Timer(cp, self.stream, BATCH)
        self.module = cp.RawModule(code=CUDA_C, options=("-std=c++17",))
        self.numba, self.numba_stream = _numba(cp, self.stream)
        self.rs = cp.random.RandomState(7)
        self.copy_GBps = None

    def fn(self, name):
        return self.module.get_function(name)

    @staticmethod
    def covering_blocks(n, per_thread=4, block=256):
        """The grid cupric's elementwise kernels launch (covering the array once), for
        their CUDA C twins."""
        from cupric.kernels._common import covering_blocks
        return covering_blocks(n, block, per_thread, simulator=False)

    @staticmethod
    def bounded_blocks(n, per_thread=4, block=256):
        """The grid cupric's reductions and histogram launch (at most WAVES_PER_SM blocks
        per SM), for their CUDA C twins."""
        from cupric.kernels._common import blocks_for
        return blocks_for(n, block, per_thread, simulator=False)

    def check_each(self, label: str, impls: dict, reset, check, skip=()) -> None:
        """Every contender (but those in `skip`, whose results land elsewhere) run once
        on the shared output, reset before each, and its result checked."""
        for name, fn in impls.items():
            if name not in skip:
                assert_on_device(f"{label}: {name}", fn, check, reset=reset)

    # -- the copy reference ------------------------------------------------------------

    def copy_rate(self) -> dict:
        cp = self.cp
        a = self.rs.random_sample(N, dtype=cp.float32)
        b = cp.empty_like(a)

        def memcpy():
            cp.cuda.runtime.memcpyAsync(b.data.ptr, a.data.ptr, a.nbytes,
                                        cp.cuda.runtime.memcpyDeviceToDevice, self.s)
        t = self.timer.compare({"d2d_copy": memcpy})["d2d_copy"]
        self.copy_GBps = 2 * a.nbytes / t / 1e9
        return {"GBps": self.copy_GBps, "bytes": 2 * a.nbytes}

    def _bandwidth(self, times: dict, nbytes: int) -> dict:
        entry: dict = {"bytes": nbytes}
        for name, t in times.items():
            entry[name] = {"ms": t * 1e3, "GBps": nbytes / t / 1e9,
                           "of_copy": nbytes / t / 1e9 / self.copy_GBps}
        _paired(entry, times)
        return entry

    # -- elementwise -------------------------------------------------------------------

    def elementwise(self) -> dict:
        cp = self.cp
        from cupric.kernels import elementwise as ew
        x = self.rs.random_sample(N, dtype=cp.float32)
        y = self.rs.random_sample(N, dtype=cp.float32)
        # Every contender writes the same output array.
        out = cp.empty_like(x)
        alpha = np.float32(2.5)
        n64 = np.int64(N)
        # The library's geometry, for the CUDA C twins: vecadd and saxpy cover the array
        # with STREAM_BLOCK-thread blocks, memcpy and fill with BLOCK-thread ones.
        from cupric.kernels._common import Call
        call = Call("benchmark")
        wide_blocks, wide = ew.quad_geometry(call, out, ew.STREAM_BLOCK)
        blocks, block = ew.quad_geometry(call, out, ew.BLOCK)
        # The geometry of the library before it launched covering grids (<= 8 blocks per
        # SM): its kernels launched that way, for a before/after in the same run.
        bounded = self.bounded_blocks(N)
        c_vecadd, c_saxpy, c_copy, c_fill = (self.fn(k) for k in
                                             ("vecadd", "saxpy", "copy", "fill"))
        s, st = self.s, self.stream
        results = {}

        benches = {
            "vecadd": ({
                "cupric": lambda: ew.vecadd(x, y, out=out, stream=s),
                "cuda_c": lambda: c_vecadd((wide_blocks,), (wide,), (x, y, out, n64),
                                           stream=st),
                "cupy": lambda: cp.add(x, y, out=out),
                "cupric_bounded_grid": lambda: ew.vecadd_kernel[bounded, 256, s](x, y, out),
            }, 3 * 4 * N, lambda: cp.array_equal(out, x + y)),
            "saxpy": ({
                "cupric": lambda: ew.saxpy(alpha, x, y, out=out, stream=s),
                "cuda_c": lambda: c_saxpy((wide_blocks,), (wide,), (alpha, x, y, out, n64),
                                          stream=st),
                "cupric_bounded_grid": lambda: ew.saxpy_kernel[bounded, 256, s](
                    alpha, x, y, out),
            }, 3 * 4 * N, lambda: cp.allclose(out, alpha * x + y, rtol=1e-6)),
            "memcpy": ({
                "cupric": lambda: ew.memcpy(x, out=out, stream=s),
                "cuda_c": lambda: c_copy((blocks,), (block,), (x, out, n64), stream=st),
                "cupy": lambda: cp.copyto(out, x),
                "cupric_bounded_grid": lambda: ew.copy_kernel[bounded, 256, s](x, out),
            }, 2 * 4 * N, lambda: cp.array_equal(out, x)),
            "fill": ({
                "cupric": lambda: ew.fill(out, 1.5, stream=s),
                "cuda_c": lambda: c_fill((blocks,), (block,), (out, np.float32(1.5), n64),
                                         stream=st),
                "cupy": lambda: out.fill(1.5),
                "cupric_bounded_grid": lambda: ew.fill_kernel[bounded, 256, s](
                    out, np.float32(1.5)),
            }, 4 * N, lambda: bool((out == 1.5).all())),
        }
        cuda, ns = self.numba, self.numba_stream
        if cuda is not None:
            @cuda.jit
            def n_vecadd(a, b, o):
                i = cuda.grid(1)
                step = cuda.gridsize(1)
                while i < o.size:
                    o[i] = a[i] + b[i]
                    i += step

            @cuda.jit
            def n_saxpy(al, a, b, o):
                i = cuda.grid(1)
                step = cuda.gridsize(1)
                while i < o.size:
                    o[i] = al * a[i] + b[i]
                    i += step
            nx, ny, nout = (cuda.as_cuda_array(v) for v in (x, y, out))
            # One element per thread and trip: numba's kernel runs on a bounded grid (at
            # most 8 blocks per SM) and, beside it, on a grid covering the array once.
            nblocks = self.bounded_blocks(N, 1)
            cblocks = self.covering_blocks(N, 1)
            benches["vecadd"][0]["numba_cuda"] = \
                lambda: n_vecadd[nblocks, 256, ns](nx, ny, nout)
            benches["vecadd"][0]["numba_cuda_covering_grid"] = \
                lambda: n_vecadd[cblocks, 256, ns](nx, ny, nout)
            benches["saxpy"][0]["numba_cuda"] = \
                lambda: n_saxpy[nblocks, 256, ns](alpha, nx, ny, nout)
        for name, (impls, nbytes, check) in benches.items():
            self.check_each(name, impls, lambda: out.fill(cp.nan), check)
            results[name] = self._bandwidth(self.timer.compare(impls), nbytes)
            geometry = (wide_blocks, wide) if name in ("vecadd", "saxpy") else (blocks, block)
            results[name]["grid"] = {"cupric": geometry, "cuda_c": geometry,
                                     "cupric_bounded_grid": (bounded, 256)}
        return results

    def image(self) -> dict:
        cp = self.cp
        from cupric.kernels import image
        h, w = IMAGE
        img = self.rs.randint(0, 256, (h, w, 4), dtype=cp.uint8)
        out = cp.empty((h, w), cp.uint8)
        pixels = img.view(cp.uint32).reshape(-1)
        c_gray = self.fn("rgba2gray")
        blocks = self.bounded_blocks(h * w)  # as cupric's rgba2gray
        impls = {
            "cupric": lambda: image.rgba2gray(img, out=out, stream=self.s),
            "cuda_c": lambda: c_gray((blocks,), (256,), (pixels, out, np.int64(h * w)),
                                     stream=self.stream),
        }
        # Both write `out`; each must match BT.601 rounded to nearest (within 1 level).
        rgb = img[..., :3].astype(cp.float32)
        expect = cp.floor(rgb[..., 0] * np.float32(0.299) + rgb[..., 1] * np.float32(0.587)
                          + rgb[..., 2] * np.float32(0.114) + np.float32(0.5))
        self.check_each("rgba2gray", impls, lambda: out.fill(0), lambda: int(
            cp.abs(out.astype(cp.int32) - expect.astype(cp.int32)).max()) <= 1)
        entry = {"rgba2gray": self._bandwidth(self.timer.compare(impls), 5 * h * w)}
        entry["rgba2gray"]["grid"] = {"cupric": blocks, "cuda_c": blocks}
        # Mandelbrot: compute-bound (float64), beside its CUDA C twin, in Mpixel/s.
        mw, mh = 4096, 4096
        frame = cp.empty((mh, mw), cp.uint8)
        dx = 3.0 / mw
        c_mandel = self.fn("mandelbrot")
        mgrid = ((mw + 31) // 32, (mh + 7) // 8)
        impls = {
            "cupric": lambda: image.mandelbrot(mw, mh, max_iter=256, out=frame,
                                               stream=self.s),
            "cuda_c": lambda: c_mandel(mgrid, (32, 8), (
                frame, np.int64(mh), np.int64(mw), np.float64(-0.5 - dx * (mw - 1) / 2),
                np.float64(dx * (mh - 1) / 2), np.float64(dx), np.float64(-dx),
                np.int32(256)), stream=self.stream),
        }
        # Both write `frame`: the CUDA C result, then cupric's against it.
        impls["cuda_c"]()
        self.stream.synchronize()
        twin = frame.copy()
        self.check_each("mandelbrot", {"cupric": impls["cupric"]}, lambda: frame.fill(255),
                        lambda: float((frame != twin).mean()) <= 0.01)
        times = self.timer.compare(impls, repeats=3, batch=2)
        entry["mandelbrot_4096x4096_256"] = _paired({
            name: {"ms": t * 1e3, "Mpixel_s": mw * mh / t / 1e6}
            for name, t in times.items()}, times)
        return entry

    def transpose(self) -> dict:
        cp = self.cp
        from cupric.kernels import transpose
        rows, cols = MATRIX
        a = self.rs.random_sample((rows, cols), dtype=cp.float32)
        out = cp.empty((cols, rows), cp.float32)  # every contender writes it
        c_t = self.fn("transpose")
        grid = ((cols + 31) // 32, (rows + 31) // 32)
        impls = {
            "cupric": lambda: transpose.transpose(a, out=out, stream=self.s),
            "cupric_tile64": lambda: transpose.transpose(a, out=out, stream=self.s,
                                                         tile_dim=64),
            "cuda_c": lambda: c_t(grid, (32, 8), (a, out, np.int64(rows), np.int64(cols)),
                                  stream=self.stream),
            "cupy": lambda: cp.copyto(out, a.T),
        }
        cuda, ns = self.numba, self.numba_stream
        if cuda is not None:
            from numba import float32

            @cuda.jit
            def n_transpose(src, dst):
                tile = cuda.shared.array((32, 33), float32)
                tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
                col = cuda.blockIdx.x * 32 + tx
                row = cuda.blockIdx.y * 32 + ty
                for k in range(0, 32, 8):
                    if col < src.shape[1] and row + k < src.shape[0]:
                        tile[ty + k, tx] = src[row + k, col]
                cuda.syncthreads()
                ocol = cuda.blockIdx.y * 32 + tx
                orow = cuda.blockIdx.x * 32 + ty
                for k in range(0, 32, 8):
                    if ocol < src.shape[0] and orow + k < src.shape[1]:
                        dst[orow + k, ocol] = tile[tx, ty + k]
            na, nout = cuda.as_cuda_array(a), cuda.as_cuda_array(out)
            impls["numba_cuda"] = lambda: n_transpose[grid, (32, 8), ns](na, nout)
        self.check_each("transpose", impls, lambda: out.fill(cp.nan),
                        lambda: cp.array_equal(out, a.T))
        return {"transpose": self._bandwidth(self.timer.compare(impls), 2 * 4 * rows * cols)}

    # -- reductions and scans ----------------------------------------------------------

    def reductions(self) -> dict:
        cp = self.cp
        from cupric.kernels import reduce
        x = self.rs.standard_normal(N, dtype=cp.float32)
        y = self.rs.standard_normal(N, dtype=cp.float32)
        out_f = cp.empty((), cp.float32)
        out_i = cp.empty((), cp.int64)
        blocks = self.bounded_blocks(N)
        partials = cp.empty(blocks, cp.float32)
        counter = cp.zeros(1, cp.uint32)
        c_sum = self.fn("reduce_sum")
        s = self.s
        benches = {
            "sum": ({"cupric": lambda: reduce.sum(x, out=out_f, stream=s),
                     "cuda_c": lambda: c_sum((blocks,), (256,), (x, np.int64(N), out_f, partials,
                                                                 counter), stream=self.stream),
                     "cupy": lambda: cp.sum(x)},
                    4 * N, lambda: abs(float(out_f) - float(cp.sum(x, dtype=cp.float64)))
                    < 1e-3 * float(cp.abs(x).sum())),
            "min": ({"cupric": lambda: reduce.min(x, out=out_f, stream=s),
                     "cupy": lambda: cp.min(x)},
                    4 * N, lambda: float(out_f) == float(cp.min(x))),
            "argmax": ({"cupric": lambda: reduce.argmax(x, out=out_i, stream=s),
                        "cupy": lambda: cp.argmax(x)},
                       4 * N, lambda: int(out_i) == int(cp.argmax(x))),
            "dot": ({"cupric": lambda: reduce.dot(x, y, out=out_f, stream=s),
                     "cupy": lambda: cp.dot(x, y)},
                    8 * N, lambda: abs(float(out_f) - float(cp.dot(x.astype(cp.float64),
                                                                   y.astype(cp.float64))))
                    < 1e-3 * float(cp.sqrt(cp.dot(x, x) * cp.dot(y, y)))),
        }
        cuda, ns = self.numba, self.numba_stream
        if cuda is not None:
            sum_reduce = cuda.reduce(lambda a, b: a + b)
            nx = cuda.as_cuda_array(x)
            nres = cuda.device_array(1, np.float32)
            benches["sum"][0]["numba_cuda"] = lambda: sum_reduce(nx, res=nres, stream=ns)
        results = {}
        for name, (impls, nbytes, check) in benches.items():
            reset = (lambda: out_i.fill(-1)) if name == "argmax" else \
                (lambda: out_f.fill(cp.nan))
            self.check_each(name, impls, reset, check, skip=("cupy", "numba_cuda"))
            results[name] = self._bandwidth(self.timer.compare(impls), nbytes)
        return results

    def scans(self) -> dict:
        cp = self.cp
        from cupric.kernels import scan
        results = {}
        for label, x, dtype in (
                ("cumsum_f32", self.rs.random_sample(N, dtype=cp.float32), cp.float32),
                ("cumsum_i32", self.rs.randint(-100, 100, N, dtype=cp.int32), cp.int32)):
            out = cp.empty(N, dtype)  # every contender writes it
            tiles = -(-N // scan.TILE)
            counter = cp.zeros(1, cp.uint32)
            flags = cp.zeros(tiles, cp.int32)
            aggregates = cp.empty(tiles, dtype)
            prefixes = cp.empty(tiles, dtype)
            c_scan = self.fn("scan_f32" if dtype == cp.float32 else "scan_i32")

            def c_inclusive_scan():
                # As cupric: clear the tile counter and the look-back flags, then scan.
                counter.fill(0)
                flags.fill(0)
                c_scan((tiles,), (256,), (x, out, np.int64(N), counter, flags, aggregates,
                                          prefixes), stream=self.stream)
            impls = {
                "cupric": lambda: scan.inclusive_scan(x, out=out, dtype=dtype, stream=self.s),
                "cuda_c": c_inclusive_scan,
                "cupy": lambda: cp.cumsum(x, dtype=dtype, out=out),
            }
            # Integer sums are exact (int32 wraps alike everywhere); float sums are
            # compared with float64 ones.
            exact = cp.cumsum(x, dtype=cp.int32 if dtype == cp.int32 else cp.float64)
            if dtype == cp.int32:
                def check():
                    return bool(cp.array_equal(out, exact))
            else:
                def check():
                    return bool(cp.allclose(out, exact, rtol=1e-4))
            self.check_each(f"inclusive_scan ({label})", impls,
                            lambda: out.fill(-7 if dtype == cp.int32 else cp.nan), check)
            results[label] = self._bandwidth(self.timer.compare(impls), 2 * 4 * N)
        return results

    # -- GEMM --------------------------------------------------------------------------

    def gemm(self) -> dict:
        cp = self.cp
        import torch
        from cupric.kernels import gemm
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
        ts = torch.cuda.ExternalStream(self.s)
        results = {}
        for label, size, dtype in (("sgemm", GEMM_F32, cp.float32),
                                   ("dgemm", GEMM_F64, cp.float64)):
            a = self.rs.standard_normal((size, size), dtype=dtype)
            b = self.rs.standard_normal((size, size), dtype=dtype)
            out = cp.empty((size, size), dtype)  # every contender writes it
            ta, tb, tout = (torch.from_dlpack(v) for v in (a, b, out))

            def torch_mm():
                with torch.cuda.stream(ts):
                    torch.matmul(ta, tb, out=tout)
            impls = {"cupric": lambda: gemm.gemm(a, b, out, stream=self.s),
                     "cublas_torch": torch_mm}
            if dtype == cp.float32:
                c_sgemm = self.fn("sgemm_blocked")
                grid = ((size + 127) // 128, (size + 127) // 128)
                impls["cuda_c"] = lambda: c_sgemm(grid, (256,), (a, b, out, np.int32(size),
                                                                 np.int32(size),
                                                                 np.int32(size)),
                                                  stream=self.stream)
            # cuBLAS's product is the reference for the others.
            torch_mm()
            self.stream.synchronize()
            ref = out.copy()
            scale = float(cp.abs(ref).max())
            tol = 1e-4 if dtype == cp.float32 else 1e-12
            self.check_each(label, impls, lambda: out.fill(cp.nan),
                            lambda: float(cp.abs(out - ref).max()) <= tol * scale,
                            skip=("cublas_torch",))
            times = self.timer.compare(impls, repeats=5, batch=1)
            flops = 2 * size ** 3
            results[label] = _paired(
                {"n": size, **{name: {"ms": t * 1e3, "TFLOPs": flops / t / 1e12}
                               for name, t in times.items()}}, times)
            if label == "sgemm":
                tiled = self.timer.compare({"cupric_tiled": lambda: gemm.gemm(
                    a, b, out, algorithm="tiled", stream=self.s)}, repeats=2, batch=1)
                results[label]["cupric_tiled"] = {"ms": tiled["cupric_tiled"] * 1e3,
                                                  "TFLOPs": flops / tiled["cupric_tiled"] / 1e12}
        return results

    # -- sorts and histogram -------------------------------------------------------------

    def sorts(self) -> dict:
        cp = self.cp
        from cupric.kernels import sort
        n = SORT_N
        # Full 32-bit keys: every radix digit matters.
        x = (self.rs.random_sample(n, dtype=cp.float64) * 2.0 ** 32).astype(cp.uint64) \
            .astype(cp.uint32)
        out = cp.empty_like(x)  # cupric and the CUDA C twin write it
        keys = cp.empty(n, cp.uint32)  # n is a power of two >= CHUNK: no padding
        to_keys, from_keys = self.fn("to_keys"), self.fn("from_keys")
        sort_shared, merge_global, merge_shared = (self.fn(k) for k in (
            "bitonic_sort_shared", "bitonic_merge_global", "bitonic_merge_shared"))
        st = self.stream
        zero = np.uint32(0)
        n64 = np.int64(n)
        tblocks = self.bounded_blocks(n, 1)

        def c_bitonic():
            # The same network and launches as cupric.kernels.sort.bitonic_sort.
            to_keys((tblocks,), (256,), (x, keys, n64, n64, zero), stream=st)
            chunks = n // 2048
            sort_shared((chunks,), (1024,), (keys,), stream=st)
            k = 4096
            while k <= n:
                j = k >> 1
                while j >= 2048:
                    merge_global(((n // 2 + 255) // 256,), (256,),
                                 (keys, n64, np.int64(k), np.int64(j)), stream=st)
                    j >>= 1
                merge_shared((chunks,), (1024,), (keys, np.int64(k)), stream=st)
                k <<= 1
            from_keys((tblocks,), (256,), (keys, out, n64, zero), stream=st)

        expect = cp.sort(x)
        results = {}
        for label, fn in (("bitonic_u32", lambda: sort.bitonic_sort(x, out, stream=self.s)),
                          ("radix_u32", lambda: sort.radix_sort(x, out, stream=self.s))):
            impls = {"cupric": fn, "cupy_sort": lambda: cp.sort(x)}
            if label == "bitonic_u32":
                impls["cuda_c"] = c_bitonic
            self.check_each(label, impls, lambda: out.fill(0),
                            lambda: cp.array_equal(out, expect), skip=("cupy_sort",))
            times = self.timer.compare(impls, repeats=5, batch=2)
            results[label] = _paired(
                {"n": n, **{name: {"ms": t * 1e3, "Gkeys_s": n / t / 1e9}
                            for name, t in times.items()}}, times)
        return results

    def histogram(self) -> dict:
        cp = self.cp
        from cupric.kernels import histogram
        x = self.rs.randint(0, 256, N, dtype=cp.uint8)
        counts = cp.empty(256, cp.int64)  # cupric and the CUDA C twin write it
        edges = cp.asarray(np.linspace(0.0, 256.0, 257))
        c_hist = self.fn("histogram_u8")
        blocks = self.bounded_blocks(N)

        def c_histogram():
            counts.fill(0)
            c_hist((blocks,), (256,), (x, np.int64(N), edges, np.float64(0), np.float64(256),
                                       np.float64(1.0), counts, np.int64(256)),
                   stream=self.stream)
        impls = {
            "cupric": lambda: histogram.histogram(x, 256, (0, 256), out=counts, stream=self.s),
            "cuda_c": c_histogram,
            "cupy": lambda: cp.histogram(x, 256, (0, 256)),
        }
        expect, _ = cp.histogram(x, 256, (0, 256))
        self.check_each("histogram", impls, lambda: counts.fill(-1),
                        lambda: cp.array_equal(counts, expect), skip=("cupy",))
        return {"histogram_u8_256": self._bandwidth(self.timer.compare(impls), N)}


BENCHMARKS = ("elementwise", "image", "transpose", "reductions", "scans", "gemm", "sorts",
              "histogram")
#: Host cost per call of the ready kernels, with every array kind: benchmarks/host_cost.py.


def summarize(results: dict) -> list[dict]:
    """One row per benchmark: cupric's rate, ratios against each peer (peer time over
    cupric time: > 1 means cupric is faster), fraction of the copy rate, the goal."""
    rows = []
    groups = {"elementwise": "bandwidth", "image": "bandwidth", "transpose": "bandwidth",
              "reductions": "reduction", "scans": "reduction", "gemm": "gemm",
              "sorts": "sort", "histogram": "atomics"}
    for group, kind in groups.items():
        for name, entry in (results.get(group) or {}).items():
            if not isinstance(entry, dict) or "cupric" not in entry:
                continue
            cup = entry["cupric"]
            paired = entry.get("paired") or {}
            peers = {}
            for peer, timing in entry.items():
                if peer != "cupric" and isinstance(timing, dict) and "ms" in timing:
                    # The median of the per-round ratios where there is one.
                    peers[peer] = paired[peer]["median"] if peer in paired else \
                        timing["ms"] / cup["ms"]
            row = {"name": name, "kind": kind, "cupric_ms": cup["ms"], "vs": peers,
                   "of_copy": cup.get("of_copy")}
            if "TFLOPs" in cup:
                row["rate"] = f"{cup['TFLOPs']:.1f} TFLOP/s"
            elif "GBps" in cup:
                row["rate"] = f"{cup['GBps']:.0f} GB/s"
            elif "Gkeys_s" in cup:
                row["rate"] = f"{cup['Gkeys_s']:.2f} Gkey/s"
            elif "Mpixel_s" in cup:
                row["rate"] = f"{cup['Mpixel_s']:.0f} Mpix/s"
            row["goal"] = _goal(name, kind, row)
            rows.append(row)
    return rows


def _goal(name: str, kind: str, row: dict) -> str:
    vs = row["vs"]
    if kind == "bandwidth" and "cuda_c" in vs and row.get("of_copy") is not None:
        ok = (row["of_copy"] or 0) >= BANDWIDTH_GOAL and vs["cuda_c"] >= 1.0
        return ("met" if ok else "MISSED") + " (>=85% copy, >=1.0x C)"
    if kind == "reduction":
        lib = vs.get("cupy")
        return ("met" if lib and lib >= 0.9 else "MISSED") + " (>=0.9x CuPy)"
    if name == "sgemm":
        return ("met" if vs.get("cublas_torch", 0) >= 0.6 else "MISSED") + \
            " (>=0.6x cuBLAS FP32)"
    if name.startswith("bitonic"):
        return ("met" if vs.get("cuda_c", 0) >= 1.0 else "MISSED") + " (>=1.0x CUDA C)"
    return "-"


def print_table(results: dict) -> None:
    for name, info in (results.get("toolchain") or {}).items():
        if "error" not in info:
            regs = {k: v.get("registers") for k, v in info["cupric"].items()}
            print(f"toolchain ({name}): libNVVM {info['nvvm']}, {info['linker']} "
                  f"{info['linker_release']}; registers cupric {regs}, CUDA C "
                  f"{info['cuda_c_registers']}")
    print(f"cupric.kernels on {results.get('device')}; d2d copy "
          f"{results.get('copy', {}).get('GBps', float('nan')):.0f} GB/s (read+write)")
    print("ratios are peer time / cupric time (>1: cupric faster)")
    header = f"{'benchmark':26s} {'cupric':>9s} {'rate':>15s} {'%copy':>6s}  {'vs peers':44s} goal"
    print(header)
    print("-" * len(header))
    for row in summarize(results):
        peers = "  ".join(f"{k} {v:.2f}x" for k, v in row["vs"].items())
        frac = f"{100 * row['of_copy']:5.1f}" if row.get("of_copy") else "    -"
        print(f"{row['name']:26s} {row['cupric_ms']:7.3f}ms {row.get('rate', ''):>15s} "
              f"{frac:>6s}  {peers:44s} {row['goal']}")
    for name in BENCHMARKS:
        entry = results.get(name)
        if isinstance(entry, dict) and "error" in entry:
            print(f"{name}: FAILED {entry['error']}")


def _toolchain(suite) -> dict:
    """Which libNVVM and linker built cupric's kernels here, and registers per thread of
    the kernels whose twins are compared (cupric's from the assembler's report, the CUDA
    C twins' from the driver)."""
    from cupric.kernels import gemm, scan
    info: dict = {}
    cases = {
        "sgemm": (gemm.blocked_kernel(np.float32), "Array[f32, 1, 'C'], Array[f32, 1, 'C'], "
                  "Array[f32, 1, 'C'], i32, i32, i32, i32, i32, i32, f32, f32",
                  "sgemm_blocked"),
        "scan_f32": (scan.scan_kernel(np.float32), "Array[f32, 1, 'C'], Array[f32, 1, 'C'], "
                     "bool, i32, Array[u32, 1, 'C'], Array[i32, 1, 'C'], Array[f32, 1, 'C'], "
                     "Array[f32, 1, 'C']", "scan_f32"),
    }
    for name, (kern, signature, twin) in cases.items():
        try:
            art = kern.compile(signature)
            info[name] = {"nvvm": str(art.nvvm_release), "linker": str(art.linker),
                          "linker_release": str(art.linker_release),
                          "cupric": {k: v.to_dict() for k, v in art.resource_usage.items()},
                          "cuda_c_registers": suite.fn(twin).attributes["num_regs"]}
        except Exception as exc:  # diagnostics only: reported, never fatal
            info[name] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    return info


def run(json_path: str | None = None, only=None, quick: bool = False) -> dict:
    """Run the benchmarks (all, or those named in `only`); print the table; return (and
    optionally write as JSON) the results."""
    if quick and not only:
        only = ("elementwise", "scans", "sorts", "histogram")
    suite = Suite()
    cp = suite.cp
    results: dict = {"device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
                     "n": N}
    with suite.stream:
        results["copy"] = suite.copy_rate()
    if suite.numba is None:
        results["numba_cuda"] = suite.numba_stream
    for name in (only or BENCHMARKS):
        try:
            # CuPy's own work (inputs, checks, its routines) goes on the timed stream
            # too, so everything is ordered on one stream.
            with suite.stream:
                results[name] = getattr(suite, name)()
        except Exception as exc:  # reported in the table and the JSON; others still run
            traceback.print_exc()
            results[name] = {"error": f"{type(exc).__name__}: {exc}"[:400]}
        suite.stream.synchronize()
        cp.get_default_memory_pool().free_all_blocks()
    results["toolchain"] = _toolchain(suite)
    results["summary"] = summarize(results)
    results["title"] = "Ready kernels (cupric.kernels), device time"
    results["method"] = (
        "Each kernel beside the same algorithm in CUDA C (CuPy RawKernel, launched on "
        "cupric's grid), numba-cuda and the routine users would otherwise call (CuPy, cuBLAS "
        "through PyTorch); the same random inputs and output array, every contender's result "
        "checked before timing. Device time only: a lead-in call, then a batch of calls "
        "between two events; rounds with the order rotated; ratios are the median per-round "
        "peer time / cupric time (above 1: cupric faster). numba-cuda's one-element "
        "grid-stride kernels run on the grid faster for them (at most 8 blocks per SM). "
        "% of copy: bandwidth over a device-to-device copy of the same run.")
    rows = []
    for row in results["summary"]:
        peers = "; ".join(f"{k} {v:.2f}" for k, v in row["vs"].items())
        rows.append([row["name"], row["cupric_ms"], row.get("rate", ""),
                     100 * row["of_copy"] if row.get("of_copy") else None, peers, row["goal"]])
    rows += [[name, None, "", None, "", f"error: {results[name]['error']}"]
             for name in BENCHMARKS if isinstance(results.get(name), dict)
             and "error" in results[name]]
    results["tables"] = [table(
        f"Device time (copy: {results.get('copy', {}).get('GBps', float('nan')):.0f} GB/s)",
        [("kernel", ""), ("cupric ms", ".3f"), ("rate", ""), ("% of copy", ".1f"),
         ("peer time / cupric time", ""), ("goal", "")], rows)]
    print_table(results)
    if json_path:
        with open(json_path, "w") as fh:
            json.dump(results, fh, indent=1, default=str)
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json")
    parser.add_argument("--only", help="comma-separated: " + ",".join(BENCHMARKS))
    args = parser.parse_args()
    result = run(args.json, args.only.split(",") if args.only else None)
    failed = [n for n in BENCHMARKS if isinstance(result.get(n), dict) and "error" in result[n]]
    sys.exit(1 if failed else 0)
