"""`python -m cupric compile`: compile one kernel of a Python file for one signature and
write its NVVM IR, PTX or cubin, the way `nvcc -ptx` or `cargo build` would, without a GPU;
report where its module-level arrays go; or build a kernel bundle to ship with a package.

    python -m cupric compile FILE::KERNEL --signature "f32, Array[f32, 1, 'C']" \\
        --arch sm_90 --emit nvvm-ir|ptx|cubin [-o OUT]
    python -m cupric compile FILE::KERNEL [--signature ...] --report [--json]
    python -m cupric compile --fatbin --arch sm_80,sm_90,sm_100 FILE::KERNEL [FILE::K2 ...]
        [--signature SIG ...] -o kernels.cubundle

--report prints the constant-memory placement (each module-level array, its bytes, the
constant bank or global memory, and why). --fatbin compiles every kernel for every
signature given (or its annotations), in all four launch variants (noalias and aligned
on or off), to a cubin per architecture plus PTX for the lowest one, into one bundle
file that `cupric.compiler.bundle.register_bundle` loads (docs/packaging.md). Bundled
kernels are built with the options their decorator gives; -O, -g and the like do not
apply there.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys

__all__ = ["main", "load_kernel"]

_EMITS = ("nvvm-ir", "ptx", "cubin")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m cupric compile", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("targets", metavar="FILE::KERNEL", nargs="+",
                   help="the Python file and the name of the kernel in it (several only "
                   "with --fatbin)")
    p.add_argument("--signature", "-s", default=None, action="append",
                   help="parameter types, e.g. \"f32, Array[f32, 1, 'C']\" (default: the "
                   "kernel's annotations, when all are concrete); repeat it with --fatbin")
    p.add_argument("--arch", default="sm_90",
                   help="target architecture (default sm_90); with --fatbin a comma-"
                   "separated list")
    p.add_argument("--report", action="store_true",
                   help="print where the kernel's module-level arrays go (constant bank or "
                   "global memory) instead of the code (unless -o is given too)")
    p.add_argument("--json", action="store_true", help="--report as JSON")
    p.add_argument("--fatbin", action="store_true",
                   help="write a kernel bundle (cubins per --arch + PTX) to -o")
    p.add_argument("--emit", choices=_EMITS, default="ptx", help="what to write")
    p.add_argument("-o", "--output", default=None,
                   help="output file (default: standard output; required for cubin)")
    p.add_argument("-O", "--opt-level", type=int, default=3, choices=range(4))
    p.add_argument("--lineinfo", action="store_true", help="map PTX lines to Python lines")
    p.add_argument("--debug", "-g", action="store_true", help="full debug information")
    p.add_argument("--fast-math", action="store_true", help="fast, less exact float math")
    p.add_argument("--may-alias", action="store_true",
                   help="compile the variant for arrays that may overlap (no noalias, no "
                   "read-only cache loads)")
    return p


def load_kernel(target: str):
    """The kernel named by `FILE::KERNEL` (the file is imported as a module).

    Raises
    ------
    ValueError
        Malformed target, missing file or name, or a name that is not a kernel.
    """
    from cupric.compiler.kernel import Kernel, kernel

    path, sep, name = target.rpartition("::")
    if not sep or not path or not name:
        raise ValueError(f"expected FILE::KERNEL, got {target!r}")
    if not os.path.isfile(path):
        raise ValueError(f"no such file: {path}")
    module = _import_file(path)
    obj = getattr(module, name, None)
    if obj is None:
        raise ValueError(f"{path} has no name {name!r}")
    if isinstance(obj, Kernel):
        return obj
    if callable(getattr(obj, "__code__", None)) or hasattr(obj, "__code__"):
        return kernel(obj)
    raise ValueError(f"{path}::{name} is not a kernel (a {type(obj).__name__})")


class KernelFileError(ValueError):
    """Importing the file that holds the kernel failed (the message names the file)."""


def _import_file(path: str):
    """Import `path` as a module, the way `python path` would see it: its own name as
    ``sys.argv[0]`` and no further arguments (not the CLI's), its folder on
    ``sys.path``; any exception it raises becomes a `KernelFileError` naming it."""
    module_name = "_cupric_cli_" + os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    folder = os.path.dirname(os.path.abspath(path))
    saved_argv = sys.argv
    sys.argv = [path]
    sys.path.insert(0, folder)
    try:
        spec.loader.exec_module(module)
    except (Exception, SystemExit) as exc:
        sys.modules.pop(module_name, None)
        if isinstance(exc, SystemExit):
            what = f"exited with status {exc.code!r} while being imported"
        else:
            what = f"raised {type(exc).__name__}: {exc}"
        raise KernelFileError(f"importing the kernel file {path} failed: it {what} (the "
                              "file's top level runs on import; guard script code with "
                              "`if __name__ == \"__main__\":`)") from exc
    finally:
        sys.argv = saved_argv
    return module


def _fatbin(args) -> int:
    from cupric.compiler.bundle import write_bundle

    if args.output is None:
        print("cupric compile: --fatbin needs -o FILE", file=sys.stderr)
        return 2
    archs = [a.strip() for a in args.arch.split(",") if a.strip()]
    variants = []
    for target in args.targets:
        kern = load_kernel(target)
        for signature in args.signature or [None]:
            for noalias in (True, False):
                for aligned in (True, False):
                    variants.append(kern.specialize(signature, noalias=noalias,
                                                    aligned=aligned))
    entries = write_bundle(args.output, variants, archs=archs)
    kernels = sorted({e.kernel for e in entries})
    print(f"wrote {args.output}: {len(entries)} variants of {', '.join(kernels)} for "
          f"{', '.join(archs)} (+ PTX for {entries[0].ptx_arch})")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the process exit status."""
    args = _parser().parse_args(argv)
    from cupric.compiler.errors import CompilerError

    try:
        if args.fatbin:
            return _fatbin(args)
    except (CompilerError, ValueError, TypeError) as exc:
        print(f"cupric compile: {exc}", file=sys.stderr)
        return 1
    if len(args.targets) > 1 or len(args.signature or ()) > 1:
        print("cupric compile: one FILE::KERNEL and one --signature (several only with "
              "--fatbin)", file=sys.stderr)
        return 2
    signature = args.signature[0] if args.signature else None
    if args.emit == "cubin" and args.output is None and not args.report:
        print("cupric compile: --emit cubin needs -o FILE", file=sys.stderr)
        return 2
    try:
        kern = load_kernel(args.targets[0])
        from cupric.compiler.kernel import Kernel

        kern = Kernel(kern.py_func, debug=args.debug, lineinfo=args.lineinfo,
                      fast_math=args.fast_math, opt_level=args.opt_level, arch=args.arch,
                      c_division=kern.c_division)
        noalias = not args.may_alias
        if args.report:
            report = kern.inspect_constants(signature)
            if args.json:
                import json
                print(json.dumps(report.as_dict(), indent=2))
            else:
                print(report)
            if args.output is None:
                return 0
        if args.emit == "nvvm-ir":
            out = kern.inspect_ir(signature, noalias=noalias)
        else:
            spec = kern.specialize(signature, noalias=noalias)
            from cupric.compiler import backend

            options = kern.options.resolve(args.arch)
            want = ("ptx",) if args.emit == "ptx" else ("cubin",)
            artifact = backend.build(spec.ir, options=options, want=want, cache=False)
            out = artifact.ptx if args.emit == "ptx" else artifact.cubin
    except (CompilerError, ValueError, TypeError) as exc:
        print(f"cupric compile: {exc}", file=sys.stderr)
        return 1
    if args.output is None:
        sys.stdout.write(out)
    else:
        mode = "wb" if isinstance(out, bytes) else "w"
        with open(args.output, mode) as f:
            f.write(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
