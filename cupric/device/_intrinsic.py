"""How kernel-side names work in cupric.

Everything in `cupric.device` is an `Intrinsic` (or a `Dim3` of them): a named object the
compiler lowers to NVVM IR by its `name`, and the simulator executes through the thread
state it installs while running a kernel on the CPU. Outside a kernel, calling one raises
`OutsideKernelError`. This module holds that contract and nothing else.
"""

from __future__ import annotations

import threading

__all__ = ["Intrinsic", "Dim3", "Namespace", "OutsideKernelError", "current", "install",
           "REGISTRY"]

# name -> Intrinsic: the compiler looks up lowering rules by these names, the simulator
# its implementations, and a test checks that both cover every entry.
REGISTRY: dict[str, "Intrinsic"] = {}

_tls = threading.local()


class OutsideKernelError(RuntimeError):
    """A `cupric.device` function was called outside a compiled or simulated kernel."""


def current():
    """The simulator's per-thread execution state, or None outside a simulated kernel."""
    return getattr(_tls, "sim", None)


def install(state) -> None:
    """Install (or with None, remove) the simulator state of the calling OS thread.

    `state.dispatch` must map intrinsic names to callables.
    """
    _tls.sim = state


class Intrinsic:
    """A function kernel code may call; `name` is its stable, dotted identity."""

    __slots__ = ("name", "doc", "__weakref__")

    def __init__(self, name: str, doc: str = "") -> None:
        if name in REGISTRY:
            raise ValueError(f"intrinsic {name!r} declared twice")
        self.name = name
        self.doc = doc
        REGISTRY[name] = self

    def __call__(self, *args, **kwargs):
        sim = getattr(_tls, "sim", None)
        if sim is None:
            raise OutsideKernelError(
                f"cupric.device.{self.name}() runs only inside a kernel, compiled with "
                f"@cupric.kernel or run by cupric.simulator")
        return sim.dispatch[self.name](*args, **kwargs)

    def __repr__(self) -> str:
        return f"<cupric.device.{self.name}>"


class _Component(Intrinsic):
    """One component (x, y or z) of a `Dim3`; read as an attribute, never called."""

    __slots__ = ()


class Dim3:
    """A read-only triple such as `threadIdx`: `threadIdx.x` is the intrinsic `threadIdx.x`."""

    __slots__ = ("name", "x_", "y_", "z_")

    def __init__(self, name: str, doc: str = "") -> None:
        self.name = name
        self.x_ = _Component(f"{name}.x", doc)
        self.y_ = _Component(f"{name}.y", doc)
        self.z_ = _Component(f"{name}.z", doc)

    def component(self, axis: str) -> Intrinsic:
        return {"x": self.x_, "y": self.y_, "z": self.z_}[axis]

    @property
    def x(self):
        return self.x_()

    @property
    def y(self):
        return self.y_()

    @property
    def z(self):
        return self.z_()

    def __repr__(self) -> str:
        return f"<cupric.device.{self.name}>"


class Namespace:
    """A group of intrinsics reached by attribute (`atomic.add`, `warp.shfl_down`, ...)."""

    def __init__(self, name: str, **members: Intrinsic) -> None:
        self.__name = name
        self.__dict__.update(members)

    def __repr__(self) -> str:
        return f"<cupric.device.{self.__name}>"
