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
                        help='"pcpp" or a command such as "gcc -E" (default: pcpp, else cpp on PATH)')
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    names = args.libraries or list(libraries.LIBRARIES)
    explicit = bool(args.libraries)
    status = 0
    for name in names:
        try:
            spec = libraries.get(name)
        except KeyError as exc:
            print(f"error: {exc.args[0]}", file=sys.stderr)
            return 2
        start = time.perf_counter()
        try:
            path, generated = cache.ensure(spec, args.headers, args.out, args.force, args.preprocessor)
        except HeadersNotFoundError as exc:
            print(f"{name}: skipped: {exc}", file=sys.stderr)
            status = status or (1 if explicit else 0)
            continue
        except BindingsError as exc:
            print(f"{name}: FAILED: {exc}", file=sys.stderr)
            status = 1
            continue
        seconds = time.perf_counter() - start
        module = cache.import_module(path, spec.name)
        what = "generated" if generated else "cached"
        version = ".".join(map(str, module.LIBRARY_VERSION))
        print(f"{name} {version}: {what} in {seconds:.2f} s -> {path}")
        header_dir = find_headers(spec, args.headers).include_dirs[0]
        try:
            lib = module.ffi.dlopen(find_shared_library(spec.shared_library, header_dir))
        except OSError as exc:
            print(f"  coverage: shared library not loadable ({exc}); install {spec.package}")
            continue
        print(f"  coverage: {measure(name, module.FUNCTIONS, lib, module.ffi)}")
    return status


if __name__ == "__main__":
    sys.exit(main())
