"""The compiled GEMM path on a GPU: small float32 products replayed through the cached
cuBLASLt plan, the classic fallbacks (misaligned pointers, float64, large problems,
other math modes), allocating calls, the handle-level gemm, and errors, all against
NumPy in float64."""

from __future__ import annotations

import threading

import numpy as np
import pytest

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def env():
    from cupric import runtime
    from cupric.cublas import _fastgemm
    from cupric.cublas import api as cb
    from cupric.runtime import memory
    runtime.Device(0).make_current()
    if _fastgemm.load() is None:
        pytest.fail(f"the compiled path did not build on the GPU machine: "
                    f"{_fastgemm.build_error()}")
    _fastgemm.install()
    return runtime, memory, cb, _fastgemm


def _close(got, ref, tol=2e-5):
    ref = np.asarray(ref, np.float64)
    scale = max(1.0, float(np.abs(ref).max()))
    err = float(np.abs(np.asarray(got, np.float64) - ref).max())
    assert err <= tol * scale, (err, scale)


def _plan_of(fg, handle, key_tail=None):
    infos = [fg.info(p) for p in handle._fast_plans.values()]
    assert infos, "no compiled plan was made"
    return infos


@pytest.mark.parametrize("shape", [(64, 64, 64), (33, 17, 29), (1, 40, 8), (128, 96, 256)])
@pytest.mark.parametrize("layout", ["CC", "FC", "CF", "FF"])
def test_small_float32_replays_on_cublaslt(env, rng, shape, layout):
    rt, mem, cb, fg = env
    m, k, n = shape
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)

    def put(x, order):
        return mem.to_device(x) if order == "C" else mem.to_device(
            np.ascontiguousarray(x.T)).T

    ad, bd = put(a, layout[0]), put(b, layout[1])
    h = cb.Handle.create()
    try:
        od = mem.empty((m, n), np.float32)
        cb.matmul(ad, bd, out=od, handle=h)  # checked Python call: makes the plan
        (info,) = _plan_of(fg, h)
        assert info["lt"] is True
        for alpha, beta in ((1, 0), (2.0, 0.5)):
            c0 = rng.standard_normal((m, n)).astype(np.float32)
            od.copy_from(c0)
            assert cb.matmul(ad, bd, out=od, alpha=alpha, beta=beta, handle=h) is od
            h.synchronize()
            _close(od.to_numpy(), alpha * (a.astype(np.float64) @ b) + beta * c0)
        assert len(h._fast_plans) == 1  # replays, no new plan
    finally:
        h.close()


def test_misaligned_pointers_take_the_classic_call(env, rng):
    rt, mem, cb, fg = env
    n = 32
    a = rng.standard_normal((n, n)).astype(np.float32)
    b = rng.standard_normal((n, n)).astype(np.float32)
    h = cb.Handle.create()
    try:
        od = mem.empty((n, n), np.float32)
        cb.matmul(mem.to_device(a), mem.to_device(b), out=od, handle=h)
        (info,) = _plan_of(fg, h)
        assert info["lt"] is True
        # Same shapes and strides, a pointer 4 bytes past a 256-byte boundary.
        big = mem.to_device(np.concatenate([[0.0], a.ravel()]).astype(np.float32))
        shifted = big[1:].reshape(n, n)
        assert shifted.ptr % 256 == 4
        od.zero()
        cb.matmul(shifted, mem.to_device(b), out=od, handle=h)
        h.synchronize()
        _close(od.to_numpy(), a.astype(np.float64) @ b)
        assert len(h._fast_plans) == 1
    finally:
        h.close()


def test_float64_large_and_other_math_modes_stay_classic(env, rng):
    rt, mem, cb, fg = env
    h = cb.Handle.create()
    try:
        a = rng.standard_normal((48, 40))
        b = rng.standard_normal((40, 24))
        od = mem.empty((48, 24), np.float64)
        for _ in range(2):
            od.zero()
            cb.matmul(mem.to_device(a), mem.to_device(b), out=od, handle=h)
            h.synchronize()
            _close(od.to_numpy(), a @ b, 1e-12)
        assert [i["lt"] for i in _plan_of(fg, h)] == [False]
        h._fast_plans.clear()
        big = rng.standard_normal((512, 512)).astype(np.float32)
        bd = mem.to_device(big)
        ob = mem.empty((512, 512), np.float32)
        for _ in range(2):
            cb.matmul(bd, bd, out=ob, handle=h)
        h.synchronize()
        _close(ob.to_numpy(), big.astype(np.float64) @ big, 1e-4)
        assert [i["lt"] for i in _plan_of(fg, h)] == [False]  # 512^3 > LT_MAX_WORK
        # A new math mode drops the plans; TF32 keeps cublasSgemm (its own choice).
        small = mem.to_device(big[:64, :64].copy())
        os_ = mem.empty((64, 64), np.float32)
        cb.matmul(small, small, out=os_, handle=h)
        assert any(i["lt"] for i in _plan_of(fg, h))
        h.math_mode = "tf32"
        assert h._fast_plans == {}
        for _ in range(2):
            cb.matmul(small, small, out=os_, handle=h)
        h.synchronize()
        ref = big[:64, :64].astype(np.float64) @ big[:64, :64]
        _close(os_.to_numpy(), ref, 1e-2)
        assert [i["lt"] for i in _plan_of(fg, h)] == [False]
    finally:
        h.close()


def test_allocating_replay(env, rng):
    rt, mem, cb, fg = env
    a = rng.standard_normal((20, 30)).astype(np.float32)
    b = rng.standard_normal((30, 10)).astype(np.float32)
    ad, bd = mem.to_device(a), mem.to_device(b)
    outs = [cb.matmul(ad, bd) for _ in range(3)]
    assert len({o.ptr for o in outs}) == 3  # each call its own result
    handle = cb.default_handle()
    assert any(i["allocating"] for i in _plan_of(fg, handle))
    rt.synchronize()
    for o in outs:
        assert o.shape == (20, 10) and o.dtype == np.float32 and o.is_c_contiguous
        _close(o.to_numpy(), a.astype(np.float64) @ b)


def test_handle_level_gemm_replay(env, rng):
    rt, mem, cb, fg = env
    h = cb.Handle.create()
    try:
        a = rng.standard_normal((24, 16)).astype(np.float32)  # op(a) = a.T: 16 x 24
        b = rng.standard_normal((24, 8)).astype(np.float32)
        af = mem.to_device(np.ascontiguousarray(a.T)).T        # column-major
        bf = mem.to_device(np.ascontiguousarray(b.T)).T
        c0 = rng.standard_normal((16, 8)).astype(np.float32)
        cf = mem.to_device(np.ascontiguousarray(c0.T)).T
        cb.gemm("T", "N", 1.0, af, bf, 0.0, cf, handle=h)
        assert [i["lt"] for i in _plan_of(fg, h)] == [True]
        cf.T.copy_from(np.ascontiguousarray(c0.T))
        cb.gemm("T", "N", -1.5, af, bf, 2.0, cf, handle=h)
        h.synchronize()
        _close(cf.T.to_numpy().T, -1.5 * (a.T.astype(np.float64) @ b) + 2.0 * c0)
    finally:
        h.close()


def test_errors_on_the_replayed_path(env, rng):
    rt, mem, cb, fg = env
    a = mem.to_device(rng.standard_normal((16, 16)).astype(np.float32))
    b = mem.to_device(rng.standard_normal((16, 16)).astype(np.float32))
    out = mem.empty((16, 16), np.float32)
    cb.matmul(a, b, out=out)
    with pytest.raises(ValueError, match="overlaps"):
        cb.matmul(a, b, out=a)
    gone = mem.empty((16, 16), np.float32)
    gone.close()
    with pytest.raises(rt.ClosedError):
        cb.matmul(a, b, out=gone)
    with pytest.raises(TypeError):
        cb.matmul(a, b, out=out, alpha="2")


def test_threads_share_the_default_handle(env, rng):
    rt, mem, cb, fg = env
    a = rng.standard_normal((32, 32)).astype(np.float32)
    ad = mem.to_device(a)
    ref = a.astype(np.float64) @ a
    errors = []

    def work():
        try:
            out = mem.empty((32, 32), np.float32)
            for _ in range(50):
                cb.matmul(ad, ad, out=out)
            rt.synchronize()
            _close(out.to_numpy(), ref)
        except Exception as exc:  # reported below with the thread's failure
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_handle_on_its_own_stream(env, rng):
    rt, mem, cb, fg = env
    stream = rt.Device(0).create_stream()
    h = cb.Handle.create(stream=stream)
    try:
        a = rng.standard_normal((64, 64)).astype(np.float32)
        ad = mem.to_device(a)
        out = mem.empty((64, 64), np.float32)
        for _ in range(3):
            cb.matmul(ad, ad, out=out, handle=h)
        assert out.stream == h.stream
        stream.synchronize()
        _close(out.to_numpy(), a.astype(np.float64) @ a)
    finally:
        h.close()
        stream.close()


@pytest.mark.parametrize("allocating", [False, True])
def test_torch_tensors_replay_through_their_own_key(env, allocating):
    """PyTorch tensors: after the first calls the plan is filed under the tensors' own
    key and later calls are read in C; every call's result is right (fresh inputs,
    poisoned output), and tensors outside the common case still get the typed error."""
    torch = pytest.importorskip("torch")
    rt, mem, cb, fg = env
    h = cb.Handle.create()
    try:
        for i in range(5):
            a = torch.randn(64, 48, device="cuda")
            b = torch.randn(48, 40, device="cuda")
            if allocating:
                got = torch.from_dlpack(cb.matmul(a, b, handle=h))
            else:
                got = torch.full((64, 40), float("nan"), device="cuda")
                assert cb.matmul(a, b, out=got, handle=h) is got
            torch.cuda.synchronize()
            _close(got.cpu().numpy(), a.double().cpu().numpy() @ b.double().cpu().numpy())
        assert any(isinstance(k, tuple) and k[0] == "torch" for k in h._fast_plans)
        # PyTorch refuses to export a tensor that requires grad (its interface and
        # DLPack both raise); the compiled path must not read it either.
        with pytest.raises((TypeError, RuntimeError, BufferError)):
            cb.matmul(torch.randn(64, 48, device="cuda", requires_grad=True),
                      torch.randn(48, 40, device="cuda"), handle=h)
    finally:
        h.close()


def test_cupy_bfloat16_matmul(env):
    """CuPy's bfloat16 arrays (interface "<V2") multiply as bfloat16, against float64."""
    torch = pytest.importorskip("torch")
    cp = pytest.importorskip("cupy")
    rt, mem, cb, fg = env
    a = torch.randn(32, 64, device="cuda").to(torch.bfloat16)
    b = torch.randn(64, 16, device="cuda").to(torch.bfloat16)
    try:
        ca, cbm = cp.from_dlpack(a), cp.from_dlpack(b)
        co = cp.from_dlpack(torch.full((32, 16), float("nan"), device="cuda",
                                       dtype=torch.bfloat16))
    except Exception as exc:  # a CuPy without bfloat16 (no ml_dtypes) cannot hold them
        pytest.skip(f"CuPy cannot hold bfloat16 here: {exc}")
    assert cb.matmul(ca, cbm, out=co) is co
    rt.synchronize()
    got = torch.from_dlpack(co.view(cp.int16)).view(torch.bfloat16).double()
    ref = a.double() @ b.double()
    assert (got - ref).abs().max().item() < 2e-2 * ref.abs().max().item()


def test_cupy_arrays_replay_through_their_own_key(env):
    """CuPy arrays on CuPy's null stream and the default handle: filed under their own
    key and replayed in C; each call right against float64 (fresh inputs, poisoned out)."""
    cp = pytest.importorskip("cupy")
    rt, mem, cb, fg = env
    h = cb.Handle.create()
    try:
        for _ in range(5):
            a = cp.random.standard_normal((40, 24), dtype=cp.float32)
            b = cp.random.standard_normal((24, 56), dtype=cp.float32)
            out = cp.full((40, 56), cp.nan, dtype=cp.float32)
            assert cb.matmul(a, b, out=out, handle=h) is out
            rt.synchronize()
            _close(cp.asnumpy(out), cp.asnumpy(a).astype(np.float64) @ cp.asnumpy(b))
        assert any(isinstance(k, tuple) and k[0] == "cupy" for k in h._fast_plans)
    finally:
        h.close()


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precision_torch_tensors_replay_gemm_ex(env, dtype):
    """float16 and bfloat16 PyTorch tensors: the checked call runs cublasGemmEx (32F
    compute) and makes a GemmEx plan that later calls replay in C (bfloat16 filed under
    the tensors' own key only); every call right against float64 (fresh inputs,
    poisoned output)."""
    torch = pytest.importorskip("torch")
    rt, mem, cb, fg = env
    dt = getattr(torch, dtype)
    h = cb.Handle.create()
    try:
        for _ in range(4):
            a = torch.randn(96, 64, device="cuda").to(dt)
            b = torch.randn(64, 80, device="cuda").to(dt)
            out = torch.full((96, 80), float("nan"), device="cuda", dtype=dt)
            assert cb.matmul(a, b, out=out, handle=h) is out
            torch.cuda.synchronize()
            ref = a.double() @ b.double()
            assert (out.double() - ref).abs().max().item() <= 2e-2 * ref.abs().max().item()
        own = [fg.info(p) for k, p in h._fast_plans.items()
               if isinstance(k, tuple) and k[0] == "torch"]
        assert own and all(p["ex"] for p in own)
    finally:
        h.close()
