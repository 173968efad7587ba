"""print, assert, trap and clocks in simulated kernels."""

import numpy as np
import pytest

from cupric import simulator as sim
from cupric.device import (FULL_MASK, clock, clock64, globaltimer, grid, nanosleep,
                           syncthreads, threadfence, threadfence_block, threadfence_system,
                           threadIdx, trap, warp)
from cupric.device.errors import KernelAssertionError, KernelTrapError


def say_hello(x):
    i = grid(1)
    print("thread", i, "value", x[i])


def test_print_reaches_stdout(capsys, rng):
    x = rng.integers(0, 1000, 6)
    capsys.readouterr()  # drop the rng fixture's seed line
    sim.launch(say_hello, 2, 3, (x,))
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"thread {i} value {x[i]}" for i in range(6)]


def say_hello_in_step(x):
    i = grid(1)
    syncthreads()
    print("thread", i, "value", x[i])


def test_print_lines_do_not_interleave_in_threaded_mode(capsys):
    x = np.arange(64)
    sim.launch(say_hello_in_step, 1, 64, (x,))
    lines = sorted(capsys.readouterr().out.splitlines(), key=lambda s: int(s.split()[1]))
    assert lines == [f"thread {i} value {i}" for i in range(64)]


def checks_input(x):
    i = grid(1)
    assert x[i] >= 0, "negative input"


def test_assert_reaches_the_host_with_file_and_line():
    x = np.ones(64)
    x[37] = -1
    with pytest.raises(KernelAssertionError) as info:
        sim.launch(checks_input, 2, 32, (x,))
    err = info.value
    assert err.filename == __file__
    assert err.line == checks_input.__code__.co_firstlineno + 2
    assert err.block == (1, 0, 0) and err.thread == (5, 0, 0)
    assert f"test_io.py:{err.line}: assertion failed: negative input" in str(err)
    assert isinstance(err, AssertionError)


def checks_in_step(x):
    i = grid(1)
    syncthreads()
    assert x[i] >= 0


def test_assert_in_threaded_mode_stops_the_launch():
    x = np.ones(64)
    x[3] = -1
    with pytest.raises(KernelAssertionError, match="assertion failed") as info:
        sim.launch(checks_in_step, 1, 64, (x,))
    assert info.value.thread == (3, 0, 0)


def traps(x):
    if grid(1) == 2:
        trap()


def test_trap_aborts_the_launch():
    with pytest.raises(KernelTrapError, match="trap") as info:
        sim.launch(traps, 1, 4, (np.zeros(1),))
    assert info.value.line == traps.__code__.co_firstlineno + 2


def clocks(out):
    i = grid(1)
    a = clock64()
    threadfence_block()
    threadfence()
    threadfence_system()
    nanosleep(100)
    b = clock64()
    out[i, 0] = b - a
    out[i, 1] = clock()
    out[i, 2] = globaltimer() > 0


def clocks_in_step(out):
    warp.ballot(FULL_MASK, True)  # a warp collective makes the launch threaded
    clocks(out)


@pytest.mark.parametrize("kernel", [clocks, clocks_in_step])
def test_clocks_are_monotonic_and_fences_run(kernel):
    out = np.full((8, 3), -1, np.int64)
    sim.launch(kernel, 1, 8, (out,))
    assert (out[:, 0] >= 0).all() and (out[:, 1] >= 0).all() and (out[:, 2] == 1).all()


def bad_sleep(out):
    nanosleep(-1)


def test_nanosleep_refuses_negative_durations():
    with pytest.raises(ValueError, match="non-negative"):
        sim.launch(bad_sleep, 1, 1, (np.zeros(1),))


def divides_by_zero(out):
    out[threadIdx.x] = np.float32(1) / out[threadIdx.x]


def test_float_division_by_zero_gives_inf_without_warnings():
    out = np.zeros(2, np.float32)
    with np.errstate(all="raise"):
        sim.launch(divides_by_zero, 1, 2, (out,))
    assert np.isinf(out).all()


def python_error(out):
    out[threadIdx.x] = {}["missing"]


def test_other_errors_keep_their_type_and_name_the_thread():
    with pytest.raises(KeyError) as info:
        sim.launch(python_error, 1, 1, (np.zeros(1),))
    assert "simulated GPU thread (0, 0, 0)" in "".join(info.value.__notes__)
