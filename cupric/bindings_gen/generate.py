"""The generator's pipeline: headers -> preprocessor -> pycparser -> selection -> cffi module.

`generate` returns the module text; `cupric.bindings_gen.cache` decides where it goes.
The output depends only on the headers' contents, the generator version and the
platform's data model, never on paths, time or the preprocessor backend.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from . import fakelibc
from .headers import HeaderSet, content_hash, find_headers
from .libraries import LibrarySpec

# The pipeline's stages (pycparser and the emitter) are imported by `generate` itself:
# a process that finds its modules in the cache only needs `generator_identity`.

# Bump when the generated text changes for the same headers; part of the cache key.
GENERATOR_VERSION = "1.1"


@dataclass
class GeneratedModule:
    """One generated module and how it was made.

    Attributes
    ----------
    text : str
        The module's Python source.
    info : ModuleInfo
        Library, version, header hash, generator version.
    functions : list of str
        Declared functions.
    files : tuple of str
        Real paths of the headers read (what the cache watches).
    backend : str
        The preprocessor that ran.
    seconds : dict
        Wall time per stage.
    cpu_seconds : float
        Processor time of the whole generation (steady when the machine is busy).
    """

    text: str
    info: ModuleInfo
    functions: list[str]
    files: tuple[str, ...]
    backend: str
    seconds: dict[str, float] = field(default_factory=dict)
    cpu_seconds: float = 0.0


def _version(macros, names) -> tuple[int, ...]:
    values = {m.name: m.value for m in macros}
    version = []
    for name in names:
        text = values.get(name, "").strip("()").rstrip("uUlL")
        if not text.isdigit():
            break
        version.append(int(text))
    return tuple(version)


def generator_identity() -> str:
    """Generator version plus the fake libc's digest: what, besides headers, shapes output."""
    return f"{GENERATOR_VERSION}+{fakelibc.digest()[:8]}"


def generate(
    spec: LibrarySpec,
    headers: str | None = None,
    backend: str | None = None,
    header_set: HeaderSet | None = None,
) -> GeneratedModule:
    """Generate the low-level module of one library.

    Parameters
    ----------
    spec : LibrarySpec
        The library.
    headers : str, optional
        Directory holding the library's headers (default: search, see `headers`).
    backend : str, optional
        Preprocessor backend (see `preprocess.preprocess`).
    header_set : HeaderSet, optional
        Already located headers (skips the search).

    Raises
    ------
    HeadersNotFoundError, PreprocessorNotFoundError, BindingsError
    """
    from .attributes import strip_attributes
    from .emit import ModuleInfo, fold_declarations, render_module
    from .parse import parse, select_declarations
    from .preprocess import preprocess
    seconds = {}
    cpu_start = time.process_time()
    start = time.perf_counter()
    header_set = header_set or find_headers(spec, headers)
    unit = preprocess(header_set, backend)
    seconds["preprocess"] = time.perf_counter() - start

    start = time.perf_counter()
    text, alignments = strip_attributes(unit.text)
    ast = parse(text)
    selection = select_declarations(ast, spec.owns)
    seconds["parse"] = time.perf_counter() - start

    start = time.perf_counter()
    folded = fold_declarations(
        selection.nodes, selection.functions, unit.macros, selection.typenames, spec.owns,
        alignments,
    )
    info = ModuleInfo(
        library=spec.name,
        library_version=_version(unit.macros, spec.version_macros),
        package=spec.package,
        header_hash=content_hash(list(unit.files), header_set),
        generator_version=generator_identity(),
        top_header=spec.top_header,
    )
    text = render_module(folded, selection.functions, selection.inline_functions, info)
    seconds["emit"] = time.perf_counter() - start
    return GeneratedModule(text, info, selection.functions, unit.files, unit.backend, seconds,
                           time.process_time() - cpu_start)
