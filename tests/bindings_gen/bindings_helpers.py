"""Helpers of the bindings tests: the libraries in the wheels, and struct layouts as cffi
computes them and as the C compiler does."""

from __future__ import annotations

import os
import shutil
import subprocess

# Libraries whose headers come from pip wheels (OptiX's come from the SDK, if at all).
WHEEL_LIBRARIES = ("cublas", "cublaslt", "curand", "cudnn", "nccl")


def cffi_layouts(ffi) -> dict[str, tuple[int, int, dict[str, int]]]:
    """``{type name: (size, alignment, {field: offset})}`` for every complete struct/union."""
    typedefs, structs, unions = ffi.list_types()
    names = list(typedefs) + [f"struct {s}" for s in structs] + [f"union {u}" for u in unions]
    out = {}
    for name in names:
        ctype = ffi.typeof(name)
        if ctype.kind not in ("struct", "union"):
            continue
        try:
            # sizeof first: out-of-line modules build a struct's field list lazily, and
            # reading .fields before that trips an assertion inside _cffi_backend.
            size = ffi.sizeof(ctype)
        except (ValueError, getattr(ffi, "error", ValueError)):
            continue  # opaque (cffi.FFI raises ValueError, out-of-line modules ffi.error)
        if ctype.fields is None:
            continue
        fields = {}
        for field_name, field in ctype.fields:
            if field.bitsize != -1 or not field_name or field_name.startswith("__cupric"):
                continue  # offsetof() does not apply to bit-fields; aligners are ours
            fields[field_name] = field.offset
        out[name] = (size, ffi.alignof(ctype), fields)
    return out


def compiler() -> str | None:
    """A C compiler on PATH, or None."""
    for name in ("gcc", "cc", "clang"):
        path = shutil.which(name)
        if path:
            return path
    return None


def c_layouts(cc: str, includes: list[str], header: str, layouts: dict, workdir: str,
              prelude: str = "") -> dict[str, tuple[int, int, dict[str, int]]]:
    """Compile and run a program printing size, alignment and offsets of the same types."""
    lines = ["#include <stdio.h>", "#include <stddef.h>", prelude, f'#include "{header}"',
             "int main(void) {"]
    for name, (_size, _align, fields) in sorted(layouts.items()):
        lines.append(f'  printf("T\\t%s\\t%zu\\t%zu\\n", "{name}", sizeof({name}), _Alignof({name}));')
        for field in fields:
            lines.append(
                f'  printf("F\\t%s\\t%s\\t%zu\\n", "{name}", "{field}", offsetof({name}, {field}));'
            )
    lines += ["  return 0;", "}"]
    source = os.path.join(workdir, "layout.c")
    binary = os.path.join(workdir, "layout")
    with open(source, "w") as f:
        f.write("\n".join(lines) + "\n")
    # The generator skips the C++-only half-precision headers the same way.
    args = [cc, "-std=gnu11", "-w", "-D__CUDA_FP16_H__", "-D__CUDA_BF16_H__", "-D__CUDA_FP8_H__",
            "-o", binary, source]
    for directory in includes:
        args += ["-I", directory]
    subprocess.run(args, check=True, capture_output=True, text=True)
    run = subprocess.run([binary], check=True, capture_output=True, text=True)
    out: dict[str, tuple[int, int, dict[str, int]]] = {}
    for line in run.stdout.splitlines():
        parts = line.split("\t")
        if parts[0] == "T":
            out[parts[1]] = (int(parts[2]), int(parts[3]), {})
        else:
            out[parts[1]][2][parts[2]] = int(parts[3])
    return out
