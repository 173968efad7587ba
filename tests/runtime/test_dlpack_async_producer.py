
"""JAX gives no stream to order after: cupric waits for a JAX array that is not ready
before taking its DLPack capsule, and does not wait for one that is (or for others)."""
from cupric.runtime import dlpack


def _fake(module: str, ready: bool):
    calls = []

    def is_ready(self):
        calls.append("is_ready")
        return ready

    def block_until_ready(self):
        calls.append("block")
        return self

    cls = type("ArrayImpl", (), {"is_ready": is_ready,
                                 "block_until_ready": block_until_ready,
                                 "__module__": module})
    return cls(), calls


def test_a_pending_jax_array_is_waited_for():
    arr, calls = _fake("jaxlib._jax", ready=False)
    dlpack._wait_for_async_producer(arr)
    assert calls == ["is_ready", "block"]


def test_a_ready_jax_array_is_not_waited_for():
    arr, calls = _fake("jax._src.array", ready=True)
    dlpack._wait_for_async_producer(arr)
    assert calls == ["is_ready"]


def test_other_producers_are_left_alone():
    arr, calls = _fake("torch", ready=False)
    dlpack._wait_for_async_producer(arr)
    assert calls == []
