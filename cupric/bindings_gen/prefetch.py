"""Generated bindings made ahead of need, in child processes.

On a machine that has never run cupric every library's module is generated on its first
use (headers preprocessed and parsed: most of a second each), one after the other, inside
the user's first calls. `start` runs that generation for several libraries at once, each
in a child Python process (pure Python work, so only processes overlap it with this
one), and `Binding` waits for a library's child before loading its module from the cache
instead of generating the same module again. A child that fails leaves nothing behind:
the parent then generates (and reports) as it always did.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading

__all__ = ["start", "wait"]

_CHILD = """
import sys
sys.path.insert(0, sys.argv[1])
from cupric.bindings_gen import cache, libraries
cache.ensure(libraries.get(sys.argv[2]))
"""

_children: dict[str, subprocess.Popen] = {}
_lock = threading.Lock()


def start(names) -> None:
    """Generate the bindings of the libraries `names` (short names of
    `libraries.LIBRARIES`) in child processes, one per library not already started by
    this process. A child finds a cached module
    current and exits; nothing waits for it here.

    Cost
    ----
    One process start per library (the generation runs there).
    """
    import cupric
    parent = os.path.dirname(os.path.dirname(os.path.abspath(cupric.__file__)))
    with _lock:
        for name in names:
            if name in _children:
                continue
            _children[name] = subprocess.Popen(
                [sys.executable, "-c", _CHILD, parent, name], stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def wait(name: str, timeout: float = 120.0) -> None:
    """Wait for the child generating `name`'s bindings, if one was started and still
    runs (the module is then in the cache). A child that outlives `timeout` is left to
    finish on its own; the caller generates as if there were none."""
    child = _children.get(name)
    if child is None or child.returncode is not None:
        return
    try:
        child.wait(timeout)
    except subprocess.TimeoutExpired:
        pass  # generation is the caller's again; the child's atomic write is harmless
