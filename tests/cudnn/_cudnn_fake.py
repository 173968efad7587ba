"""Stand-ins for the CPU lane: device arrays at made-up addresses, and the few
backend-API calls that need a GPU to succeed.

Descriptors are records of their attributes; finalizing an execution plan succeeds or
refuses by engine; heuristics return scripted engine lists. It lets the engine-choice,
plan-caching and execution logic of cupric.cudnn.engine_choice run on the CPU lane through its
real code paths. Everything else (enum values, the ffi, status names) is the real
generated module's.
"""

from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass
class Record:
    kind: int
    attrs: dict = dataclasses.field(default_factory=dict)
    finalized: bool = False
    engine: int | None = None        # ENGINECFG / ENGINE / EXECUTION_PLAN
    destroyed: bool = False


class FakeBackend:
    """Attribute access falls through to the real library for constants."""

    def __init__(self, real_lib, ffi, *, heuristics=None, notes=None, refused=(),
                 workspace=None, graph_refused=False):
        self._real = real_lib
        self._ffi = ffi
        self.records: dict[int, Record] = {}
        self._next = 0x1000
        self.heuristics = heuristics or {}       # mode value -> list of engine indices
        self.notes = notes or {}                 # engine -> list of numerical notes
        self.refused = set(refused)              # engines whose plans refuse to finalize
        self.workspace = workspace or {}         # engine -> workspace bytes
        self.graph_refused = graph_refused
        self.executed: list[tuple] = []

    def __getattr__(self, name):
        return getattr(self._real, name)

    # -- helpers -------------------------------------------------------------------------

    def _id(self, desc) -> int:
        return int(self._ffi.cast("uintptr_t", desc))

    def _rec(self, desc) -> Record:
        rec = self.records[self._id(desc)]
        assert not rec.destroyed, "use of a destroyed descriptor"
        return rec

    def live(self, kind_name: str | None = None) -> int:
        code = None if kind_name is None else getattr(
            self._real, f"CUDNN_BACKEND_{kind_name}_DESCRIPTOR")
        return sum(1 for r in self.records.values()
                   if not r.destroyed and (code is None or r.kind == code))

    # -- the C API -------------------------------------------------------------------------

    def cudnnBackendCreateDescriptor(self, kind, out):
        self._next += 0x10
        self.records[self._next] = Record(int(kind))
        out[0] = self._ffi.cast("cudnnBackendDescriptor_t", self._next)
        return 0

    def cudnnBackendDestroyDescriptor(self, desc):
        rec = self._rec(desc)
        rec.destroyed = True
        return 0

    def cudnnBackendSetAttribute(self, desc, name, vtype, count, array):
        rec = self._rec(desc)
        if vtype == self._real.CUDNN_TYPE_BACKEND_DESCRIPTOR:
            values = [self._id(array[i]) for i in range(count)]
        elif vtype in (self._real.CUDNN_TYPE_VOID_PTR, self._real.CUDNN_TYPE_HANDLE):
            values = [int(self._ffi.cast("uintptr_t", array[i])) for i in range(count)]
        else:
            values = [array[i] for i in range(count)]
        rec.attrs[int(name)] = values
        return 0

    def cudnnBackendFinalize(self, desc):
        rec = self._rec(desc)
        lib = self._real
        if rec.kind == lib.CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR and self.graph_refused:
            return 3001
        if rec.kind == lib.CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR:
            mode = rec.attrs[int(lib.CUDNN_ATTR_ENGINEHEUR_MODE)][0]
            if mode not in self.heuristics:
                return 3000
        if rec.kind == lib.CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR:
            cfg = self.records[rec.attrs[int(lib.CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG)][0]]
            assert not cfg.destroyed
            rec.engine = cfg.engine
            if cfg.engine in self.refused:
                return 3002
        rec.finalized = True
        return 0

    def cudnnBackendGetAttribute(self, desc, name, vtype, requested, count, array):
        rec = self._rec(desc)
        lib = self._real
        name = int(name)
        if name == int(lib.CUDNN_ATTR_ENGINEHEUR_RESULTS):
            mode = rec.attrs[int(lib.CUDNN_ATTR_ENGINEHEUR_MODE)][0]
            engines = self.heuristics[mode]
            count[0] = len(engines)
            for i in range(min(requested, len(engines))):
                cfg = self.records[self._id(array[i])]
                cfg.engine = engines[i]
                cfg.finalized = True
            return 0
        if name == int(lib.CUDNN_ATTR_ENGINECFG_ENGINE):
            engine = self.records[self._id(array[0])]
            engine.engine = rec.engine
            count[0] = 1
            return 0
        if name == int(lib.CUDNN_ATTR_ENGINE_GLOBAL_INDEX):
            array[0] = rec.engine
            count[0] = 1
            return 0
        if name == int(lib.CUDNN_ATTR_ENGINE_NUMERICAL_NOTE):
            notes = self.notes.get(rec.engine, [])
            for i, note in enumerate(notes[:requested]):
                array[i] = note
            count[0] = len(notes)
            return 0
        if name == int(lib.CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE):
            array[0] = self.workspace.get(rec.engine, 0)
            count[0] = 1
            return 0
        raise AssertionError(f"fake cuDNN: unexpected attribute read {name}")

    def cudnnBackendExecute(self, handle, plan, pack):
        lib = self._real
        p = self._rec(plan)
        v = self._rec(pack)
        assert p.finalized and v.finalized
        self.executed.append((p.engine,
                              tuple(v.attrs[int(lib.CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS)]),
                              tuple(v.attrs[int(lib.CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS)]),
                              v.attrs[int(lib.CUDNN_ATTR_VARIANT_PACK_WORKSPACE)][0]))
        return 0

    def cudnnGetLastErrorString(self, buf, size):
        buf[0] = b"\0"


class FakeDeviceArray:
    """An object exporting a made-up device pointer through the CUDA Array Interface:
    enough for validation, which never dereferences it."""

    _next = 0x7F0000000000

    def __init__(self, shape, dtype="float32", strides=None, readonly=False, ptr=None):
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self.strides = strides
        if ptr is None:
            ptr = FakeDeviceArray._next
            FakeDeviceArray._next += 1 << 24
        self.ptr = ptr
        self.readonly = readonly

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.ptr, self.readonly),
                "version": 3, "strides": self.strides, "stream": None}


def nhwc(shape, dtype="float32", **kw):
    """A fake channels-last array of logical shape (N, C, H, W)."""
    n, c, h, w = shape
    item = np.dtype(dtype).itemsize
    return FakeDeviceArray(shape, dtype, strides=(h * w * c * item, item, w * c * item, c * item),
                           **kw)
