"""Launching a kernel on the simulator: argument preparation, the choice of execution
strategy, and the two runners.

- serial: one OS thread runs every thread of a block, one after another. Right for any
  kernel that reaches no barrier and no warp collective (most elementwise kernels), and
  much the fastest.
- threads: the threads of one block are live at once, meeting at barriers and warp
  collectives; blocks run one by one.
- grid: every thread of the grid is live at once, for kernels that call grid_sync.

The live modes run on the generator engine (`_engine`: the kernel rewritten so that
collectives yield, all threads in this OS thread) when the rewrite is possible, and on
OS threads (one per simulated thread, passing a baton, `_Pool`) otherwise.
"""

from __future__ import annotations

import threading
import time

import numpy as np

from cupric import _config
from ..device import registry
from ..device.errors import KernelAssertionError, KernelError
from ..types import scalar_from_dtype
from . import _impl, _impl_half, _impl_hopper, _impl_math, _impl_mma, _impl_wide  # noqa: F401  (they fill the implementation table)
from ._array import SimArray
from ._live import Aborted, LiveSet
from ._scan import _python_function, needs, needs_of_values
from ._state import BlockState, LaunchState, ThreadState
from .errors import DeadlockError, SimulatorError

__all__ = ["launch", "run", "MODES"]

MODES = ("serial", "threads", "grid")
# OS threads are cheap but not free: a cooperative grid beyond this many threads is
# refused (a GPU, too, limits a cooperative grid to the blocks it can keep resident).
# Generators are cheaper still.
_MAX_LIVE_DEFAULT = 8192
_MAX_LIVE_GENERATORS = 65536


def _prepare(func, args) -> tuple[list, list]:
    """Kernel arguments as the simulated threads see them, and host copies to write back."""
    code = func.__code__
    names = code.co_varnames[:code.co_argcount]
    import inspect  # here, not at module level: it costs several ms to import

    try:
        inspect.signature(func).bind(*args)
    except TypeError as exc:
        raise TypeError(f"kernel {func.__name__}: {exc}") from None
    out, copy_back = [], []
    for i, value in enumerate(args):
        name = names[i] if i < len(names) else f"arg{i}"
        out.append(_argument(value, name, copy_back))
    return out, copy_back


def _argument(value, name: str, copy_back: list):
    if isinstance(value, np.ndarray):
        if value.dtype.fields is None:
            try:
                scalar_from_dtype(value.dtype)  # the element types a compiled launch takes
            except TypeError as exc:
                raise TypeError(f"argument {name!r}: {exc}") from None
        elif value.dtype.hasobject:
            raise TypeError(f"argument {name!r}: arrays of Python objects cannot be passed "
                            f"to a kernel")
        return SimArray(value, name)
    if isinstance(value, SimArray):
        return value
    if hasattr(value, "to_numpy") and hasattr(value, "copy_from"):
        # A device buffer: run on a host copy and write the result back after the launch.
        host = np.ascontiguousarray(value.to_numpy())
        copy_back.append((value, host))
        return SimArray(host, name)
    if hasattr(value, "__cuda_array_interface__"):
        raise TypeError(f"argument {name!r}: the simulator cannot read device memory of a "
                        f"{type(value).__name__}; pass a NumPy array or a DeviceBuffer")
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        if not -2**63 <= value < 2**63:
            raise OverflowError(f"argument {name!r}: {value} does not fit the i64 a Python "
                                f"int is passed as")
        return np.int64(value)  # typeof(int) is i64: arithmetic wraps as compiled code's
    if isinstance(value, float):
        return np.float64(value)
    if type(value) is tuple:
        return tuple(_argument(v, f"{name}[{i}]", copy_back) for i, v in enumerate(value))
    return value


def _located(exc: BaseException, state: ThreadState) -> BaseException:
    """The exception to report for a failure of the simulated thread `state`."""
    if isinstance(exc, KernelError):
        exc.locate(block=state.bid, thread=state.tid)
        return exc
    if isinstance(exc, AssertionError):
        tb = exc.__traceback__
        while tb.tb_next is not None:
            tb = tb.tb_next
        message = str(exc)
        new = KernelAssertionError(f"assertion failed: {message}" if message
                                   else "assertion failed",
                                   filename=tb.tb_frame.f_code.co_filename, line=tb.tb_lineno,
                                   block=state.bid, thread=state.tid)
        new.__cause__ = exc
        return new
    exc.add_note(f"raised in simulated GPU thread {state.tid} of block {state.bid}")
    return exc


def _returned(func) -> TypeError:
    return TypeError(f"kernel {func.__name__} returned a value; kernels return nothing")


def _block_ids(grid):
    for z in range(grid[2]):
        for y in range(grid[1]):
            for x in range(grid[0]):
                yield (x, y, z)


def _thread_ids(block):
    return [(x, y, z) for z in range(block[2]) for y in range(block[1])
            for x in range(block[0])]


def launch(py_func, grid, block, args, *, shared_bytes: int = 0, mode: str | None = None):
    """Run a kernel on the CPU with GPU semantics.

    Parameters
    ----------
    py_func : function or kernel
        The kernel's Python function, or any object with a `py_func` attribute (a
        compiled kernel).
    grid, block : int or tuple of 1 to 3 ints
        Blocks per grid and threads per block (at most 1024), as in `kern[grid, block]`.
    args : sequence
        Kernel arguments. NumPy arrays are modified in place; objects with
        `to_numpy()`/`copy_from()` (the runtime's DeviceBuffer) are copied to the host,
        and back after the launch; Python ints and floats become i64 and f64.
    shared_bytes : int
        Bytes of dynamic shared memory per block (`shared.dynamic`).
    mode : {"serial", "threads", "grid"}, optional
        How to run the threads (see the module docs); by default chosen by scanning the
        kernel for barriers, warp collectives and grid_sync.

    Raises
    ------
    KernelAssertionError
        A thread failed an `assert`; names the Python file and line and the thread.
    KernelIndexError
        An array index was out of bounds, or negative.
    BarrierError, DeadlockError
        A barrier or warp collective not reached by every thread it waits for.
    SimulatorError
        The launch configuration is beyond what the simulator (or a GPU) can run.

    Cost
    ----
    Serial mode is the cheapest. The live modes cost microseconds per thread per barrier
    or warp collective on the generator engine, and several times more on OS threads:
    use modest grids in tests.
    """
    func = _python_function(py_func)
    if func is None:
        raise TypeError(f"cannot simulate {py_func!r}: expected a Python function or a "
                        f"kernel with a py_func")
    run(func, func, grid, block, args, shared_bytes=shared_bytes, mode=mode)


def run(func, body, grid, block, args, *, shared_bytes: int = 0, mode: str | None = None):
    """`launch` of kernel `func` whose threads run `body`: `func` itself, or its typed
    twin (`_twin`, which computes with compiled code's semantics; `func` is still what
    is scanned for collectives and named in errors)."""
    # The launch limits of an sm_90 device, the same check as a GPU launch's (loaded with
    # the first launch: importing the simulator stays light).
    from ..runtime.launch import SM90_LIMITS, check_config
    grid, block, shared_bytes = check_config(func.__name__, grid, block, shared_bytes,
                                             SM90_LIMITS)
    nthreads = block[0] * block[1] * block[2]
    args = tuple(args)
    # Collectives handed to the kernel as arguments: the generator rewrite cannot see them.
    from_args = needs_of_values(args)
    through_args = bool(from_args)
    if mode is None:
        found = needs(func) | from_args
        mode = "grid" if "grid" in found else "threads" if found else "serial"
    elif mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if mode == "threads" and nthreads == 1:
        mode = "serial"  # one thread per block: every collective completes at once
    args, copy_back = _prepare(func, args)
    state = LaunchState(grid, block, shared_bytes, mode)
    try:
        if mode == "serial":
            _run_serial(body, args, state)
        else:
            _run_threads(body, args, state, through_args)
    finally:
        # Like a GPU, a failed launch leaves whatever the threads wrote before failing.
        for buffer, host in copy_back:
            buffer.copy_from(host)


def _run_serial(func, args, launch: LaunchState) -> None:
    state = ThreadState(launch)
    tids = _thread_ids(launch.block)
    previous = registry.current()
    registry.install(state)
    try:
        with np.errstate(all="ignore"):
            for bid in _block_ids(launch.grid):
                state.enter_block(BlockState(bid, launch.shared_bytes))
                lin = 0
                for tid in tids:
                    state.tid = tid
                    state.lin = lin
                    lin += 1
                    if func(*args) is not None:
                        raise _returned(func)
    except Exception as exc:
        located = _located(exc, state)
        if located is exc:
            raise
        raise located from exc
    finally:
        registry.install(previous)


def _timeout() -> float:
    return _config.SIMULATOR_TIMEOUT.get()


class _Pool:
    """OS threads that each run one simulated thread per job, reused from job to job.

    A job is one live set: one block, or the whole grid. Each worker waits for its job,
    then for the baton (its state's `wake` lock), and runs the kernel; `LiveSet` passes
    the baton along.
    """

    def __init__(self, func, args, launch: LaunchState, nworkers: int) -> None:
        self.func = func
        self.args = args
        self.launch = launch
        self.nworkers = nworkers
        self.tids = _thread_ids(launch.block)
        self.cond = threading.Condition()
        self.gen = 0
        self.job = None
        self.done = 0
        self.states = []
        for _ in range(nworkers):
            state = ThreadState(launch)
            state.wake = threading.Lock()
            state.wake.acquire()  # held until the thread is handed the baton
            self.states.append(state)
        self.threads = []
        # The default stack size: threading.stack_size() is process-wide, and changing it
        # here would race with other threads (and other launches) creating threads.
        for i in range(nworkers):
            t = threading.Thread(target=self._work, args=(i,), daemon=True,
                                 name=f"cupric-simulated-thread-{i}")
            t.start()
            self.threads.append(t)

    def _work(self, i: int) -> None:
        state = self.states[i]
        registry.install(state)
        nb = self.launch.nthreads
        seen = 0
        with np.errstate(all="ignore"):
            while True:
                with self.cond:
                    while self.gen == seen:
                        self.cond.wait()
                    seen = self.gen
                    job = self.job
                if job is None:
                    return
                live, blocks = job
                state.live = live
                state.enter_block(blocks[i // nb])
                state.lin = i % nb
                state.tid = self.tids[state.lin]
                state.atomics = 0
                state.wake.acquire()
                try:
                    if live.aborted:
                        raise Aborted()
                    if self.func(*self.args) is not None:
                        raise _returned(self.func)
                    live.exit(state)
                except Aborted:
                    pass
                except Exception as exc:
                    live.fail(state, _located(exc, state))
                except BaseException as exc:  # SystemExit and the like: stop the launch
                    live.fail(state, exc)
                with self.cond:
                    self.done += 1
                    if self.done == self.nworkers:
                        self.cond.notify_all()

    def run(self, live: LiveSet, blocks: list) -> None:
        """Run one job; returns when every worker finished it, or raises its failure."""
        timeout = _timeout()
        with self.cond:
            self.job = (live, blocks)
            self.done = 0
            self.gen += 1
            self.cond.notify_all()
        live.start()
        with self.cond:
            seen, since = live.progress, time.monotonic()
            while self.done < self.nworkers:
                self.cond.wait(0.25)
                now = time.monotonic()
                if live.progress != seen:
                    seen, since = live.progress, now
                elif live.aborted and now - since > 5.0:
                    break  # a thread spinning in kernel code never sees the abort
                elif not live.aborted and now - since > timeout:
                    # Watchdog: a thread that neither blocks, yields nor exits for this
                    # long is spinning on memory no other thread will write while it
                    # holds the baton. Report it rather than hang (it is a daemon thread).
                    live.fail(None, DeadlockError(
                        f"no simulated thread made progress for {timeout:g} s "
                        f"(CUPRIC_SIMULATOR_TIMEOUT): a thread spins without nanosleep() "
                        f"or atomics, waiting for a write no other thread can make"))
                    break
        if live.error is not None:
            raise live.error

    def stop(self) -> None:
        with self.cond:
            self.job = None
            self.gen += 1
            self.cond.notify_all()
        for t in self.threads:
            t.join(1.0)


def _engine_choice() -> str:
    engine = _config.SIMULATOR_ENGINE.get()
    if engine not in ("auto", "threads", "generators"):
        raise ValueError(f"CUPRIC_SIMULATOR_ENGINE must be auto, threads or generators, "
                         f"got {engine!r}")
    return engine


def _run_threads(func, args, launch: LaunchState, through_args: bool) -> None:
    # The generator engine (ast, inspect) loads on the first launch that needs it.
    from ._engine import run_generators
    from ._transform import transform

    engine = _engine_choice()
    gen_func = None
    if engine != "threads" and not through_args:
        gen_func = transform(func)
    if engine == "generators" and gen_func is None:
        raise SimulatorError(f"CUPRIC_SIMULATOR_ENGINE=generators, but kernel "
                             f"{func.__name__} cannot be rewritten into a generator")
    if gen_func is not None:
        if launch.mode == "grid":
            _check_grid_size(launch, _MAX_LIVE_GENERATORS)
        run_generators(gen_func, args, launch, _block_ids(launch.grid),
                       _thread_ids(launch.block), _located, lambda: _returned(func))
        return
    _run_os_threads(func, args, launch)


def _check_grid_size(launch: LaunchState, default_limit: int) -> int:
    g = launch.grid
    total = g[0] * g[1] * g[2] * launch.nthreads
    limit = _config.SIMULATOR_MAX_THREADS.get()
    limit = default_limit if limit is None else limit
    if total > limit:
        raise SimulatorError(
            f"a kernel that calls grid_sync needs all {total} threads of its grid "
            f"running at once; the simulator runs at most {limit} "
            f"(CUPRIC_SIMULATOR_MAX_THREADS): use a smaller grid")
    return total


def _run_os_threads(func, args, launch: LaunchState) -> None:
    nb = launch.nthreads
    if launch.mode == "grid":
        g = launch.grid
        total = _check_grid_size(launch, _MAX_LIVE_DEFAULT)
        pool = _Pool(func, args, launch, total)
        try:
            live = LiveSet(pool.states)
            blocks = [BlockState(bid, launch.shared_bytes, live.block_sync(nb))
                      for bid in _block_ids(g)]
            pool.run(live, blocks)
        finally:
            pool.stop()
        return
    pool = _Pool(func, args, launch, nb)
    try:
        for bid in _block_ids(launch.grid):
            live = LiveSet(pool.states)
            pool.run(live, [BlockState(bid, launch.shared_bytes, live.block_sync(nb))])
    finally:
        pool.stop()
