"""`@cupric.kernel` and `@cupric.device_function`: Python functions that compile to GPU
code. A kernel is specialized per concrete argument types at its first launch with them
(like Rust's monomorphization), compiled through libNVVM, cached on disk, and launched
through the runtime's prepared argument packing: `kern[grid, block](args...)`.
Without a GPU (or with CUPRIC_SIMULATOR=1) launches run on `cupric.simulator`.
"""

from __future__ import annotations

import functools
import json
import threading
import weakref

from cupric.compiler import launcher as _launcher
# Argument reading, specializations and the `kern[grid, block]` binding live in their own
# modules; the names imported here also keep working from this one.
from cupric.compiler.arguments import (_ARRAY_CLASSES, _INTAKE_ERRORS,  # noqa: F401
                                       _NUMPY_SCALARS, _OWN_BUFFERS, _WrongDevice,
                                       _arg_parts, _disjoint, _geometry)
from cupric.compiler.errors import CompileError
from cupric.compiler.launcher import _config, _Launcher, _Simulate  # noqa: F401
from cupric.compiler.specialization import (Specialization,  # noqa: F401
                                            _readonly_types, param_types)
from cupric.runtime import intake as _intake
from cupric.runtime.native import current_device_ordinal, driver_available

__all__ = ["kernel", "device_function", "Kernel", "DeviceFunction", "Specialization",
           "KernelArgumentError"]


class KernelArgumentError(CompileError, TypeError):
    """Launch arguments that do not fit the kernel: a wrong count (located at the `def`)
    or an argument whose type does not fit its parameter (located at that parameter,
    with a caret under it). Also a `TypeError`."""


class DeviceFunction:
    """A function kernels may call (`@cupric.device_function`).

    Compiled into each kernel that calls it, specialized per argument types. Called from
    ordinary Python it runs the Python function itself (so kernels that call it also run
    in the simulator).
    """

    _cupric_device_function = True

    def __init__(self, py_func) -> None:
        self.py_func = py_func
        functools.update_wrapper(self, py_func)

    def __call__(self, *args):
        return self.py_func(*args)

    def __repr__(self) -> str:
        return f"<cupric device function {self.py_func.__qualname__}>"


def device_function(py_func=None):
    """Mark a function as callable from kernels.

    Examples
    --------
    >>> @cupric.device_function
    ... def clamp(x, lo, hi):
    ...     return min(max(x, lo), hi)
    """
    if py_func is None:
        return device_function
    if not callable(getattr(py_func, "__code__", None)) and not hasattr(py_func, "__code__"):
        raise TypeError("@cupric.device_function applies to plain Python functions")
    return DeviceFunction(py_func)


def kernel(py_func=None, *, debug: bool = False, lineinfo: bool = False,
           fast_math: bool = False, opt_level: int = 3, arch=None,
           max_registers: int | None = None, c_division: bool = False,
           fma: bool | None = None, bounds_check: bool | None = None, options=None):
    """Compile a Python function into a GPU kernel.

    Parameters
    ----------
    py_func : function
        Parameters annotated with cupric types (`f32`, `Array[f32, 2, "C"]`, a struct,
        `tuple[...]`) or left generic (no annotation, or a `TypeVar`).
    debug, lineinfo : bool
        Full debug info (slow code) / line tables only (profilers show Python lines).
    fast_math : bool
        Flush denormals, approximate division and square root, reassociate float math.
    opt_level : int
        0..3 (libNVVM `-opt`).
    arch : str, optional
        Target architecture; default: the current device's (sm_90 without a GPU).
    max_registers : int, optional
        Register cap per thread.
    c_division : bool
        Signed `//` and `%` truncate toward zero (C semantics; a few instructions fewer)
        instead of Python's flooring.
    fma : bool, optional
        Allow contracting `a * b + c` into one fused multiply-add (default True; results
        then differ from NumPy's in the last bit).
    options : cupric.compiler.CompileOptions, optional
        All backend options at once (arch, opt_level, debug, lineinfo, fast_math, fma,
        max_registers); replaces the keywords of the same names. Fast-math switches given
        one by one in it (ftz, prec_div, prec_sqrt) are kept as they are.
    bounds_check : bool, optional
        Check every array index against the shape; an out-of-range access prints the
        array, the index and the Python line and aborts the kernel (instead of corrupting
        memory). Default: on with `debug=True`, else off.

    Returns
    -------
    Kernel

    Examples
    --------
    >>> from cupric.types import f32, Array
    >>> from cupric.device import grid
    >>> @cupric.kernel
    ... def saxpy(a: f32, x: Array[f32, 1], y: Array[f32, 1]):
    ...     i = grid(1)
    ...     if i < len(x):
    ...         y[i] = a * x[i] + y[i]
    >>> saxpy[blocks, 256](2.0, x, y)          # doctest: +SKIP
    """
    if options is not None:  # a CompileOptions wins over the individual keywords
        debug, lineinfo, fast_math = options.debug, options.lineinfo, options.fast_math
        opt_level, arch, max_registers = options.opt_level, options.arch, options.max_registers
        fma = options.fma
    settings = dict(debug=debug, lineinfo=lineinfo, fast_math=fast_math,
                    opt_level=opt_level, arch=arch, max_registers=max_registers,
                    c_division=c_division, fma=fma,
                    bounds_check=bounds_check, options=options)
    if py_func is None:
        return lambda f: Kernel(f, **settings)
    return Kernel(py_func, **settings)


def _check_function(py_func) -> None:
    import types
    if not isinstance(py_func, types.FunctionType):
        raise TypeError(f"@cupric.kernel applies to a plain Python function (def), got "
                        f"{type(py_func).__name__}")


# Every kernel, for `_forget_device`: a context reset destroys the modules and launch
# handles they keep.
_KERNELS: "weakref.WeakSet[Kernel]" = weakref.WeakSet()


def _forget_device(ordinal: int) -> None:
    """After a reset of device `ordinal`'s context: drop the launch handles and generated
    launchers loaded there (they are loaded again on the next launch)."""
    for kern in list(_KERNELS):
        with kern._lock:
            kern._fast = None
            kern._no_fast.clear()
            for spec in list(kern._variants.values()):
                with spec._lock:
                    spec._on_device.pop(ordinal, None)
                    spec._prepared = None


def _register_reset_hook() -> None:
    from cupric.runtime.context import on_reset
    on_reset(_forget_device)


_SIM_NOTICE = [False]


_CHOSEN = "CUPRIC_SIMULATOR is set"


def _simulator_reason() -> str | None:
    from cupric._config import simulator_requested
    if simulator_requested():
        return _CHOSEN
    if not driver_available():
        return "no CUDA driver on this machine"
    return None


def _first_bind(kern, *config):
    """The first ``kern[...]`` of the process: chooses what the later ones make."""
    bind = _Launcher
    if not _use_simulator():
        from cupric.compiler import _fastcall
        module = _fastcall.load()  # None when switched off or not buildable
        if module is not None:
            bind = module.bind
    _BIND[0] = bind
    return bind(kern, *config)


#: What ``kern[grid, block, stream, shared_bytes]`` makes: the compiled launcher
#: extension's `bind` (`cupric.compiler._fastcall`: the call enters the kernel's compiled
#: launcher in C), or `_Launcher` on the simulator, with the extension switched off or
#: not buildable; the first subscript of the process decides.
_BIND = [_first_bind]


class Kernel:
    """A GPU kernel written in Python (made by `@cupric.kernel`).

    Launch with `kern[grid, block](*args)`, `kern[grid, block, stream, shared_bytes](...)`
    or `kern.launch(*args, grid=..., block=..., stream=..., shared_bytes=...)`;
    `kern.simulate[grid, block](...)` runs it on the CPU simulator. `inspect_ir(sig)` and
    `inspect_ptx(sig)` show the generated code for a signature.

    Raises (at launch)
    ------------------
    TypeError
        Wrong argument count or an argument that does not fit its annotation; a host
        array (NumPy, a PyTorch CPU tensor...) where a device array is expected.
    cupric.runtime.DeviceMismatchError
        An array lives on another GPU than the launch's (also a `ValueError`); the
        message names the kernel, the parameter and both devices. Nothing was launched.
    cupric.runtime.ClosedError
        A closed DeviceBuffer, or a view of one (on every path, the generated launchers
        included). Nothing was launched.
    CompileError
        The kernel is outside the kernel language (file:line:col, caret, what is allowed).

    Cost
    ----
    First launch with new argument types: typing, codegen, libNVVM and the linker (tens of
    ms), or a disk-cache hit. Later launches: a dictionary lookup on the argument types and
    the runtime's prepared packing, through a launcher generated for the signature and the
    argument classes (`cupric.compiler.launcher`; several array kinds keep one each), in C
    for scalars and contiguous 1-D arrays on one GPU (`cupric.compiler._fastcall`;
    ``CUPRIC_KERNEL_FASTCALL=0`` keeps the generated Python launchers).
    Arrays are read by `cupric.runtime.intake`: CuPy arrays, PyTorch tensors and
    numba-cuda device arrays through their own attributes, other arrays through
    `__cuda_array_interface__` or DLPack.

    Devices
    -------
    A launch runs on the current device; each device the kernel is launched on gets its
    own copy of the module. On a machine with one GPU there is nothing to check (host
    memory is refused by type) and nothing is read. With several GPUs, every array
    argument's device is compared with the launch's before anything is queued: a
    DeviceBuffer's recorded device, CuPy's ``data.device_id``, PyTorch's
    ``get_device()`` (one attribute and one comparison each, also in the generated
    launcher, which asks the current device once per launch); numba-cuda arrays and
    other `__cuda_array_interface__` producers name no device, so the driver is asked
    about the pointer (`cuPointerGetAttributes`, about a microsecond, on every launch with
    them; a borrowed DeviceBuffer remembers the answer). Memory every device reaches is
    accepted: managed memory, pinned host memory, addresses the driver does not know.
    Memory of another device is accepted when peer access from the launch's device to it
    was enabled through `cupric.runtime.enable_peer_access` (and, for memory of a
    stream-ordered pool, read-write access granted by that pool's `set_access`); access
    enabled by another library is not seen, and is then refused: enable it through
    cupric too (enabling an enabled pair is harmless).

    Streams
    -------
    An array whose `__cuda_array_interface__` names a producer stream (CuPy: its current
    stream, the legacy default stream for CuPy's null stream; numba-cuda: the array's
    bound stream) orders the launch's own stream after that stream, as the interface
    (v3) asks of a consumer: an event recorded on the producer stream and waited on by the
    launch stream (`cupric.runtime.memory.order_after`, one reused event per thread and
    device), the host never waits. It is skipped where CUDA orders the two already: the
    same stream; the legacy default stream against the per-thread default stream; the
    legacy default stream against a blocking stream, either way round (one
    `cuStreamGetFlags` query says which). Several arrays of one producer cost one wait.
    A launch that is refused (wrong device, wrong type) orders nothing. A launch stream
    being captured into a graph gets no wait (CUDA forbids waiting there on an event
    recorded outside the capture): finish or order the producer's work before launching
    the graph. DLPack producers are handed the launch stream and order themselves.
    PyTorch names no stream (order PyTorch's work yourself), nor do DeviceBuffers (their
    work is on streams you chose). A wait costs a few driver calls (flags, capture
    status, event record and wait: a few microseconds); launching on CuPy's current
    stream itself (``with cupy.cuda.ExternalStream(stream.handle): ...``) needs none.
    """

    _cupric_kernel = True

    def __init__(self, py_func, *, debug=False, lineinfo=False, fast_math=False,
                 opt_level=3, arch=None, max_registers=None, c_division=False,
                 fma=None, bounds_check=None, options=None) -> None:
        from cupric.compiler.options import CompileOptions
        _check_function(py_func)
        self.py_func = py_func
        functools.update_wrapper(self, py_func)
        self.options = CompileOptions(arch=arch, opt_level=opt_level, debug=debug,
                                      lineinfo=lineinfo, fast_math=fast_math,
                                      max_registers=max_registers, fma=fma)
        if options is not None:
            self.options = options
        self.fast_math = fast_math
        self.c_division = c_division
        self.bounds_check = bool(debug if bounds_check is None else bounds_check)
        self.symbol = py_func.__name__
        self._fingerprint = None
        self._specs: dict = {}       # launch key -> (arg_types, written)
        self._variants: dict = {}    # (arg_types, noalias, aligned) -> Specialization
        self._writes: dict = {}      # arg_types -> written array parameters
        self._fast = None            # guarded launcher for the first common signature
        self._no_fast: set = set()
        self._lock = threading.RLock()
        self._param_specs = None
        _preload_cache_path()
        _KERNELS.add(self)

    def __repr__(self) -> str:
        return f"<cupric kernel {self.py_func.__qualname__}>"

    def __call__(self, *args, **kwargs):
        raise TypeError(f"launch the kernel {self.__name__} with {self.__name__}[grid, block]"
                        f"(...); to call code from kernels use @cupric.device_function")

    @property
    def fingerprint(self) -> str:
        if self._fingerprint is None:
            from cupric.compiler.fingerprint import fingerprint
            self._fingerprint = fingerprint(self.py_func, lines=self.options.lineinfo
                                            or self.options.debug)
        return self._fingerprint

    # -- launching -------------------------------------------------------------------------

    def __getitem__(self, config) -> _Launcher:
        if config.__class__ is tuple and 2 <= len(config) <= 4:  # kern[grid, block, ...]
            return _BIND[0](self, *config)
        return _config(self, config)

    @property
    def simulate(self) -> _Simulate:
        """`kern.simulate[grid, block](...)` runs the kernel on `cupric.simulator`."""
        return _Simulate(self)

    def launch(self, *args, grid, block, stream=None, shared_bytes: int = 0) -> None:
        """Launch with keyword configuration (see the class docstring)."""
        self._launch(grid, block, stream, shared_bytes, args)

    def _simulate(self, grid, block, shared_bytes, args):
        # The front end, the argument checks and the launch limits of a GPU launch, then
        # the kernel's typed twin (cupric.compiler.arguments).
        from cupric.compiler.arguments import simulate
        return simulate(self, grid, block, shared_bytes, args)

    def _launch(self, grid, block, stream, shared_bytes, args) -> None:
        if _SIMULATOR[0] is not False and _use_simulator():
            return self._fallback(grid, block, shared_bytes, args)
        # The launch device: the current one. With one GPU nothing can live elsewhere
        # (host arrays are refused by type), so device -1 skips the device checks.
        multi = _MULTI[0]
        if multi is None:
            multi = _resolve_multi()
        device = _current_device() if multi else -1
        # The hot path: one pass over the arguments builds the flattened ABI values and
        # the specialization key; contiguous 1-D device arrays and Python scalars are
        # handled inline, everything else by _arg_parts.
        flat: list = []
        key: list = []
        extents: list = []
        pending: list = []  # producers' streams (CUDA Array Interface) to order after
        put = flat.append
        index = 0
        address_bits = 0  # OR of the array pointers: alignment of them all
        try:
            for value in args:
                cls = value.__class__
                if cls in _OWN_BUFFERS and value.ndim == 1 and \
                        value.strides[0] == value.itemsize:
                    if value.allocation.closed:
                        _intake.check_open(value, f"argument {index}")
                    if device >= 0:
                        found = _intake.buffer_device(value, device)
                        if found is not None:
                            raise _WrongDevice(index, found)
                    ptr = value.ptr
                    n = value.shape[0]
                    put(ptr)
                    put(n)
                    put(1)
                    if n:
                        extents.append((ptr, ptr + n * value.itemsize, index, ptr))
                        address_bits |= ptr
                    key.append((value.dtype, 1, "C"))
                elif cls is float or cls is int or cls is bool or cls in _NUMPY_SCALARS:
                    put(value)
                    key.append(cls)
                else:
                    before = len(extents)
                    key.append(_arg_parts(value, flat, extents, index, device, pending,
                                          stream))
                    for extent in extents[before:]:
                        address_bits |= extent[3]
                index += 1
        except TypeError as exc:
            cls = exc.__class__ if exc.__class__ in _INTAKE_ERRORS else TypeError
            raise cls(f"{self.__name__}: {exc}") from None
        except _WrongDevice as wrong:
            raise self._device_error(*wrong.args, device) from None
        key = tuple(key)
        entry = self._specs.get(key)
        if entry is None:
            entry = self._new_entry(key, args)
        written, variants, arg_types = entry
        choice = (not (written and len(extents) > 1 and not _disjoint(extents, written)),
                  not address_bits & 15)
        spec = variants.get(choice)
        if spec is None:
            spec = variants[choice] = self._variant(arg_types, *choice)
        if device >= 0:
            prepared = spec._on_device.get(device) or spec.prepared(device)
        else:
            prepared = spec._prepared or spec.prepared()
        if pending:
            _intake.order_after(stream, pending)
        prepared.launch(grid, block, stream, shared_bytes, *flat)
        if choice == (True, True) and key not in self._no_fast:
            self._add_launcher(key, args, written, prepared, device)

    def _add_launcher(self, key, args, written, prepared, device: int) -> None:
        """Put a generated launcher for this signature and these argument classes at the
        head of the kernel's chain (`cupric.compiler.launcher`), unless one is there or
        the chain is full."""
        launch_key = (key, tuple(v.__class__ for v in args))
        if launch_key in self._no_fast:
            return
        with self._lock:  # two threads adding launchers at once must not lose one
            known = _launcher.launcher_keys(self._fast)
            if launch_key in known or len(known) >= _launcher.MAX_LAUNCHERS:
                return
            fast = _launcher.make_launcher(self, key, args, written, prepared, device,
                                           fallback=self._fast)
            if fast is None:
                self._no_fast.add(launch_key)
            else:
                _launcher.index_chain(fast)
                self._fast = fast
                if _BIND[0] is _Launcher and _launcher.is_compiled(fast):
                    # From now on kern[grid, block] is the extension's bound
                    # configuration, whose call enters the compiled launcher directly.
                    _BIND[0] = _launcher._fastcall.load().bind

    def _device_error(self, index: int, found: int, device: int):
        """The `DeviceMismatchError` for argument `index` living on device `found` while
        the launch runs on `device`."""
        from cupric.runtime.errors import DeviceMismatchError
        code = self.py_func.__code__
        names = code.co_varnames[:code.co_argcount]
        name = names[index] if index < len(names) else None
        what = f"argument {index} ({name})" if name else f"argument {index}"
        return DeviceMismatchError(
            f"{self.__name__}: {what} lives on device {found}, but the launch runs on "
            f"device {device} (the current device); make device {found} current for this "
            f"launch, copy the array to device {device} (cupric.runtime.copy_peer), or "
            f"enable peer access (cupric.runtime.enable_peer_access({found}, "
            f"device={device}))", argument=name or f"argument {index}", device=found,
            expected=device)

    def _fallback(self, grid, block, shared_bytes, args):
        if not _SIM_NOTICE[0]:
            _SIM_NOTICE[0] = True
            reason = _simulator_reason()
            if reason != _CHOSEN:  # asked for by the user: nothing to point out
                from cupric.simulator import notice_no_gpu
                notice_no_gpu(reason)
        return self._simulate(grid, block, shared_bytes, args)

    def _new_entry(self, key, args):
        with self._lock:
            entry = self._specs.get(key)
            if entry is not None:
                return entry
            try:
                arg_types = self.bind_types(args)
                written = self.writes(arg_types)
            except CompileError as exc:
                raise exc.with_traceback(None) from None
            entry = self._specs[key] = (written, {}, arg_types)
            return entry

    def writes(self, arg_types) -> frozenset:
        """Indices of the array parameters the kernel writes for `arg_types` (directly or
        through device functions), from memory, the disk cache, or typing."""
        known = self._writes.get(arg_types)
        if known is not None:
            return known
        from cupric.compiler.cache import default_cache, make_key
        key = make_key("cupric.frontend.writes", self.fingerprint, repr(arg_types))
        cache = default_cache()
        entry = cache.get(key)
        if entry is not None and "writes" in entry.payloads:
            known = frozenset(json.loads(entry.payloads["writes"]))
        else:
            known = frozenset(self._variant(arg_types, False).typed.writes)
            try:
                cache.put(key, {"writes": json.dumps(sorted(known))})
            except OSError:
                pass  # a read-only cache only costs typing again next time
        self._writes[arg_types] = known
        return known

    def bind_types(self, args) -> tuple:
        """Concrete parameter types for launch arguments `args`.

        Raises
        ------
        TypeError
            Wrong argument count or an argument that does not fit its annotation.
        """
        from cupric.compiler.signature import BindError, bind, param_specs, type_of_value
        if self._param_specs is None:
            self._check_parameters()
            self._param_specs = param_specs(self.py_func)
        names = list(self.py_func.__code__.co_varnames[:self.py_func.__code__.co_argcount])
        actual = []
        for index, value in enumerate(args):
            try:
                try:
                    actual.append(type_of_value(value))
                except TypeError:
                    if not hasattr(value, "__dlpack__"):
                        raise
                    # A DLPack-only producer: its layout, as the intake layer reads it.
                    actual.append(type_of_value(_intake.read(value)))
            except TypeError as exc:
                raise self._argument_error(f"argument {index} of {self.__name__}(): {exc}",
                                           index if index < len(names) else None) from None
        try:
            return bind(self.__name__, names, self._param_specs, actual)
        except BindError as exc:
            raise self._argument_error(str(exc), exc.index) from None

    def _argument_error(self, message: str, index) -> KernelArgumentError:
        """A launch-argument error pointing at parameter `index` (or the `def`)."""
        from cupric.compiler.frontend.source import get_source
        src = get_source(self.py_func)
        params = src.tree.args.args
        node = params[index] if index is not None and index < len(params) else src.tree
        located = src.error(node, message, hint="launch arguments must fit the parameter "
                            "annotations; device arrays for Array parameters")
        return KernelArgumentError(located.message, filename=located.filename,
                                   line=located.line, col=located.col,
                                   source_line=located.source_line, hint=located.hint)

    def _check_parameters(self) -> None:
        """Kernel parameters are plain positional names (a CompileError at the `def`)."""
        code = self.py_func.__code__
        if code.co_flags & 0x0C or code.co_kwonlyargcount or code.co_posonlyargcount or \
                self.py_func.__defaults__:
            from cupric.compiler.frontend.source import get_source
            src = get_source(self.py_func)
            raise src.error(src.tree, "kernel parameters must be plain positional "
                            "parameters (no *args, **kwargs, defaults or keyword-only "
                            "parameters)") from None

    def variant_for(self, args, *, noalias: bool = True,
                    aligned: bool = True) -> Specialization:
        """The specialization the general launch takes for `args` when their arrays do not
        overlap and start on 16-byte boundaries (nothing typed ahead: code found in the
        disk cache loads as it is); for libraries keeping their own plan of a launch.
        Raises KernelArgumentError where `args` do not fit the parameters."""
        return self._variant(self.bind_types(args), noalias, aligned)

    def _variant(self, arg_types, noalias, aligned=False) -> Specialization:
        key = (arg_types, noalias, aligned)
        spec = self._variants.get(key)
        if spec is None:
            spec = self._variants[key] = Specialization(self, arg_types, noalias, aligned)
        return spec

    def _signature_types(self, signature) -> tuple:
        """Concrete parameter types for `signature` (a string, a sequence of cupric types,
        or None for the annotations, which must then all be concrete)."""
        from cupric.compiler.signature import (BindError, Generic, bind, param_specs,
                                               parse_signature)
        self._check_parameters()
        specs = param_specs(self.py_func)
        if signature is None:
            if any(isinstance(s, Generic) for s in specs):
                raise TypeError(f"{self.__name__} has generic parameters; pass a signature")
            types = tuple(specs)
        elif isinstance(signature, str):
            types = parse_signature(signature)
        else:
            types = tuple(signature)
        names = list(self.py_func.__code__.co_varnames[:self.py_func.__code__.co_argcount])
        try:
            types = bind(self.__name__, names, specs, list(types))
        except BindError as exc:
            raise self._argument_error(str(exc), exc.index) from None
        return types

    # -- inspection ------------------------------------------------------------------------

    def specialize(self, signature=None, *, noalias: bool = True,
                   aligned: bool = True) -> Specialization:
        """The specialization for `signature`: a string ("f32, Array[f32, 1, 'C']"), a
        sequence of cupric types, or None for the parameter annotations themselves (all
        must be concrete). With `noalias` (default) array arguments are assumed not to
        overlap, and with `aligned` (default) to start on 16-byte boundaries, as the
        launch path finds for distinct allocations.

        Raises
        ------
        CompileError
            The kernel does not compile for these types.
        TypeError, ValueError
            The signature does not fit the kernel's parameters.
        """
        types = self._signature_types(signature)
        try:
            spec = self._variant(types, noalias, aligned)
            spec.typed
            return spec
        except CompileError as exc:
            raise exc.with_traceback(None) from None

    def compile(self, signature=None, *, arch=None, noalias: bool = True,
                aligned: bool = True):
        """Compile (or fetch from the cache) the code for `signature`; returns the
        `cupric.compiler.backend.Artifact` (PTX, cubin). A cache hit needs no typing."""
        types = self._signature_types(signature)
        return self._variant(types, noalias, aligned).artifact(arch)

    def inspect_types(self, signature=None) -> dict:
        """Local variable name -> type for `signature`."""
        return dict(self.specialize(signature).typed.var_types)

    def inspect_constants(self, signature=None):
        """Where the module-level arrays the kernel reads go (constant bank or global
        memory, why, how many bytes) for `signature`: a
        `cupric.compiler.lowering.const.PlacementReport` (prints as a table)."""
        from cupric.compiler.lowering.const import placement_report
        return placement_report(self.specialize(signature).typed)

    def inspect_ir(self, signature=None, *, noalias: bool = True,
                   aligned: bool = True) -> str:
        """The NVVM IR text for `signature` (see `specialize`)."""
        spec = self.specialize(signature, noalias=noalias, aligned=aligned)
        try:
            return spec.ir
        except CompileError as exc:
            raise exc.with_traceback(None) from None

    def inspect_ptx(self, signature=None, *, arch=None, noalias: bool = True,
                    aligned: bool = True) -> str:
        """The PTX for `signature` on `arch` (default: the current device, else sm_90)."""
        spec = self.specialize(signature, noalias=noalias, aligned=aligned)
        try:
            return spec.artifact(arch).ptx
        except CompileError as exc:
            raise exc.with_traceback(None) from None


@functools.cache
def _preload_cache_path() -> None:
    """Import what a disk-cache hit needs (key, cache, backend lookup) when the first
    kernel is declared, so that the first launch in a new process reaches cached code
    in about a millisecond instead of paying these imports then. Typing, codegen and
    libNVVM stay unloaded until something must really be compiled."""
    import cupric.compiler.backend  # noqa: F401
    import cupric.compiler.cache  # noqa: F401
    import cupric.compiler.fingerprint  # noqa: F401
    import cupric.compiler.link  # noqa: F401  (backend.lookup builds ResourceUsage)
    import cupric.compiler.signature  # noqa: F401


_SIMULATOR = [None]

#: Whether the machine has several GPUs (None until the first launch asks): only then can
#: an array live on another device than the launch's, and only then is it checked.
_MULTI = [None]


def _resolve_multi() -> bool:
    multi = False
    if driver_available():
        from cupric.runtime import device_count
        multi = device_count() > 1
    _MULTI[0] = multi
    return multi


#: The current device's ordinal (device 0's primary context is made current when no
#: context is, as the launch would), one C call with the runtime's compiled path; bound
#: here so that a launch pays no extra call for it.
_current_device = current_device_ordinal


def _use_simulator() -> bool:
    if _SIMULATOR[0] is None:
        _SIMULATOR[0] = _simulator_reason() is not None
    return _SIMULATOR[0]




_register_reset_hook()
