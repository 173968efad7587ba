"""What the copy engine accepts of a TMA copy (`cupric.device.tma.check_copy`), measured on
an H100 (issue 14): x times the element size a multiple of 16 bytes (a 64-byte-swizzle
test loaded at x = 100 of a u16 tensor), stores at non-negative coordinates only (the
same test stored at (-8, -3)), boxes on 128 bytes of shared memory; anything else fails
the launch with an illegal instruction (or a misaligned address) that names no copy. The
simulator's tensor maps refuse such copies with `CopyError`; a kernel compiled with
bounds checking stops with a DeviceAssertionError naming the line."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import cupric
from cupric.device import KernelError, shared, tma
from cupric.device.tma import COORDINATE_BYTES, SHARED_ALIGNMENT, CopyError, check_copy
from cupric.simulator.tma import tensor_map as sim_map
from cupric.types import f32, u16, u64


@pytest.mark.parametrize("itemsize", [1, 2, 4, 8])
def test_x_starts_on_16_bytes(itemsize):
    step = COORDINATE_BYTES // itemsize
    for x in (0, step, 5 * step, -step, -3 * step, 2 ** 20 * step):
        assert check_copy(x, -5, itemsize) == (x, -5)
    for x in (1, step - 1, step + 1, -1, -step - 1):
        if (x * itemsize) % 16 == 0:
            continue
        for store in (False, True):
            with pytest.raises(CopyError, match=f"multiple of {step}\\)") as caught:
                check_copy(x, 0, itemsize, store=store, what="tma.load_2d")
            assert f"x = {x} " in str(caught.value) and "faults" in str(caught.value)


def test_stores_fault_at_negative_coordinates_loads_do_not():
    for x, y in ((-8, 0), (0, -3), (-8, -3), (-64, -16)):
        assert check_copy(x, y, 2) == (x, y)
        with pytest.raises(CopyError, match=f"a store at \\({x}, {y}\\)"):
            check_copy(x, y, 2, store=True, what="tma.store_2d")
    assert check_copy(112, 45, 2, store=True) == (112, 45)  # clipped at the far edges


def test_box_on_128_bytes_of_shared_memory():
    assert check_copy(0, 0, 2, 1024 + SHARED_ALIGNMENT) == (0, 0)
    with pytest.raises(CopyError, match="address 0x410 is not a multiple of 128"):
        check_copy(0, 0, 2, 1024 + 16)


def test_copy_error_is_a_value_and_kernel_error():
    with pytest.raises(CopyError) as caught:
        check_copy(100, 0, 2, what="tma.store_2d", filename="k.py", line=7)
    exc = caught.value
    assert isinstance(exc, ValueError) and isinstance(exc, KernelError)
    assert str(exc).startswith("k.py:7: tma.store_2d: x = 100 is 200 bytes")
    assert (exc.filename, exc.line) == ("k.py", 7)


def test_simulated_map_checks_with_its_element_size():
    m = sim_map(np.zeros((16, 64), np.uint16), (32, 16), swizzle=64)
    assert m.check_copy(np.int32(-8), np.int32(-3), 0, "tma.load_2d") == (-8, -3)
    assert m.check_copy(np.int32(104), 2, 512, "tma.store_2d", store=True) == (104, 2)
    with pytest.raises(CopyError, match="x = 100 is 200 bytes") as caught:
        m.check_copy(np.int32(100), 0, 0, "tma.load_2d", site=("kernel.py", 3))
    assert (caught.value.filename, caught.value.line) == ("kernel.py", 3)
    with pytest.raises(CopyError, match="a store at \\(-8, -3\\)"):
        m.check_copy(-8, -3, 0, "tma.store_2d", store=True)
    wide = sim_map(np.zeros((16, 64), np.float32), (32, 16), swizzle=128)
    assert wide.check_copy(4, 0, 0, "tma.load_2d") == (4, 0)
    with pytest.raises(CopyError, match="multiple of 4"):
        wide.check_copy(6, 0, 0, "tma.load_2d")



def test_simulator_refuses_what_faults_on_a_gpu():
    """The kernel of issue 14's failing case (a load at x = 100 of a u16 tensor, a store at
    (-8, -3)) stops at the faulting copy's line on the simulator too."""
    from test_tma_cluster import box_of, copy_kernel

    from cupric.simulator import launch
    for (x, y, x2, y2), bad in (((100, 30, 104, 40), "tma.load_2d: x = 100"),
                                ((120, 40, -8, -3), "tma.store_2d: a store at (-8, -3)")):
        src = np.ones((48, 136), np.uint16)
        dst = np.zeros((50, 120), np.uint16)
        box = box_of(64)
        maps = (sim_map(src, box, swizzle=64), sim_map(dst, box, swizzle=64))
        out = np.zeros(box[0] * 16, np.uint16)
        with pytest.raises(CopyError, match=re.escape(bad)) as caught:
            launch(copy_kernel, (1, 1, 1), (128, 1, 1),
                   (maps[0].array, maps[1].array, out, np.int32(x), np.int32(y),
                    np.int32(x2), np.int32(y2), np.int32(box[0])), shared_bytes=3072)
        assert caught.value.filename.endswith("test_tma_cluster.py")

def load_at(src_map, x, y):
    sm = shared.dynamic(u16)
    bars = shared.array(1, u64)
    tma.load_2d(sm, 0, src_map, x, y, bars, 0)


def load_words_at(src_map, x, y):
    sm = shared.dynamic(f32)
    bars = shared.array(1, u64)
    tma.load_2d(sm, 0, src_map, x, y, bars, 0)


def store_at(dst_map, x, y):
    sm = shared.dynamic(u16)
    tma.store_2d(dst_map, x, y, sm, 0)


SIGNATURE = "Array[u64, 1, 'C'], i32, i32"


@pytest.mark.parametrize("fn, mask, store", [(load_at, 7, False), (load_words_at, 3, False),
                                             (store_at, 7, True)])
def test_bounds_check_tests_each_copy_first(fn, mask, store):
    """With bounds checking, x & (16 / itemsize - 1) (the shared array's item size), a
    store's x | y < 0 and the shared address & 127 are tested before the copy, a failure
    stopping the kernel through __assertfail; without it the copy is issued as written."""
    plain = cupric.kernel(fn).inspect_ptx(SIGNATURE, arch="sm_90")
    checked = cupric.kernel(fn, bounds_check=True).inspect_ptx(SIGNATURE, arch="sm_90")
    copy = "cp.async.bulk.tensor.2d"
    assert plain.count(copy) == checked.count(copy) == 1
    assert "__assertfail" not in plain and "__assertfail" in checked
    for test in (f", {mask};", ", 127;"):
        assert test not in plain
        assert checked.index(test) < checked.index(copy)
    assert ("or.b32" in checked) == store and "or.b32" not in plain


# -- GPU -------------------------------------------------------------------------------

SCRIPT = textwrap.dedent(r'''
    import json, sys
    import numpy as np
    import cupric
    from cupric import runtime as rt
    from cupric.device import mbarrier, shared, syncthreads, threadIdx, tma
    from cupric.runtime.errors import ContextLostError, DeviceAssertionError
    from cupric.runtime.tensor_map import tensor_map
    from cupric.types import u16, u64

    @cupric.kernel(bounds_check=True)
    def round_trip(src_map, dst_map, out, x, y, x2, y2):
        sm = shared.dynamic(u16)
        bars = shared.array(1, u64)
        pad = ((1024 - (tma.shared_address(sm, 0) & 1023)) & 1023) >> 1
        if threadIdx.x == 0:
            mbarrier.init(bars, 0, 1)
            mbarrier.fence_init()
            tma.acquire(src_map)
            tma.acquire(dst_map)
            mbarrier.arrive_expect_tx(bars, 0, 32 * 16 * 2)
            tma.load_2d(sm, pad, src_map, x, y, bars, 0)   # LINE load
        syncthreads()
        mbarrier.wait(bars, 0, 0)
        i = threadIdx.x
        while i < 32 * 16:
            out[i] = sm[pad + i]
            i += 128
        syncthreads()
        if threadIdx.x == 0:
            tma.store_2d(dst_map, x2, y2, sm, pad)   # LINE store
            tma.commit()
            tma.wait(0)

    src = rt.to_device(np.arange(48 * 136, dtype=np.uint16).reshape(48, 136))
    dst = rt.to_device(np.zeros((50, 120), np.uint16))
    out = rt.to_device(np.full(32 * 16, 0xBEEF, np.uint16))
    x, y, x2, y2 = (np.int32(v) for v in sys.argv[1:5])
    try:
        with tensor_map(src, (32, 16), swizzle=64) as ms, \
                tensor_map(dst, (32, 16), swizzle=64) as md:
            round_trip[1, 128, None, 2048](ms.array, md.array, out, x, y, x2, y2)
            rt.synchronize()
            first, stored = int(out.to_numpy()[0]), dst.to_numpy()
    except (DeviceAssertionError, ContextLostError) as caught:
        exc = getattr(caught, "original", caught)
        assert isinstance(exc, DeviceAssertionError), repr(caught)
        print(json.dumps({"message": str(exc), "line": exc.line}))
    else:
        print(json.dumps({"message": "no error", "first": first,
                          "corner": int(stored[y2, x2]), "written": int((stored != 0).sum())}))
''')


def _line(tag):
    return next(n for n, text in enumerate(SCRIPT.splitlines(), 1) if tag in text)


@pytest.mark.gpu
@pytest.mark.parametrize("coords, failure", [
    ((104, 30, 104, 40), None),
    ((100, 30, 104, 40), ("LINE load", "tma.load_2d: x is not a multiple of 8")),
    ((104, 30, -8, 40), ("LINE store", "tma.store_2d: a store at a negative coordinate")),
    ((104, 30, 8, -3), ("LINE store", "tma.store_2d: a store at a negative coordinate"))])
def test_gpu_checked_copies_name_their_line(coords, failure, tmp_path):
    """Copies the copy engine faults on stop a bounds-checked kernel at their line with a
    DeviceAssertionError; a valid round trip (a load, a store clipped at the far edges)
    runs. Own process each: a faulted context is unusable."""
    path = tmp_path / "tma_copy.py"
    path.write_text(SCRIPT)
    proc = subprocess.run([sys.executable, str(path), *map(str, coords)],
                          capture_output=True, text=True, timeout=240)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    assert lines, f"no result (rc {proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    got = json.loads(lines[-1])
    if failure is None:
        x, y, x2, y2 = coords
        # row 0 of a 64-byte swizzle keeps its order; 16 columns x 10 rows fit in dst
        assert got == {"message": "no error", "first": y * 136 + x,
                       "corner": y * 136 + x, "written": 16 * 10}
    else:
        assert failure[1] in got["message"] and got["line"] == _line(failure[0])
