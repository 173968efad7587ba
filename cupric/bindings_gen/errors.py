"""Errors of the bindings generator and of the generated low-level modules.

Two families: generation problems (`BindingsError` and its subclasses) and a library
that cannot be loaded (`LibraryNotFoundError`, an `ImportError` so that
``except ImportError`` in user code keeps working as it does for any missing package).
"""

from __future__ import annotations


class BindingsError(RuntimeError):
    """Generating a low-level module failed (preprocessing, parsing, folding, emitting)."""


class HeadersNotFoundError(BindingsError):
    """A library's C headers were not found in the wheels, CUDA_HOME or the given directory.

    Attributes
    ----------
    library : str
        The library's short name (``"cublas"``, ``"cudnn"``, ...).
    package : str
        The pip package that carries the headers.
    """

    def __init__(self, library: str, package: str, detail: str):
        self.library = library
        self.package = package
        self.detail = detail
        # Packages not on PyPI (the OptiX SDK) are named as a phrase ("the OptiX SDK ...").
        how = f"install {package}" if package.startswith("the ") else f"`pip install {package}`"
        super().__init__(
            f"headers of {library} not found ({detail}); {how}, or set CUDA_HOME, "
            f"or pass --headers DIR"
        )


    def __reduce__(self):
        # Generation runs in worker processes; their errors must survive pickling.
        return (type(self), (self.library, self.package, self.detail))


class PreprocessorNotFoundError(BindingsError):
    """Neither pcpp nor a C preprocessor on PATH is available."""


class LibraryNotFoundError(ImportError):
    """A CUDA library's shared object (or its headers) is missing.

    Attributes
    ----------
    library : str
        The library's short name.
    package : str
        The pip package to install.
    """

    def __init__(self, library: str, package: str, detail: str, hint: str | None = None):
        self.library = library
        self.package = package
        self._args = (library, package, detail, hint)
        # Libraries that are not on PyPI (OptiX comes with the driver) give their own hint.
        hint = hint or f"install it with `pip install {package}`"
        super().__init__(f"{library} is not available ({detail}); {hint}")

    def __reduce__(self):
        return (type(self), self._args)


class LibraryStatusError(RuntimeError):
    """Base of the per-library status errors raised by each library's ``check()``.

    Attributes
    ----------
    code : int
        The raw status value the library returned.
    name : str
        The status enumerator's C name (``"CUBLAS_STATUS_NOT_INITIALIZED"``), or
        ``"UNKNOWN(<code>)"`` for a value the headers do not name.
    description : str
        The library's own description of the status.
    """

    library = "?"

    def __init__(self, code: int, name: str, description: str):
        self.code = int(code)
        self.name = name
        self.description = description
        super().__init__(f"{name} ({self.code}): {description}")

    def __reduce__(self):
        # Exceptions with a custom __init__ need this to pickle (multiprocessing, pytest-xdist).
        return (type(self), (self.code, self.name, self.description))
