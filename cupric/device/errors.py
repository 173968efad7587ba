"""Errors a kernel raises on the host: a failed device-side `assert`, `trap()`, and an
out-of-bounds array access.

Both execution paths raise these: the CPU simulator when a simulated thread fails, and
the compiled path when a kernel's assert or trap reaches the host after a launch.
"""

from __future__ import annotations

__all__ = ["KernelError", "KernelAssertionError", "KernelIndexError", "KernelTrapError"]


class KernelError(RuntimeError):
    """Base of the errors a kernel raises while running.

    Attributes
    ----------
    filename, line : str or None, int or None
        The Python source location of the failing statement, when known.
    block, thread : tuple of int or None
        The (x, y, z) block and thread index of the failing GPU thread, when known.
    """

    def __init__(self, message: str, *, filename: str | None = None, line: int | None = None,
                 block: tuple | None = None, thread: tuple | None = None) -> None:
        self.message = message
        self.filename = filename
        self.line = line
        self.block = block
        self.thread = thread
        super().__init__(self._render())

    def _render(self) -> str:
        where = ""
        if self.filename is not None and self.line is not None:
            where = f"{self.filename}:{self.line}: "
        who = ""
        if self.block is not None and self.thread is not None:
            who = f" (block {tuple(self.block)}, thread {tuple(self.thread)})"
        return f"{where}{self.message}{who}"

    def locate(self, *, block: tuple | None = None, thread: tuple | None = None) -> None:
        """Fill in the failing thread's coordinates once the launcher knows them."""
        if self.block is None:
            self.block = block
        if self.thread is None:
            self.thread = thread
        self.args = (self._render(),)


class KernelAssertionError(KernelError, AssertionError):
    """A device-side `assert cond, message` failed; names the Python file and line."""


class KernelIndexError(KernelError, IndexError):
    """An array index was out of bounds (negative indices are out of bounds too: a GPU
    does not wrap them around). Names the array, the index and the Python line.

    Attributes
    ----------
    array : str
        The array's name (the kernel parameter, or "shared.array", "local.array", ...).
    index : object
        The offending index.
    shape : tuple of int
        The array's shape.
    """

    def __init__(self, array: str, index, shape: tuple, **where) -> None:
        self.array = array
        self.index = index
        self.shape = tuple(shape)
        super().__init__(f"index {index!r} out of bounds for array {array!r} of shape "
                         f"{self.shape}", **where)


class KernelTrapError(KernelError):
    """A kernel executed `trap()`: the launch aborted."""
