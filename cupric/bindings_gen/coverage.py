"""Coverage: how many declared functions the shared library actually exports.

A header may declare functions the shipped library does not export (removed APIs,
functions of another library); calling them would fail, so the CLI reports them and
the tests hold each library's list of such names.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Coverage:
    """Functions declared by the headers against symbols the library exports."""

    library: str
    declared: int
    resolved: int
    missing: tuple[str, ...]

    def __str__(self) -> str:
        percent = 100.0 * self.resolved / self.declared if self.declared else 100.0
        text = f"{self.library}: {self.resolved}/{self.declared} functions resolve ({percent:.1f}%)"
        if self.missing:
            shown = ", ".join(self.missing[:8])
            more = f" and {len(self.missing) - 8} more" if len(self.missing) > 8 else ""
            text += f"; not exported: {shown}{more}"
        return text


def measure(library: str, functions, lib, ffi) -> Coverage:
    """Resolve each declared function in an ``ffi.dlopen`` handle of `ffi`."""
    missing = []
    for name in functions:
        try:
            getattr(lib, name)
        except (AttributeError, ffi.error):  # cffi raises ffi.error for a missing symbol
            missing.append(name)
    return Coverage(library, len(functions), len(functions) - len(missing), tuple(missing))
