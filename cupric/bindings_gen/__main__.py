"""Command line: generate low-level modules ahead of time and print their coverage.

``python -m cupric.bindings_gen [LIB...] [--headers DIR] [--out DIR] [--force]``

Without LIB, every library whose headers are found. Coverage is the number of declared
functions that the installed shared library exports.
"""

from __future__ import annotations

import argparse
import sys
import time

from . import cache, libraries
from .binding import find_shared_library
from .coverage import measure
from .errors import BindingsError, HeadersNotFoundError
from .headers import find_headers


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m cupric.bindings_gen",
        description="Generate cffi bindings of CUDA libraries from their installed headers.",
    )
    parser.add_argument("libraries", nargs="*", metavar="LIB",
                        help=f"libraries to generate (default: all found): {', '.join(libraries.LIBRARIES)}")
    parser.add_argument("--headers", metavar="DIR",
                        help="directory with the headers (default: wheels, then CUDA_HOME)")
    parser.add_argument("--out", metavar="DIR",
                        help=f"bindings directory (default: {cache.bindings_dir()})")
    parser.add_argument("--force", action="store_true", help="regenerate even when cached")
    parser.add_argument("--preprocessor", metavar="CMD",
                        help='"pcpp" or a command such as "gcc -E" (default: a C preprocessor on PATH, else pcpp)')
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    names = args.libraries or list(libraries.LIBRARIES)
    explicit = bool(args.libraries)
    try:
        specs = [libraries.get(name) for name in names]
    except KeyError as exc:
        print(f"error: {exc.args[0]}", file=sys.stderr)
        return 2
    start = time.perf_counter()
    results = cache.ensure_many(specs, args.headers, args.out, args.force, args.preprocessor)
    total = time.perf_counter() - start
    status = 0
    for spec in specs:
        name = spec.name
        value, error = results[name]
        if isinstance(error, HeadersNotFoundError):
            print(f"{name}: skipped: {error}", file=sys.stderr)
            status = status or (1 if explicit else 0)
            continue
        if isinstance(error, BindingsError):
            print(f"{name}: FAILED: {error}", file=sys.stderr)
            status = 1
            continue
        if error is not None:
            raise error
        path, generated = value
        module = cache.import_module(path, spec.name)
        what = f"generated in {sum(generated.seconds.values()):.2f} s" if generated else "cached"
        version = ".".join(map(str, module.LIBRARY_VERSION))
        print(f"{name} {version}: {what} -> {path}")
        if not module.FUNCTIONS:
            # OptiX: the API is a function table the driver fills, nothing to resolve.
            print("  coverage: no exported functions declared")
            continue
        header_dir = find_headers(spec, args.headers).include_dirs[0]
        try:
            lib = module.ffi.dlopen(find_shared_library(spec.shared_library, header_dir))
        except OSError as exc:
            # OptiX's runtime comes with the driver, not with the package of its headers.
            what = "an NVIDIA driver" if spec.root_variable else spec.package
            print(f"  coverage: shared library not loadable ({exc}); install {what}")
            continue
        print(f"  coverage: {measure(name, module.FUNCTIONS, lib, module.ffi)}")
    print(f"{len(specs)} libraries in {total:.2f} s")
    return status


if __name__ == "__main__":
    sys.exit(main())
