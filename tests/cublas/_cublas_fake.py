"""Host-memory stand-ins for the CPU lane: device arrays over NumPy memory and a column-major
GEMM emulator that replaces cuBLAS's GEMM entry points.

The emulator reads and writes through the raw addresses the wrappers pass, exactly as
cuBLAS would on the device, so the row-major/column-major translation, leading dimensions
and batch strides are checked with real data on a machine without a GPU.
"""

from __future__ import annotations

import ctypes

import numpy as np

from cupric.cublas import handle as handle_mod

_PREFIX_DTYPE = {"S": np.float32, "D": np.float64, "C": np.complex64, "Z": np.complex128}
_CUDA_DTYPE = {0: np.float32, 1: np.float64, 2: np.float16, 4: np.complex64,
               5: np.complex128, 3: np.int8, 10: np.int32}


class FakeDeviceArray:
    """Exposes a NumPy array's memory through ``__cuda_array_interface__`` (version 2,
    no stream), as a GPU library would expose device memory."""

    def __init__(self, array: np.ndarray, readonly: bool = False):
        self.array = array
        self.readonly = readonly

    @property
    def __cuda_array_interface__(self):
        a = self.array
        return {"shape": a.shape, "typestr": a.dtype.str,
                "data": (a.__array_interface__["data"][0], self.readonly),
                "strides": a.strides, "version": 2}


def dev(array, readonly=False):
    """A cupric DeviceBuffer over host memory (through the CAI import path)."""
    from cupric.runtime.interop import as_device_array
    return as_device_array(FakeDeviceArray(array, readonly))


def view(ptr: int, dtype, rows: int, cols: int, ld: int) -> np.ndarray:
    """The column-major matrix (rows x cols, leading dimension ld) at a raw address."""
    dtype = np.dtype(dtype)
    if rows == 0 or cols == 0:
        return np.zeros((rows, cols), dtype)
    count = ld * (cols - 1) + rows
    raw = (ctypes.c_char * (count * dtype.itemsize)).from_address(ptr)
    flat = np.frombuffer(raw, dtype=dtype)
    return np.lib.stride_tricks.as_strided(flat, shape=(rows, cols),
                                           strides=(dtype.itemsize, ld * dtype.itemsize))


def scalar(ptr: int, dtype):
    dtype = np.dtype(dtype)
    raw = (ctypes.c_char * dtype.itemsize).from_address(ptr)
    return np.frombuffer(raw, dtype=dtype)[0]


def _op(matrix, op):
    return matrix if op == 0 else (matrix.T if op == 1 else matrix.conj().T)


def _gemm(dtype, ta, tb, m, n, k, pa, a, lda, b, ldb, pb, c, ldc, scale=None):
    scale = dtype if scale is None else scale
    rows_a, cols_a = (m, k) if ta == 0 else (k, m)
    rows_b, cols_b = (k, n) if tb == 0 else (n, k)
    A = view(a, dtype[0], rows_a, cols_a, lda)
    B = view(b, dtype[0], rows_b, cols_b, ldb)
    C = view(c, dtype[1], m, n, ldc)
    alpha, beta = scalar(pa, scale), scalar(pb, scale)
    result = alpha * (_op(A, ta).astype(np.float64 if dtype[0] != np.complex64 and
                                        dtype[0] != np.complex128 else np.complex128)
                      @ _op(B, tb))
    if beta != 0:
        result = result + beta * C
    C[...] = result.astype(dtype[1])


class Emulator:
    """Replaces the GEMM functions in cupric.cublas.handle's function table."""

    def __init__(self):
        self.calls: list[tuple] = []

    def install(self, monkeypatch):
        table = {}
        for p, dt in _PREFIX_DTYPE.items():
            table[f"cublas{p}gemm"] = self._classic(p, (dt, dt))
            table[f"cublas{p}gemmStridedBatched"] = self._strided(p, (dt, dt))
            table[f"cublas{p}gemmBatched"] = self._pointers(p, (dt, dt))
        table["cublasGemmEx"] = self._ex
        table["cublasGemmStridedBatchedEx"] = self._ex_strided
        install_table(monkeypatch, _Table(table))


    def _classic(self, p, dtype):
        def fn(h, ta, tb, m, n, k, pa, a, lda, b, ldb, pb, c, ldc):
            self.calls.append((f"{p}gemm", ta, tb, m, n, k, lda, ldb, ldc))
            _gemm(dtype, ta, tb, m, n, k, pa, a, lda, b, ldb, pb, c, ldc)
            return 0
        return fn

    def _strided(self, p, dtype):
        def fn(h, ta, tb, m, n, k, pa, a, lda, sa, b, ldb, sb, pb, c, ldc, sc, batch):
            self.calls.append((f"{p}gemmStridedBatched", ta, tb, m, n, k, lda, ldb, ldc,
                               sa, sb, sc, batch))
            item_in = np.dtype(dtype[0]).itemsize
            item_out = np.dtype(dtype[1]).itemsize
            for i in range(batch):
                _gemm(dtype, ta, tb, m, n, k, pa, a + i * sa * item_in, lda,
                      b + i * sb * item_in, ldb, pb, c + i * sc * item_out, ldc)
            return 0
        return fn

    def _pointers(self, p, dtype):
        def fn(h, ta, tb, m, n, k, pa, a, lda, b, ldb, pb, c, ldc, batch):
            self.calls.append((f"{p}gemmBatched", ta, tb, m, n, k, lda, ldb, ldc, batch))
            arrays = [view(ptr, np.uint64, batch, 1, batch)[:, 0] for ptr in (a, b, c)]
            for pa_, pb_, pc_ in zip(*arrays):
                _gemm(dtype, ta, tb, m, n, k, pa, int(pa_), lda, int(pb_), ldb, pb, int(pc_),
                      ldc)
            return 0
        return fn

    def _ex(self, h, ta, tb, m, n, k, pa, a, at, lda, b, bt, ldb, pb, c, ct, ldc, compute,
            algo):
        self.calls.append(("GemmEx", ta, tb, m, n, k, lda, ldb, ldc, at, ct, compute))
        scale = np.int32 if compute == 72 else np.float32
        _gemm((_CUDA_DTYPE[at], _CUDA_DTYPE[ct]), ta, tb, m, n, k, pa, a, lda, b, ldb, pb,
              c, ldc, scale)
        return 0

    def _ex_strided(self, h, ta, tb, m, n, k, pa, a, at, lda, sa, b, bt, ldb, sb, pb, c, ct,
                    ldc, sc, batch, compute, algo):
        self.calls.append(("GemmStridedBatchedEx", ta, tb, m, n, k, lda, ldb, ldc, sa, sb,
                           sc, batch))
        scale = np.int32 if compute == 72 else np.float32
        dt = (_CUDA_DTYPE[at], _CUDA_DTYPE[ct])
        ii, io = np.dtype(dt[0]).itemsize, np.dtype(dt[1]).itemsize
        for i in range(batch):
            _gemm(dt, ta, tb, m, n, k, pa, a + i * sa * ii, lda, b + i * sb * ii, ldb, pb,
                  c + i * sc * io, ldc, scale)
        return 0


def host_uploads(monkeypatch):
    """Let `to_device` (pointer arrays of batched calls) return host-backed buffers."""
    from cupric.runtime import memory
    monkeypatch.setattr(memory, "to_device",
                        lambda array, stream=None: dev(np.array(array, copy=True)))


def install_table(monkeypatch, table):
    """Make `table` the function table of every module that calls cuBLAS."""
    from cupric.cublas import numpy_api
    monkeypatch.setattr(handle_mod, "_FAST", table)
    monkeypatch.setattr(numpy_api, "_FAST", table)


def forbid_calls(monkeypatch):
    """Any cuBLAS function lookup now fails the test: validation must come first."""
    install_table(monkeypatch, _Table({}))


class _Table(dict):
    """A function table whose misses fail loudly: no real cuBLAS call may happen."""

    def __init__(self, table):
        super().__init__()
        self._table = table

    def get(self, name, default=None):
        base = name[:-3] if name.endswith("_64") else name
        try:
            return self._table[base]
        except KeyError:
            raise AssertionError(f"unexpected cuBLAS call {name}") from None

    def __setitem__(self, name, value):
        raise AssertionError(f"unexpected cuBLAS function lookup {name}")


class ArityTable(dict):
    """A function table whose functions only check their argument count (and that every
    argument is an int) against the real C signature, record the call and succeed."""

    def __init__(self):
        super().__init__()
        self.calls: list[tuple] = []

    def get(self, name, default=None):
        from cupric.cublas import lib, lt
        module = lt if name.startswith("cublasLt") else lib
        expected = len(module.ffi.typeof(getattr(module.lib, name)).args)

        def fn(*args):
            assert len(args) == expected, f"{name}: {len(args)} arguments, C has {expected}"
            assert all(isinstance(a, int) for a in args), (name, args)
            self.calls.append((name, *args))
            return 0
        return fn

    def __setitem__(self, name, value):
        pass
