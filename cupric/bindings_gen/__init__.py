"""cupric.bindings_gen: low-level bindings generated from the CUDA libraries' own headers.

The counterpart of Rust CUDA's bindgen ``*-sys`` crates, with pycparser and cffi: a
library's headers are preprocessed (a C preprocessor where one is installed, else the
pure-Python pcpp; no C compiler is ever needed), parsed, reduced to the library's own
declarations plus the types they use, constant-folded, and written as a cffi
out-of-line ABI module into a per-user cache. Nothing derived from NVIDIA's headers is
part of cupric itself.

Pipeline, one module per stage: `headers` (finding them) -> `preprocess` (with the
fake libc of `fakelibc`) -> `parse` (pycparser, own declarations and dependencies) ->
`fold` / `emit` (constants, cffi module text) -> `cache` (per-user cache, loading) ->
`binding` (opening the shared library at first use) -> `coverage`.

Command line: ``python -m cupric.bindings_gen [LIB...] [--headers DIR] [--out DIR]``.

Examples
--------
>>> from cupric.bindings_gen import generate_library
>>> module = generate_library("curand")          # doctest: +SKIP
>>> module.info.library_version                  # doctest: +SKIP
(10, 4, 5)
"""

from __future__ import annotations

from .errors import (
    BindingsError,
    HeadersNotFoundError,
    LibraryNotFoundError,
    LibraryStatusError,
    PreprocessorNotFoundError,
)
from .libraries import LIBRARIES, LibrarySpec

__all__ = [
    "LIBRARIES",
    "LibrarySpec",
    "BindingsError",
    "HeadersNotFoundError",
    "LibraryNotFoundError",
    "LibraryStatusError",
    "PreprocessorNotFoundError",
    "generate_library",
    "load_module",
    "bindings_dir",
    "GENERATOR_VERSION",
]


def generate_library(name: str, headers: str | None = None, backend: str | None = None):
    """Generate one library's module text without touching the cache.

    Parameters
    ----------
    name : str
        Library short name: one of `LIBRARIES` (``cublas``, ``cublaslt``, ``curand``,
        ``cudnn``, ``nccl``).
    headers : str, optional
        Directory with the library's headers.
    backend : str, optional
        ``"pcpp"`` or a preprocessor command (``"gcc -E"``).

    Returns
    -------
    GeneratedModule
    """
    from . import libraries
    from .generate import generate

    return generate(libraries.get(name), headers=headers, backend=backend)


def load_module(name: str, headers: str | None = None):
    """The generated module of a library from the cache, generating it when needed."""
    from . import cache, libraries

    return cache.load_module(libraries.get(name), headers)


def bindings_dir() -> str:
    """The directory generated modules are cached in."""
    from .cache import bindings_dir as _bindings_dir

    return _bindings_dir()


def __getattr__(name: str):
    if name == "GENERATOR_VERSION":
        from .generate import GENERATOR_VERSION

        return GENERATOR_VERSION
    raise AttributeError(f"module 'cupric.bindings_gen' has no attribute {name!r}")
