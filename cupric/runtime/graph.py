"""CUDA graphs: record a stream's work once, replay it with one launch.

Stream capture turns the kernels, copies and callbacks queued on a stream into a graph
(`CUgraph`) instead of running them; `Graph.create()` builds one node by node instead:
kernels (cupric kernels with their arguments, checked as a launch checks them), copies,
memsets, host functions, event records and waits, child graphs, and the dependencies
between them. An instantiated graph (`CUgraphExec`) replays the whole sequence for the
host cost of a single launch; `GraphExec.update` swaps in the parameters of a newly
captured graph of the same shape, `GraphExec.set_kernel_args` those of one kernel node,
without re-instantiating.
"""

from __future__ import annotations

from . import _lifetime
from ._driver import bindings, check, driver
from ._lifetime import Resource
from .errors import CudaError
from .graph_nodes import (_endpoint, _host_trampoline_handle, _HostFunctions, _kernel_node,
                          _node_dependencies)

__all__ = ["Graph", "GraphExec", "GraphNode", "StreamCapture", "GraphUpdateError",
           "CAPTURE_MODES"]

# StreamCapture mode -> CUstreamCaptureMode member name.
CAPTURE_MODES = {
    "global": "CU_STREAM_CAPTURE_MODE_GLOBAL",
    "thread_local": "CU_STREAM_CAPTURE_MODE_THREAD_LOCAL",
    "relaxed": "CU_STREAM_CAPTURE_MODE_RELAXED",
}


class GraphUpdateError(CudaError):
    """`GraphExec.update` could not apply the new graph (`CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE`).

    Attributes
    ----------
    result : str
        The `CUgraphExecUpdateResult` name saying why (topology changed, function
        changed...). The executable graph is unchanged; instantiate the new graph instead.
    """

    def __init__(self, code, result: str) -> None:
        self.result = result
        super().__init__(code, f"cannot update the executable graph: {result}")


def _destroy_graph(handle) -> None:
    check(driver().cuGraphDestroy(handle))


def _destroy_graph_exec(handle) -> None:
    check(driver().cuGraphExecDestroy(handle))


class StreamCapture:
    """Context manager returned by `Stream.capture()`.

    ``with stream.capture() as cap:`` begins capture on entry and ends it on exit;
    ``cap.graph`` is then the captured `Graph`. If the block raises, the partial graph is
    destroyed and the exception propagates.

    Thread safety
    -------------
    In ``"global"`` mode (the default), other threads must not make calls unsafe during
    capture (e.g. synchronous allocation) while it is active; see the CUDA Programming
    Guide on stream capture modes.
    """

    __slots__ = ("_stream", "_mode", "graph", "_active")

    def __init__(self, stream, mode: str = "global") -> None:
        if mode not in CAPTURE_MODES:
            raise ValueError(f"capture mode must be one of {', '.join(CAPTURE_MODES)}, "
                             f"got {mode!r}")
        self._stream = stream
        self._mode = mode
        self.graph: Graph | None = None
        self._active = False

    def __enter__(self) -> StreamCapture:
        if self._active or self.graph is not None:
            raise RuntimeError("a StreamCapture is used once; call stream.capture() again")
        d = driver()
        stream = self._stream
        if stream.ptr in (0, 2):
            raise ValueError("the legacy default stream cannot be captured; capture on a "
                             "stream from Device.create_stream()")
        _lifetime.capture_began()
        try:
            check(d.cuStreamBeginCapture(stream.handle,
                                         getattr(d.CUstreamCaptureMode,
                                                 CAPTURE_MODES[self._mode])))
        except BaseException:
            _lifetime.capture_ended()
            raise
        self._active = True
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self._active = False
        d = driver()
        result = d.cuStreamEndCapture(self._stream.handle)
        _lifetime.capture_ended()
        err = result[0]
        if exc_type is not None:
            # The block failed: drop whatever was captured and let the block's exception
            # propagate; an error ending the capture (e.g. an invalidated capture) is a
            # consequence of that exception, not a separate failure.
            if err == 0 and result[1] is not None and int(result[1]) != 0:
                check(d.cuGraphDestroy(result[1]))
            return
        handle = check(result)
        self.graph = Graph._wrap(self._stream.device, handle, owned=True)


class Graph(Resource):
    """A CUDA graph: captured from a stream (`Stream.capture()`) or built node by node
    (`Graph.create()`); no public constructor.

    Examples
    --------
    >>> with stream.capture() as cap:                          # doctest: +SKIP
    ...     kernel.launch(grid, block, x, y, stream=stream)
    >>> exe = cap.graph.instantiate()
    >>> for _ in range(1000):
    ...     exe.launch(stream)

    Built explicitly:

    >>> g = Graph.create()                                     # doctest: +SKIP
    >>> up = g.add_memcpy(d_x, h_x)
    >>> k = g.add_kernel(saxpy, blocks, 256, 2.0, d_x, d_y, depends_on=[up])
    >>> down = g.add_memcpy(h_y, d_y, depends_on=[k])
    >>> exe = g.instantiate()
    >>> exe.launch(stream)
    >>> exe.set_kernel_args(k, 3.0, d_x, d_y)                  # same shape, new values

    Ownership
    ---------
    Nodes belong to their graph and are destroyed with it; a node keeps its graph alive.
    The graph keeps the arrays, events and child graphs its nodes use alive (the driver
    holds raw pointers), and host functions stay callable while the graph or any
    executable graph made from it exists.
    """

    __slots__ = ("_device", "_keep", "_host")

    def __init__(self, *args, **kwargs) -> None:
        raise TypeError("Graph has no public constructor; build one with Graph.create() or "
                        "capture one with `with stream.capture() as cap:` and use cap.graph")

    @classmethod
    def _wrap(cls, device, handle, *, owned: bool) -> Graph:
        self = cls.__new__(cls)
        self._device = device
        self._keep = []
        self._host = _HostFunctions()
        self._init_resource(handle, _destroy_graph if owned else None)
        return self

    @classmethod
    def create(cls, device=None) -> Graph:
        """An empty graph on `device` (default: the current one) to add nodes to
        (`cuGraphCreate`)."""
        from .device import Device
        dev = Device(device) if device is not None else Device.current()
        dev.make_current()
        return cls._wrap(dev, check(driver().cuGraphCreate(0)), owned=True)

    @classmethod
    def from_handle(cls, handle, device=None) -> Graph:
        """Borrow a `CUgraph` made elsewhere; cupric never destroys it."""
        from .device import Device
        dev = Device(device) if device is not None else Device.current()
        return cls._wrap(dev, driver().CUgraph(int(handle)), owned=False)

    def _label(self) -> str:
        return "graph"

    @property
    def device(self):
        return self._device

    @property
    def node_count(self) -> int:
        """How many nodes (kernels, copies, ...) the graph has."""
        _nodes, count = check(driver().cuGraphGetNodes(self.handle, 0))
        return int(count)

    # -- building node by node -----------------------------------------------------------

    def _deps(self, depends_on):
        nodes = list(depends_on or ())
        for n in nodes:
            if not isinstance(n, GraphNode):
                raise TypeError(f"depends_on takes GraphNodes, got {type(n).__name__}")
            if n.graph is not self:
                raise ValueError(f"node {n!r} belongs to another graph")
        return [n.handle for n in nodes], len(nodes)

    def _node(self, kind: str, result, label: str, keep=()) -> GraphNode:
        handle = check(result)
        self._keep.extend(keep)
        return GraphNode(self, handle, kind, label)

    def add_kernel(self, kernel, grid, block, *args, shared_bytes: int = 0,
                   depends_on=()) -> GraphNode:
        """A kernel node: `kernel` launched on `grid` x `block` with `args`.

        Parameters
        ----------
        kernel : cupric kernel or PreparedLaunch
            A `@cupric.kernel` is compiled (or found in the cache) for the arguments'
            types and checked as a launch checks them (types against its annotations,
            device arrays only, the configuration against its limits). A
            `PreparedLaunch` (``function.prepare(param_types)``, for a raw module
            function) takes its flattened parameter values, as its `launch` does.
        grid, block : int or tuple of 1-3 ints
        *args
            The launch arguments. Their values are copied into the node now (as a launch
            copies them); arrays must stay allocated while the graph runs (the graph
            keeps them referenced).
        shared_bytes : int
            Dynamic shared memory per block.
        depends_on : sequence of GraphNode

        Raises
        ------
        KernelArgumentError, TypeError, LaunchConfigError
            As the same launch would, before anything is added.
        """
        from .launch import PreparedLaunch
        if not (getattr(kernel, "_cupric_kernel", False) or
                isinstance(kernel, PreparedLaunch)):
            raise TypeError(f"add_kernel takes a cupric kernel or a PreparedLaunch "
                            f"(function.prepare(param_types)), got {type(kernel).__name__}")
        params, argv, keep, prepared, name = _kernel_node(self._device, kernel, kernel,
                                                          grid, block, shared_bytes, args)
        deps, n = self._deps(depends_on)
        result = driver().cuGraphAddKernelNode(self.handle, deps, n, params)
        del argv  # the driver copied the values during the call
        node = self._node("kernel", result, name, keep + [prepared])
        node._kernel = (kernel, prepared)
        return node

    def add_memcpy(self, dst, src, *, nbytes: int | None = None,
                   depends_on=()) -> GraphNode:
        """A copy node between host (NumPy) and device arrays, either way or device to
        device; `nbytes` defaults to the whole of `src`, which must fit in `dst`.

        Host arrays must be C-contiguous; pinned host memory (`pinned_empty`) lets the
        copy run asynchronously with other nodes.
        """
        d = driver()
        dst_ptr, dst_kind, dst_size, dst_keep = _endpoint(dst, "dst", writable=True)
        src_ptr, src_kind, src_size, src_keep = _endpoint(src, "src")
        nbytes = src_size if nbytes is None else int(nbytes)
        if nbytes <= 0 or nbytes > src_size or nbytes > dst_size:
            raise ValueError(f"add_memcpy: {nbytes} bytes from a {src_size}-byte source "
                             f"into a {dst_size}-byte destination")
        p = d.CUDA_MEMCPY3D()
        for side, ptr, kind in (("src", src_ptr, src_kind), ("dst", dst_ptr, dst_kind)):
            if kind == "host":
                setattr(p, f"{side}MemoryType", d.CUmemorytype.CU_MEMORYTYPE_HOST)
                setattr(p, f"{side}Host", ptr)
            else:
                setattr(p, f"{side}MemoryType", d.CUmemorytype.CU_MEMORYTYPE_DEVICE)
                setattr(p, f"{side}Device", d.CUdeviceptr(ptr))
        p.WidthInBytes, p.Height, p.Depth = nbytes, 1, 1
        deps, n = self._deps(depends_on)
        self._device.make_current()
        ctx = check(d.cuCtxGetCurrent())
        return self._node("memcpy", d.cuGraphAddMemcpyNode(self.handle, deps, n, p, ctx),
                          f"{src_kind}->{dst_kind} {nbytes} B", [dst_keep, src_keep])

    def add_memset(self, dst, value: int, *, width: int = 1, count: int | None = None,
                   depends_on=()) -> GraphNode:
        """A memset node: `count` elements of `width` bytes (1, 2 or 4) of the device
        array `dst` set to `value` (default: all of `dst`)."""
        d = driver()
        if width not in (1, 2, 4):
            raise ValueError(f"memset width must be 1, 2 or 4 bytes, got {width}")
        ptr, kind, size, keep = _endpoint(dst, "dst", writable=True)
        if kind != "device":
            raise TypeError("add_memset sets device memory; got a host array")
        count = size // width if count is None else int(count)
        if count <= 0 or count * width > size:
            raise ValueError(f"add_memset: {count} x {width} bytes do not fit in "
                             f"{size} bytes")
        if not 0 <= int(value) < 1 << (8 * width):
            raise ValueError(f"memset value {value} does not fit in {width} byte(s)")
        p = d.CUDA_MEMSET_NODE_PARAMS()
        p.dst = d.CUdeviceptr(ptr)
        p.value, p.elementSize, p.width, p.height, p.pitch = int(value), width, count, 1, 0
        deps, n = self._deps(depends_on)
        self._device.make_current()
        ctx = check(d.cuCtxGetCurrent())
        return self._node("memset", d.cuGraphAddMemsetNode(self.handle, deps, n, p, ctx),
                          f"{count} x {width} B = {value}", [keep])

    def add_host(self, fn, *args, depends_on=()) -> GraphNode:
        """A host-function node: `fn(*args)` runs on a driver thread each time the graph
        runs, after its dependencies. It must not call CUDA. An exception it raises is
        kept and raised (as `HostCallbackError`) by the next `GraphExec.launch` or
        `GraphExec.raise_host_errors()`."""
        if not callable(fn):
            raise TypeError(f"add_host needs a callable, got {type(fn).__name__}")
        d = driver()
        token = self._host.add(fn, args)
        p = d.CUDA_HOST_NODE_PARAMS()
        p.fn = _host_trampoline_handle()
        p.userData = token
        deps, n = self._deps(depends_on)
        return self._node("host", d.cuGraphAddHostNode(self.handle, deps, n, p),
                          getattr(fn, "__name__", "host function"))

    def add_event_record(self, event, *, depends_on=()) -> GraphNode:
        """A node recording `event` (a cupric Event) when its dependencies are done."""
        deps, n = self._deps(depends_on)
        return self._node("event_record", driver().cuGraphAddEventRecordNode(
            self.handle, deps, n, event.handle), "record", [event])

    def add_event_wait(self, event, *, depends_on=()) -> GraphNode:
        """A node that waits for `event` (recorded by other work, or by a record node)
        before its dependents run."""
        deps, n = self._deps(depends_on)
        return self._node("event_wait", driver().cuGraphAddEventWaitNode(
            self.handle, deps, n, event.handle), "wait", [event])

    def add_child_graph(self, child: Graph, *, depends_on=()) -> GraphNode:
        """A node running a copy of `child` (the driver clones it now; later changes to
        `child` do not reach this graph)."""
        if not isinstance(child, Graph):
            raise TypeError(f"add_child_graph takes a Graph, got {type(child).__name__}")
        if child is self:
            raise ValueError("a graph cannot contain itself")
        deps, n = self._deps(depends_on)
        node = self._node("child_graph", driver().cuGraphAddChildGraphNode(
            self.handle, deps, n, child.handle), "child graph", [child])
        self._host.adopt(child._host)
        return node

    def add_empty(self, *, depends_on=()) -> GraphNode:
        """A node that does nothing: a join point for dependencies."""
        deps, n = self._deps(depends_on)
        return self._node("empty", driver().cuGraphAddEmptyNode(self.handle, deps, n),
                          "join")

    def add_dependency(self, before: GraphNode, after: GraphNode) -> None:
        """Make `after` wait for `before` (`cuGraphAddDependencies`)."""
        self._deps([before, after])
        d = driver()
        try:  # CUDA 13 takes edge data (None: default edges); 12.x does not
            result = d.cuGraphAddDependencies(self.handle, [before.handle], [after.handle],
                                              None, 1)
        except TypeError:
            result = d.cuGraphAddDependencies(self.handle, [before.handle], [after.handle],
                                              1)
        check(result)

    def nodes(self) -> list:
        """Raw `CUgraphNode` handles of every node (`cuGraphGetNodes`)."""
        count = self.node_count
        if count == 0:
            return []
        return list(check(driver().cuGraphGetNodes(self.handle, count))[0])[:count]

    def dependencies(self, node: GraphNode) -> list:
        """Raw handles of the nodes `node` waits for."""
        return _node_dependencies(node.handle)

    def to_dot(self, path=None, *, verbose: bool = False) -> str:
        """The graph in Graphviz DOT (`cuGraphDebugDotPrint`): returns the text, and
        writes it to `path` when given. `verbose` adds every node's parameters."""
        import os
        import tempfile
        d = driver()
        flags = d.CUgraphDebugDot_flags
        value = int(flags.CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE) if verbose else 0
        with tempfile.TemporaryDirectory(prefix="cupric-dot-") as folder:
            target = os.path.join(folder, "graph.dot")
            check(d.cuGraphDebugDotPrint(self.handle, target.encode(), value))
            with open(target, encoding="utf-8", errors="replace") as fh:
                text = fh.read()
        if path is not None:
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(text)
        return text

    def instantiate(self, *, upload_stream=None, auto_free_on_launch: bool = False) -> GraphExec:
        """An executable graph ready to launch.

        Parameters
        ----------
        upload_stream : Stream, optional
            Upload the graph's resources to the device on this stream now, so the first
            launch is not slower than later ones.
        auto_free_on_launch : bool
            Free memory allocated by graph allocation nodes when the graph is relaunched.

        Cost
        ----
        Milliseconds for large graphs; instantiate once, launch many times.
        """
        d = driver()
        flags = 0
        if auto_free_on_launch:
            flags |= int(d.CUgraphInstantiate_flags.CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH)
        self._device.make_current()
        handle = check(d.cuGraphInstantiate(self.handle, flags))
        exe = GraphExec._wrap(self._device, handle)
        exe._graph = self  # nodes, arrays and host functions stay alive with the exe
        if upload_stream is not None:
            exe.upload(upload_stream)
        return exe


class GraphExec(Resource):
    """An instantiated, launchable graph (made by `Graph.instantiate()`)."""

    __slots__ = ("_device", "_graph")

    def __init__(self, *args, **kwargs) -> None:
        raise TypeError("GraphExec has no public constructor; use graph.instantiate()")

    @classmethod
    def _wrap(cls, device, handle) -> GraphExec:
        self = cls.__new__(cls)
        self._device = device
        self._graph = None
        self._init_resource(handle, _destroy_graph_exec)
        return self

    def _label(self) -> str:
        return "executable graph"

    def launch(self, stream=None) -> None:
        """Replay the graph on `stream` (the legacy default stream if None).

        Cost
        ----
        About one kernel launch of host time, whatever the number of nodes.
        """
        from .stream import as_stream_handle
        d = driver()
        if self._graph is not None:
            self._graph._host.raise_pending()
        ptr = as_stream_handle(stream)
        if ptr in (0, 2):
            self._device.make_current()
        check(d.cuGraphLaunch(self.handle, d.CUstream(ptr)))

    def raise_host_errors(self) -> None:
        """Raise `HostCallbackError` for exceptions that host-function nodes raised in
        earlier launches (synchronize first to see those of the last launch)."""
        if self._graph is not None:
            self._graph._host.raise_pending()

    def set_kernel_args(self, node: GraphNode, *args, grid=None, block=None,
                        shared_bytes: int | None = None) -> None:
        """Give kernel node `node` new arguments (and optionally a new configuration)
        in this executable graph only (`cuGraphExecKernelNodeSetParams`); the next
        launch uses them. The arguments are checked as `Graph.add_kernel` checks them;
        a cupric kernel may get arguments of other types (another compiled variant).

        Raises
        ------
        KernelArgumentError, TypeError, LaunchConfigError
            As `Graph.add_kernel`; the node keeps its old arguments.
        ValueError
            `node` is not a kernel node of the graph this was instantiated from.
        """
        graph = self._graph
        if graph is None or not isinstance(node, GraphNode) or node.graph is not graph \
                or node.kind != "kernel":
            raise ValueError("set_kernel_args takes a kernel node of the graph this "
                             "executable graph was instantiated from")
        kernel, prepared = node._kernel
        d = driver()
        old = check(d.cuGraphKernelNodeGetParams(node.handle))
        grid = grid if grid is not None else (old.gridDimX, old.gridDimY, old.gridDimZ)
        block = block if block is not None else (old.blockDimX, old.blockDimY,
                                                 old.blockDimZ)
        shared_bytes = old.sharedMemBytes if shared_bytes is None else shared_bytes
        params, argv, keep, prepared, _ = _kernel_node(self._device, kernel, prepared, grid,
                                                       block, shared_bytes, args)
        check(d.cuGraphExecKernelNodeSetParams(self.handle, node.handle, params))
        del argv
        graph._keep.extend(keep + [prepared])

    def upload(self, stream) -> None:
        """Prepare the graph's device resources on `stream` ahead of the first launch."""
        from .stream import as_stream_handle
        d = driver()
        check(d.cuGraphUpload(self.handle, d.CUstream(as_stream_handle(stream))))

    def update(self, graph: Graph) -> None:
        """Take the parameters of `graph`, a graph of the same topology (`cuGraphExecUpdate`).

        Raises
        ------
        GraphUpdateError
            If the graphs differ in a way an update cannot express (`.result` says how);
            this executable graph is left as it was.
        """
        # Through cffi: cuda.bindings drops the result info (which says *why*) when the
        # call fails, and the reason is the useful part of the error.
        from .launch import native
        n = native()
        info = n.ffi.new("cupric_CUgraphExecUpdateResultInfo *")
        err = n.lib.cuGraphExecUpdate_v2(int(self.handle), int(graph.handle), info)
        if err == 0:
            return
        if err == 910:  # CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE
            try:
                why = bindings().CUgraphExecUpdateResult(info.result).name
            except ValueError:
                why = f"CUgraphExecUpdateResult {info.result}"
            raise GraphUpdateError(err, why)
        check((err,))


class GraphNode:
    """One node of a `Graph` (made by its ``add_*`` methods; destroyed with the graph).

    Attributes
    ----------
    graph : Graph
    kind : str
        ``"kernel"``, ``"memcpy"``, ``"memset"``, ``"host"``, ``"event_record"``,
        ``"event_wait"``, ``"child_graph"`` or ``"empty"``.
    label : str
        What the node does, in words (the kernel's name, the copy's direction and size).
    """

    __slots__ = ("graph", "handle", "kind", "label", "_kernel")

    def __init__(self, graph: Graph, handle, kind: str, label: str) -> None:
        self.graph = graph
        self.handle = handle
        self.kind = kind
        self.label = label
        self._kernel = None

    def __repr__(self) -> str:
        return f"<GraphNode {self.kind}: {self.label}>"

    @property
    def dependencies(self) -> int:
        """How many nodes this one waits for."""
        return len(_node_dependencies(self.handle))
