"""CUDA graphs: record a stream's work once, replay it with one launch.

Stream capture turns the kernels, copies and callbacks queued on a stream into a graph
(`CUgraph`) instead of running them. An instantiated graph (`CUgraphExec`) replays the
whole sequence for the host cost of a single launch; `GraphExec.update` swaps in the
parameters of a newly captured graph of the same shape without re-instantiating.
"""

from __future__ import annotations

from ._driver import bindings, check, driver
from ._lifetime import Resource
from .errors import CudaError

__all__ = ["Graph", "GraphExec", "StreamCapture", "GraphUpdateError", "CAPTURE_MODES"]

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
        check(d.cuStreamBeginCapture(stream.handle, getattr(d.CUstreamCaptureMode, CAPTURE_MODES[self._mode])))
        self._active = True
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self._active = False
        d = driver()
        result = d.cuStreamEndCapture(self._stream.handle)
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
    """A captured CUDA graph (no public constructor: use `Stream.capture()`).

    Examples
    --------
    >>> with stream.capture() as cap:                          # doctest: +SKIP
    ...     kernel.launch(grid, block, x, y, stream=stream)
    >>> exe = cap.graph.instantiate()
    >>> for _ in range(1000):
    ...     exe.launch(stream)
    """

    __slots__ = ("_device",)

    def __init__(self, *args, **kwargs) -> None:
        raise TypeError("Graph has no public constructor; capture one with "
                        "`with stream.capture() as cap:` and use cap.graph")

    @classmethod
    def _wrap(cls, device, handle, *, owned: bool) -> Graph:
        self = cls.__new__(cls)
        self._device = device
        self._init_resource(handle, _destroy_graph if owned else None)
        return self

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
        if upload_stream is not None:
            exe.upload(upload_stream)
        return exe


class GraphExec(Resource):
    """An instantiated, launchable graph (made by `Graph.instantiate()`)."""

    __slots__ = ("_device",)

    def __init__(self, *args, **kwargs) -> None:
        raise TypeError("GraphExec has no public constructor; use graph.instantiate()")

    @classmethod
    def _wrap(cls, device, handle) -> GraphExec:
        self = cls.__new__(cls)
        self._device = device
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
        ptr = as_stream_handle(stream)
        if ptr in (0, 2):
            self._device.make_current()
        check(d.cuGraphLaunch(self.handle, d.CUstream(ptr)))

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
