"""Deferred releases run inside whatever cupric call drains them (`_lifetime.drain`),
possibly on a thread that already holds a lock the release takes again: a stream's
release forgets it in the ready kernels' workspace and in the shared library-handle
tables. Those locks must be reentrant, or the thread waits on itself forever."""
import threading

from cupric.kernels import _common
from cupric.runtime import shared_handles


def _finishes(fn, seconds: float = 10.0) -> bool:
    done = threading.Event()

    def body():
        fn()
        done.set()

    threading.Thread(target=body, daemon=True).start()
    return done.wait(seconds)


def test_a_stream_release_inside_a_workspace_call_does_not_hang():
    ws = _common.Workspace(0)
    ws.last_stream = 0x1000   # the holder's stream, not the one being released
    _common._WORKSPACES[-7] = ws
    try:
        def held():
            with ws.lock:
                _common._forget_stream(0x2000)
        assert _finishes(held)
        assert ws.last_stream == 0x1000
    finally:
        _common._WORKSPACES.pop(-7, None)


def test_a_stream_release_inside_a_shared_handle_creation_does_not_hang():
    table = shared_handles.SharedHandles()

    class Handle:
        _closed = False
        _key = None

        def close(self):
            self._closed = True
            table.discard(self)

    kept, doomed = Handle(), Handle()
    kept._key, doomed._key = (0, 0x1000), (0, 0x2000)
    table._handles.update({kept._key: kept, doomed._key: doomed})

    def held():
        with table._lock:
            shared_handles._forget_stream(0x2000)
    assert _finishes(held)
    assert doomed._closed and not kept._closed
    assert table._handles == {kept._key: kept}
