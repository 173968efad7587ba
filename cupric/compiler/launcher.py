"""Generated kernel launchers: an inline cache per (signature, array kinds) of a kernel.

A kernel launch's general path (`cupric.compiler.kernel.Kernel._launch`) reads every
argument through `cupric.runtime.intake`, builds the specialization key, checks aliasing
and alignment, and packs the ABI values. Once a launch with scalars and contiguous 1-D
arrays went through it, a launcher specialized to exactly those argument classes is
generated as Python source: it re-checks only what can differ between calls (the classes,
dtypes, contiguity, liveness, alignment, overlap of written arrays) and hands the values
straight to the runtime's prepared launch. Launchers chain: each falls through to the
one made before it, the last to the general path, so a kernel called with DeviceBuffers,
CuPy arrays and PyTorch tensors keeps a fast path for each (at most `MAX_LAUNCHERS`).
With one GPU, where `cupric.compiler._fastcall` is built and not switched off, the
launcher is that extension's compiled table making the same checks in C (the Python
source it replaces stays readable as its `source`); elsewhere it is the generated function.
A caller with a general path of its own (the ready kernels) calls the launchers as an
`attempt`: what none of them takes comes back untouched instead of entering the kernel's.
"""

from __future__ import annotations

from cupric.compiler import _fastcall

__all__ = ["make_launcher", "launcher_keys", "index_chain", "attempt", "launch_now",
           "MAX_LAUNCHERS"]

#: Launchers a kernel keeps (signature x array kinds); later combinations take the
#: general path.
MAX_LAUNCHERS = 4

_SCALARS = None  # (Python scalar classes, NumPy scalar classes), set on first use


def _scalar_classes():
    global _SCALARS
    if _SCALARS is None:
        from cupric.compiler.kernel import _NUMPY_SCALARS
        _SCALARS = (frozenset({int, float, bool}), _NUMPY_SCALARS)
    return _SCALARS


def launcher_keys(head) -> list:
    """The (specialization key, argument classes) pairs of a chain of launchers."""
    keys = []
    while head is not None and hasattr(head, "launch_key"):
        keys.append(head.launch_key)
        head = head.next_launcher
    return keys


def make_launcher(kern, key, args, written, prepared, device: int = -1, fallback=None):
    """A launcher for one signature of scalars and contiguous 1-D arrays, or None for
    other signatures.

    The launcher takes ``(grid, block, stream, shared_bytes, args)`` and checks the
    argument classes, dtypes, contiguity, that DeviceBuffers are open (their allocation
    record, shared by every view: ``buf.allocation.closed``), 16-byte alignment and
    non-overlap of written arrays, and packs the ABI values into `prepared.launch`;
    anything else goes to `fallback` (the launcher made before, else the kernel's general
    path), so its result is always the general path's.

    `device` >= 0 (machines with several GPUs): `prepared` is that device's, and the
    launcher also checks that it is current and that every array says it lives there
    (one attribute and one comparison each); anything else (another device, an array
    whose device must be asked of the driver) takes the general path, which raises or
    accepts. With one GPU (-1) no device line is generated.
    """
    from cupric.compiler.kernel import _current_device
    from cupric.runtime import intake
    from cupric.runtime.array_adapters import ADAPTERS
    from cupric.runtime.managed import ManagedBuffer
    python_scalars, numpy_scalars = _scalar_classes()
    names = [f"a{i}" for i in range(len(args))]
    # An attempt (`items` >= 0) the launcher refuses goes on to the launcher made before,
    # past the last one back to the caller as NotImplemented (see `attempt`).
    slow = ("return _slow(g, b, st, sh, args) if items < 0 else "
            "_refuse(g, b, st, sh, args, items)")
    env = {"_slow": fallback if fallback is not None else kern._launch,
           "_refuse": fallback if fallback is not None else _refused,
           "_launch": prepared.launch, "DEV": device, "_order": order_cupy,
           "_current": _current_device}
    checks, setup, flat, arrays = [], [], [], []
    streams: list = []  # CuPy current-stream readers to check once per launch
    sources: list = []  # the same reads as (function, attribute or None), for C
    plan: list | None = [] if device < 0 else None  # (kind, dtype, itemsize) for C
    strided = []  # PyTorch's strided layout, for the compiled launcher
    for i, (name, value, part) in enumerate(zip(names, args, key)):
        cls = value.__class__
        env[f"C{i}"] = cls
        checks.append(f"{name}.__class__ is C{i}")
        vector = isinstance(part, tuple) and len(part) == 3 and part[1:] == (1, "C")
        adapter = ADAPTERS.get(cls) if vector else None
        if adapter is not None and (adapter.kind not in ("cupy", "torch") or
                                    adapter.dtypes.get(value.dtype) != part[0]):
            return None
        if vector and cls in intake.BUFFER_CLASSES:
            env[f"D{i}"] = value.dtype
            size = value.itemsize
            own = cls in intake.OWN_BUFFERS
            rank = f"{name}.ndim" if own else f"len({name}.shape)"
            live = f" or {name}.allocation.closed" if own else ""
            setup.append(f"if {rank} != 1 or {name}.dtype is not D{i} or "
                         f"{name}.strides[0] != {size}{live}: {slow}")
            if device >= 0:
                if not own:
                    return None  # its device is the driver's to say: the general path
                if not issubclass(cls, ManagedBuffer):  # managed: any device
                    setup.append(f"if {name}.allocation.device != DEV: {slow}")
            setup.append(f"p{i} = {name}.ptr; n{i} = {name}.shape[0]")
            flat += [f"p{i}", f"n{i}", "1"]
            arrays.append((i, size))
            _plan(plan, _fastcall.BUFFER if own else None, value.dtype, size)
        elif adapter is not None and adapter.kind == "cupy":
            # What CupyAdapter.read gives a non-empty contiguous 1-D array, inline; an
            # empty one (its pointer reads 0) takes the general path. CuPy keeps its
            # contiguity flag, size and rank as plain fields: no shape tuple is built.
            env[f"D{i}"] = value.dtype
            size = part[0].itemsize
            fields = hasattr(value, "_c_contiguous")
            _plan(plan, _fastcall.CUPY_FIELDS if fields else _fastcall.CUPY, value.dtype,
                  size)
            if fields:
                setup.append(f"if {name}.dtype is not D{i} or not {name}._c_contiguous or "
                             f"{name}.ndim != 1: {slow}")
                setup.append(f"n{i} = {name}.size")
            else:
                setup.append(f"s{i} = {name}.shape")
                setup.append(f"if len(s{i}) != 1 or {name}.dtype is not D{i} or "
                             f"{name}.strides[0] != {size}: {slow}")
                setup.append(f"n{i} = s{i}[0]")
            setup.append(f"if not n{i}: {slow}")
            setup.append(f"m{i} = {name}.data")
            if device >= 0:
                setup.append(f"if m{i}.device_id != DEV: {slow}")
            setup.append(f"p{i} = m{i}.ptr")
            flat += [f"p{i}", f"n{i}", "1"]
            arrays.append((i, size))
            if adapter.current_stream is not None and \
                    adapter.current_stream not in streams:
                streams.append(adapter.current_stream)
                sources.append(getattr(adapter, "stream_source", None) or
                               (adapter.current_stream, None))
        elif adapter is not None and adapter.kind == "torch":
            # TorchAdapter.read inline: a CUDA, strided, non-autograd tensor of the same
            # dtype, 1-D, not empty, contiguous (for 1-D: unit stride, or one item whose
            # stride nothing reads).
            env[f"D{i}"] = value.dtype
            env[f"L{i}"] = adapter.strided
            size = part[0].itemsize
            _plan(plan, _fastcall.TORCH, value.dtype, size)
            strided.append(adapter.strided)
            setup.append(f"if {name}.dtype is not D{i} or not {name}.is_cuda or "
                         f"{name}.requires_grad or {name}.layout is not L{i} or "
                         f"{name}.ndim != 1: {slow}")
            setup.append(f"n{i} = {name}.shape[0]")
            setup.append(f"if not n{i} or not {name}.is_contiguous(): {slow}")
            if device >= 0:
                setup.append(f"if {name}.get_device() != DEV: {slow}")
            setup.append(f"p{i} = {name}.data_ptr()")
            flat += [f"p{i}", f"n{i}", "1"]
            arrays.append((i, size))
        elif part is cls and (cls in python_scalars or cls in numpy_scalars):
            flat.append(name)
            _plan(plan, _fastcall.SCALAR, None, 0)
        else:
            return None
    if device >= 0:
        setup.insert(0, f"if _current() != DEV: {slow}")
    if arrays:
        setup.append("if items >= 0 and (" +
                     " or ".join(f"n{i} != items" for i, _ in arrays) + f"): {slow}")
        setup.append("if (" + " | ".join(f"p{i}" for i, _ in arrays) + f") & 15: {slow}")
    for w, wsize in arrays:
        if w not in written:
            continue
        for o, osize in arrays:
            if o == w:
                continue
            setup.append(f"if n{w} and n{o} and p{w} < p{o} + n{o} * {osize} and "
                         f"p{o} < p{w} + n{w} * {wsize}: {slow}")
    for k, reader in enumerate(streams):
        # CuPy names its current stream (0: the null stream, which its interface calls 1,
        # the legacy one). Legacy producer and legacy launch stream: nothing to do; else
        # `order_cupy` orders the launch stream after it where CUDA does not already.
        # Last: every check above may still send the call to the general path.
        env[f"Q{k}"] = reader
        setup.append(f"q{k} = Q{k}()")
        setup.append(f"if q{k} != 0 and q{k} != 1 or st is not None: _order(st, q{k})")
    unpack = f"    {', '.join(names)}{',' if len(names) == 1 else ''} = args" if names else ""
    body = ["def fast(g, b, st, sh, args, items=-1):",
            f"    if len(args) != {len(args)}: {slow}",
            unpack,
            f"    if not ({' and '.join(checks) or 'True'}): {slow}"]
    body += [f"    {line}" for line in setup]
    body.append(f"    _launch(g, b, st, sh, {', '.join(flat)})")
    source = "\n".join(line for line in body if line)
    namespace = dict(env)
    exec(compile(source, f"<cupric fast launch of {kern.__name__}>", "exec"), namespace)
    fast = namespace["fast"]
    compiled = _compiled(plan, args, written, prepared, env["_slow"], sources, strided,
                         fallback is not None)
    if compiled is not None:
        fast = compiled  # the same checks and values, made in C (the source says which)
    fast.launch_key = (key, tuple(v.__class__ for v in args))
    fast.next_launcher = fallback
    fast.source = source
    fast.probe = arrays[0][0] if arrays else None  # the first array argument's index
    fast.dispatch = None  # set on the chain's head by `index_chain`
    return fast


def _plan(plan, kind, dtype, itemsize) -> None:
    """Record one argument of the compiled launcher's table (`kind` None: an argument it
    does not read, so the signature keeps the generated Python launcher)."""
    if plan is not None:
        plan.append(None if kind is None else (kind, dtype, itemsize))


def _compiled(plan, args, written, prepared, fallback, sources, strided, chained):
    """The compiled launcher (`cupric.compiler._fastcall`) for a planned signature, or
    None: the extension is switched off or missing, the machine has several GPUs (plan
    None), or an argument is of a kind it does not read. With the runtime's compiled
    launch (`prepared.c_layout`), it packs and calls cuLaunchKernel itself."""
    if plan is None or None in plan or len(set(map(id, strided))) > 1 or \
            len(plan) > _fastcall.MAX_ARGS:
        return None
    from cupric.runtime.memory import DeviceBuffer
    if any(p[0] == _fastcall.BUFFER and not issubclass(v.__class__, DeviceBuffer)
           for p, v in zip(plan, args)):
        return None  # a DeviceBuffer look-alike: its slots are not DeviceBuffer's
    module = _fastcall.load()
    if module is None:
        return None
    layout = getattr(prepared, "c_layout", None)
    return module.make(prepared.launch, fallback, order_cupy, tuple(sources),
                       strided[0] if strided else None,
                       tuple(p[0] for p in plan), tuple(v.__class__ for v in args),
                       tuple(p[1] for p in plan), tuple(p[2] for p in plan),
                       tuple(i in written for i in range(len(plan))), layout,
                       prepared.launch_failed if layout is not None else None, chained)


def _refused(grid, block, stream, shared_bytes, args, items):
    """The end of an attempt's chain: nothing launched (see `attempt`)."""
    return NotImplemented


def attempt(kern, grid, block, stream, shared_bytes: int, args: tuple, items: int) -> bool:
    """Launch `kern` through its launcher for these argument classes if it takes the
    call as it is, with every array argument 1-D of exactly `items` (>= 0) items; True
    when launched. False, with nothing launched and nothing ordered, where no launcher
    of the kernel takes it (none made yet, another signature, a refused check): the
    caller then takes its own general path, with its checks and errors.

    For callers that know the common case of their arrays (the ready kernels' plans): the
    launcher's checks replace theirs, made once, in C where the extension is built.
    """
    fast = kern._fast
    # The compiled launcher picks this call's kind's launcher itself; generated ones go
    # along the chain until one takes it.
    return fast is not None and \
        fast(grid, block, stream, shared_bytes, args, items) is not NotImplemented


def launch_now(kern, grid, block, stream, shared_bytes: int, args: tuple) -> None:
    """What `kern[grid, block, stream, shared_bytes](*args)` runs, without building the
    launch configuration object: the kernel's generated launcher for its common signature
    (it sends anything else to the general path), else the general path.

    Cost
    ----
    One Python call before the launcher's own: for callers that launch a known kernel
    on every call (the ready kernels).
    """
    fast = kern._fast
    if fast is not None:
        dispatch = fast.dispatch  # several array kinds: this call's kind's launcher
        if dispatch is not None and len(args) > dispatch[0]:
            fast = dispatch[1].get(args[dispatch[0]].__class__, fast)
        fast(grid, block, stream, shared_bytes, args)
    else:
        kern._launch(grid, block, stream, shared_bytes, args)


def is_compiled(launcher) -> bool:
    """Whether a launcher of the chain is the compiled one."""
    cls = launcher.__class__
    return cls.__module__ == "cupric.compiler._fastcall" and cls.__name__ == "Launcher"


def index_chain(head) -> None:
    """Give the head of a chain its dispatch table: ``(index, {class: launcher})``, the
    newest launcher for each class of the argument at `index` (the first array argument),
    so that a launch picks its kind's launcher with one dictionary lookup instead of
    falling through the launchers of other kinds. None while the chain holds one class
    there (nothing to pick)."""
    probe = head.probe
    table: dict = {}
    node = head
    while node is not None and hasattr(node, "launch_key"):
        if node.probe == probe and probe is not None:
            table.setdefault(node.launch_key[1][probe], node)
        node = node.next_launcher
    head.dispatch = (probe, table) if len(table) > 1 else None


def order_cupy(stream, current: int) -> None:
    """The generated launcher's ordering after CuPy's current stream (`current`: its raw
    handle, 0 for CuPy's null stream, which its interface names 1). Where the launch
    stream's handle is at hand (None, an int, an open cupric Stream), `needs_wait`'s first
    rules are checked here, as the compiled launcher checks them: nothing to do for the
    same stream or two default streams."""
    from cupric.runtime.stream import Stream
    consumer = None
    if stream is None:
        consumer = 0
    elif stream.__class__ is int:
        consumer = stream
    elif stream.__class__ is Stream and not stream.closed:
        consumer = stream.ptr
    if consumer is not None:
        producer, consumer = current or 1, consumer or 1
        if producer == consumer or producer <= 2 and consumer <= 2:
            return
    from cupric.runtime.intake import order_after
    order_after(stream, (current or 1,))


# -- kern[grid, block]: the launch configuration bound to a kernel ------------------------------

class _Launcher:
    """`kern[grid, block, stream, shared_bytes]`: a launch configuration bound to a kernel."""

    __slots__ = ("kernel", "grid", "block", "stream", "shared_bytes", "simulate")

    def __init__(self, kern, grid, block, stream=None, shared_bytes=0, simulate=False):
        # kern[grid, block] builds one of these per launch: plain stores only.
        self.kernel = kern
        self.grid = grid
        self.block = block
        self.stream = stream
        self.shared_bytes = shared_bytes
        self.simulate = simulate

    def __call__(self, *args):
        fast = self.kernel._fast
        if fast is not None and not self.simulate:
            dispatch = fast.dispatch  # several kinds: the launcher of this call's kind
            if dispatch is not None and len(args) > dispatch[0]:
                fast = dispatch[1].get(args[dispatch[0]].__class__, fast)
            return fast(self.grid, self.block, self.stream, self.shared_bytes, args)
        if self.simulate:
            return self.kernel._simulate(self.grid, self.block, self.shared_bytes, args)
        return self.kernel._launch(self.grid, self.block, self.stream, self.shared_bytes, args)


def _config(kern, config, simulate=False):
    if not isinstance(config, tuple) or not 2 <= len(config) <= 4:
        raise TypeError(f"launch {kern.__name__} as {kern.__name__}[grid, block](...) or "
                        f"{kern.__name__}[grid, block, stream, shared_bytes](...)")
    return _Launcher(kern, *config, simulate=simulate)


class _Simulate:
    __slots__ = ("kernel",)

    def __init__(self, kern) -> None:
        self.kernel = kern

    def __getitem__(self, config):
        return _config(self.kernel, config, simulate=True)
