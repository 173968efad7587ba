"""`python -m cupric`: the command line.

    python -m cupric info [--json]        what cupric found: driver, GPUs, toolchain, libraries
    python -m cupric demo [--simulator]   compile and run the demo kernels (simulator without a GPU)
    python -m cupric compile FILE::KERNEL --signature ... [--arch sm_90] [--emit ptx] [-o OUT]
    python -m cupric compile FILE::KERNEL --report [--json]     constant-memory placement
    python -m cupric compile --fatbin --arch sm_80,sm_90 FILE::KERNEL ... -o K.cubundle

`python -m cupric COMMAND --help` explains each command.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv.pop(0) if argv else "help"
    if command == "info":
        from ._info import main as info_main

        return info_main(argv)
    if command == "demo":
        from ._demo import main as demo_main

        return demo_main(argv)
    if command == "compile":
        from .compiler.cli import main as compile_main

        return compile_main(argv)
    if command in ("help", "-h", "--help"):
        print(__doc__.strip())
        return 0
    print(f"cupric: unknown command {command!r}\n\n{__doc__.strip()}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
