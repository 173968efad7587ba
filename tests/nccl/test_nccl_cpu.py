"""cupric.nccl on the CPU lane: the tables against the installed header, options into
ncclConfig_t, unique ids, typed errors, the wait loop against fakes, and every argument
check of the collectives (nothing may reach NCCL when a check fails; the calls that
pass reach it with the right counts, types, operators, pointers and stream)."""

from __future__ import annotations

import pickle
import threading
import time

import numpy as np
import pytest

from _nccl_fake import FakeDeviceArray, RecordingLib, fake_communicator, pointer

nccl = pytest.importorskip("cupric.nccl")
if not nccl.is_available():
    pytest.skip(f"NCCL is not loadable: {nccl.lib.binding.unavailable_reason}",
                allow_module_level=True)

from cupric.nccl import communicator as C  # noqa: E402
from cupric.nccl import options as O  # noqa: E402
from cupric.nccl import waiting as W  # noqa: E402
from cupric.nccl import lib, tables  # noqa: E402
from cupric.runtime import intake  # noqa: E402


# --------------------------------------------------------------------------------------
# Tables against the header


def test_dtype_table_matches_the_header():
    names = {"int8": "ncclInt8", "uint8": "ncclUint8", "int32": "ncclInt32",
             "uint32": "ncclUint32", "int64": "ncclInt64", "uint64": "ncclUint64",
             "float16": "ncclFloat16", "float32": "ncclFloat32", "float64": "ncclFloat64"}
    assert {str(d): v for d, v in tables.DTYPES.items()} == {
        k: getattr(lib, v) for k, v in names.items()}
    assert tables.EXTRA_DTYPES["bfloat16"] == lib.ncclBfloat16
    if hasattr(lib.lib, "ncclFloat8e4m3"):
        assert tables.EXTRA_DTYPES["float8_e4m3fn"] == lib.ncclFloat8e4m3
        assert tables.EXTRA_DTYPES["float8_e5m2"] == lib.ncclFloat8e5m2


def test_op_table_and_constants_match_the_header():
    assert tables.OPS == {"sum": lib.ncclSum, "prod": lib.ncclProd, "max": lib.ncclMax,
                          "min": lib.ncclMin, "avg": lib.ncclAvg}
    assert (lib.SUCCESS, lib.IN_PROGRESS) == (lib.ncclSuccess, lib.ncclInProgress)
    assert O._UNDEF_INT == lib.NCCL_CONFIG_UNDEF_INT
    assert O._SPLIT_NOCOLOR == lib.NCCL_SPLIT_NOCOLOR
    assert O._UNIQUE_ID_BYTES == lib.NCCL_UNIQUE_ID_BYTES == lib.ffi.sizeof("ncclUniqueId")


def test_nccl_dtype_reads_numpy_ml_dtypes_and_torch_names():
    assert tables.nccl_dtype(np.float32) == 7
    assert tables.nccl_dtype(np.dtype("V2"), "torch.bfloat16") == 9
    assert tables.nccl_dtype(np.dtype(np.float32), "torch.float32") == 7
    assert tables.nccl_dtype(np.bool_) is None
    assert tables.nccl_dtype(np.complex64) is None
    ml_dtypes = pytest.importorskip("ml_dtypes")
    assert tables.nccl_dtype(ml_dtypes.bfloat16) == 9
    assert tables.nccl_dtype(ml_dtypes.float8_e5m2) == 11


def test_wire_type_moves_anything_as_bytes_and_reduces_complex_sums():
    assert tables.wire_type(np.bool_, None, 10, None) == (1, 10)
    assert tables.wire_type(np.complex128, None, 3, None) == (1, 48)
    assert tables.wire_type(np.complex64, None, 5, 0) == (7, 10)      # sum: pairs
    assert tables.wire_type(np.complex128, None, 5, 4) == (8, 10)     # avg: pairs
    with pytest.raises(tables.UnsupportedDtypeError, match="prod"):
        tables.wire_type(np.complex64, None, 5, 1)
    with pytest.raises(tables.UnsupportedDtypeError, match="bool"):
        tables.wire_type(np.bool_, None, 5, 2)
    with pytest.raises(TypeError):        # also a TypeError
        tables.wire_type(np.dtype("V2"), "torch.bool", 1, 0)


@pytest.mark.parametrize("bad", ["mean", "SUM", 0, None])
def test_unknown_operators_are_refused(bad):
    with pytest.raises(ValueError, match="op must be one of"):
        tables.reduction_op(bad)


# --------------------------------------------------------------------------------------
# Options, unique ids, errors


def test_options_fill_an_nccl_config():
    keep = []
    cfg = C.CommOptions(blocking=False, max_ctas=16, net_name="Socket",
                        comm_name="train", split_share=True).config(lib, keep)
    assert cfg.size == lib.ffi.sizeof("ncclConfig_t")
    assert (cfg.magic, cfg.version) == (lib.NCCL_API_MAGIC, lib.NCCL_VERSION_CODE)
    assert (cfg.blocking, cfg.maxCTAs, cfg.splitShare) == (0, 16, 1)
    assert cfg.minCTAs == cfg.cgaClusterSize == lib.NCCL_CONFIG_UNDEF_INT
    assert lib.ffi.string(cfg.netName) == b"Socket"
    assert lib.ffi.string(cfg.commName) == b"train" and len(keep) == 2
    assert C.CommOptions().config(lib, []).blocking == 1


@pytest.mark.parametrize("kwargs,error", [
    ({"blocking": 0}, TypeError), ({"timeout": 0}, ValueError),
    ({"timeout": -1.0}, ValueError), ({"poll_interval": 0}, ValueError),
    ({"max_ctas": -1}, ValueError), ({"min_ctas": 8, "max_ctas": 4}, ValueError),
    ({"net_name": 3}, TypeError), ({"cga_cluster_size": True}, ValueError)])
def test_bad_options_are_refused(kwargs, error):
    with pytest.raises(error):
        C.CommOptions(**kwargs)


def test_unique_id_round_trips():
    uid = nccl.UniqueId.new()
    data = uid.to_bytes()
    assert len(data) == 128 and bytes(uid) == data and any(data)
    assert nccl.UniqueId.from_bytes(data) == uid and hash(uid) == hash(nccl.UniqueId(data))
    assert pickle.loads(pickle.dumps(uid)) == uid
    assert nccl.UniqueId.new() != uid
    assert "UniqueId" in repr(uid) and data.hex() not in repr(uid)
    with pytest.raises(ValueError, match="128 bytes"):
        nccl.UniqueId(b"x" * 127)
    with pytest.raises(TypeError):
        nccl.UniqueId("x" * 128)


@pytest.mark.parametrize("code,cls", [
    (1, lib.NcclCudaError), (2, lib.NcclSystemError), (3, lib.NcclInternalError),
    (4, lib.NcclInvalidArgumentError), (5, lib.NcclInvalidUsageError),
    (6, lib.NcclRemoteError), (8, lib.NcclTimeoutError)])
def test_check_raises_the_typed_error_of_each_result(code, cls):
    with pytest.raises(cls) as info:
        lib.check(code)
    error = info.value
    assert type(error) is cls and isinstance(error, lib.NcclError)
    assert error.code == code and error.name == lib.binding.status_name(code)
    assert isinstance(error.last_error, str)
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is cls and (again.code, again.description, again.last_error) == (
        error.code, error.description, error.last_error)
    assert isinstance(lib.NcclTimeoutError(8, "ncclTimeout", "x"), TimeoutError)
    assert isinstance(lib.NcclInvalidArgumentError(4, "a", "b"), ValueError)


def test_errors_carry_nccl_last_error_text(monkeypatch):
    text = lib.ffi.new("char[]", b"peer 3 closed its connection")
    fake = RecordingLib()
    fake.ncclGetLastError = lambda comm: text
    real = lib.binding.lib.ncclGetErrorString
    fake.ncclGetErrorString = real
    monkeypatch.setattr(lib.binding, "_functions", fake)
    with pytest.raises(lib.NcclRemoteError) as info:
        lib.check(6)
    assert info.value.last_error == "peer 3 closed its connection"
    assert "peer 3 closed its connection" in str(info.value)


# --------------------------------------------------------------------------------------
# The wait loop, against fakes


class _Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def test_poll_until_returns_once_done():
    clock, polls = _Clock(), []
    aborted = []
    C.poll_until(lambda: len(polls) >= 5, lambda: polls.append(1) or 7,
                 lambda: aborted.append(1), timeout=10, what="x", clock=clock,
                 sleep=clock.sleep)
    assert len(polls) == 5 and not aborted


def test_poll_until_aborts_and_raises_the_async_error():
    aborted = []
    statuses = iter([0, 7, 6])
    with pytest.raises(lib.NcclRemoteError, match="all_reduce failed; the communicator "
                                                  "was aborted"):
        C.poll_until(lambda: False, lambda: next(statuses), lambda: aborted.append(1),
                     timeout=None, what="all_reduce", sleep=lambda s: None)
    assert aborted == [1]


def test_poll_until_times_out_then_aborts_instead_of_hanging():
    clock, aborted = _Clock(), []
    with pytest.raises(lib.NcclTimeoutError, match="within 2 s") as info:
        C.poll_until(lambda: False, lambda: 0, lambda: aborted.append(clock.now),
                     timeout=2.0, what="work on stream 0x0", clock=clock,
                     sleep=clock.sleep)
    assert isinstance(info.value, TimeoutError) and info.value.code == 8
    assert len(aborted) == 1 and 2.0 <= aborted[0] < 2.1
    # The pause doubles but never exceeds 10 ms: the deadline is met within a pause.


def test_poll_until_keeps_the_timeout_when_abort_fails():
    def abort():
        raise lib.NcclInternalError(3, "ncclInternalError", "abort broke")
    clock = _Clock()
    with pytest.raises(lib.NcclTimeoutError) as info:
        C.poll_until(lambda: False, lambda: 0, abort, timeout=0.5, what="x",
                     clock=clock, sleep=clock.sleep)
    assert isinstance(info.value.__cause__, lib.NcclInternalError)


def test_wait_of_a_non_blocking_call_times_out_and_aborts(monkeypatch):
    # A non-blocking communicator whose enqueue stays ncclInProgress (a peer that never
    # answers): the call raises NcclTimeoutError after the options' timeout, aborted.
    comm = fake_communicator(blocking=False, timeout=0.05)
    fake = RecordingLib(status=lib.IN_PROGRESS)
    monkeypatch.setattr(lib, "lib", fake)
    aborted = []
    monkeypatch.setattr(C.Communicator, "async_error", lambda self: lib.IN_PROGRESS)
    monkeypatch.setattr(C.Communicator, "abort",
                        lambda self, wait=True: aborted.append((self, wait)))
    x = FakeDeviceArray(0x10000, (64,))
    with pytest.raises(lib.NcclTimeoutError, match="ncclAllReduce did not finish"):
        comm.all_reduce(x)
    assert aborted == [(comm, False)]   # a timeout does not wait for the abort
    assert [name for name, _ in fake.calls] == ["ncclAllReduce"]


class _BlockingAbortLib(RecordingLib):
    """ncclCommAbort blocks until `release` is set, as the real one does while the
    device is busy (it frees device memory, which waits for the whole device)."""

    def __init__(self, status=0):
        super().__init__()
        self.release = threading.Event()
        self.abort_status = status

    def ncclCommAbort(self, comm):
        self.calls.append(("ncclCommAbort", pointer(lib, comm)))
        self.release.wait(10)
        return self.abort_status


@pytest.fixture
def busy_device(monkeypatch):
    lib.binding.load()
    fake = _BlockingAbortLib()
    monkeypatch.setattr(lib, "lib", fake)
    monkeypatch.setattr(W, "_make_current", lambda device: None)
    monkeypatch.setattr(C, "_stream_done", lambda handle: False)   # a stream held forever
    monkeypatch.setattr(C.Communicator, "async_error", lambda self: 0)
    yield fake
    fake.release.set()
    assert C.join_aborts(10)


def _owned(timeout):
    return C.Communicator._blank(0x2000, 0, 1, 0, C.CommOptions(timeout=timeout),
                                 multi=False)


def test_a_timed_out_wait_raises_without_waiting_for_the_abort(busy_device):
    comm = _owned(0.05)
    start = time.monotonic()
    with pytest.raises(lib.NcclTimeoutError, match="did not finish within 0.05 s"):
        comm.wait(stream=0x10)
    assert time.monotonic() - start < 1.0    # the abort itself is still blocked
    assert comm.closed and not C.join_aborts(0.05)
    busy_device.release.set()
    assert C.join_aborts(10)
    assert busy_device.calls == [("ncclCommAbort", 0x2000)]   # once, on the right handle
    comm.abort()                              # nothing left to do
    assert busy_device.calls == [("ncclCommAbort", 0x2000)]


def test_an_explicit_abort_waits_and_a_background_failure_warns(busy_device):
    busy_device.release.set()
    busy_device.abort_status = lib.ncclInternalError
    comm = _owned(5.0)
    with pytest.raises(lib.NcclInternalError, match="ncclCommAbort"):
        comm.abort()                          # wait=True: NCCL's error is raised
    other = _owned(5.0)
    with pytest.warns(RuntimeWarning, match="ncclCommAbort of nccl.Communicator"):
        other.abort(wait=False)
        assert C.join_aborts(10)


# --------------------------------------------------------------------------------------
# Argument checks: nothing reaches NCCL when one fails


@pytest.fixture
def recorded(monkeypatch):
    lib.binding.load()
    fake = RecordingLib()
    monkeypatch.setattr(lib, "lib", fake)
    return fake


A = FakeDeviceArray


@pytest.mark.parametrize("call,error,match", [
    (lambda c: c.all_reduce(A(0x10000, (8,)), A(0x20000, (9,))), C.ShapeMismatchError,
     "out has 9"),
    (lambda c: c.all_reduce(A(0x10000, (8,)), A(0x20000, (8,), np.int32)),
     C.DtypeMismatchError, "float32 but recv is int32"),
    (lambda c: c.all_reduce(A(0x10000, (8,)), A(0x10010, (8,))), C.OverlapError,
     "overlap"),
    (lambda c: c.all_reduce(A(0x10000, (8,)), op="mean"), ValueError, "op must be"),
    (lambda c: c.all_reduce(A(0x10000, (8,), np.bool_)), tables.UnsupportedDtypeError,
     "bool"),
    (lambda c: c.all_reduce(np.zeros(8, np.float32)), intake.HostMemoryError, "host"),
    (lambda c: c.all_reduce(A(0x10000, (8,), readonly=True)), intake.ReadOnlyError,
     "read-only"),
    (lambda c: c.all_reduce(A(0x10000, (4, 4), strides=(32, 4))), intake.StrideError,
     "contiguous"),
    (lambda c: c.all_reduce(object()), intake.NotAnArrayError, "not a device array"),
    (lambda c: c.broadcast(A(0x10000, (8,)), root=4), C.RankError, "outside 0 .. 3"),
    (lambda c: c.reduce(A(0x10000, (8,)), root=-1), C.RankError, "root -1"),
    (lambda c: c.broadcast(A(0x10000, (8,)), root=True), TypeError, "root"),
    (lambda c: c.send(A(0x10000, (8,)), peer=9), C.RankError, "peer 9"),
    (lambda c: c.recv(A(0x10000, (8,), readonly=True), peer=1), intake.ReadOnlyError,
     "read-only"),
    (lambda c: c.all_gather(A(0x10000, (8,)), A(0x20000, (8, 3))), C.ShapeMismatchError,
     "world_size \\* send.size = 32"),
    (lambda c: c.all_gather(A(0x10000, (8,)), A(0x0fff0, (32,))), C.OverlapError,
     "overlap"),
    (lambda c: c.reduce_scatter(A(0x10000, (30,))), C.ShapeMismatchError, "divide"),
    (lambda c: c.reduce_scatter(A(0x10000, (32,)), A(0x20000, (7,))),
     C.ShapeMismatchError, "28 elements, got 32"),
    (lambda c: c.all_to_all(A(0x10000, (30,)), A(0x20000, (30,))), C.ShapeMismatchError,
     "multiple of world_size 4"),
    (lambda c: c.all_to_all(A(0x10000, (32,)), A(0x10000, (32,))), C.OverlapError,
     "overlap"),
])
def test_bad_arguments_raise_before_any_nccl_call(recorded, call, error, match):
    comm = fake_communicator(rank=1, size=4)
    with pytest.raises(error, match=match):
        call(comm)
    assert recorded.calls == []


def test_closed_communicators_are_refused(recorded):
    comm = fake_communicator()
    comm.close()               # borrowed: only marked closed
    from cupric.runtime.errors import ClosedError
    with pytest.raises(ClosedError):
        comm.all_reduce(A(0x10000, (8,)))
    with pytest.raises(ClosedError):
        comm.__enter__()
    assert recorded.calls == []


def test_no_public_constructor():
    with pytest.raises(TypeError, match="no public constructor"):
        nccl.Communicator()


# --------------------------------------------------------------------------------------
# What reaches NCCL when the checks pass


def _args(recorded, name):
    calls = [args for n, args in recorded.calls if n == name]
    assert calls, recorded.calls
    return calls


def test_all_reduce_in_and_out_of_place(recorded):
    comm = fake_communicator(rank=2, size=4)
    x, y = A(0x10000, (4, 8)), A(0x20000, (32,))
    assert comm.all_reduce(x, op="max", stream=0x77) is x
    assert comm.all_reduce(x, y, op="avg") is y
    (send, recv, count, dtype, op, _c, stream), second = _args(recorded, "ncclAllReduce")
    assert (pointer(lib, send), pointer(lib, recv), count, dtype, op) == (
        0x10000, 0x10000, 32, 7, 2)
    assert pointer(lib, stream) == 0x77
    assert (pointer(lib, second[1]), second[2], second[4], pointer(lib, second[6])) == (
        0x20000, 32, 4, 0)


def test_complex_sums_and_byte_moves(recorded):
    comm = fake_communicator(rank=0, size=2)
    comm.all_reduce(A(0x10000, (5,), np.complex64))
    comm.broadcast(A(0x10000, (5,), np.bool_), root=1)
    (reduce_args,) = _args(recorded, "ncclAllReduce")
    assert (reduce_args[2], reduce_args[3]) == (10, 7)
    (bcast,) = _args(recorded, "ncclBroadcast")
    assert (bcast[2], bcast[3], bcast[4]) == (5, 1, 1)


def test_all_gather_and_reduce_scatter_in_place_layouts(recorded):
    comm = fake_communicator(rank=2, size=4)
    out = A(0x10000, (4, 8))
    mine = A(0x10000 + 2 * 32, (8,))            # row 2 of out: the in-place layout
    assert comm.all_gather(mine, out) is out
    (args,) = _args(recorded, "ncclAllGather")
    assert (pointer(lib, args[0]), pointer(lib, args[1]), args[2]) == (
        0x10000 + 64, 0x10000, 8)
    block = A(0x10000 + 2 * 32, (8,))
    comm.reduce_scatter(out, block, op="min")
    (args,) = _args(recorded, "ncclReduceScatter")
    assert (pointer(lib, args[1]), args[2], args[4]) == (0x10000 + 64, 8, 3)


def test_all_to_all_is_a_group_of_sends_and_receives(recorded):
    comm = fake_communicator(rank=1, size=4)
    comm.all_to_all(A(0x10000, (4, 6), np.float64), A(0x20000, (24,), np.float64))
    names = [name for name, _ in recorded.calls]
    assert names[0] == "ncclGroupStart" and names[-1] == "ncclGroupEnd"
    sends = _args(recorded, "ncclSend")
    recvs = _args(recorded, "ncclRecv")
    assert [pointer(lib, a[0]) for a in sends] == [0x10000 + 48 * p for p in range(4)]
    assert [pointer(lib, a[0]) for a in recvs] == [0x20000 + 48 * p for p in range(4)]
    assert {(a[1], a[2]) for a in sends + recvs} == {(6, 8)}
    assert [a[3] for a in sends] == [a[3] for a in recvs] == [0, 1, 2, 3]


def test_group_context_manager_ends_the_group_even_on_errors(recorded):
    comm = fake_communicator(rank=0, size=2)
    with pytest.raises(C.RankError):
        with nccl.group():
            comm.send(A(0x10000, (4,)), peer=1)
            comm.recv(A(0x20000, (4,)), peer=7)
    assert [n for n, _ in recorded.calls] == ["ncclGroupStart", "ncclSend",
                                              "ncclGroupEnd"]
    assert W._group_state()[0] == 0


def test_failing_status_raises_the_typed_error(recorded):
    comm = fake_communicator()
    recorded.status = 5
    with pytest.raises(lib.NcclInvalidUsageError, match="ncclAllReduce"):
        comm.all_reduce(A(0x10000, (8,)))


def test_bus_bandwidth_factors():
    f = nccl.bus_bandwidth_factor
    assert f("all_reduce", 8) == pytest.approx(1.75)
    assert f("all_gather", 8) == f("reduce_scatter", 8) == pytest.approx(0.875)
    assert f("all_reduce", 1) == 0.0 and f("broadcast", 4) == 1.0
    with pytest.raises(ValueError):
        f("gather", 2)
    with pytest.raises(ValueError):
        f("all_reduce", 0)


def test_import_is_light():
    import subprocess
    import sys
    code = ("import sys, cupric.nccl, cupric.distributed; "
            "bad = [m for m in ('cuda.bindings.driver', 'cffi', 'torch', 'mpi4py', "
            "'cupric.nccl.communicator') if m in sys.modules]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"
