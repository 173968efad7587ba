"""CUDA graphs built node by node (`Graph.create`): CPU lane (no driver needed): kernel
node arguments checked as a launch checks them (wrong types, host arrays) before any
GPU work, parameter packing into the node's argument buffer, copy endpoints, the host
function registry. GPU lane: a graph of copy, memset, kernel, host-function, event
record/wait, child-graph and empty nodes with their dependencies runs and matches NumPy;
`GraphExec.set_kernel_args` changes a kernel node's arguments in the executable graph
only; the DOT export names the nodes."""

from __future__ import annotations

import ctypes
import struct
import sys
from pathlib import Path

import numpy as np
import pytest

from cupric.runtime import graph as g
from cupric.runtime import graph_nodes as gn

sys.path.insert(0, str(Path(__file__).parent))
import graph_node_kernels as gk  # noqa: E402


class _Function:
    name = "fake"
    handle = 0


class _Prepared:
    function = _Function()

    def __init__(self, types):
        self.param_types = types


def test_kernel_params_pack_as_a_launch_does():
    prepared = _Prepared(("f32", "ptr", "i64", "i8", ("bytes", 12, 4)))
    record = np.zeros((), dtype=[("a", "<i4"), ("b", "<f4"), ("c", "<i4")])
    record["a"], record["b"], record["c"] = 7, 2.5, -3
    params, (buf, argv) = gn._kernel_params(prepared, [1.5, 0xDEAD0000, 1 << 40, 1, record])
    assert params.kernelParams == ctypes.addressof(argv)
    f32 = struct.unpack("<f", ctypes.string_at(argv[0], 4))[0]
    ptr = struct.unpack("<Q", ctypes.string_at(argv[1], 8))[0]
    i64 = struct.unpack("<q", ctypes.string_at(argv[2], 8))[0]
    i8 = struct.unpack("<b", ctypes.string_at(argv[3], 1))[0]
    assert (f32, ptr, i64, i8) == (1.5, 0xDEAD0000, 1 << 40, 1)
    assert ctypes.string_at(argv[4], 12) == record.tobytes()
    assert argv[1] % 8 == 0 and argv[4] % 4 == 0  # aligned as the ABI wants


def test_kernel_params_refuse_bad_values():
    from cupric.runtime.launch import KernelArgumentError
    with pytest.raises(KernelArgumentError, match="takes 2 parameter values, got 1"):
        gn._kernel_params(_Prepared(("f32", "ptr")), [1.0])
    with pytest.raises(KernelArgumentError, match="host NumPy array"):
        gn._kernel_params(_Prepared(("ptr",)), [np.zeros(3)])
    with pytest.raises(KernelArgumentError, match="struct of 8 bytes"):
        gn._kernel_params(_Prepared((("bytes", 8, 4),)), [b"abc"])


def test_cupric_kernel_node_arguments_are_checked_before_the_gpu():
    from cupric.compiler.node_args import launch_parts
    from cupric.compiler.kernel import KernelArgumentError
    with pytest.raises(KernelArgumentError, match="takes 3"):
        launch_parts(gk.axpy, 1, 32, 0, (1.0, np.zeros(4, np.float32)))
    with pytest.raises(TypeError, match="to_device"):
        launch_parts(gk.axpy, 1, 32, 0, (1.0, np.zeros(4, np.float32),
                                         np.zeros(4, np.float32)))


def test_copy_endpoints():
    host = np.arange(6, dtype=np.float32)
    ptr, kind, size, keep = gn._endpoint(host, "src")
    assert (ptr, kind, size, keep is host) == (host.ctypes.data, "host", 24, True)
    with pytest.raises(ValueError, match="C-contiguous"):
        gn._endpoint(np.zeros((4, 4))[:, ::2], "src")
    frozen = np.zeros(3)
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        gn._endpoint(frozen, "dst", writable=True)


def test_host_functions_stay_registered_with_their_owner_and_report_errors():
    from cupric.runtime.stream import HostCallbackError
    calls = []
    owner = gn._HostFunctions()
    ok = owner.add(calls.append, ("ran",))
    bad = owner.add(lambda: 1 / 0, ())
    for _ in range(2):  # runs on every launch, unlike a stream callback
        gn._graph_host_trampoline(ok)
    gn._graph_host_trampoline(bad)
    assert calls == ["ran", "ran"]
    with pytest.raises(HostCallbackError) as info:
        owner.raise_pending()
    assert isinstance(info.value.__cause__, ZeroDivisionError)
    owner.raise_pending()  # reported once
    del owner, info  # the traceback holds raise_pending's frame, hence the owner
    import gc
    gc.collect()
    assert ok not in gn._host_registry and bad not in gn._host_registry


def test_graph_has_no_public_constructor():
    with pytest.raises(TypeError, match="Graph.create"):
        g.Graph()


# -- GPU lane ---------------------------------------------------------------------------

@pytest.mark.gpu
def test_a_graph_built_node_by_node(rng, tmp_path):
    from cupric import runtime as rt
    device = rt.current_device()
    stream = device.create_stream()
    n = 10_000
    hx = rng.standard_normal(n).astype(np.float32)
    hy = rng.standard_normal(n).astype(np.float32)
    out = np.full(n, np.nan, np.float32)
    x, y = rt.empty(n, np.float32), rt.empty(n, np.float32)
    flag = rt.empty(n, np.uint32)
    x.fill(np.float32(123))  # poisoned: the copy node must overwrite it
    seen = []
    event = device.create_event(timing=False)

    child = g.Graph.create()
    child.add_kernel(gk.scale, (n + 255) // 256, 256, 0.5, y)   # y *= 0.5

    graph = g.Graph.create()
    up_x = graph.add_memcpy(x, hx)
    up_y = graph.add_memcpy(y, hy)
    fill = graph.add_memset(flag, 0xABCD1234, width=4)
    join = graph.add_empty(depends_on=[up_x, up_y])
    k = graph.add_kernel(gk.axpy, (n + 255) // 256, 256, 2.0, x, y, depends_on=[join])
    half = graph.add_child_graph(child, depends_on=[k])
    rec = graph.add_event_record(event, depends_on=[half])
    wait = graph.add_event_wait(event, depends_on=[rec])
    host = graph.add_host(seen.append, "host node ran", depends_on=[wait])
    down = graph.add_memcpy(out, y, depends_on=[host])
    graph.add_dependency(fill, down)
    assert graph.node_count == 10
    assert k.dependencies == 1 and down.dependencies == 2 and join.dependencies == 2
    assert len(graph.dependencies(down)) == 2

    exe = graph.instantiate()
    # The kernel may contract a * x + y into an FMA: a few ulp from NumPy where the sum
    # cancels, hence the absolute tolerance.
    exe.launch(stream)
    stream.synchronize()
    np.testing.assert_allclose(out, 0.5 * (2.0 * hx + hy), rtol=1e-6, atol=1e-6)
    assert seen == ["host node ran"]
    assert np.all(flag.to_numpy() == 0xABCD1234)

    # New arguments for the kernel node, in the executable graph only.
    hx2 = rng.standard_normal(n).astype(np.float32)
    x2 = rt.to_device(hx2)
    exe.set_kernel_args(k, -3.0, x2, y)
    exe.launch(stream)
    stream.synchronize()
    np.testing.assert_allclose(out, 0.5 * (-3.0 * hx2 + hy), rtol=1e-6, atol=1e-6)
    assert seen == ["host node ran"] * 2
    exe2 = graph.instantiate()  # the graph itself still has the old arguments
    exe2.launch(stream)
    stream.synchronize()
    np.testing.assert_allclose(out, 0.5 * (2.0 * hx + hy), rtol=1e-6, atol=1e-6)

    from cupric.compiler.kernel import KernelArgumentError
    with pytest.raises(KernelArgumentError):
        exe.set_kernel_args(k, 1.0, x2)
    with pytest.raises(ValueError, match="kernel node"):
        exe.set_kernel_args(down, 1.0, x2, y)

    dot = graph.to_dot(tmp_path / "g.dot", verbose=True)
    assert dot.startswith("digraph") and (tmp_path / "g.dot").read_text() == dot
    assert "axpy" in dot and dot.count("->") >= 9
    print(f"graph: {graph.node_count} nodes, DOT {len(dot)} characters")


@pytest.mark.gpu
def test_host_node_errors_surface_at_the_next_launch():
    from cupric import runtime as rt
    from cupric.runtime.stream import HostCallbackError
    stream = rt.current_device().create_stream()
    graph = g.Graph.create()
    graph.add_host(lambda: 1 / 0)
    exe = graph.instantiate()
    exe.launch(stream)
    stream.synchronize()
    with pytest.raises(HostCallbackError):
        exe.launch(stream)


@pytest.mark.gpu
def test_kernel_node_launch_checks():
    from cupric import runtime as rt
    from cupric.runtime.launch import LaunchConfigError
    graph = g.Graph.create()
    y = rt.zeros(8, np.float32)
    with pytest.raises(LaunchConfigError, match="threads"):
        graph.add_kernel(gk.scale, 1, 4096, 1.0, y)
    with pytest.raises(TypeError):
        graph.add_kernel(gk.scale, 1, 32, 1.0, np.zeros(8, np.float32))
    assert graph.node_count == 0
