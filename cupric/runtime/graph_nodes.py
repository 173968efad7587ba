"""The parts of CUDA graph nodes: a kernel node's parameters packed as a launch packs
them (`CUDA_KERNEL_NODE_PARAMS`), the two ends of a copy node, and host-function nodes,
whose Python callables stay registered while a graph that can call them lives.

`cupric.runtime.graph` builds its nodes from these.
"""

from __future__ import annotations

import ctypes
import itertools
import struct
import threading
import weakref

import numpy as np

from ._driver import bindings, check, driver


def _node_dependencies(handle) -> list:
    # (nodes, [edge data,] count): CUDA 13's bindings also return the edges' data.
    d = driver()
    count = int(check(d.cuGraphNodeGetDependencies(handle, 0))[-1])
    if count == 0:
        return []
    found = check(d.cuGraphNodeGetDependencies(handle, count))
    return [n for n in list(found[0])[:count] if n is not None and int(n)]


def _kernel_node(device, kernel, prepared, grid, block, shared_bytes, args):
    """Kernel node parameters for launching `kernel` (a cupric kernel, else the
    `prepared` launch's function) with `args`: (params, buffers to keep until the driver
    copied them, objects the graph keeps, PreparedLaunch, kernel name)."""
    from .launch import check_config, validate_launch
    keep = list(args)
    if getattr(kernel, "_cupric_kernel", False):
        # The compiler binds a cupric kernel's arguments (the runtime knows nothing of
        # its types): the launch's own checks, then the flattened ABI values.
        from cupric.compiler.node_args import launch_parts
        device.make_current()
        prepared, values, extra = launch_parts(kernel, grid, block, shared_bytes, args)
        keep += extra
        name = kernel.__name__
    else:
        values, name = list(args), prepared.function.name
        validate_launch(prepared.function, grid, block, shared_bytes)
    (gx, gy, gz), (bx, by, bz), shared_bytes = check_config(name, grid, block, shared_bytes)
    params, argv = _kernel_params(prepared, values)
    params.gridDimX, params.gridDimY, params.gridDimZ = gx, gy, gz
    params.blockDimX, params.blockDimY, params.blockDimZ = bx, by, bz
    params.sharedMemBytes = shared_bytes
    return params, argv, keep, prepared, name


def _kernel_params(prepared, values):
    """CUDA_KERNEL_NODE_PARAMS for `prepared`'s function with `values` packed as a launch
    packs them; returns it and the buffers its pointers point into (to keep until the
    driver has copied them)."""
    from .launch import KernelArgumentError, param_layout
    d = bindings()  # struct types only: no driver call here
    types, fmt, offsets, size = param_layout(prepared.param_types)
    if len(values) != len(types):
        raise KernelArgumentError(f"kernel {prepared.function.name!r} takes {len(types)} "
                                  f"parameter values, got {len(values)}")
    packed = []
    for index, (t, v) in enumerate(zip(types, values)):
        if isinstance(t, tuple):  # a struct by value: its bytes
            v = bytes(v) if isinstance(v, (bytes, bytearray)) else np.asarray(v).tobytes()
            if len(v) != t[1]:
                raise KernelArgumentError(f"parameter {index}: a struct of {t[1]} bytes, "
                                          f"got {len(v)}", index)
        elif t == "ptr" and isinstance(v, np.ndarray):
            raise KernelArgumentError(f"parameter {index}: a host NumPy array where a "
                                      f"device pointer is expected; copy it with "
                                      f"cupric.runtime.to_device", index)
        packed.append(v)
    buf = ctypes.create_string_buffer(size)
    try:
        struct.pack_into(fmt, buf, 0, *packed)
    except struct.error as exc:
        raise KernelArgumentError(f"kernel {prepared.function.name!r}: {exc}") from None
    base = ctypes.addressof(buf)
    argv = (ctypes.c_void_p * max(len(offsets), 1))(*[base + o for o in offsets])
    params = d.CUDA_KERNEL_NODE_PARAMS()
    params.func = prepared.function.handle
    params.kernelParams = ctypes.addressof(argv)
    params.extra = 0
    return params, (buf, argv)


def _endpoint(array, what: str, writable: bool = False):
    """(address, "host" or "device", size in bytes, object to keep) of a copy's end."""
    if isinstance(array, np.ndarray):
        if not array.flags.c_contiguous:
            raise ValueError(f"{what}: host arrays must be C-contiguous")
        if writable and not array.flags.writeable:
            raise ValueError(f"{what}: the host array is read-only")
        return array.ctypes.data, "host", array.nbytes, array
    host = getattr(array, "host_array", None)  # PinnedBuffer-like objects
    if host is not None and isinstance(host, np.ndarray):
        return _endpoint(host, what, writable)
    from .interop import as_device_array
    buf = as_device_array(array)
    if not buf.is_c_contiguous:
        raise ValueError(f"{what}: device arrays must be C-contiguous")
    return buf.ptr, "device", buf.nbytes, buf


# Host-function nodes: the driver calls one C trampoline with a token; the token names
# the Python callable, which stays registered while the graph (or an executable graph
# made from it) exists -- unlike a stream's host callback, it runs on every launch.
_host_registry: dict[int, tuple] = {}
_host_lock = threading.Lock()
_host_tokens = itertools.count(1)


def _graph_host_trampoline(user_data) -> None:
    # On a driver thread; must not raise (ctypes would print and drop the exception).
    with _host_lock:
        entry = _host_registry.get(int(user_data or 0))
    if entry is None:
        return
    fn, args, sink_ref = entry
    sink = sink_ref()
    if sink is None:
        return
    try:
        fn(*args)
    except BaseException as exc:
        with sink.lock:
            sink.errors.append(exc)


_HOST_FN_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_graph_host_c = _HOST_FN_TYPE(_graph_host_trampoline)
_graph_host_handle = []


def _host_trampoline_handle():
    if not _graph_host_handle:
        address = ctypes.cast(_graph_host_c, ctypes.c_void_p).value
        _graph_host_handle.append(driver().CUhostFn(address))
    return _graph_host_handle[0]


class _HostFunctions:
    """The host functions of one graph (and of the child graphs it copied): registered
    while this object lives, which the graph and its executable graphs keep alive."""

    __slots__ = ("tokens", "errors", "lock", "children", "__weakref__")

    def __init__(self) -> None:
        self.tokens: list[int] = []
        self.errors: list = []
        self.lock = threading.Lock()
        self.children: list = []

    def add(self, fn, args) -> int:
        token = next(_host_tokens)
        with _host_lock:  # weakly: the registry must not keep its owner alive
            _host_registry[token] = (fn, args, weakref.ref(self))
        self.tokens.append(token)
        return token

    def adopt(self, child: "_HostFunctions") -> None:
        """A child graph's host functions report to this graph's errors too."""
        self.children.append(child)

    def raise_pending(self) -> None:
        from .stream import HostCallbackError
        errors = []
        for sink in (self, *self.children):
            with sink.lock:
                errors += sink.errors
                sink.errors.clear()
        if errors:
            raise HostCallbackError(errors) from errors[0]

    def __del__(self) -> None:
        registry = _host_registry  # None late in interpreter shutdown
        if registry is None:
            return
        with _host_lock:
            for token in self.tokens:
                registry.pop(token, None)
